/* A fake libcuda.so.1 for tests: devices, contexts, device memory and the
 * symbol lookup. Execution lives in exec.c/capture.c, the shared time-sliced
 * GPUs in gpu.c. Device memory is simulated per process.
 * Environment: FAKE_GPU_COUNT (2), FAKE_GPU_MEM_MB (81920), FAKE_PITCH (512),
 * FAKE_GPU_REVERSE=1 (CUDA ordinals in reverse physical order),
 * FAKE_KERNEL_NS (10000, for kernels not made by fakeKernel), FAKE_CTX_BYTES
 * (314572800: device memory a context takes; cuCtxCreate* takes it per
 * context, the primary context on its first retain, given back on destroy /
 * last release / reset), FAKE_GPU_STATE, FAKE_TIMESLICE_US, FAKE_SWITCH_US
 * (gpu.c); FAKE_GPU_MEM, FAKE_PAGE_MBPS (uvm.c: one memory pool per GPU for
 * every process, managed memory and paging); CUDA_MPS_PIPE_DIRECTORY, CUDA_MPS_ACTIVE_THREAD_PERCENTAGE,
 * CUDA_MPS_PINNED_DEVICE_MEM_LIMIT (mps_client.c: the process as an MPS
 * client of the fake nvidia-cuda-mps-control). */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "fake.h"

#define MAXDEV FAKE_MAXDEV

static struct fake_ctx g_ctx[MAXDEV];
static uint64_t g_used[MAXDEV];
static uint64_t g_next_ptr[MAXDEV];
static uint64_t g_next_va = 0x700000000000ull;
static int g_count = 2;
static uint64_t g_mem = 81920ull << 20;
static uint64_t g_pitch = 512;
static int g_reverse;
static uint64_t g_ctx_bytes = 300ull << 20;
static int g_prim_refs[MAXDEV];
static pthread_mutex_t g_ctx_mu = PTHREAD_MUTEX_INITIALIZER;
static uint32_t g_next_ptr32[MAXDEV];
static uint64_t g_kernel_ns = 10000;
static __thread struct fake_ctx *t_cur;

uint64_t fake_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

void fake_sleep_until(uint64_t t)
{
    uint64_t n = fake_now_ns();
    if (t <= n)
        return;
    struct timespec ts = { (time_t)((t - n) / 1000000000ull), (long)((t - n) % 1000000000ull) };
    while (nanosleep(&ts, &ts) && errno == EINTR) {
    }
}

struct fake_ctx *fake_current(void) { return t_cur; }
/* the devices this process sees: an MPS client sees its control daemon's */
static int count(void)
{
    const struct fake_mps *m = mps_client();
    return m ? m->count : g_count;
}
int fake_gpu_count(void) { return count(); }
uint64_t fake_kernel_default_ns(void) { return g_kernel_ns; }

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
        g_next_ptr[i] = 0x100000000000ull * (uint64_t)(i + 1);
        g_next_ptr32[i] = 0x01000000u * (uint32_t)(i + 1);
    }
}

static int phys(int ordinal)
{
    const struct fake_mps *m = mps_client();
    if (m)
        return ordinal >= 0 && ordinal < m->count ? m->gpu[ordinal] : ordinal;
    return g_reverse ? g_count - 1 - ordinal : ordinal;
}
int fake_phys(int ordinal) { return ordinal >= 0 && ordinal < FAKE_MAXDEV ? phys(ordinal) : ordinal; }

/* ---- the allocation table: pointer/handle -> size, device, kind ---- */

enum { K_PTR, K_HANDLE, K_ARRAY };
/* a generic allocation handle: refs (create/retain/import) and mappings keep its memory alive */
enum { H_DEVICE, H_HOST, H_IMPORTED };

#define FT_SIZE (1u << 18)
static struct ft_ent {
    uint64_t key;
    uint64_t size;
    int dev;
    int kind;
    int hkind, refs, maps;
} g_ft[FT_SIZE];
static pthread_mutex_t g_ft_mu = PTHREAD_MUTEX_INITIALIZER;

static struct ft_ent *ft_find_locked(uint64_t key, int kind, int create)
{
    uint64_t i = (key * 0x9E3779B97F4A7C15ull) >> 46;
    struct ft_ent *tomb = NULL;
    for (unsigned n = 0; n < FT_SIZE; n++, i = (i + 1) & (FT_SIZE - 1)) {
        struct ft_ent *e = &g_ft[i];
        if (e->key == key && e->kind == kind)
            return e;
        if (e->key == 1 && !tomb)
            tomb = e;
        if (!e->key) {
            if (!create)
                return NULL;
            return tomb ? tomb : e;
        }
    }
    return create ? tomb : NULL;
}

static CUresult ft_put(uint64_t key, uint64_t size, int dev, int kind, int hkind)
{
    pthread_mutex_lock(&g_ft_mu);
    struct ft_ent *e = ft_find_locked(key, kind, 1);
    if (e)
        *e = (struct ft_ent){ key, size, dev, kind, hkind, 1, 0 };
    pthread_mutex_unlock(&g_ft_mu);
    return e ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}

static void device_free(int dev, uint64_t size)
{
    if (dev >= 0 && uvm_on())
        uvm_give(phys(dev), size);
    else if (dev >= 0)
        __atomic_sub_fetch(&g_used[dev], size, __ATOMIC_SEQ_CST);
}

uint64_t fake_gpu_mem(void) { return g_mem; }

/* bytes in use on dev: this process's own, or with FAKE_GPU_MEM every process's */
static uint64_t used_on(int dev)
{
    return uvm_on() ? uvm_used(phys(dev)) : __atomic_load_n(&g_used[dev], __ATOMIC_SEQ_CST);
}

/* the most device memory this process may hold on dev: the GPU's, or an MPS client's pinned limit */
static uint64_t mem_cap(int dev)
{
    const struct fake_mps *m = mps_client();
    return m && dev >= 0 && dev < m->count && m->limit[dev] && m->limit[dev] < g_mem ? m->limit[dev] : g_mem;
}

static CUresult device_take(int dev, uint64_t size)
{
    if (uvm_on())
        return uvm_take(phys(dev), size, mem_cap(dev));
    if (__atomic_add_fetch(&g_used[dev], size, __ATOMIC_SEQ_CST) > mem_cap(dev)) {
        __atomic_sub_fetch(&g_used[dev], size, __ATOMIC_SEQ_CST);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    return CUDA_SUCCESS;
}

/* kind K_PTR with a 32-bit pointer for the v1 ABI when v1 is set; K_ARRAY takes *out as the key */
static CUresult phys_alloc(int dev, uint64_t size, uint64_t *out, int kind, int v1)
{
    CUresult rc = device_take(dev, size);
    if (rc != CUDA_SUCCESS)
        return rc;
    uint64_t key = *out;
    if (kind == K_PTR && v1)
        key = __atomic_fetch_add(&g_next_ptr32[dev], (uint32_t)(((size + 511) & ~511ull) + 512), __ATOMIC_SEQ_CST);
    else if (kind == K_PTR)
        key = __atomic_fetch_add(&g_next_ptr[dev], ((size + 511) & ~511ull) + 512, __ATOMIC_SEQ_CST);
    if (ft_put(key, size, dev, kind, H_DEVICE) != CUDA_SUCCESS) {
        device_free(dev, size);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    *out = key;
    return CUDA_SUCCESS;
}

static CUresult phys_free(uint64_t key, int kind)
{
    pthread_mutex_lock(&g_ft_mu);
    struct ft_ent *e = ft_find_locked(key, kind, 0);
    uint64_t size = e ? e->size : 0;
    int dev = e ? e->dev : -1;
    if (e)
        e->key = 1;
    pthread_mutex_unlock(&g_ft_mu);
    if (!e)
        return CUDA_ERROR_INVALID_VALUE;
    if (dev < 0 && kind == K_PTR && uvm_on())
        uvm_managed_free(key);
    device_free(dev, size);
    return CUDA_SUCCESS;
}

static int cur_dev(void) { return t_cur ? t_cur->dev : -1; }

API CUresult cuInit(unsigned flags) { (void)flags; return mps_client_init(); }
API CUresult cuDriverGetVersion(int *v) { *v = 12040; return CUDA_SUCCESS; }
API CUresult cuDeviceGetCount(int *n) { *n = count(); return CUDA_SUCCESS; }
API CUresult cuDeviceGet(CUdevice *d, int ordinal)
{
    if (ordinal < 0 || ordinal >= count())
        return CUDA_ERROR_INVALID_DEVICE;
    *d = ordinal;
    return CUDA_SUCCESS;
}
API CUresult cuDeviceGetUuid(CUuuid *u, CUdevice d)
{
    if (d < 0 || d >= count())
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
    if (d < 0 || d >= count())
        return CUDA_ERROR_INVALID_DEVICE;
    *b = g_mem;
    return CUDA_SUCCESS;
}

/* ---- contexts ---- */

static CUresult ctx_mem(int d, int take)
{
    if (take)
        return device_take(d, g_ctx_bytes);
    device_free(d, g_ctx_bytes);
    return CUDA_SUCCESS;
}
/* every created context is a context of its own (never freed: other threads may still point at it) */
API CUresult cuCtxCreate_v2(CUcontext *c, unsigned flags, CUdevice d)
{
    (void)flags;
    if (mps_client_status() != CUDA_SUCCESS)
        return mps_client_status();
    if (d < 0 || d >= count())
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
    if (mps_client_status() != CUDA_SUCCESS)
        return mps_client_status();
    if (d < 0 || d >= count())
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
    if (d < 0 || d >= count())
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
    if (d < 0 || d >= count())
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
    if (!t_cur)
        return CUDA_ERROR_INVALID_CONTEXT;
    *d = t_cur->dev;
    return CUDA_SUCCESS;
}

/* ---- memory ---- */

API CUresult cuMemGetInfo_v2(size_t *f, size_t *t)
{
    int dev = cur_dev();
    if (dev < 0)
        return CUDA_ERROR_INVALID_CONTEXT;
    uint64_t u = used_on(dev);
    *f = (size_t)(mem_cap(dev) > u ? mem_cap(dev) - u : 0); /* MPS: free is what the pinned limit leaves */
    *t = (size_t)g_mem;
    return CUDA_SUCCESS;
}

/* Synchronous allocation and free may synchronize the device: "potentially unsafe" during a capture. */
static CUresult alloc_now(CUdeviceptr *p, size_t size, int v1)
{
    int dev = cur_dev();
    if (dev < 0)
        return CUDA_ERROR_INVALID_CONTEXT;
    if (!size)
        return CUDA_ERROR_INVALID_VALUE;
    uint64_t out = 0;
    CUresult rc = phys_alloc(dev, size, &out, K_PTR, v1);
    if (rc == CUDA_SUCCESS)
        *p = out;
    return rc;
}

API CUresult cuMemAlloc_v2(CUdeviceptr *p, size_t size)
{
    CUresult rc = capture_check_unsafe();
    return rc != CUDA_SUCCESS ? rc : alloc_now(p, size, 0);
}
/* v1 ABI: 32-bit pointers and sizes */
API CUresult cuMemAlloc(CUdeviceptr_v1 *p, unsigned int size)
{
    CUresult rc = capture_check_unsafe();
    CUdeviceptr out = 0;
    if (rc == CUDA_SUCCESS)
        rc = alloc_now(&out, size, 1);
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
API CUresult cuMemFree(CUdeviceptr_v1 p)
{
    CUresult rc = capture_check_unsafe();
    return rc != CUDA_SUCCESS ? rc : phys_free(p, K_PTR);
}
static unsigned clamp32(uint64_t v) { return v > 0xffffffffull ? 0xffffffffu : (unsigned)v; }
API CUresult cuMemGetInfo(unsigned int *f, unsigned int *t)
{
    int dev = cur_dev();
    if (dev < 0)
        return CUDA_ERROR_INVALID_CONTEXT;
    uint64_t u = used_on(dev);
    *f = clamp32(mem_cap(dev) > u ? mem_cap(dev) - u : 0);
    *t = clamp32(g_mem);
    return CUDA_SUCCESS;
}
API CUresult cuDeviceTotalMem(unsigned int *b, CUdevice d)
{
    if (d < 0 || d >= count())
        return CUDA_ERROR_INVALID_DEVICE;
    *b = clamp32(g_mem);
    return CUDA_SUCCESS;
}
/* With FAKE_GPU_MEM, managed memory takes device memory only where touched (uvm.c); else it is device memory. */
API CUresult cuMemAllocManaged(CUdeviceptr *p, size_t size, unsigned flags)
{
    (void)flags;
    int dev = cur_dev();
    if (!uvm_on() || dev < 0 || !size)
        return cuMemAlloc_v2(p, size);
    CUresult rc = capture_check_unsafe();
    if (rc != CUDA_SUCCESS)
        return rc;
    uint64_t key = __atomic_fetch_add(&g_next_ptr[dev], ((size + 511) & ~511ull) + 512, __ATOMIC_SEQ_CST);
    if (!uvm_managed_add(key, size, phys(dev)))
        return CUDA_ERROR_OUT_OF_MEMORY;
    if (ft_put(key, size, -1, K_PTR, H_HOST) != CUDA_SUCCESS) {
        uvm_managed_free(key);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    *p = key;
    return CUDA_SUCCESS;
}
API CUresult cuMemAdvise(CUdeviceptr p, size_t bytes, int advice, CUdevice d)
{
    (void)bytes;
    if (d < 0 || d >= count())
        return CUDA_ERROR_INVALID_DEVICE;
    return uvm_on() ? uvm_advise(p, advice) : CUDA_SUCCESS;
}
API CUresult cuMemAllocPitch_v2(CUdeviceptr *p, size_t *pitch, size_t w, size_t h, unsigned elem)
{
    (void)elem;
    size_t pt = (w + g_pitch - 1) / g_pitch * g_pitch;
    CUresult rc = cuMemAlloc_v2(p, pt * h);
    if (rc == CUDA_SUCCESS)
        *pitch = pt;
    return rc;
}
API CUresult cuMemFree_v2(CUdeviceptr p)
{
    CUresult rc = capture_check_unsafe();
    return rc != CUDA_SUCCESS ? rc : phys_free(p, K_PTR);
}
/* stream-ordered: legal on a capturing stream (an allocation node; the fake allocates at once) */
API CUresult cuMemAllocAsync(CUdeviceptr *p, size_t size, CUstream s) { (void)s; return alloc_now(p, size, 0); }
API CUresult cuMemAllocAsync_ptsz(CUdeviceptr *p, size_t size, CUstream s) { (void)s; return alloc_now(p, size, 0); }
API CUresult cuMemAllocFromPoolAsync(CUdeviceptr *p, size_t size, CUmemoryPool pool, CUstream s) { (void)pool; (void)s; return alloc_now(p, size, 0); }
API CUresult cuMemAllocFromPoolAsync_ptsz(CUdeviceptr *p, size_t size, CUmemoryPool pool, CUstream s) { (void)pool; (void)s; return alloc_now(p, size, 0); }
API CUresult cuMemFreeAsync(CUdeviceptr p, CUstream s) { (void)s; return phys_free(p, K_PTR); }
API CUresult cuMemFreeAsync_ptsz(CUdeviceptr p, CUstream s) { (void)s; return phys_free(p, K_PTR); }

/* ---- virtual memory management (cuMem*), the path NCCL and expandable segments use ---- */

static uint64_t g_next_handle = 0x1000;

API CUresult cuMemCreate(CUmemGenericAllocationHandle *h, size_t size, const CUmemAllocationProp *prop, unsigned long long flags)
{
    (void)flags;
    if (!prop || !h || !size)
        return CUDA_ERROR_INVALID_VALUE;
    int host = prop->location.type == CU_MEM_LOCATION_TYPE_HOST || prop->location.type == CU_MEM_LOCATION_TYPE_HOST_NUMA ||
               prop->location.type == CU_MEM_LOCATION_TYPE_HOST_NUMA_CURRENT;
    if (!host && (prop->location.type != CU_MEM_LOCATION_TYPE_DEVICE || prop->location.id < 0 || prop->location.id >= count()))
        return CUDA_ERROR_INVALID_DEVICE;
    uint64_t key = __atomic_fetch_add(&g_next_handle, 1, __ATOMIC_SEQ_CST);
    int dev = host ? -1 : prop->location.id; /* pinned host memory takes no device memory */
    CUresult rc = host ? CUDA_SUCCESS : device_take(dev, size);
    if (rc != CUDA_SUCCESS)
        return rc;
    if (ft_put(key, size, dev, K_HANDLE, host ? H_HOST : H_DEVICE) != CUDA_SUCCESS) {
        device_free(dev, size);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    *h = key;
    return CUDA_SUCCESS;
}

/* Under g_ft_mu: the memory goes when the last reference and the last mapping are gone. */
static void handle_settle_locked(struct ft_ent *e)
{
    if (e->refs > 0 || e->maps > 0)
        return;
    if (e->hkind == H_DEVICE)
        device_free(e->dev, e->size);
    e->key = 1;
}

static CUresult handle_change(uint64_t h, int drefs, int dmaps)
{
    pthread_mutex_lock(&g_ft_mu);
    struct ft_ent *e = ft_find_locked(h, K_HANDLE, 0);
    CUresult rc = CUDA_ERROR_INVALID_VALUE;
    if (e && e->refs + drefs >= 0 && e->maps + dmaps >= 0 && (drefs >= 0 || e->refs > 0)) {
        e->refs += drefs;
        e->maps += dmaps;
        handle_settle_locked(e);
        rc = CUDA_SUCCESS;
    }
    pthread_mutex_unlock(&g_ft_mu);
    return rc;
}

API CUresult cuMemRelease(CUmemGenericAllocationHandle h) { return handle_change(h, -1, 0); }

/* virtual address ranges: reserved ranges and which handle is mapped where */
#define MAX_MAPS 4096
static struct { uint64_t va, size, handle; } g_maps[MAX_MAPS];

API CUresult cuMemAddressReserve(CUdeviceptr *p, size_t size, size_t align, CUdeviceptr addr, unsigned long long flags)
{
    (void)align, (void)addr, (void)flags;
    if (!p || !size)
        return CUDA_ERROR_INVALID_VALUE;
    *p = __atomic_fetch_add(&g_next_va, (size + (2u << 20) - 1) & ~((2ull << 20) - 1), __ATOMIC_SEQ_CST);
    return CUDA_SUCCESS;
}
API CUresult cuMemAddressFree(CUdeviceptr p, size_t size) { (void)p, (void)size; return CUDA_SUCCESS; }

API CUresult cuMemMap(CUdeviceptr p, size_t size, size_t offset, CUmemGenericAllocationHandle h, unsigned long long flags)
{
    (void)offset, (void)flags;
    pthread_mutex_lock(&g_ft_mu);
    struct ft_ent *e = ft_find_locked(h, K_HANDLE, 0);
    int slot = -1;
    for (int i = 0; e && i < MAX_MAPS && slot < 0; i++)
        if (!g_maps[i].size)
            slot = i;
    if (slot >= 0) {
        g_maps[slot].va = p;
        g_maps[slot].size = size;
        g_maps[slot].handle = h;
        e->maps++;
    }
    pthread_mutex_unlock(&g_ft_mu);
    return slot >= 0 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

API CUresult cuMemUnmap(CUdeviceptr p, size_t size)
{
    int found = 0;
    pthread_mutex_lock(&g_ft_mu);
    for (int i = 0; i < MAX_MAPS; i++) {
        if (g_maps[i].size && g_maps[i].va >= p && g_maps[i].va < p + size) {
            struct ft_ent *e = ft_find_locked(g_maps[i].handle, K_HANDLE, 0);
            if (e) {
                e->maps--;
                handle_settle_locked(e);
            }
            g_maps[i].size = 0;
            found = 1;
        }
    }
    pthread_mutex_unlock(&g_ft_mu);
    return found ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

API CUresult cuMemSetAccess(CUdeviceptr p, size_t size, const CUmemAccessDesc *desc, size_t count)
{
    (void)p, (void)size;
    return desc && count ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

API CUresult cuMemGetAllocationGranularity(size_t *g, const CUmemAllocationProp *prop, int option)
{
    (void)option;
    if (!g || !prop)
        return CUDA_ERROR_INVALID_VALUE;
    *g = 2u << 20;
    return CUDA_SUCCESS;
}

/* Another reference to the handle mapped at p (released with cuMemRelease like the original). */
API CUresult cuMemRetainAllocationHandle(CUmemGenericAllocationHandle *h, void *p)
{
    uint64_t a = (uint64_t)(uintptr_t)p, found = 0;
    pthread_mutex_lock(&g_ft_mu);
    for (int i = 0; i < MAX_MAPS && !found; i++)
        if (g_maps[i].size && a >= g_maps[i].va && a < g_maps[i].va + g_maps[i].size)
            found = g_maps[i].handle;
    struct ft_ent *e = found ? ft_find_locked(found, K_HANDLE, 0) : NULL;
    if (e)
        e->refs++;
    pthread_mutex_unlock(&g_ft_mu);
    if (!e || !h)
        return CUDA_ERROR_INVALID_VALUE;
    *h = found;
    return CUDA_SUCCESS;
}

/* A shareable handle is a memfd naming the allocation (size and GPU); importing it in another process gives
 * a handle to the same memory, which that process does not pay for again. */
struct shared_desc {
    uint64_t magic, size;
    int32_t dev, pad;
};
#define SHARED_MAGIC 0x454c42414552414full

API CUresult cuMemExportToShareableHandle(void *out, CUmemGenericAllocationHandle h, int type, unsigned long long flags)
{
    (void)flags;
    if (!out || type != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&g_ft_mu);
    struct ft_ent *e = ft_find_locked(h, K_HANDLE, 0);
    struct shared_desc d = { SHARED_MAGIC, e ? e->size : 0, e ? e->dev : -1, 0 };
    pthread_mutex_unlock(&g_ft_mu);
    if (!e)
        return CUDA_ERROR_INVALID_VALUE;
    int fd = memfd_create("fake-cumem", 0);
    if (fd < 0 || pwrite(fd, &d, sizeof d, 0) != (ssize_t)sizeof d) {
        if (fd >= 0)
            close(fd);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    *(int *)out = fd;
    return CUDA_SUCCESS;
}

API CUresult cuMemImportFromShareableHandle(CUmemGenericAllocationHandle *h, void *shared, int type)
{
    struct shared_desc d;
    int fd = (int)(intptr_t)shared;
    if (!h || type != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR || pread(fd, &d, sizeof d, 0) != (ssize_t)sizeof d ||
        d.magic != SHARED_MAGIC)
        return CUDA_ERROR_INVALID_VALUE;
    uint64_t key = __atomic_fetch_add(&g_next_handle, 1, __ATOMIC_SEQ_CST);
    if (ft_put(key, d.size, d.dev, K_HANDLE, H_IMPORTED) != CUDA_SUCCESS)
        return CUDA_ERROR_OUT_OF_MEMORY;
    *h = key;
    return CUDA_SUCCESS;
}

/* ---- arrays ---- */

struct fake_array { uint64_t bytes; };

static uint64_t fmt_bytes(CUarray_format f) { return f == CU_AD_FORMAT_FLOAT || f == CU_AD_FORMAT_UNSIGNED_INT32 || f == CU_AD_FORMAT_SIGNED_INT32 ? 4 : f == CU_AD_FORMAT_HALF || f == CU_AD_FORMAT_UNSIGNED_INT16 || f == CU_AD_FORMAT_SIGNED_INT16 ? 2 : 1; }
static CUresult array_new(uint64_t bytes, void **out)
{
    int dev = cur_dev();
    if (dev < 0)
        return CUDA_ERROR_INVALID_CONTEXT;
    struct fake_array *a = malloc(sizeof *a);
    if (!a)
        return CUDA_ERROR_OUT_OF_MEMORY;
    a->bytes = bytes;
    uint64_t key = (uint64_t)(uintptr_t)a;
    CUresult rc = phys_alloc(dev, bytes, &key, K_ARRAY, 0);
    if (rc != CUDA_SUCCESS) {
        free(a);
        return rc;
    }
    *out = a;
    return CUDA_SUCCESS;
}
static CUresult array_free(void *a)
{
    CUresult rc = phys_free((uint64_t)(uintptr_t)a, K_ARRAY);
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

/* legacy IPC: the handle carries the pointer; opening it maps the same memory without taking more */
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

API uint64_t fakeUsedBytes(int dev) { return dev >= 0 && dev < MAXDEV ? __atomic_load_n(&g_used[dev], __ATOMIC_SEQ_CST) : 0; }
/* by NVML (physical) index, for the fake NVML */
API uint64_t fakeUsedBytesPhys(int i)
{
    for (int o = 0; o < count(); o++)
        if (phys(o) == i)
            return fakeUsedBytes(o);
    return 0;
}
