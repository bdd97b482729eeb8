/* Memory oversubscription in the library: a claim that opted in (limits file `resident`) has a limit larger
 * than what the device holds for it. Its device allocations are counted against both (alloc.c); one that
 * the device memory held for it cannot take, or that the device itself refuses, is served here from
 * managed memory instead, which the driver pages between host and device and evicts before it fails a
 * device allocation, so claims that did not opt in keep every byte they were promised on the device. */
#include "spill.h"

#include "alloc.h"
#include "hooks.h"
#include "util.h"

CUresult spill_alloc(struct dev_rec *d, struct tab *t, CUdeviceptr *dptr, size_t size)
{
    CUdevice dev;
    if (!r_cuMemAllocManaged || !r_cuCtxGetDevice || r_cuCtxGetDevice(&dev) != CUDA_SUCCESS)
        return CUDA_ERROR_OUT_OF_MEMORY;
    if (!alloc_reserve_managed(d, size))
        return CUDA_ERROR_OUT_OF_MEMORY; /* past the claim's whole limit: as for every claim */
    CUresult rc = r_cuMemAllocManaged(dptr, size, CU_MEM_ATTACH_GLOBAL);
    if (rc == CUDA_SUCCESS && r_cuMemAdvise) {
        /* pages live on the device while they fit and stay mapped there when they do not (no fault storms
         * on access from the device); advice is a hint, so a driver that refuses it changes nothing */
        r_cuMemAdvise(*dptr, size, CU_MEM_ADVISE_SET_PREFERRED_LOCATION, dev);
        r_cuMemAdvise(*dptr, size, CU_MEM_ADVISE_SET_ACCESSED_BY, dev);
    }
    static int told;
    if (rc == CUDA_SUCCESS && !__atomic_exchange_n(&told, 1, __ATOMIC_RELAXED))
        tlog(LOG_INFO, "%s: the device memory held for this claim (%llu bytes) is in use; serving allocations "
             "past it from managed memory (memoryOversubscription)", d->uuid, (unsigned long long)d->resident);
    return alloc_settle(d, t, size, rc, rc == CUDA_SUCCESS ? *dptr : 0);
}

CUresult spill_refused(struct dev_rec *d, const char *path)
{
    static int told;
    if (d->spill && alloc_held_full() && !__atomic_exchange_n(&told, 1, __ATOMIC_RELAXED))
        tlog(LOG_WARN, "%s: %s: out of memory: the device memory held for this claim (%llu bytes) is in use, and "
             "only cuMemAlloc (cudaMalloc) is served from host memory under memoryOversubscription; use it "
             "instead of pools, pitched, array or cuMemCreate allocations", d->uuid, path,
             (unsigned long long)d->resident);
    return CUDA_ERROR_OUT_OF_MEMORY;
}
