/* A fake libcuda.so.1 for tests: a few GPUs with simulated memory and a
 * simulated timeline. Kernels are asynchronous: a launch only moves the
 * stream's and the device's "busy until" time forward by the kernel's
 * duration; events, stream and context synchronisation read that timeline.
 * Each process has its own timeline per device (like an ideal MPS share).
 * Environment: FAKE_GPU_COUNT (2), FAKE_GPU_MEM_MB (81920), FAKE_PITCH (512),
 * FAKE_GPU_REVERSE=1 (CUDA ordinals in reverse physical order),
 * FAKE_KERNEL_NS (10000, for kernels not made by fakeKernel), FAKE_CTX_BYTES
 * (314572800: device memory a context takes; cuCtxCreate* takes it per
 * context, the primary context on its first retain, given back on destroy /
 * last release / reset). */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <errno.h>

#include "tessera_cuda.h"

#define API __attribute__((visibility("default")))
#define MAXDEV 16
#define FAKE_MAGIC 0x46414b454b524e4cull

struct fake_ctx { int dev; int live; };
struct fake_stream { uint64_t last_end; int dev; };
struct fake_event { uint64_t ts; };
struct fake_kernel { uint64_t magic; uint64_t ns; };
struct fake_array { uint64_t bytes; };

static struct fake_ctx g_ctx[MAXDEV];
static struct fake_stream g_default_stream[MAXDEV];
static uint64_t g_busy_until[MAXDEV];
static uint64_t g_busy_total[MAXDEV];
static uint64_t g_used[MAXDEV];
static uint64_t g_next_ptr[MAXDEV];
static uint64_t g_next_handle = 0x1000;
static int g_count = 2;
static uint64_t g_mem = 81920ull << 20;
static uint64_t g_pitch = 512;
static int g_reverse;
static uint64_t g_ctx_bytes = 300ull << 20;
static int g_prim_refs[MAXDEV];
static pthread_mutex_t g_ctx_mu = PTHREAD_MUTEX_INITIALIZER;
static int g_live_events;
static uint32_t g_next_ptr32[MAXDEV];
static uint64_t g_kernel_ns = 10000;
static __thread struct fake_ctx *t_cur;

/* allocation table: pointer/handle -> size, device */
#define FT_SIZE (1u << 18)
static struct { uint64_t key; uint64_t size; int dev; int kind; } g_ft[FT_SIZE];
static pthread_mutex_t g_ft_mu = PTHREAD_MUTEX_INITIALIZER;

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void sleep_until(uint64_t t)
{
    uint64_t n = now_ns();
    if (t <= n)
        return;
    struct timespec ts = { (time_t)((t - n) / 1000000000ull), (long)((t - n) % 1000000000ull) };
    while (nanosleep(&ts, &ts) && errno == EINTR) {
    }
}

static uint64_t env_u64(const char *name, uint64_t def)
{
    const char *v = getenv(name);
    return v && *v ? strtoull(v, NULL, 10) : def;
}

__attribute__((constructor)) static void fake_init(void)
{
    g_count = (int)env_u64("FAKE_GPU_COUNT", 2);
    if (g_count > MAXDEV)
        g_count = MAXDEV;
    g_mem = env_u64("FAKE_GPU_MEM_MB", 81920) << 20;
    g_pitch = env_u64("FAKE_PITCH", 512);
    g_reverse = (int)env_u64("FAKE_GPU_REVERSE", 0);
    g_kernel_ns = env_u64("FAKE_KERNEL_NS", 10000);
    g_ctx_bytes = env_u64("FAKE_CTX_BYTES", 300ull << 20);
    for (int i = 0; i < MAXDEV; i++) {
        g_ctx[i].dev = i;
        g_default_stream[i].dev = i;
        g_next_ptr[i] = 0x100000000000ull * (uint64_t)(i + 1);
        g_next_ptr32[i] = 0x01000000u * (uint32_t)(i + 1);
    }
}

static int phys(int ordinal) { return g_reverse ? g_count - 1 - ordinal : ordinal; }

static int ft_put(uint64_t key, uint64_t size, int dev, int kind)
{
    pthread_mutex_lock(&g_ft_mu);
    uint64_t i = (key * 0x9E3779B97F4A7C15ull) >> 46;
    for (unsigned n = 0; n < FT_SIZE; n++, i = (i + 1) & (FT_SIZE - 1)) {
        if (!g_ft[i].key || g_ft[i].key == 1) {
            g_ft[i].key = key;
            g_ft[i].size = size;
            g_ft[i].dev = dev;
            g_ft[i].kind = kind;
            pthread_mutex_unlock(&g_ft_mu);
            return 1;
        }
    }
    pthread_mutex_unlock(&g_ft_mu);
    return 0;
}

static int ft_take(uint64_t key, int kind, uint64_t *size, int *dev)
{
    pthread_mutex_lock(&g_ft_mu);
    uint64_t i = (key * 0x9E3779B97F4A7C15ull) >> 46;
    for (unsigned n = 0; n < FT_SIZE && g_ft[i].key; n++, i = (i + 1) & (FT_SIZE - 1)) {
        if (g_ft[i].key == key && g_ft[i].kind == kind) {
            *size = g_ft[i].size;
            *dev = g_ft[i].dev;
            g_ft[i].key = 1;
            pthread_mutex_unlock(&g_ft_mu);
            return 1;
        }
    }
    pthread_mutex_unlock(&g_ft_mu);
    return 0;
}

static CUresult phys_alloc(int dev, uint64_t size, uint64_t *out, int kind)
{
    uint64_t u = __atomic_add_fetch(&g_used[dev], size, __ATOMIC_SEQ_CST);
    if (u > g_mem) {
        __atomic_sub_fetch(&g_used[dev], size, __ATOMIC_SEQ_CST);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    uint64_t key;
    if (kind == 3)
        key = __atomic_fetch_add(&g_next_ptr32[dev], (uint32_t)(((size + 511) & ~511ull) + 512), __ATOMIC_SEQ_CST);
    else if (kind == 0)
        key = __atomic_fetch_add(&g_next_ptr[dev], ((size + 511) & ~511ull) + 512, __ATOMIC_SEQ_CST);
    else if (kind == 1)
        key = __atomic_fetch_add(&g_next_handle, 1, __ATOMIC_SEQ_CST);
    else
        key = *out;
    if (kind == 3)
        kind = 0;
    if (!ft_put(key, size, dev, kind)) {
        __atomic_sub_fetch(&g_used[dev], size, __ATOMIC_SEQ_CST);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    *out = key;
    return CUDA_SUCCESS;
}

static CUresult phys_free(uint64_t key, int kind)
{
    uint64_t size;
    int dev;
    if (!ft_take(key, kind, &size, &dev))
        return CUDA_ERROR_INVALID_VALUE;
    __atomic_sub_fetch(&g_used[dev], size, __ATOMIC_SEQ_CST);
    return CUDA_SUCCESS;
}

#define CUR_DEV(d)                                  \
    int d;                                          \
    do {                                            \
        if (!t_cur)                                 \
            return CUDA_ERROR_INVALID_CONTEXT;      \
        d = t_cur->dev;                             \
    } while (0)

API CUresult cuInit(unsigned flags) { (void)flags; return CUDA_SUCCESS; }
API CUresult cuDriverGetVersion(int *v) { *v = 12040; return CUDA_SUCCESS; }
API CUresult cuDeviceGetCount(int *n) { *n = g_count; return CUDA_SUCCESS; }
API CUresult cuDeviceGet(CUdevice *d, int ordinal)
{
    if (ordinal < 0 || ordinal >= g_count)
        return CUDA_ERROR_INVALID_DEVICE;
    *d = ordinal;
    return CUDA_SUCCESS;
}
API CUresult cuDeviceGetUuid(CUuuid *u, CUdevice d)
{
    if (d < 0 || d >= g_count)
        return CUDA_ERROR_INVALID_DEVICE;
    static const unsigned char base[16] = { 0x7e, 0x55, 0xe7, 0xa0, 0x12, 0x34, 0x45, 0x67, 0x89, 0xab, 0xcd, 0xef, 0, 0, 0, 0 };
    memcpy(u->bytes, base, 16);
    u->bytes[15] = (char)phys(d);
    return CUDA_SUCCESS;
}
API CUresult cuDeviceGetUuid_v2(CUuuid *u, CUdevice d) { return cuDeviceGetUuid(u, d); }
API CUresult cuDeviceGetName(char *name, int len, CUdevice d)
{
    (void)d;
    strncpy(name, "Fake H100 80GB", (size_t)len);
    return CUDA_SUCCESS;
}
API CUresult cuDeviceTotalMem_v2(size_t *b, CUdevice d)
{
    if (d < 0 || d >= g_count)
        return CUDA_ERROR_INVALID_DEVICE;
    *b = g_mem;
    return CUDA_SUCCESS;
}
static CUresult ctx_mem(int d, int take)
{
    if (take) {
        if (__atomic_add_fetch(&g_used[d], g_ctx_bytes, __ATOMIC_SEQ_CST) > g_mem) {
            __atomic_sub_fetch(&g_used[d], g_ctx_bytes, __ATOMIC_SEQ_CST);
            return CUDA_ERROR_OUT_OF_MEMORY;
        }
    } else {
        __atomic_sub_fetch(&g_used[d], g_ctx_bytes, __ATOMIC_SEQ_CST);
    }
    return CUDA_SUCCESS;
}
/* every created context is a context of its own (never freed: other threads may still point at it) */
API CUresult cuCtxCreate_v2(CUcontext *c, unsigned flags, CUdevice d)
{
    (void)flags;
    if (d < 0 || d >= g_count)
        return CUDA_ERROR_INVALID_DEVICE;
    struct fake_ctx *x = malloc(sizeof *x);
    if (!x || ctx_mem(d, 1) != CUDA_SUCCESS) {
        free(x);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    x->dev = d;
    x->live = 1;
    t_cur = x;
    *c = (CUcontext)t_cur;
    return CUDA_SUCCESS;
}
API CUresult cuCtxCreate_v3(CUcontext *c, void *params, int n, unsigned flags, CUdevice d) { (void)params; (void)n; return cuCtxCreate_v2(c, flags, d); }
API CUresult cuCtxCreate_v4(CUcontext *c, void *params, unsigned flags, CUdevice d) { (void)params; return cuCtxCreate_v2(c, flags, d); }
API CUresult cuCtxDestroy_v2(CUcontext c)
{
    struct fake_ctx *x = (struct fake_ctx *)c;
    if (!x || (x >= g_ctx && x < g_ctx + MAXDEV) || !__atomic_exchange_n(&x->live, 0, __ATOMIC_SEQ_CST))
        return CUDA_ERROR_INVALID_CONTEXT;
    ctx_mem(x->dev, 0);
    if (t_cur == x)
        t_cur = NULL;
    return CUDA_SUCCESS;
}
API CUresult cuDevicePrimaryCtxRetain(CUcontext *c, CUdevice d)
{
    if (d < 0 || d >= g_count)
        return CUDA_ERROR_INVALID_DEVICE;
    CUresult rc = CUDA_SUCCESS;
    pthread_mutex_lock(&g_ctx_mu);
    if (g_prim_refs[d] == 0)
        rc = ctx_mem(d, 1);
    if (rc == CUDA_SUCCESS) {
        g_prim_refs[d]++;
        *c = (CUcontext)&g_ctx[d];
    }
    pthread_mutex_unlock(&g_ctx_mu);
    return rc;
}
API CUresult cuDevicePrimaryCtxRelease_v2(CUdevice d)
{
    if (d < 0 || d >= g_count)
        return CUDA_ERROR_INVALID_DEVICE;
    CUresult rc = CUDA_SUCCESS;
    pthread_mutex_lock(&g_ctx_mu);
    if (g_prim_refs[d] == 0)
        rc = CUDA_ERROR_INVALID_CONTEXT;
    else if (--g_prim_refs[d] == 0)
        ctx_mem(d, 0);
    pthread_mutex_unlock(&g_ctx_mu);
    return rc;
}
API CUresult cuDevicePrimaryCtxRelease(CUdevice d) { return cuDevicePrimaryCtxRelease_v2(d); }
/* reset drops the primary context whatever its retain count (simplified) */
API CUresult cuDevicePrimaryCtxReset_v2(CUdevice d)
{
    if (d < 0 || d >= g_count)
        return CUDA_ERROR_INVALID_DEVICE;
    pthread_mutex_lock(&g_ctx_mu);
    if (g_prim_refs[d] > 0)
        ctx_mem(d, 0);
    g_prim_refs[d] = 0;
    pthread_mutex_unlock(&g_ctx_mu);
    return CUDA_SUCCESS;
}
API CUresult cuDevicePrimaryCtxReset(CUdevice d) { return cuDevicePrimaryCtxReset_v2(d); }
API CUresult cuCtxSetCurrent(CUcontext c) { t_cur = (struct fake_ctx *)c; return CUDA_SUCCESS; }
API CUresult cuCtxGetCurrent(CUcontext *c) { *c = (CUcontext)t_cur; return CUDA_SUCCESS; }
API CUresult cuCtxGetDevice(CUdevice *d)
{
    CUR_DEV(dev);
    *d = dev;
    return CUDA_SUCCESS;
}
API CUresult cuCtxSynchronize(void)
{
    CUR_DEV(dev);
    sleep_until(__atomic_load_n(&g_busy_until[dev], __ATOMIC_SEQ_CST));
    return CUDA_SUCCESS;
}

API CUresult cuMemGetInfo_v2(size_t *f, size_t *t)
{
    CUR_DEV(dev);
    uint64_t u = __atomic_load_n(&g_used[dev], __ATOMIC_SEQ_CST);
    *f = (size_t)(g_mem - u);
    *t = (size_t)g_mem;
    return CUDA_SUCCESS;
}
API CUresult cuMemAlloc_v2(CUdeviceptr *p, size_t size)
{
    CUR_DEV(dev);
    if (!size)
        return CUDA_ERROR_INVALID_VALUE;
    uint64_t out;
    CUresult rc = phys_alloc(dev, size, &out, 0);
    if (rc == CUDA_SUCCESS)
        *p = out;
    return rc;
}
/* v1 ABI: 32-bit pointers and sizes */
API CUresult cuMemAlloc(CUdeviceptr_v1 *p, unsigned int size)
{
    CUR_DEV(dev);
    if (!size)
        return CUDA_ERROR_INVALID_VALUE;
    uint64_t out;
    CUresult rc = phys_alloc(dev, size, &out, 3);
    if (rc == CUDA_SUCCESS)
        *p = (CUdeviceptr_v1)out;
    return rc;
}
API CUresult cuMemAllocPitch(CUdeviceptr_v1 *p, unsigned int *pitch, unsigned int w, unsigned int h, unsigned elem)
{
    (void)elem;
    uint64_t pt = (w + g_pitch - 1) / g_pitch * g_pitch;
    if (pt * h > 0xffffffffull)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult rc = cuMemAlloc(p, (unsigned)(pt * h));
    if (rc == CUDA_SUCCESS)
        *pitch = (unsigned)pt;
    return rc;
}
API CUresult cuMemFree(CUdeviceptr_v1 p) { return phys_free(p, 0); }
static unsigned clamp32(uint64_t v) { return v > 0xffffffffull ? 0xffffffffu : (unsigned)v; }
API CUresult cuMemGetInfo(unsigned int *f, unsigned int *t)
{
    CUR_DEV(dev);
    uint64_t u = __atomic_load_n(&g_used[dev], __ATOMIC_SEQ_CST);
    *f = clamp32(g_mem - u);
    *t = clamp32(g_mem);
    return CUDA_SUCCESS;
}
API CUresult cuDeviceTotalMem(unsigned int *b, CUdevice d)
{
    if (d < 0 || d >= g_count)
        return CUDA_ERROR_INVALID_DEVICE;
    *b = clamp32(g_mem);
    return CUDA_SUCCESS;
}
API CUresult cuMemAllocManaged(CUdeviceptr *p, size_t size, unsigned flags) { (void)flags; return cuMemAlloc_v2(p, size); }
API CUresult cuMemAllocPitch_v2(CUdeviceptr *p, size_t *pitch, size_t w, size_t h, unsigned elem)
{
    (void)elem;
    size_t pt = (w + g_pitch - 1) / g_pitch * g_pitch;
    CUresult rc = cuMemAlloc_v2(p, pt * h);
    if (rc == CUDA_SUCCESS)
        *pitch = pt;
    return rc;
}
API CUresult cuMemFree_v2(CUdeviceptr p) { return phys_free(p, 0); }
API CUresult cuMemAllocAsync(CUdeviceptr *p, size_t size, CUstream s) { (void)s; return cuMemAlloc_v2(p, size); }
API CUresult cuMemAllocAsync_ptsz(CUdeviceptr *p, size_t size, CUstream s) { (void)s; return cuMemAlloc_v2(p, size); }
API CUresult cuMemAllocFromPoolAsync(CUdeviceptr *p, size_t size, CUmemoryPool pool, CUstream s) { (void)pool; (void)s; return cuMemAlloc_v2(p, size); }
API CUresult cuMemAllocFromPoolAsync_ptsz(CUdeviceptr *p, size_t size, CUmemoryPool pool, CUstream s) { (void)pool; (void)s; return cuMemAlloc_v2(p, size); }
API CUresult cuMemFreeAsync(CUdeviceptr p, CUstream s) { (void)s; return phys_free(p, 0); }
API CUresult cuMemFreeAsync_ptsz(CUdeviceptr p, CUstream s) { (void)s; return phys_free(p, 0); }
API CUresult cuMemCreate(CUmemGenericAllocationHandle *h, size_t size, const CUmemAllocationProp *prop, unsigned long long flags)
{
    (void)flags;
    if (!prop || prop->location.id < 0 || prop->location.id >= g_count)
        return CUDA_ERROR_INVALID_DEVICE;
    uint64_t out;
    CUresult rc = phys_alloc(prop->location.id, size, &out, 1);
    if (rc == CUDA_SUCCESS)
        *h = out;
    return rc;
}
API CUresult cuMemRelease(CUmemGenericAllocationHandle h) { return phys_free(h, 1); }

static uint64_t fmt_bytes(CUarray_format f) { return f == CU_AD_FORMAT_FLOAT || f == CU_AD_FORMAT_UNSIGNED_INT32 || f == CU_AD_FORMAT_SIGNED_INT32 ? 4 : f == CU_AD_FORMAT_HALF || f == CU_AD_FORMAT_UNSIGNED_INT16 || f == CU_AD_FORMAT_SIGNED_INT16 ? 2 : 1; }
static CUresult array_new(uint64_t bytes, void **out)
{
    CUR_DEV(dev);
    struct fake_array *a = malloc(sizeof *a);
    if (!a)
        return CUDA_ERROR_OUT_OF_MEMORY;
    a->bytes = bytes;
    uint64_t key = (uint64_t)(uintptr_t)a;
    CUresult rc = phys_alloc(dev, bytes, &key, 2);
    if (rc != CUDA_SUCCESS) {
        free(a);
        return rc;
    }
    *out = a;
    return CUDA_SUCCESS;
}
static CUresult array_free(void *a)
{
    CUresult rc = phys_free((uint64_t)(uintptr_t)a, 2);
    if (rc == CUDA_SUCCESS)
        free(a);
    return rc;
}
API CUresult cuArrayCreate_v2(CUarray *a, const CUDA_ARRAY_DESCRIPTOR *d)
{
    return array_new(d->Width * (d->Height ? d->Height : 1) * fmt_bytes(d->Format) * d->NumChannels, (void **)a);
}
API CUresult cuArray3DCreate_v2(CUarray *a, const CUDA_ARRAY3D_DESCRIPTOR *d)
{
    return array_new(d->Width * (d->Height ? d->Height : 1) * (d->Depth ? d->Depth : 1) * fmt_bytes(d->Format) * d->NumChannels, (void **)a);
}
API CUresult cuMipmappedArrayCreate(CUmipmappedArray *a, const CUDA_ARRAY3D_DESCRIPTOR *d, unsigned levels)
{
    (void)levels;
    return array_new(2 * d->Width * (d->Height ? d->Height : 1) * (d->Depth ? d->Depth : 1) * fmt_bytes(d->Format) * d->NumChannels, (void **)a);
}
API CUresult cuArrayCreate(CUarray *a, const CUDA_ARRAY_DESCRIPTOR_v1 *d)
{
    return array_new((uint64_t)d->Width * (d->Height ? d->Height : 1) * fmt_bytes(d->Format) * d->NumChannels, (void **)a);
}
API CUresult cuArray3DCreate(CUarray *a, const CUDA_ARRAY3D_DESCRIPTOR_v1 *d)
{
    return array_new((uint64_t)d->Width * (d->Height ? d->Height : 1) * (d->Depth ? d->Depth : 1) * fmt_bytes(d->Format) * d->NumChannels, (void **)a);
}
API CUresult cuArrayDestroy(CUarray a) { return array_free(a); }
API CUresult cuMipmappedArrayDestroy(CUmipmappedArray a) { return array_free(a); }

API CUresult cuIpcGetMemHandle(CUipcMemHandle *h, CUdeviceptr p)
{
    memset(h, 0, sizeof *h);
    memcpy(h->reserved, &p, sizeof p);
    return CUDA_SUCCESS;
}
API CUresult cuIpcOpenMemHandle_v2(CUdeviceptr *p, CUipcMemHandle h, unsigned flags)
{
    (void)flags;
    memcpy(p, h.reserved, sizeof *p);
    return CUDA_SUCCESS;
}
API CUresult cuIpcCloseMemHandle(CUdeviceptr p) { (void)p; return CUDA_SUCCESS; }

/* ---- simulated execution ---- */

API CUfunction fakeKernel(uint64_t ns)
{
    struct fake_kernel *k = malloc(sizeof *k);
    k->magic = FAKE_MAGIC;
    k->ns = ns;
    return (CUfunction)k;
}
API CUgraphExec fakeGraphExec(uint64_t ns) { return (CUgraphExec)fakeKernel(ns); }
API uint64_t fakeBusyNs(int dev) { return __atomic_load_n(&g_busy_total[dev], __ATOMIC_SEQ_CST); }
API uint64_t fakeUsedBytes(int dev) { return __atomic_load_n(&g_used[dev], __ATOMIC_SEQ_CST); }
/* by NVML (physical) index, for the fake NVML */
API uint64_t fakeUsedBytesPhys(int i) { return i >= 0 && i < g_count ? fakeUsedBytes(phys(i)) : 0; }
API int fakeLiveEvents(void) { return __atomic_load_n(&g_live_events, __ATOMIC_SEQ_CST); }

static struct fake_stream *stream_of(CUstream s)
{
    if (s && (uintptr_t)s > 2)
        return (struct fake_stream *)s;
    return &g_default_stream[t_cur ? t_cur->dev : 0];
}

static uint64_t umax(uint64_t a, uint64_t b) { return a > b ? a : b; }

static CUresult run(const void *fn, CUstream s)
{
    CUR_DEV(dev);
    const struct fake_kernel *k = fn;
    uint64_t dur = k && k->magic == FAKE_MAGIC ? k->ns : g_kernel_ns;
    struct fake_stream *st = stream_of(s);
    uint64_t now = now_ns(), old = __atomic_load_n(&g_busy_until[dev], __ATOMIC_SEQ_CST), end;
    do {
        end = umax(umax(now, old), __atomic_load_n(&st->last_end, __ATOMIC_SEQ_CST)) + dur;
    } while (!__atomic_compare_exchange_n(&g_busy_until[dev], &old, end, 0, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST));
    __atomic_store_n(&st->last_end, end, __ATOMIC_SEQ_CST);
    __atomic_add_fetch(&g_busy_total[dev], dur, __ATOMIC_SEQ_CST);
    return CUDA_SUCCESS;
}

#define LP CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz, unsigned shmem, CUstream s
#define UNUSED_GRID (void)gx, (void)gy, (void)gz, (void)bx, (void)by, (void)bz, (void)shmem
API CUresult cuLaunchKernel(LP, void **p, void **e) { UNUSED_GRID; (void)p; (void)e; return run(f, s); }
API CUresult cuLaunchKernel_ptsz(LP, void **p, void **e) { UNUSED_GRID; (void)p; (void)e; return run(f, s); }
API CUresult cuLaunchCooperativeKernel(LP, void **p) { UNUSED_GRID; (void)p; return run(f, s); }
API CUresult cuLaunchCooperativeKernel_ptsz(LP, void **p) { UNUSED_GRID; (void)p; return run(f, s); }
API CUresult cuLaunchKernelEx(const CUlaunchConfig *c, CUfunction f, void **p, void **e) { (void)p; (void)e; return run(f, c ? c->hStream : NULL); }
API CUresult cuLaunchKernelEx_ptsz(const CUlaunchConfig *c, CUfunction f, void **p, void **e) { (void)p; (void)e; return run(f, c ? c->hStream : NULL); }
API CUresult cuGraphLaunch(CUgraphExec g, CUstream s) { return run(g, s); }
API CUresult cuGraphLaunch_ptsz(CUgraphExec g, CUstream s) { return run(g, s); }

API CUresult cuStreamCreate(CUstream *s, unsigned flags)
{
    (void)flags;
    CUR_DEV(dev);
    struct fake_stream *st = calloc(1, sizeof *st);
    st->dev = dev;
    *s = (CUstream)st;
    return CUDA_SUCCESS;
}
API CUresult cuStreamDestroy_v2(CUstream s) { free(s); return CUDA_SUCCESS; }
API CUresult cuStreamSynchronize(CUstream s) { sleep_until(__atomic_load_n(&stream_of(s)->last_end, __ATOMIC_SEQ_CST)); return CUDA_SUCCESS; }
API CUresult cuEventCreate(CUevent *e, unsigned flags)
{
    (void)flags;
    *e = (CUevent)calloc(1, sizeof(struct fake_event));
    __atomic_add_fetch(&g_live_events, 1, __ATOMIC_SEQ_CST);
    return CUDA_SUCCESS;
}
API CUresult cuEventDestroy_v2(CUevent e)
{
    if (e)
        __atomic_sub_fetch(&g_live_events, 1, __ATOMIC_SEQ_CST);
    free(e);
    return CUDA_SUCCESS;
}
API CUresult cuEventRecord(CUevent e, CUstream s)
{
    if (!t_cur)
        return CUDA_ERROR_INVALID_CONTEXT;
    ((struct fake_event *)e)->ts = umax(now_ns(), __atomic_load_n(&stream_of(s)->last_end, __ATOMIC_SEQ_CST));
    return CUDA_SUCCESS;
}
API CUresult cuEventRecord_ptsz(CUevent e, CUstream s) { return cuEventRecord(e, s); }
API CUresult cuEventQuery(CUevent e) { return now_ns() >= ((struct fake_event *)e)->ts ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY; }
API CUresult cuEventSynchronize(CUevent e) { sleep_until(((struct fake_event *)e)->ts); return CUDA_SUCCESS; }
API CUresult cuEventElapsedTime(float *ms, CUevent a, CUevent b)
{
    const struct fake_event *x = (const struct fake_event *)a, *y = (const struct fake_event *)b;
    if (now_ns() < y->ts)
        return CUDA_ERROR_NOT_READY;
    *ms = (float)((double)((int64_t)(y->ts - x->ts)) / 1e6);
    return CUDA_SUCCESS;
}

/* ---- cuGetProcAddress: a static name table, like the real driver's ---- */
#define SYM(n) { #n, (void *)&n },
static const struct { const char *name; void *fn; } g_syms[] = {
    SYM(cuInit) SYM(cuDriverGetVersion) SYM(cuDeviceGetCount) SYM(cuDeviceGet) SYM(cuDeviceGetUuid)
    SYM(cuDeviceGetUuid_v2) SYM(cuDeviceGetName) SYM(cuDeviceTotalMem_v2) SYM(cuCtxCreate_v2)
    SYM(cuDevicePrimaryCtxRetain) SYM(cuCtxDestroy_v2) SYM(cuCtxSetCurrent) SYM(cuCtxGetCurrent)
    SYM(cuCtxGetDevice) SYM(cuCtxSynchronize) SYM(cuMemGetInfo_v2) SYM(cuMemAlloc_v2) SYM(cuMemAllocManaged)
    SYM(cuMemAllocPitch_v2) SYM(cuMemFree_v2) SYM(cuMemAllocAsync) SYM(cuMemAllocAsync_ptsz)
    SYM(cuMemAllocFromPoolAsync) SYM(cuMemAllocFromPoolAsync_ptsz) SYM(cuMemFreeAsync) SYM(cuMemFreeAsync_ptsz)
    SYM(cuMemCreate) SYM(cuMemRelease) SYM(cuArrayCreate_v2) SYM(cuArray3DCreate_v2) SYM(cuMipmappedArrayCreate)
    SYM(cuArrayDestroy) SYM(cuMipmappedArrayDestroy) SYM(cuIpcGetMemHandle) SYM(cuIpcOpenMemHandle_v2)
    SYM(cuIpcCloseMemHandle) SYM(cuLaunchKernel) SYM(cuLaunchKernel_ptsz) SYM(cuLaunchCooperativeKernel)
    SYM(cuLaunchCooperativeKernel_ptsz) SYM(cuLaunchKernelEx) SYM(cuLaunchKernelEx_ptsz) SYM(cuGraphLaunch)
    SYM(cuGraphLaunch_ptsz) SYM(cuStreamCreate) SYM(cuStreamDestroy_v2) SYM(cuStreamSynchronize)
    SYM(cuEventCreate) SYM(cuEventDestroy_v2) SYM(cuEventRecord) SYM(cuEventRecord_ptsz) SYM(cuEventQuery)
    SYM(cuEventSynchronize) SYM(cuEventElapsedTime) SYM(cuCtxCreate_v3) SYM(cuCtxCreate_v4)
    SYM(cuDevicePrimaryCtxRelease) SYM(cuDevicePrimaryCtxRelease_v2) SYM(cuDevicePrimaryCtxReset)
    SYM(cuDevicePrimaryCtxReset_v2) SYM(cuMemAlloc) SYM(cuMemAllocPitch) SYM(cuMemFree) SYM(cuMemGetInfo)
    SYM(cuDeviceTotalMem) SYM(cuArrayCreate) SYM(cuArray3DCreate)
    { "cuGetProcAddress", NULL }, { "cuGetProcAddress_v2", NULL },
};

API CUresult cuGetProcAddress(const char *symbol, void **pfn, int ver, cuuint64_t flags);
API CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int ver, cuuint64_t flags, int *status);

static void *lookup(const char *name)
{
    if (!strcmp(name, "cuGetProcAddress"))
        return (void *)&cuGetProcAddress;
    if (!strcmp(name, "cuGetProcAddress_v2"))
        return (void *)&cuGetProcAddress_v2;
    for (size_t i = 0; i < sizeof g_syms / sizeof g_syms[0]; i++)
        if (g_syms[i].fn && !strcmp(g_syms[i].name, name))
            return g_syms[i].fn;
    return NULL;
}

#define CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM 2
/* Like the driver: a base name resolves to its newest version (_v2) and, with
 * the per-thread flag, to its _ptsz variant where one exists; a cudaVersion
 * before 3.2 (3020) gets the v1 entry points. */
API CUresult cuGetProcAddress(const char *symbol, void **pfn, int ver, cuuint64_t flags)
{
    char buf[128];
    void *f = NULL;
    if (!symbol || !pfn || strlen(symbol) > 100)
        return CUDA_ERROR_INVALID_VALUE;
    if (flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) {
        strcpy(buf, symbol);
        strcat(buf, "_ptsz");
        f = lookup(buf);
    }
    if (!f && ver >= 3020) {
        strcpy(buf, symbol);
        strcat(buf, "_v2");
        f = lookup(buf);
    }
    if (!f)
        f = lookup(symbol);
    *pfn = f;
    return f ? CUDA_SUCCESS : CUDA_ERROR_NOT_FOUND;
}
API CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int ver, cuuint64_t flags, int *status)
{
    CUresult rc = cuGetProcAddress(symbol, pfn, ver, flags);
    if (status)
        *status = rc == CUDA_SUCCESS ? 0 : 1;
    return rc;
}
