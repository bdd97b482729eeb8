/* Generic allocation handles (cuMemCreate). The driver frees such memory only
 * when every reference to the handle is released (cuMemRelease of the handle
 * cuMemCreate returned and of each cuMemRetainAllocationHandle) and every
 * mapping of it is unmapped, so the bytes are given back at that moment, not
 * at the first cuMemRelease (NCCL retains and releases handles of memory that
 * stays mapped). Handles this process did not create here (imported from
 * another process, or host memory) are not in the table and never counted: the
 * creating process pays. A small table under a mutex: these calls are not hot
 * and the lock is never held across a driver call. */
#include <pthread.h>
#include <string.h>

#include "alloc.h"
#include "devices.h"
#include "hooks.h"
#include "spill.h"
#include "util.h"
#include "vmm.h"

#define MAX_HANDLES 4096
#define MAX_MAPS 8192

struct handle {
    uint64_t h; /* 0: free entry */
    uint64_t size;
    unsigned rec;
    int refs, maps;
};

struct mapping {
    uint64_t va, size, h; /* size 0: free entry */
};

static struct handle g_handles[MAX_HANDLES];
static struct mapping g_maps[MAX_MAPS];
static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;

static struct handle *find_locked(uint64_t h)
{
    for (int i = 0; i < MAX_HANDLES; i++)
        if (g_handles[i].h == h && h)
            return &g_handles[i];
    return NULL;
}

/* Under the lock: the handle's memory is gone once nothing refers to it; returns its bytes to give back. */
static uint64_t settle_locked(struct handle *e, unsigned *rec)
{
    if (e->refs > 0 || e->maps > 0)
        return 0;
    uint64_t size = e->size;
    *rec = e->rec;
    memset(e, 0, sizeof *e);
    return size;
}

static void give_back(uint64_t size, unsigned rec)
{
    if (size)
        rec_release(rec, size);
}

static int track(uint64_t h, uint64_t size, struct dev_rec *d)
{
    struct handle *e = NULL;
    pthread_mutex_lock(&g_mu);
    for (int i = 0; i < MAX_HANDLES && !e; i++)
        if (!g_handles[i].h)
            e = &g_handles[i];
    if (e)
        *e = (struct handle){ h, size, alloc_rec(d), 1, 0 };
    pthread_mutex_unlock(&g_mu);
    return e != NULL;
}

HOOK CUresult cuMemCreate(CUmemGenericAllocationHandle *h, size_t size, const CUmemAllocationProp *prop,
                          unsigned long long flags)
{
    if (!cuda_ready() || !r_cuMemCreate)
        return CUDA_ERROR_NOT_INITIALIZED;
    struct dev_rec *d = NULL;
    if (prop && prop->location.type == CU_MEM_LOCATION_TYPE_DEVICE) /* host and host-NUMA memory is not the GPU's */
        d = acct_cuda(prop->location.id);
    if (!d)
        return r_cuMemCreate(h, size, prop, flags);
    if (!alloc_reserve(d, size))
        return spill_refused(d, "cuMemCreate");
    CUresult rc = r_cuMemCreate(h, size, prop, flags);
    if (rc == CUDA_SUCCESS && !track(*h, size, d)) {
        static int warned;
        if (!__atomic_exchange_n(&warned, 1, __ATOMIC_RELAXED))
            tlog(LOG_WARN, "cuMemCreate handle table full; some allocations are not counted");
        rec_release(alloc_rec(d), size);
    }
    return alloc_finish(d, size, rc);
}

/* Changes a handle's references and mappings after the driver agreed. */
static void adjust(uint64_t h, int drefs, int dmaps)
{
    unsigned rec = 0;
    uint64_t size = 0;
    pthread_mutex_lock(&g_mu);
    struct handle *e = find_locked(h);
    if (e) {
        e->refs += drefs;
        e->maps += dmaps;
        size = settle_locked(e, &rec);
    }
    pthread_mutex_unlock(&g_mu);
    give_back(size, rec);
}

HOOK CUresult cuMemRelease(CUmemGenericAllocationHandle h)
{
    if (!cuda_ready() || !r_cuMemRelease)
        return CUDA_ERROR_NOT_INITIALIZED;
    CUresult rc = r_cuMemRelease(h);
    if (rc == CUDA_SUCCESS && acct_on())
        adjust(h, -1, 0);
    return rc;
}

HOOK CUresult cuMemRetainAllocationHandle(CUmemGenericAllocationHandle *h, void *addr)
{
    if (!cuda_ready() || !r_cuMemRetainAllocationHandle)
        return CUDA_ERROR_NOT_INITIALIZED;
    CUresult rc = r_cuMemRetainAllocationHandle(h, addr);
    if (rc == CUDA_SUCCESS && h && acct_on())
        adjust(*h, 1, 0);
    return rc;
}

HOOK CUresult cuMemMap(CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle h,
                       unsigned long long flags)
{
    if (!cuda_ready() || !r_cuMemMap)
        return CUDA_ERROR_NOT_INITIALIZED;
    CUresult rc = r_cuMemMap(ptr, size, offset, h, flags);
    if (rc != CUDA_SUCCESS || !acct_on())
        return rc;
    pthread_mutex_lock(&g_mu);
    struct handle *e = find_locked(h);
    for (int i = 0; e && i < MAX_MAPS; i++) {
        if (!g_maps[i].size) {
            g_maps[i] = (struct mapping){ ptr, size ? size : 1, h };
            e->maps++;
            break;
        }
    }
    pthread_mutex_unlock(&g_mu);
    return rc;
}

HOOK CUresult cuMemUnmap(CUdeviceptr ptr, size_t size)
{
    if (!cuda_ready() || !r_cuMemUnmap)
        return CUDA_ERROR_NOT_INITIALIZED;
    CUresult rc = r_cuMemUnmap(ptr, size);
    if (rc != CUDA_SUCCESS || !acct_on())
        return rc;
    for (;;) {
        uint64_t h = 0;
        pthread_mutex_lock(&g_mu);
        for (int i = 0; i < MAX_MAPS && !h; i++) {
            if (g_maps[i].size && g_maps[i].va >= ptr && g_maps[i].va < ptr + size) {
                h = g_maps[i].h;
                g_maps[i].size = 0;
            }
        }
        pthread_mutex_unlock(&g_mu);
        if (!h)
            break;
        adjust(h, 0, -1);
    }
    return rc;
}

void vmm_after_fork(void)
{
    pthread_mutex_init(&g_mu, NULL);
    memset(g_handles, 0, sizeof g_handles);
    memset(g_maps, 0, sizeof g_maps);
}
