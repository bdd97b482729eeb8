/* A fake libnvidia-ml.so.1 for tests, matching fake_cuda.c's GPUs (NVML
 * indexes are physical order). The host view shows one foreign process and
 * 1 GiB of foreign memory plus what the fake libcuda of this process holds.
 * FAKE_NVML_FAIL=1 makes nvmlInit fail. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tessera_cuda.h"

#define API __attribute__((visibility("default")))
#define MAXDEV 16

static struct nvmlDevice_st { int index; } g_dev[MAXDEV];
static unsigned g_count = 2;
static uint64_t g_mem = 81920ull << 20;
static int g_fail_init;

/* the fake CUDA driver's bytes on this device, when it is loaded in this process */
static uint64_t cuda_used(int index)
{
    uint64_t (*f)(int) = (uint64_t(*)(int))dlsym(RTLD_DEFAULT, "fakeUsedBytesPhys");
    return f ? f(index) : 0;
}

__attribute__((constructor)) static void fake_init(void)
{
    const char *v = getenv("FAKE_GPU_COUNT");
    if (v && *v)
        g_count = (unsigned)strtoul(v, NULL, 10);
    if (g_count > MAXDEV)
        g_count = MAXDEV;
    v = getenv("FAKE_GPU_MEM_MB");
    if (v && *v)
        g_mem = strtoull(v, NULL, 10) << 20;
    for (int i = 0; i < MAXDEV; i++)
        g_dev[i].index = i;
    v = getenv("FAKE_NVML_FAIL");
    g_fail_init = v && *v == '1';
}

API nvmlReturn_t nvmlInit_v2(void) { return g_fail_init ? NVML_ERROR_UNKNOWN : NVML_SUCCESS; }
API nvmlReturn_t nvmlInit(void) { return nvmlInit_v2(); }
API nvmlReturn_t nvmlDeviceGetHandleByUUID(const char *uuid, nvmlDevice_t *d)
{
    char want[96];
    for (unsigned i = 0; i < g_count; i++) {
        snprintf(want, sizeof want, "GPU-7e55e7a0-1234-4567-89ab-cdef000000%02x", i);
        if (uuid && !strcmp(uuid, want)) {
            *d = &g_dev[i];
            return NVML_SUCCESS;
        }
    }
    return NVML_ERROR_INVALID_ARGUMENT;
}
API nvmlReturn_t nvmlShutdown(void) { return NVML_SUCCESS; }
API nvmlReturn_t nvmlDeviceGetCount_v2(unsigned *n) { *n = g_count; return NVML_SUCCESS; }
API nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned i, nvmlDevice_t *d)
{
    if (i >= g_count)
        return NVML_ERROR_INVALID_ARGUMENT;
    *d = &g_dev[i];
    return NVML_SUCCESS;
}
API nvmlReturn_t nvmlDeviceGetIndex(nvmlDevice_t d, unsigned *i) { *i = (unsigned)d->index; return NVML_SUCCESS; }
API nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t d, char *buf, unsigned len)
{
    snprintf(buf, len, "GPU-7e55e7a0-1234-4567-89ab-cdef000000%02x", d->index);
    return NVML_SUCCESS;
}
API nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t d, char *buf, unsigned len)
{
    (void)d;
    snprintf(buf, len, "Fake H100 80GB");
    return NVML_SUCCESS;
}
API nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t d, nvmlMemory_t *m)
{
    m->total = g_mem;
    m->used = (1ull << 30) + cuda_used(d->index);
    m->free = g_mem - m->used;
    return NVML_SUCCESS;
}
API nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t d, nvmlMemory_v2_t *m)
{
    m->total = g_mem;
    m->reserved = 256ull << 20;
    m->used = (1ull << 30) + cuda_used(d->index);
    m->free = g_mem - m->used - m->reserved;
    return NVML_SUCCESS;
}

#define HOST_PROCS(name, type)                                                \
    API nvmlReturn_t name(nvmlDevice_t d, unsigned *count, type *infos)       \
    {                                                                         \
        (void)d;                                                              \
        if (!infos || *count < 1) {                                           \
            *count = 1;                                                       \
            return NVML_ERROR_INSUFFICIENT_SIZE;                              \
        }                                                                     \
        memset(infos, 0, sizeof *infos);                                      \
        infos[0].pid = 4242;                                                  \
        infos[0].usedGpuMemory = 1ull << 30;                                  \
        *count = 1;                                                           \
        return NVML_SUCCESS;                                                  \
    }
HOST_PROCS(nvmlDeviceGetComputeRunningProcesses, nvmlProcessInfo_v1_t)
HOST_PROCS(nvmlDeviceGetComputeRunningProcesses_v2, nvmlProcessInfo_t)
HOST_PROCS(nvmlDeviceGetComputeRunningProcesses_v3, nvmlProcessInfo_t)
