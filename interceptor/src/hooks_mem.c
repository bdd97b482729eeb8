/* Memory hooks: every device allocation is reserved in the claim's region
 * before the driver is asked, and given back after the driver freed it, so the
 * claim's total never passes its limit. Imported memory (IPC handles,
 * cuMemImportFromShareableHandle) is not in our tables and is never counted:
 * the exporting process already holds it. An oversubscribed claim's cuMemAlloc
 * past what the device holds for it is served from managed memory (spill.c). */

#include <stdint.h>

#include "alloc.h"
#include "devices.h"
#include "hooks.h"
#include "hooks_mem.h"
#include "spill.h"
#include "table.h"
#include "util.h"

static struct tab g_tab_ptr = TAB_INIT(20);
static struct tab g_tab_array = TAB_INIT(16);

int mem_init(void)
{
    return tab_init(&g_tab_ptr) || tab_init(&g_tab_array) ? -1 : 0;
}

/* A forked child holds none of the parent's allocations in its own slot. */
void mem_after_fork(void)
{
    tab_reset(&g_tab_ptr);
    tab_reset(&g_tab_array);
}

HOOK CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t size)
{
    if (!cuda_ready() || !r_cuMemAlloc_v2)
        return CUDA_ERROR_NOT_INITIALIZED;
    struct dev_rec *d = acct_current();
    if (!d)
        return r_cuMemAlloc_v2(dptr, size);
    /* oversubscribed: past the device memory held for the claim, or where the device is full, managed */
    if (!alloc_reserve(d, size))
        return alloc_held_full() ? spill_alloc(d, &g_tab_ptr, dptr, size) : CUDA_ERROR_OUT_OF_MEMORY;
    CUresult rc = r_cuMemAlloc_v2(dptr, size);
    if (rc == CUDA_ERROR_OUT_OF_MEMORY && d->spill) {
        alloc_finish(d, size, rc);
        return spill_alloc(d, &g_tab_ptr, dptr, size);
    }
    return alloc_settle(d, &g_tab_ptr, size, rc, rc == CUDA_SUCCESS ? *dptr : 0);
}

HOOK CUresult cuMemAllocManaged(CUdeviceptr *dptr, size_t size, unsigned flags)
{
    if (!cuda_ready() || !r_cuMemAllocManaged)
        return CUDA_ERROR_NOT_INITIALIZED;
    struct dev_rec *d = acct_current();
    if (!d)
        return r_cuMemAllocManaged(dptr, size, flags);
    if (!alloc_reserve_managed(d, size)) /* the driver places it: counted toward the limit only */
        return CUDA_ERROR_OUT_OF_MEMORY;
    CUresult rc = r_cuMemAllocManaged(dptr, size, flags);
    return alloc_settle(d, &g_tab_ptr, size, rc, rc == CUDA_SUCCESS ? *dptr : 0);
}

/* The pitch is only known afterwards: reserve a 512-byte-aligned estimate, then settle to the real size. */
static uint64_t pitch_estimate(uint64_t width, uint64_t height)
{
    return ((width + 511) & ~511ull) * height;
}

HOOK CUresult cuMemAllocPitch_v2(CUdeviceptr *dptr, size_t *pitch, size_t width, size_t height, unsigned elem)
{
    if (!cuda_ready() || !r_cuMemAllocPitch_v2)
        return CUDA_ERROR_NOT_INITIALIZED;
    struct dev_rec *d = acct_current();
    if (!d || !pitch || !r_cuMemFree_v2)
        return r_cuMemAllocPitch_v2(dptr, pitch, width, height, elem);
    uint64_t size = pitch_estimate(width, height);
    if (!alloc_reserve(d, size))
        return spill_refused(d, "cuMemAllocPitch_v2");
    CUresult rc = r_cuMemAllocPitch_v2(dptr, pitch, width, height, elem);
    if (rc == CUDA_SUCCESS && !alloc_resize(d, &size, (uint64_t)*pitch * height)) {
        r_cuMemFree_v2(*dptr);
        rc = CUDA_ERROR_OUT_OF_MEMORY;
    }
    return alloc_settle(d, &g_tab_ptr, size, rc, rc == CUDA_SUCCESS ? *dptr : 0);
}

/* v1 ABI: 32-bit pointers and sizes; the same tables (a pointer is a number) */
HOOK CUresult cuMemAlloc(CUdeviceptr_v1 *dptr, unsigned int size)
{
    if (!cuda_ready() || !r_cuMemAlloc)
        return CUDA_ERROR_NOT_INITIALIZED;
    struct dev_rec *d = acct_current();
    if (!d)
        return r_cuMemAlloc(dptr, size);
    if (!alloc_reserve(d, size))
        return spill_refused(d, "cuMemAlloc");
    CUresult rc = r_cuMemAlloc(dptr, size);
    return alloc_settle(d, &g_tab_ptr, size, rc, rc == CUDA_SUCCESS ? *dptr : 0);
}

HOOK CUresult cuMemAllocPitch(CUdeviceptr_v1 *dptr, unsigned int *pitch, unsigned int width, unsigned int height,
                              unsigned elem)
{
    if (!cuda_ready() || !r_cuMemAllocPitch)
        return CUDA_ERROR_NOT_INITIALIZED;
    struct dev_rec *d = acct_current();
    if (!d || !pitch || !r_cuMemFree)
        return r_cuMemAllocPitch(dptr, pitch, width, height, elem);
    uint64_t size = pitch_estimate(width, height);
    if (!alloc_reserve(d, size))
        return spill_refused(d, "cuMemAllocPitch");
    CUresult rc = r_cuMemAllocPitch(dptr, pitch, width, height, elem);
    if (rc == CUDA_SUCCESS && !alloc_resize(d, &size, (uint64_t)*pitch * height)) {
        r_cuMemFree(*dptr);
        rc = CUDA_ERROR_OUT_OF_MEMORY;
    }
    return alloc_settle(d, &g_tab_ptr, size, rc, rc == CUDA_SUCCESS ? *dptr : 0);
}

HOOK CUresult cuMemFree(CUdeviceptr_v1 dptr)
{
    if (!cuda_ready() || !r_cuMemFree)
        return CUDA_ERROR_NOT_INITIALIZED;
    struct freeing f;
    if (!free_begin(&f, &g_tab_ptr, dptr))
        return r_cuMemFree(dptr);
    return free_end(&f, r_cuMemFree(dptr));
}

HOOK CUresult cuMemFree_v2(CUdeviceptr dptr)
{
    if (!cuda_ready() || !r_cuMemFree_v2)
        return CUDA_ERROR_NOT_INITIALIZED;
    struct freeing f;
    if (!free_begin(&f, &g_tab_ptr, dptr))
        return r_cuMemFree_v2(dptr);
    return free_end(&f, r_cuMemFree_v2(dptr));
}

/* Each macro below defines a whole hook (one per ABI variant of the same call). */
#define ALLOC_ASYNC(name)                                                           \
    HOOK CUresult name(CUdeviceptr *dptr, size_t size, CUstream s)                  \
    {                                                                               \
        if (!cuda_ready() || !r_##name)                                             \
            return CUDA_ERROR_NOT_INITIALIZED;                                      \
        struct dev_rec *d = acct_current();                                         \
        if (!d)                                                                     \
            return r_##name(dptr, size, s);                                         \
        if (!alloc_reserve(d, size))                                                \
            return spill_refused(d, #name);                                         \
        CUresult rc = r_##name(dptr, size, s);                                      \
        return alloc_settle(d, &g_tab_ptr, size, rc, rc == CUDA_SUCCESS ? *dptr : 0); \
    }
ALLOC_ASYNC(cuMemAllocAsync)
ALLOC_ASYNC(cuMemAllocAsync_ptsz)

#define ALLOC_POOL(name)                                                              \
    HOOK CUresult name(CUdeviceptr *dptr, size_t size, CUmemoryPool pool, CUstream s) \
    {                                                                                 \
        if (!cuda_ready() || !r_##name)                                               \
            return CUDA_ERROR_NOT_INITIALIZED;                                        \
        struct dev_rec *d = acct_current();                                           \
        if (!d)                                                                       \
            return r_##name(dptr, size, pool, s);                                     \
        if (!alloc_reserve(d, size))                                                  \
            return spill_refused(d, #name);                                           \
        CUresult rc = r_##name(dptr, size, pool, s);                                  \
        return alloc_settle(d, &g_tab_ptr, size, rc, rc == CUDA_SUCCESS ? *dptr : 0);   \
    }
ALLOC_POOL(cuMemAllocFromPoolAsync)
ALLOC_POOL(cuMemAllocFromPoolAsync_ptsz)

/* stream-ordered frees are given back when issued, not when the stream reaches them */
#define FREE_ASYNC(name)                                   \
    HOOK CUresult name(CUdeviceptr dptr, CUstream s)       \
    {                                                      \
        if (!cuda_ready() || !r_##name)                    \
            return CUDA_ERROR_NOT_INITIALIZED;             \
        struct freeing f;                                  \
        if (!free_begin(&f, &g_tab_ptr, dptr))             \
            return r_##name(dptr, s);                      \
        return free_end(&f, r_##name(dptr, s));            \
    }
FREE_ASYNC(cuMemFreeAsync)
FREE_ASYNC(cuMemFreeAsync_ptsz)

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

/* Arrays: the size is computed from the descriptor; the key is the array handle. */
HOOK CUresult cuArrayCreate_v2(CUarray *a, const CUDA_ARRAY_DESCRIPTOR *desc)
{
    if (!cuda_ready() || !r_cuArrayCreate_v2)
        return CUDA_ERROR_NOT_INITIALIZED;
    struct dev_rec *d = desc ? acct_current() : NULL;
    if (!d)
        return r_cuArrayCreate_v2(a, desc);
    uint64_t size = array_bytes(desc->Width, desc->Height, 1, desc->Format, desc->NumChannels, 1);
    if (!alloc_reserve(d, size))
        return spill_refused(d, "cuArrayCreate_v2");
    CUresult rc = r_cuArrayCreate_v2(a, desc);
    return alloc_settle(d, &g_tab_array, size, rc, rc == CUDA_SUCCESS ? (uintptr_t)*a : 0);
}

HOOK CUresult cuArray3DCreate_v2(CUarray *a, const CUDA_ARRAY3D_DESCRIPTOR *desc)
{
    if (!cuda_ready() || !r_cuArray3DCreate_v2)
        return CUDA_ERROR_NOT_INITIALIZED;
    struct dev_rec *d = desc ? acct_current() : NULL;
    if (!d)
        return r_cuArray3DCreate_v2(a, desc);
    uint64_t size = array_bytes(desc->Width, desc->Height, desc->Depth, desc->Format, desc->NumChannels, 1);
    if (!alloc_reserve(d, size))
        return spill_refused(d, "cuArray3DCreate_v2");
    CUresult rc = r_cuArray3DCreate_v2(a, desc);
    return alloc_settle(d, &g_tab_array, size, rc, rc == CUDA_SUCCESS ? (uintptr_t)*a : 0);
}

HOOK CUresult cuArrayCreate(CUarray *a, const CUDA_ARRAY_DESCRIPTOR_v1 *desc)
{
    if (!cuda_ready() || !r_cuArrayCreate)
        return CUDA_ERROR_NOT_INITIALIZED;
    struct dev_rec *d = desc ? acct_current() : NULL;
    if (!d)
        return r_cuArrayCreate(a, desc);
    uint64_t size = array_bytes(desc->Width, desc->Height, 1, desc->Format, desc->NumChannels, 1);
    if (!alloc_reserve(d, size))
        return spill_refused(d, "cuArrayCreate");
    CUresult rc = r_cuArrayCreate(a, desc);
    return alloc_settle(d, &g_tab_array, size, rc, rc == CUDA_SUCCESS ? (uintptr_t)*a : 0);
}

HOOK CUresult cuArray3DCreate(CUarray *a, const CUDA_ARRAY3D_DESCRIPTOR_v1 *desc)
{
    if (!cuda_ready() || !r_cuArray3DCreate)
        return CUDA_ERROR_NOT_INITIALIZED;
    struct dev_rec *d = desc ? acct_current() : NULL;
    if (!d)
        return r_cuArray3DCreate(a, desc);
    uint64_t size = array_bytes(desc->Width, desc->Height, desc->Depth, desc->Format, desc->NumChannels, 1);
    if (!alloc_reserve(d, size))
        return spill_refused(d, "cuArray3DCreate");
    CUresult rc = r_cuArray3DCreate(a, desc);
    return alloc_settle(d, &g_tab_array, size, rc, rc == CUDA_SUCCESS ? (uintptr_t)*a : 0);
}

HOOK CUresult cuMipmappedArrayCreate(CUmipmappedArray *a, const CUDA_ARRAY3D_DESCRIPTOR *desc, unsigned levels)
{
    if (!cuda_ready() || !r_cuMipmappedArrayCreate)
        return CUDA_ERROR_NOT_INITIALIZED;
    struct dev_rec *d = desc ? acct_current() : NULL;
    if (!d)
        return r_cuMipmappedArrayCreate(a, desc, levels);
    uint64_t size = array_bytes(desc->Width, desc->Height, desc->Depth, desc->Format, desc->NumChannels, levels);
    if (!alloc_reserve(d, size))
        return spill_refused(d, "cuMipmappedArrayCreate");
    CUresult rc = r_cuMipmappedArrayCreate(a, desc, levels);
    return alloc_settle(d, &g_tab_array, size, rc, rc == CUDA_SUCCESS ? (uintptr_t)*a : 0);
}

HOOK CUresult cuArrayDestroy(CUarray a)
{
    if (!cuda_ready() || !r_cuArrayDestroy)
        return CUDA_ERROR_NOT_INITIALIZED;
    struct freeing f;
    if (!free_begin(&f, &g_tab_array, (uintptr_t)a))
        return r_cuArrayDestroy(a);
    return free_end(&f, r_cuArrayDestroy(a));
}

HOOK CUresult cuMipmappedArrayDestroy(CUmipmappedArray a)
{
    if (!cuda_ready() || !r_cuMipmappedArrayDestroy)
        return CUDA_ERROR_NOT_INITIALIZED;
    struct freeing f;
    if (!free_begin(&f, &g_tab_array, (uintptr_t)a))
        return r_cuMipmappedArrayDestroy(a);
    return free_end(&f, r_cuMipmappedArrayDestroy(a));
}

HOOK CUresult cuMemGetInfo_v2(size_t *free_b, size_t *total_b)
{
    if (!cuda_ready() || !r_cuMemGetInfo_v2)
        return CUDA_ERROR_NOT_INITIALIZED;
    size_t rf = 0, rt = 0;
    CUresult rc = r_cuMemGetInfo_v2(&rf, &rt);
    if (rc != CUDA_SUCCESS)
        return rc;
    struct dev_rec *d = acct_current();
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
    if (!cuda_ready() || !r_cuDeviceTotalMem_v2)
        return CUDA_ERROR_NOT_INITIALIZED;
    CUresult rc = r_cuDeviceTotalMem_v2(bytes, dev);
    struct dev_rec *d;
    if (rc != CUDA_SUCCESS || !bytes || !(d = acct_cuda(dev)))
        return rc;
    if (d->limit && (d->limit < *bytes || d->spill)) /* oversubscribed: the whole limit */
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
    if (!cuda_ready() || !r_cuMemGetInfo)
        return CUDA_ERROR_NOT_INITIALIZED;
    struct dev_rec *d = acct_current();
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
    if (!cuda_ready() || !r_cuDeviceTotalMem)
        return CUDA_ERROR_NOT_INITIALIZED;
    CUresult rc = r_cuDeviceTotalMem(bytes, dev);
    struct dev_rec *d;
    if (rc != CUDA_SUCCESS || !bytes || !(d = acct_cuda(dev)))
        return rc;
    if (d->limit && (d->limit < *bytes || d->spill))
        *bytes = clamp_u32(d->limit);
    return rc;
}

HOOK CUresult cuGetProcAddress(const char *symbol, void **pfn, int ver, cuuint64_t flags)
{
    if (!cuda_ready() || !r_cuGetProcAddress)
        return CUDA_ERROR_NOT_INITIALIZED;
    CUresult rc = r_cuGetProcAddress(symbol, pfn, ver, flags);
    if (rc == CUDA_SUCCESS && pfn && *pfn && !t_in_hook)
        *pfn = cuda_hook_for(*pfn);
    return rc;
}

HOOK CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int ver, cuuint64_t flags, int *status)
{
    if (!cuda_ready() || !r_cuGetProcAddress_v2)
        return CUDA_ERROR_NOT_INITIALIZED;
    CUresult rc = r_cuGetProcAddress_v2(symbol, pfn, ver, flags, status);
    if (rc == CUDA_SUCCESS && pfn && *pfn && !t_in_hook)
        *pfn = cuda_hook_for(*pfn);
    return rc;
}
