/* A fake libnvidia-ml.so.1 for tests: the NVML calls Tessera's NVML backend makes through pynvml (device
 * identity, memory, MIG mode, GPU and compute instances) and those the interception library makes.
 *
 * With FAKE_NVML_NODE=<SimulatedNode file> (read at nvmlInit) it drives that node's GPUs, with the MIG
 * profile tables of dra_driver/core/profiles.py (build/gen/fake_products.h) and the MIG state of nvml/state.c
 * (FAKE_NVML_STATE, FAKE_NVML_PROC). Without it: FAKE_GPU_COUNT (2) GPUs of FAKE_GPU_MEM_MB (81920) that
 * match fake_cuda.c, whose host view shows one foreign process and 1 GiB of foreign memory plus what the
 * fake libcuda of this process holds. FAKE_NVML_FAIL=1 makes nvmlInit fail. A GPU's PCIe throughput is what
 * the fake libcuda's page moves put on its link (nvml/pcie.c, FAKE_GPU_MEM).
 *
 * One translation unit: the pieces below are #included, so that everything but the API is static. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include "fake_products.h"
#include "nvml/defs.h"
#include "nvml/yaml_doc.c"
#include "nvml/node.c"
#include "nvml/mig.c"
#include "nvml/state.c"

#define API __attribute__((visibility("default")))

static void sync_sys(void); /* nvml/topology.c: the node's sysfs tree, written at nvmlInit */

enum { H_GPU = 1, H_MIG = 2 };
struct nvmlDevice_st {
    int kind;
    unsigned gpu, gi, ci;
};
struct nvmlGpuInstance_st {
    unsigned gpu, gi;
};
struct nvmlComputeInstance_st {
    unsigned gpu, gi, ci;
};

static struct nvmlDevice_st g_dev[FAKE_MAXDEV];
static struct nvmlDevice_st g_mig[FAKE_MAXDEV][FAKE_NGI][FAKE_NCI];
static struct nvmlGpuInstance_st g_gih[FAKE_MAXDEV][FAKE_NGI];
static struct nvmlComputeInstance_st g_cih[FAKE_MAXDEV][FAKE_NGI][FAKE_NCI];
static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static unsigned g_refs;
static int g_fail_init;

static void unlock_call(int *locked)
{
    if (*locked)
        pthread_mutex_unlock(&g_mu);
}
/* every entry point holds the lock until it returns */
#define LOCKED __attribute__((cleanup(unlock_call))) int locked_ = (pthread_mutex_lock(&g_mu), 1)

__attribute__((constructor)) static void fake_init(void)
{
    for (unsigned i = 0; i < FAKE_MAXDEV; i++) {
        g_dev[i] = (struct nvmlDevice_st){ .kind = H_GPU, .gpu = i };
        for (unsigned k = 0; k < FAKE_NGI; k++) {
            g_gih[i][k] = (struct nvmlGpuInstance_st){ .gpu = i, .gi = k };
            for (unsigned c = 0; c < FAKE_NCI; c++) {
                g_mig[i][k][c] = (struct nvmlDevice_st){ .kind = H_MIG, .gpu = i, .gi = k, .ci = c };
                g_cih[i][k][c] = (struct nvmlComputeInstance_st){ .gpu = i, .gi = k, .ci = c };
            }
        }
    }
    plain_node(&g_node);
    const char *v = getenv("FAKE_NVML_FAIL");
    g_fail_init = v && *v == '1';
}

/* A node from a file needs nvmlInit, as the real library does; the plain GPUs answer without it. */
static nvmlReturn_t ready(int need_state)
{
    if (!g_node.from_file)
        return NVML_SUCCESS;
    if (!g_refs)
        return NVML_ERROR_UNINITIALIZED;
    return need_state ? state_refresh() : NVML_SUCCESS;
}

static int in_range(const void *p, const void *base, size_t size)
{
    return (uintptr_t)p >= (uintptr_t)base && (uintptr_t)p < (uintptr_t)base + size;
}

static const struct gpu_desc *gpu_of(nvmlDevice_t d)
{
    return in_range(d, g_dev, sizeof g_dev) && d->gpu < g_node.ngpu ? &g_node.gpu[d->gpu] : NULL;
}

static const struct gpu_desc *mig_capable(nvmlDevice_t d)
{
    const struct gpu_desc *g = gpu_of(d);
    return g && g->prod && g->prod->memory_slices ? g : NULL;
}

/* a MIG device handle whose compute instance still exists */
static const struct ci_rec *mig_of(nvmlDevice_t d)
{
    if (!in_range(d, g_mig, sizeof g_mig) || d->gpu >= g_node.ngpu)
        return NULL;
    const struct gi_rec *gi = &g_st.gpu[d->gpu].gi[d->gi];
    return gi->used && gi->ci[d->ci].used ? &gi->ci[d->ci] : NULL;
}

static struct gi_rec *gi_of(nvmlGpuInstance_t h)
{
    if (!in_range(h, g_gih, sizeof g_gih) || h->gpu >= g_node.ngpu)
        return NULL;
    struct gi_rec *gi = &g_st.gpu[h->gpu].gi[h->gi];
    return gi->used ? gi : NULL;
}

static struct ci_rec *ci_of(nvmlComputeInstance_t h)
{
    if (!in_range(h, g_cih, sizeof g_cih) || h->gpu >= g_node.ngpu)
        return NULL;
    struct gi_rec *gi = &g_st.gpu[h->gpu].gi[h->gi];
    return gi->used && gi->ci[h->ci].used ? &gi->ci[h->ci] : NULL;
}

static nvmlReturn_t copy_text(char *buf, unsigned len, const char *text)
{
    if (!buf)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (strlen(text) + 1 > len)
        return NVML_ERROR_INSUFFICIENT_SIZE;
    memcpy(buf, text, strlen(text) + 1);
    return NVML_SUCCESS;
}

/* ---------- library ---------- */

API nvmlReturn_t nvmlInitWithFlags(unsigned flags)
{
    (void)flags;
    LOCKED;
    if (g_fail_init)
        return NVML_ERROR_UNKNOWN;
    if (g_refs) {
        g_refs++;
        return NVML_SUCCESS;
    }
    const char *file = getenv("FAKE_NVML_NODE");
    if (file && *file) {
        static struct node_desc node;
        if (load_node_file(file, &node)) {
            fprintf(stderr, "fake libnvidia-ml: node file %s: %s\n", file, g_err);
            return NVML_ERROR_UNKNOWN;
        }
        g_node = node;
        nvmlReturn_t rc = state_open();
        if (rc != NVML_SUCCESS) {
            plain_node(&g_node);
            return rc;
        }
        sync_sys();
    } else {
        plain_node(&g_node);
    }
    g_refs = 1;
    return NVML_SUCCESS;
}

API nvmlReturn_t nvmlInit_v2(void) { return nvmlInitWithFlags(0); }
API nvmlReturn_t nvmlInit(void) { return nvmlInitWithFlags(0); }

API nvmlReturn_t nvmlShutdown(void)
{
    LOCKED;
    if (!g_refs)
        return NVML_ERROR_UNINITIALIZED;
    g_refs--;
    return NVML_SUCCESS;
}

API const char *nvmlErrorString(nvmlReturn_t rc)
{
    switch (rc) {
    case NVML_SUCCESS: return "Success";
    case NVML_ERROR_UNINITIALIZED: return "Uninitialized";
    case NVML_ERROR_INVALID_ARGUMENT: return "Invalid Argument";
    case NVML_ERROR_NOT_SUPPORTED: return "Not Supported";
    case NVML_ERROR_NOT_FOUND: return "Not Found";
    case NVML_ERROR_INSUFFICIENT_SIZE: return "Insufficient Size";
    case NVML_ERROR_GPU_IS_LOST: return "GPU is lost";
    case NVML_ERROR_RESET_REQUIRED: return "GPU requires reset";
    case NVML_ERROR_IN_USE: return "In use by another client";
    case NVML_ERROR_INSUFFICIENT_RESOURCES: return "Insufficient Resources";
    case NVML_ERROR_ARGUMENT_VERSION_MISMATCH: return "Argument version mismatch";
    default: return "Unknown Error";
    }
}

API nvmlReturn_t nvmlSystemGetDriverVersion(char *buf, unsigned len)
{
    LOCKED;
    nvmlReturn_t rc = ready(0);
    return rc ? rc : copy_text(buf, len, g_node.driver_version);
}

API nvmlReturn_t nvmlSystemGetCudaDriverVersion(int *version)
{
    LOCKED;
    nvmlReturn_t rc = ready(0);
    if (rc || !version)
        return rc ? rc : NVML_ERROR_INVALID_ARGUMENT;
    *version = g_node.cuda_version;
    return NVML_SUCCESS;
}

API nvmlReturn_t nvmlSystemGetCudaDriverVersion_v2(int *version) { return nvmlSystemGetCudaDriverVersion(version); }

/* Test hook: a GPU reset (what an administrator does to apply a pending MIG mode on Ampere). */
API nvmlReturn_t fakeNvmlResetGpu(unsigned index)
{
    LOCKED;
    int fd;
    nvmlReturn_t rc = ready(0);
    if (rc || index >= g_node.ngpu)
        return rc ? rc : NVML_ERROR_INVALID_ARGUMENT;
    if ((rc = state_begin(&fd)))
        return rc;
    return state_end(fd, mig_reset(&g_st.gpu[index]));
}

#include "nvml/api_device.c"
#include "nvml/api_mig.c"
#include "nvml/topology.c"
#include "nvml/pcie.c"
