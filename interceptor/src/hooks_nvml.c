/* NVML view: memory info shows the claim's limit as the total and the claim's
 * bytes as used; the process list shows the claim's live processes (pids as
 * the processes themselves saw them) instead of the host's. */

#include <stdint.h>
#include <string.h>

#include "devices.h"
#include "hooks.h"
#include "region_handle.h"

HOOK nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t dev, nvmlMemory_t *mem)
{
    if (!nvml_ready() || !r_nvmlDeviceGetMemoryInfo)
        return NVML_ERROR_NOT_SUPPORTED;
    nvmlReturn_t rc = r_nvmlDeviceGetMemoryInfo(dev, mem);
    struct dev_rec *d;
    if (rc != NVML_SUCCESS || !mem || !(d = acct_nvml(dev)))
        return rc;
    uint64_t t, f, u;
    acct_view(d, mem->total, mem->total, &t, &f, &u);
    mem->total = t;
    mem->free = f;
    mem->used = u;
    return rc;
}

HOOK nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t dev, nvmlMemory_v2_t *mem)
{
    if (!nvml_ready() || !r_nvmlDeviceGetMemoryInfo_v2)
        return NVML_ERROR_NOT_SUPPORTED;
    nvmlReturn_t rc = r_nvmlDeviceGetMemoryInfo_v2(dev, mem);
    struct dev_rec *d;
    if (rc != NVML_SUCCESS || !mem || !(d = acct_nvml(dev)))
        return rc;
    uint64_t t, f, u;
    acct_view(d, mem->total, mem->total, &t, &f, &u);
    mem->total = t;
    mem->reserved = 0;
    mem->free = f;
    mem->used = u;
    return rc;
}

/* Defines one process-list variant (they differ in the record type). */
#define PROCS_HOOK(name, type, extra_fields)                                              \
    HOOK nvmlReturn_t name(nvmlDevice_t dev, unsigned *count, type *infos)                \
    {                                                                                     \
        if (!nvml_ready() || !r_##name)                                                   \
            return NVML_ERROR_NOT_SUPPORTED;                                              \
        struct dev_rec *d = count ? acct_nvml(dev) : NULL;                                 \
        if (!d)                                                                           \
            return r_##name(dev, count, infos);                                           \
        unsigned pids[64];                                                                \
        uint64_t bytes[64];                                                               \
        unsigned n = region_procs(d->rh, d->g, 64, pids, bytes);                           \
        if (n > 64)                                                                       \
            n = 64;                                                                       \
        if (!infos || *count < n) {                                                       \
            *count = n;                                                                   \
            return n ? NVML_ERROR_INSUFFICIENT_SIZE : NVML_SUCCESS;                       \
        }                                                                                 \
        for (unsigned i = 0; i < n; i++) {                                                \
            memset(&infos[i], 0, sizeof infos[i]);                                        \
            infos[i].pid = pids[i];                                                       \
            infos[i].usedGpuMemory = bytes[i];                                            \
            extra_fields;                                                                 \
        }                                                                                 \
        *count = n;                                                                       \
        return NVML_SUCCESS;                                                              \
    }

PROCS_HOOK(nvmlDeviceGetComputeRunningProcesses, nvmlProcessInfo_v1_t, (void)0)
PROCS_HOOK(nvmlDeviceGetComputeRunningProcesses_v2, nvmlProcessInfo_t, (infos[i].gpuInstanceId = 0xFFFFFFFFu, infos[i].computeInstanceId = 0xFFFFFFFFu))
PROCS_HOOK(nvmlDeviceGetComputeRunningProcesses_v3, nvmlProcessInfo_t, (infos[i].gpuInstanceId = 0xFFFFFFFFu, infos[i].computeInstanceId = 0xFFFFFFFFu))
