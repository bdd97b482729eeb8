/* Memory hooks: every device allocation is reserved in the claim's region
 * before the driver is asked, and given back after the driver freed it, so the
 * claim's total never passes its limit. Imported memory (IPC handles,
 * cuMemImportFromShareableHandle) is not in our tables and is never counted:
 * the exporting process already holds it. */

#define NEED(fn)                                    \
    do {                                            \
        if (!lib_ready(&g_cuda, 1) || !r_##fn)      \
            return CUDA_ERROR_NOT_INITIALIZED;      \
    } while (0)

static struct dev_rec *acct_dev(void)
{
    if (!g_acct || t_in_hook)
        return NULL;
    return rec_current();
}

static void track(struct tab *t, uint64_t key, uint64_t size, struct dev_rec *d)
{
    if (!tab_put(t, key, size, (unsigned)(d - g_recs))) {
        static int warned;
        if (!__atomic_exchange_n(&warned, 1, __ATOMIC_RELAXED))
            tlog(LOG_WARN, "allocation table full; some allocations are not counted");
        acct_release(d, size);
    }
}

/* Driver allocation and free calls of this process in flight, and how many have finished: a context's cost
 * is measured as a drop in free memory, which only means something when none of these moved meanwhile. */
static uint64_t g_drv_inflight, g_drv_done;

static void drv_enter(void)
{
    __atomic_add_fetch(&g_drv_inflight, 1, __ATOMIC_SEQ_CST);
}

static void drv_leave(void)
{
    __atomic_add_fetch(&g_drv_done, 1, __ATOMIC_SEQ_CST);
    __atomic_sub_fetch(&g_drv_inflight, 1, __ATOMIC_SEQ_CST);
}

/* Gives back the bytes of an entry taken from a table. */
static void release_taken(uint64_t size, unsigned rec)
{
    if (rec < (unsigned)MAX_RECS && g_recs[rec].rh)
        acct_release(&g_recs[rec], size);
}

/* Reserve, call, then track or give back. `call` must set *out on success. */
#define ALLOC_WITH(d, tab, size, call, keyexpr)                \
    do {                                                       \
        if (!(d))                                              \
            return call;                                       \
        t_in_hook++;                                           \
        CUresult rc_ = CUDA_ERROR_OUT_OF_MEMORY;               \
        if (acct_reserve((d), (size))) {                       \
            drv_enter();                                       \
            rc_ = call;                                        \
            drv_leave();                                       \
            if (rc_ == CUDA_SUCCESS)                           \
                track((tab), (uint64_t)(keyexpr), (size), (d)); \
            else                                               \
                acct_release((d), (size));                     \
        }                                                      \
        t_in_hook--;                                           \
        return rc_;                                            \
    } while (0)

/* The entry leaves the table before the driver frees: once the driver has the address back it may hand it
 * to another thread's allocation at once, whose entry must not meet ours. A failed free puts it back. */
#define FREE_WITH(tab, call, key)                                          \
    do {                                                                   \
        if (!g_acct || t_in_hook)                                          \
            return call;                                                   \
        t_in_hook++;                                                       \
        uint64_t size_ = 0;                                                \
        unsigned rec_ = 0;                                                 \
        int had_ = tab_take((tab), (uint64_t)(key), &size_, &rec_);        \
        drv_enter();                                                       \
        CUresult rc_ = call;                                               \
        drv_leave();                                                       \
        if (had_ && (rc_ == CUDA_SUCCESS ||                                \
                     !tab_put((tab), (uint64_t)(key), size_, rec_)))       \
            release_taken(size_, rec_);                                    \
        t_in_hook--;                                                       \
        return rc_;                                                        \
    } while (0)

HOOK CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t size)
{
    NEED(cuMemAlloc_v2);
    struct dev_rec *d = acct_dev();
    ALLOC_WITH(d, &g_tab_ptr, size, r_cuMemAlloc_v2(dptr, size), *dptr);
}

HOOK CUresult cuMemAllocManaged(CUdeviceptr *dptr, size_t size, unsigned flags)
{
    NEED(cuMemAllocManaged);
    struct dev_rec *d = acct_dev();
    ALLOC_WITH(d, &g_tab_ptr, size, r_cuMemAllocManaged(dptr, size, flags), *dptr);
}

/* The pitch is only known afterwards: reserve a 512-byte-aligned estimate,
 * then settle the difference. */
#define PITCH_WITH(alloc, freefn)                                                  \
    do {                                                                           \
        struct dev_rec *d = acct_dev();                                            \
        if (!d || !pitch || !freefn)                                               \
            return alloc(dptr, pitch, width, height, elem);                        \
        uint64_t est = (((uint64_t)width + 511) & ~511ull) * height;               \
        t_in_hook++;                                                               \
        CUresult rc = CUDA_ERROR_OUT_OF_MEMORY;                                    \
        if (acct_reserve(d, est)) {                                                \
            rc = alloc(dptr, pitch, width, height, elem);                          \
            if (rc != CUDA_SUCCESS) {                                              \
                acct_release(d, est);                                              \
            } else {                                                               \
                uint64_t actual = (uint64_t)*pitch * height;                       \
                if (actual > est && !acct_reserve(d, actual - est)) {              \
                    freefn(*dptr);                                                 \
                    acct_release(d, est);                                          \
                    rc = CUDA_ERROR_OUT_OF_MEMORY;                                 \
                } else {                                                           \
                    if (actual < est)                                              \
                        acct_release(d, est - actual);                             \
                    track(&g_tab_ptr, *dptr, actual, d);                           \
                }                                                                  \
            }                                                                      \
        }                                                                          \
        t_in_hook--;                                                               \
        return rc;                                                                 \
    } while (0)

HOOK CUresult cuMemAllocPitch_v2(CUdeviceptr *dptr, size_t *pitch, size_t width, size_t height, unsigned elem)
{
    NEED(cuMemAllocPitch_v2);
    PITCH_WITH(r_cuMemAllocPitch_v2, r_cuMemFree_v2);
}

/* v1 ABI: 32-bit pointers and sizes; the same tables (a pointer is a number) */
HOOK CUresult cuMemAlloc(CUdeviceptr_v1 *dptr, unsigned int size)
{
    NEED(cuMemAlloc);
    struct dev_rec *d = acct_dev();
    ALLOC_WITH(d, &g_tab_ptr, size, r_cuMemAlloc(dptr, size), *dptr);
}

HOOK CUresult cuMemAllocPitch(CUdeviceptr_v1 *dptr, unsigned int *pitch, unsigned int width, unsigned int height,
                              unsigned elem)
{
    NEED(cuMemAllocPitch);
    PITCH_WITH(r_cuMemAllocPitch, r_cuMemFree);
}

HOOK CUresult cuMemFree(CUdeviceptr_v1 dptr)
{
    NEED(cuMemFree);
    FREE_WITH(&g_tab_ptr, r_cuMemFree(dptr), dptr);
}

HOOK CUresult cuMemFree_v2(CUdeviceptr dptr)
{
    NEED(cuMemFree_v2);
    FREE_WITH(&g_tab_ptr, r_cuMemFree_v2(dptr), dptr);
}

#define ALLOC_ASYNC(name)                                                          \
    HOOK CUresult name(CUdeviceptr *dptr, size_t size, CUstream s)                 \
    {                                                                              \
        NEED(name);                                                                \
        struct dev_rec *d = acct_dev();                                            \
        ALLOC_WITH(d, &g_tab_ptr, size, r_##name(dptr, size, s), *dptr);           \
    }
ALLOC_ASYNC(cuMemAllocAsync)
ALLOC_ASYNC(cuMemAllocAsync_ptsz)

#define ALLOC_POOL(name)                                                                   \
    HOOK CUresult name(CUdeviceptr *dptr, size_t size, CUmemoryPool pool, CUstream s)      \
    {                                                                                      \
        NEED(name);                                                                        \
        struct dev_rec *d = acct_dev();                                                    \
        ALLOC_WITH(d, &g_tab_ptr, size, r_##name(dptr, size, pool, s), *dptr);             \
    }
ALLOC_POOL(cuMemAllocFromPoolAsync)
ALLOC_POOL(cuMemAllocFromPoolAsync_ptsz)

/* stream-ordered frees are given back when issued, not when the stream reaches them */
#define FREE_ASYNC(name)                                           \
    HOOK CUresult name(CUdeviceptr dptr, CUstream s)               \
    {                                                              \
        NEED(name);                                                \
        FREE_WITH(&g_tab_ptr, r_##name(dptr, s), dptr);            \
    }
FREE_ASYNC(cuMemFreeAsync)
FREE_ASYNC(cuMemFreeAsync_ptsz)

HOOK CUresult cuMemCreate(CUmemGenericAllocationHandle *h, size_t size, const CUmemAllocationProp *prop,
                          unsigned long long flags)
{
    NEED(cuMemCreate);
    struct dev_rec *d = NULL;
    if (g_acct && !t_in_hook && prop && prop->location.type == CU_MEM_LOCATION_TYPE_DEVICE)
        d = rec_for_cuda(prop->location.id);
    ALLOC_WITH(d, &g_tab_handle, size, r_cuMemCreate(h, size, prop, flags), *h);
}

HOOK CUresult cuMemRelease(CUmemGenericAllocationHandle h)
{
    NEED(cuMemRelease);
    FREE_WITH(&g_tab_handle, r_cuMemRelease(h), h);
}

static uint64_t format_bytes(CUarray_format f)
{
    switch (f) {
    case CU_AD_FORMAT_UNSIGNED_INT8:
    case CU_AD_FORMAT_SIGNED_INT8:
        return 1;
    case CU_AD_FORMAT_UNSIGNED_INT16:
    case CU_AD_FORMAT_SIGNED_INT16:
    case CU_AD_FORMAT_HALF:
        return 2;
    case CU_AD_FORMAT_UNSIGNED_INT32:
    case CU_AD_FORMAT_SIGNED_INT32:
    case CU_AD_FORMAT_FLOAT:
        return 4;
    default:
        return 16; /* block-compressed and newer formats: count generously */
    }
}

static uint64_t array_bytes(uint64_t w, uint64_t h, uint64_t dep, CUarray_format f, unsigned ch, unsigned levels)
{
    uint64_t total = 0;
    if (!levels)
        levels = 1;
    for (unsigned l = 0; l < levels; l++) {
        total += (w ? w : 1) * (h ? h : 1) * (dep ? dep : 1) * format_bytes(f) * (ch ? ch : 1);
        w = w > 1 ? w / 2 : w;
        h = h > 1 ? h / 2 : h;
        dep = dep > 1 ? dep / 2 : dep;
    }
    return total;
}

HOOK CUresult cuArrayCreate_v2(CUarray *a, const CUDA_ARRAY_DESCRIPTOR *desc)
{
    NEED(cuArrayCreate_v2);
    struct dev_rec *d = desc ? acct_dev() : NULL;
    uint64_t size = d ? array_bytes(desc->Width, desc->Height, 1, desc->Format, desc->NumChannels, 1) : 0;
    ALLOC_WITH(d, &g_tab_array, size, r_cuArrayCreate_v2(a, desc), (uintptr_t)*a);
}

HOOK CUresult cuArray3DCreate_v2(CUarray *a, const CUDA_ARRAY3D_DESCRIPTOR *desc)
{
    NEED(cuArray3DCreate_v2);
    struct dev_rec *d = desc ? acct_dev() : NULL;
    uint64_t size = d ? array_bytes(desc->Width, desc->Height, desc->Depth, desc->Format, desc->NumChannels, 1) : 0;
    ALLOC_WITH(d, &g_tab_array, size, r_cuArray3DCreate_v2(a, desc), (uintptr_t)*a);
}

HOOK CUresult cuArrayCreate(CUarray *a, const CUDA_ARRAY_DESCRIPTOR_v1 *desc)
{
    NEED(cuArrayCreate);
    struct dev_rec *d = desc ? acct_dev() : NULL;
    uint64_t size = d ? array_bytes(desc->Width, desc->Height, 1, desc->Format, desc->NumChannels, 1) : 0;
    ALLOC_WITH(d, &g_tab_array, size, r_cuArrayCreate(a, desc), (uintptr_t)*a);
}

HOOK CUresult cuArray3DCreate(CUarray *a, const CUDA_ARRAY3D_DESCRIPTOR_v1 *desc)
{
    NEED(cuArray3DCreate);
    struct dev_rec *d = desc ? acct_dev() : NULL;
    uint64_t size = d ? array_bytes(desc->Width, desc->Height, desc->Depth, desc->Format, desc->NumChannels, 1) : 0;
    ALLOC_WITH(d, &g_tab_array, size, r_cuArray3DCreate(a, desc), (uintptr_t)*a);
}

HOOK CUresult cuMipmappedArrayCreate(CUmipmappedArray *a, const CUDA_ARRAY3D_DESCRIPTOR *desc, unsigned levels)
{
    NEED(cuMipmappedArrayCreate);
    struct dev_rec *d = desc ? acct_dev() : NULL;
    uint64_t size = d ? array_bytes(desc->Width, desc->Height, desc->Depth, desc->Format, desc->NumChannels, levels) : 0;
    ALLOC_WITH(d, &g_tab_array, size, r_cuMipmappedArrayCreate(a, desc, levels), (uintptr_t)*a);
}

HOOK CUresult cuArrayDestroy(CUarray a)
{
    NEED(cuArrayDestroy);
    FREE_WITH(&g_tab_array, r_cuArrayDestroy(a), (uintptr_t)a);
}

HOOK CUresult cuMipmappedArrayDestroy(CUmipmappedArray a)
{
    NEED(cuMipmappedArrayDestroy);
    FREE_WITH(&g_tab_array, r_cuMipmappedArrayDestroy(a), (uintptr_t)a);
}

HOOK CUresult cuMemGetInfo_v2(size_t *free_b, size_t *total_b)
{
    NEED(cuMemGetInfo_v2);
    size_t rf = 0, rt = 0;
    CUresult rc = r_cuMemGetInfo_v2(&rf, &rt);
    if (rc != CUDA_SUCCESS)
        return rc;
    struct dev_rec *d = acct_dev();
    uint64_t t = rt, f = rf, u;
    if (d)
        acct_view(d, rt, rf, &t, &f, &u);
    if (free_b)
        *free_b = (size_t)f;
    if (total_b)
        *total_b = (size_t)t;
    return rc;
}

HOOK CUresult cuDeviceTotalMem_v2(size_t *bytes, CUdevice dev)
{
    NEED(cuDeviceTotalMem_v2);
    CUresult rc = r_cuDeviceTotalMem_v2(bytes, dev);
    if (rc != CUDA_SUCCESS || !bytes || !g_acct || t_in_hook)
        return rc;
    struct dev_rec *d = rec_for_cuda(dev);
    if (d && d->limit && d->limit < *bytes)
        *bytes = (size_t)d->limit;
    return rc;
}

static unsigned clamp_u32(uint64_t v)
{
    return v > 0xffffffffull ? 0xffffffffu : (unsigned)v;
}

/* v1 views: computed from the 64-bit view, clamped to 32 bits */
HOOK CUresult cuMemGetInfo(unsigned int *free_b, unsigned int *total_b)
{
    NEED(cuMemGetInfo);
    struct dev_rec *d = acct_dev();
    size_t rf = 0, rt = 0;
    if (!d || !r_cuMemGetInfo_v2 || r_cuMemGetInfo_v2(&rf, &rt) != CUDA_SUCCESS)
        return r_cuMemGetInfo(free_b, total_b);
    uint64_t t, f, u;
    acct_view(d, rt, rf, &t, &f, &u);
    if (free_b)
        *free_b = clamp_u32(f);
    if (total_b)
        *total_b = clamp_u32(t);
    return CUDA_SUCCESS;
}

HOOK CUresult cuDeviceTotalMem(unsigned int *bytes, CUdevice dev)
{
    NEED(cuDeviceTotalMem);
    CUresult rc = r_cuDeviceTotalMem(bytes, dev);
    if (rc != CUDA_SUCCESS || !bytes || !g_acct || t_in_hook)
        return rc;
    struct dev_rec *d = rec_for_cuda(dev);
    if (d && d->limit && d->limit < *bytes)
        *bytes = clamp_u32(d->limit);
    return rc;
}

HOOK CUresult cuGetProcAddress(const char *symbol, void **pfn, int ver, cuuint64_t flags)
{
    NEED(cuGetProcAddress);
    CUresult rc = r_cuGetProcAddress(symbol, pfn, ver, flags);
    if (rc == CUDA_SUCCESS && pfn && *pfn && !t_in_hook)
        *pfn = hook_for(&g_cuda, *pfn);
    return rc;
}

HOOK CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int ver, cuuint64_t flags, int *status)
{
    NEED(cuGetProcAddress_v2);
    CUresult rc = r_cuGetProcAddress_v2(symbol, pfn, ver, flags, status);
    if (rc == CUDA_SUCCESS && pfn && *pfn && !t_in_hook)
        *pfn = hook_for(&g_cuda, *pfn);
    return rc;
}
