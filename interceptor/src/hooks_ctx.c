/* Context memory: a CUDA context takes device memory (hundreds of MiB on a
 * real GPU) that no allocation call shows. Each context this process creates
 * (cuCtxCreate*, the primary context on its first retain) is charged to the
 * claim as the drop in the device's free memory across its creation, measured
 * under the region lock so that the claim's own allocations cannot land in
 * the window. The bytes are charged even past the limit (failing a context
 * breaks the program; later allocations fail instead), sit in this process's
 * slot (so the dead-process sweep gives them back) and are credited on
 * destroy, last release or reset. Where nothing can measure, the configured
 * `context` bytes are charged. Not a hot path: it may take locks and dlopen. */
#include <pthread.h>
#include <stdint.h>
#include <string.h>

#include "alloc.h"
#include "devices.h"
#include "hooks.h"
#include "hooks_ctx.h"
#include "region_handle.h"
#include "table.h"
#include "util.h"

static struct tab g_tab_ctx = TAB_INIT(10);

/* Primary contexts, by CUDA ordinal: this process's retain count and charge. */
static struct {
    int refs;
    uint64_t bytes;
    struct dev_rec *rec;
} g_prim[MAX_RECS];
static pthread_mutex_t g_prim_mutex = PTHREAD_MUTEX_INITIALIZER;

static pthread_once_t g_nvml_init_once = PTHREAD_ONCE_INIT;
static int g_nvml_ok;

static void nvml_init_once(void)
{
    /* the application may never use NVML; its init is reference counted */
    if (nvml_ready() && r_nvmlInit_v2 && r_nvmlDeviceGetHandleByUUID && r_nvmlDeviceGetMemoryInfo &&
        r_nvmlInit_v2() == NVML_SUCCESS)
        g_nvml_ok = 1;
}

static nvmlDevice_t nvml_handle(struct dev_rec *d)
{
    nvmlDevice_t h = __atomic_load_n(&d->nvml_h, __ATOMIC_ACQUIRE);
    if (h)
        return h;
    pthread_once(&g_nvml_init_once, nvml_init_once);
    if (!g_nvml_ok || r_nvmlDeviceGetHandleByUUID(d->uuid, &h) != NVML_SUCCESS)
        return NULL;
    __atomic_store_n(&d->nvml_h, h, __ATOMIC_RELEASE);
    return h;
}

enum { METER_NONE, METER_CUDA, METER_NVML };

struct meter {
    int src;
    nvmlDevice_t nh;
    uint64_t before;
    uint64_t done_before; /* drv_done() when the first reading was taken */
};

/* Device-wide free bytes from the meter's source; -1 when it cannot say. */
static int meter_read(const struct meter *m, uint64_t *out)
{
    if (m->src == METER_CUDA) {
        size_t f = 0, t = 0;
        if (!r_cuMemGetInfo_v2 || r_cuMemGetInfo_v2(&f, &t) != CUDA_SUCCESS)
            return -1;
        *out = f;
        return 0;
    }
    if (m->src == METER_NVML) {
        nvmlMemory_t mem;
        if (r_nvmlDeviceGetMemoryInfo(m->nh, &mem) != NVML_SUCCESS)
            return -1;
        *out = mem.free;
        return 0;
    }
    return -1;
}

/* Picks a source before the region lock is taken: the driver's own free
 * memory when a context on this device is current (both readings then come
 * from it), else NVML's. */
static void meter_pick(struct meter *m, struct dev_rec *d, CUdevice dev)
{
    CUdevice cur;
    m->src = METER_NONE;
    m->nh = NULL;
    if (r_cuCtxGetDevice && r_cuCtxGetDevice(&cur) == CUDA_SUCCESS && cur == dev) {
        m->src = METER_CUDA;
    } else if ((m->nh = nvml_handle(d)) != NULL) {
        m->src = METER_NVML;
    }
}

/* Under the region lock: the bytes the creation just cost. Another thread's allocation or free landing in
 * the window would be charged to the context (or hide its cost), so then the configured default is used. */
static uint64_t meter_cost(struct meter *m, struct dev_rec *d, int measured_before)
{
    uint64_t after;
    if (measured_before && meter_read(m, &after) == 0 &&
        drv_inflight() == 0 && drv_done() == m->done_before)
        return m->before > after ? m->before - after : 0;
    if (measured_before)
        tlog(LOG_DEBUG, "%s: allocations ran while a context was created; charging the default %llu bytes",
             d->uuid, (unsigned long long)d->ctx_default);
    return d->ctx_default;
}

/* A context creation in progress: the region stays locked across the driver
 * call so that none of the claim's allocations can land in the window. */
struct ctx_charge {
    struct meter m;
    int locked;
    int measured_before;
};

/* Before the creation: pick the meter, enter the guard, lock the region and take the first reading. */
static void ctx_charge_begin(struct ctx_charge *cc, struct dev_rec *d, CUdevice dev)
{
    meter_pick(&cc->m, d, dev);
    t_in_hook++;
    cc->locked = region_lock(d->rh) == 0;
    cc->measured_before = 0;
    if (cc->locked) {
        cc->m.done_before = drv_done();
        cc->measured_before = drv_inflight() == 0 && meter_read(&cc->m, &cc->m.before) == 0;
    }
}

/* After it: charge what it cost when it succeeded, unlock, leave the guard.
 * Returns the bytes charged (0 when the region could not be locked). */
static uint64_t ctx_charge_end(struct ctx_charge *cc, struct dev_rec *d, CUresult rc)
{
    uint64_t bytes = 0;
    if (cc->locked) {
        if (rc == CUDA_SUCCESS) {
            bytes = meter_cost(&cc->m, d, cc->measured_before);
            region_charge_locked(d->rh, d->g, bytes);
            if (d->spill) /* a context is device memory: part of what the device holds for the claim */
                region_charge_locked(d->rh, d->res_g, bytes);
        }
        region_unlock(d->rh);
    }
    t_in_hook--;
    return bytes;
}

/* A context's table record: its bytes are held on the device for an oversubscribed claim too. */
static unsigned ctx_rec(struct dev_rec *d)
{
    return rec_index(d) | (d->spill ? REC_HELD : 0);
}

static struct dev_rec *ctx_dev(CUdevice dev)
{
    if (!g_tab_ctx.e)
        return NULL;
    return acct_cuda(dev);
}

static void ctx_track(struct dev_rec *d, CUcontext c, uint64_t bytes)
{
    tlog(LOG_DEBUG, "%s: context %llx costs %llu bytes", d->uuid, (unsigned long long)(uintptr_t)c,
         (unsigned long long)bytes);
    unsigned rec = ctx_rec(d);
    if (!tab_put(&g_tab_ctx, (uint64_t)(uintptr_t)c, bytes, rec)) {
        static int warned;
        if (!__atomic_exchange_n(&warned, 1, __ATOMIC_RELAXED))
            tlog(LOG_WARN, "context table full; some contexts are not counted");
        rec_release(rec, bytes);
    }
}

/* Defines one cuCtxCreate variant (they differ only in their parameters). */
#define CTX_CREATE_HOOK(name, params, args)                                             \
    HOOK CUresult name params                                                           \
    {                                                                                   \
        if (!cuda_ready() || !r_##name)                                                 \
            return CUDA_ERROR_NOT_INITIALIZED;                                          \
        struct dev_rec *d = ctx_dev(dev);                                               \
        if (!d || !c)                                                                   \
            return r_##name args;                                                       \
        struct ctx_charge cc;                                                           \
        ctx_charge_begin(&cc, d, dev);                                                  \
        CUresult rc = r_##name args;                                                    \
        uint64_t bytes = ctx_charge_end(&cc, d, rc);                                    \
        if (rc == CUDA_SUCCESS && bytes)                                                \
            ctx_track(d, *c, bytes);                                                    \
        return rc;                                                                      \
    }

CTX_CREATE_HOOK(cuCtxCreate_v2, (CUcontext *c, unsigned flags, CUdevice dev), (c, flags, dev))
CTX_CREATE_HOOK(cuCtxCreate_v3, (CUcontext *c, void *params, int nparams, unsigned flags, CUdevice dev),
                (c, params, nparams, flags, dev))
CTX_CREATE_HOOK(cuCtxCreate_v4, (CUcontext *c, void *params, unsigned flags, CUdevice dev), (c, params, flags, dev))

HOOK CUresult cuCtxDestroy_v2(CUcontext c)
{
    if (!cuda_ready() || !r_cuCtxDestroy_v2)
        return CUDA_ERROR_NOT_INITIALIZED;
    struct freeing f;
    if (!free_begin(&f, &g_tab_ctx, (uintptr_t)c))
        return r_cuCtxDestroy_v2(c);
    return free_end(&f, r_cuCtxDestroy_v2(c));
}

HOOK CUresult cuDevicePrimaryCtxRetain(CUcontext *c, CUdevice dev)
{
    if (!cuda_ready() || !r_cuDevicePrimaryCtxRetain)
        return CUDA_ERROR_NOT_INITIALIZED;
    struct dev_rec *d = ctx_dev(dev);
    if (!d || dev < 0 || dev >= MAX_RECS)
        return r_cuDevicePrimaryCtxRetain(c, dev);
    CUresult rc;
    pthread_mutex_lock(&g_prim_mutex);
    if (g_prim[dev].refs > 0) {
        rc = r_cuDevicePrimaryCtxRetain(c, dev);
    } else {
        struct ctx_charge cc;
        ctx_charge_begin(&cc, d, dev);
        rc = r_cuDevicePrimaryCtxRetain(c, dev);
        g_prim[dev].bytes = ctx_charge_end(&cc, d, rc);
        g_prim[dev].rec = d;
    }
    if (rc == CUDA_SUCCESS)
        g_prim[dev].refs++;
    pthread_mutex_unlock(&g_prim_mutex);
    return rc;
}

/* After a successful release (drop one reference) or reset (drop all). */
static void prim_drop(CUdevice dev, int all)
{
    if (!acct_on() || dev < 0 || dev >= MAX_RECS)
        return;
    pthread_mutex_lock(&g_prim_mutex);
    if (g_prim[dev].refs > 0) {
        g_prim[dev].refs = all ? 0 : g_prim[dev].refs - 1;
        if (g_prim[dev].refs == 0 && g_prim[dev].rec) {
            if (g_prim[dev].bytes)
                rec_release(ctx_rec(g_prim[dev].rec), g_prim[dev].bytes);
            g_prim[dev].bytes = 0;
            g_prim[dev].rec = NULL;
        }
    }
    pthread_mutex_unlock(&g_prim_mutex);
}

/* Defines one release or reset variant. */
#define PRIM_DROP_HOOK(name, all)                        \
    HOOK CUresult name(CUdevice dev)                     \
    {                                                    \
        if (!cuda_ready() || !r_##name)                  \
            return CUDA_ERROR_NOT_INITIALIZED;           \
        if (t_in_hook)                                   \
            return r_##name(dev);                        \
        t_in_hook++;                                     \
        CUresult rc = r_##name(dev);                     \
        if (rc == CUDA_SUCCESS)                          \
            prim_drop(dev, (all));                       \
        t_in_hook--;                                     \
        return rc;                                       \
    }
PRIM_DROP_HOOK(cuDevicePrimaryCtxRelease, 0)
PRIM_DROP_HOOK(cuDevicePrimaryCtxRelease_v2, 0)
PRIM_DROP_HOOK(cuDevicePrimaryCtxReset, 1)
PRIM_DROP_HOOK(cuDevicePrimaryCtxReset_v2, 1)

int ctx_init(void)
{
    return tab_init(&g_tab_ctx);
}

/* In a forked child no context of the parent's is ours. */
void ctx_after_fork(void)
{
    memset(g_prim, 0, sizeof g_prim);
    pthread_mutex_init(&g_prim_mutex, NULL);
    tab_reset(&g_tab_ctx);
}
