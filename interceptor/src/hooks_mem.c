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

static void untrack(struct tab *t, uint64_t key)
{
    uint64_t size;
    unsigned rec;
    if (tab_take(t, key, &size, &rec) && rec < (unsigned)MAX_RECS && g_recs[rec].rh)
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
            rc_ = call;                                        \
            if (rc_ == CUDA_SUCCESS)                           \
                track((tab), (uint64_t)(keyexpr), (size), (d)); \
            else                                               \
                acct_release((d), (size));                     \
        }                                                      \
        t_in_hook--;                                           \
        return rc_;                                            \
    } while (0)

#define FREE_WITH(tab, call, key)                              \
    do {                                                       \
        if (!g_acct || t_in_hook)                              \
            return call;                                       \
        t_in_hook++;                                           \
        CUresult rc_ = call;                                   \
        if (rc_ == CUDA_SUCCESS)                               \
            untrack((tab), (uint64_t)(key));                   \
        t_in_hook--;                                           \
        return rc_;                                            \
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

HOOK CUresult cuMemAllocPitch_v2(CUdeviceptr *dptr, size_t *pitch, size_t width, size_t height, unsigned elem)
{
    NEED(cuMemAllocPitch_v2);
    struct dev_rec *d = acct_dev();
    if (!d || !pitch || !r_cuMemFree_v2)
        return r_cuMemAllocPitch_v2(dptr, pitch, width, height, elem);
    /* the pitch is only known afterwards: reserve a 512-byte-aligned estimate,
     * then settle the difference */
    uint64_t est = ((width + 511) & ~(size_t)511) * height;
    t_in_hook++;
    CUresult rc = CUDA_ERROR_OUT_OF_MEMORY;
    if (acct_reserve(d, est)) {
        rc = r_cuMemAllocPitch_v2(dptr, pitch, width, height, elem);
        if (rc != CUDA_SUCCESS) {
            acct_release(d, est);
        } else {
            uint64_t actual = (uint64_t)*pitch * height;
            if (actual > est && !acct_reserve(d, actual - est)) {
                r_cuMemFree_v2(*dptr);
                acct_release(d, est);
                rc = CUDA_ERROR_OUT_OF_MEMORY;
            } else {
                if (actual < est)
                    acct_release(d, est - actual);
                track(&g_tab_ptr, *dptr, actual, d);
            }
        }
    }
    t_in_hook--;
    return rc;
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
