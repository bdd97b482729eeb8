/* The one list of driver entry points: those we hook (exported, defined in
 * hooks_*.c) and those we only call. resolve.c builds its lookup tables and
 * the real-function pointers r_<name> from these lists; every hook module
 * calls the driver through r_<name>. Adding a hook: declare it here, add it to
 * CUDA_HOOKS or NVML_HOOKS, define it in a hooks_*.c. */
#ifndef TESSERA_HOOKS_H
#define TESSERA_HOOKS_H

#include "tessera_cuda.h"

#define HOOK __attribute__((visibility("default")))

#pragma GCC visibility push(hidden)

/* hooked driver API */
HOOK CUresult cuGetProcAddress(const char *symbol, void **pfn, int ver, cuuint64_t flags);
HOOK CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int ver, cuuint64_t flags, int *status);
HOOK CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t size);
HOOK CUresult cuMemAllocPitch_v2(CUdeviceptr *dptr, size_t *pitch, size_t width, size_t height, unsigned elem);
HOOK CUresult cuMemAllocManaged(CUdeviceptr *dptr, size_t size, unsigned flags);
HOOK CUresult cuMemFree_v2(CUdeviceptr dptr);
HOOK CUresult cuMemAllocAsync(CUdeviceptr *dptr, size_t size, CUstream s);
HOOK CUresult cuMemAllocAsync_ptsz(CUdeviceptr *dptr, size_t size, CUstream s);
HOOK CUresult cuMemAllocFromPoolAsync(CUdeviceptr *dptr, size_t size, CUmemoryPool pool, CUstream s);
HOOK CUresult cuMemAllocFromPoolAsync_ptsz(CUdeviceptr *dptr, size_t size, CUmemoryPool pool, CUstream s);
HOOK CUresult cuMemFreeAsync(CUdeviceptr dptr, CUstream s);
HOOK CUresult cuMemFreeAsync_ptsz(CUdeviceptr dptr, CUstream s);
HOOK CUresult cuMemCreate(CUmemGenericAllocationHandle *h, size_t size, const CUmemAllocationProp *prop, unsigned long long flags);
HOOK CUresult cuMemRelease(CUmemGenericAllocationHandle h);
HOOK CUresult cuMemRetainAllocationHandle(CUmemGenericAllocationHandle *h, void *addr);
HOOK CUresult cuMemMap(CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle h,
                       unsigned long long flags);
HOOK CUresult cuMemUnmap(CUdeviceptr ptr, size_t size);
HOOK CUresult cuArrayCreate_v2(CUarray *a, const CUDA_ARRAY_DESCRIPTOR *d);
HOOK CUresult cuArray3DCreate_v2(CUarray *a, const CUDA_ARRAY3D_DESCRIPTOR *d);
HOOK CUresult cuArrayDestroy(CUarray a);
HOOK CUresult cuMipmappedArrayCreate(CUmipmappedArray *a, const CUDA_ARRAY3D_DESCRIPTOR *d, unsigned levels);
HOOK CUresult cuMipmappedArrayDestroy(CUmipmappedArray a);
HOOK CUresult cuMemGetInfo_v2(size_t *free_b, size_t *total_b);
HOOK CUresult cuDeviceTotalMem_v2(size_t *bytes, CUdevice dev);
/* the v1 ABI (32-bit sizes), still exported for old binaries */
HOOK CUresult cuMemAlloc(CUdeviceptr_v1 *dptr, unsigned int size);
HOOK CUresult cuMemAllocPitch(CUdeviceptr_v1 *dptr, unsigned int *pitch, unsigned int width, unsigned int height, unsigned elem);
HOOK CUresult cuMemFree(CUdeviceptr_v1 dptr);
HOOK CUresult cuMemGetInfo(unsigned int *free_b, unsigned int *total_b);
HOOK CUresult cuDeviceTotalMem(unsigned int *bytes, CUdevice dev);
HOOK CUresult cuArrayCreate(CUarray *a, const CUDA_ARRAY_DESCRIPTOR_v1 *d);
HOOK CUresult cuArray3DCreate(CUarray *a, const CUDA_ARRAY3D_DESCRIPTOR_v1 *d);
/* contexts */
HOOK CUresult cuCtxCreate_v2(CUcontext *c, unsigned flags, CUdevice dev);
HOOK CUresult cuCtxCreate_v3(CUcontext *c, void *params, int nparams, unsigned flags, CUdevice dev);
HOOK CUresult cuCtxCreate_v4(CUcontext *c, void *params, unsigned flags, CUdevice dev);
HOOK CUresult cuCtxDestroy_v2(CUcontext c);
HOOK CUresult cuDevicePrimaryCtxRetain(CUcontext *c, CUdevice dev);
HOOK CUresult cuDevicePrimaryCtxRelease(CUdevice dev);
HOOK CUresult cuDevicePrimaryCtxRelease_v2(CUdevice dev);
HOOK CUresult cuDevicePrimaryCtxReset(CUdevice dev);
HOOK CUresult cuDevicePrimaryCtxReset_v2(CUdevice dev);
#define LAUNCH_PARAMS CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz, \
                      unsigned shmem, CUstream s, void **params, void **extra
HOOK CUresult cuLaunchKernel(LAUNCH_PARAMS);
HOOK CUresult cuLaunchKernel_ptsz(LAUNCH_PARAMS);
HOOK CUresult cuLaunchKernelEx(const CUlaunchConfig *cfg, CUfunction f, void **params, void **extra);
HOOK CUresult cuLaunchKernelEx_ptsz(const CUlaunchConfig *cfg, CUfunction f, void **params, void **extra);
HOOK CUresult cuLaunchCooperativeKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                                        unsigned bz, unsigned shmem, CUstream s, void **params);
HOOK CUresult cuLaunchCooperativeKernel_ptsz(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                                             unsigned by, unsigned bz, unsigned shmem, CUstream s, void **params);
HOOK CUresult cuGraphLaunch(CUgraphExec g, CUstream s);
HOOK CUresult cuGraphLaunch_ptsz(CUgraphExec g, CUstream s);
/* stream capture (capture.c) */
HOOK CUresult cuStreamBeginCapture(CUstream s);
HOOK CUresult cuStreamBeginCapture_ptsz(CUstream s);
HOOK CUresult cuStreamBeginCapture_v2(CUstream s, CUstreamCaptureMode mode);
HOOK CUresult cuStreamBeginCapture_v2_ptsz(CUstream s, CUstreamCaptureMode mode);
HOOK CUresult cuStreamBeginCaptureToGraph(CUstream s, CUgraph g, const CUgraphNode *deps, const CUgraphEdgeData *edata,
                                          size_t n, CUstreamCaptureMode mode);
HOOK CUresult cuStreamBeginCaptureToGraph_ptsz(CUstream s, CUgraph g, const CUgraphNode *deps,
                                               const CUgraphEdgeData *edata, size_t n, CUstreamCaptureMode mode);
HOOK CUresult cuStreamEndCapture(CUstream s, CUgraph *g);
HOOK CUresult cuStreamEndCapture_ptsz(CUstream s, CUgraph *g);

/* driver API we call but do not hook (declared only for their types) */
CUresult cuCtxGetDevice(CUdevice *dev);
CUresult cuCtxGetCurrent(CUcontext *ctx);
CUresult cuDeviceGetUuid(CUuuid *uuid, CUdevice dev);
CUresult cuEventCreate(CUevent *ev, unsigned flags);
CUresult cuEventDestroy_v2(CUevent ev);
CUresult cuEventRecord(CUevent ev, CUstream s);
CUresult cuEventRecord_ptsz(CUevent ev, CUstream s);
CUresult cuEventQuery(CUevent ev);
CUresult cuEventSynchronize(CUevent ev);
CUresult cuEventElapsedTime(float *ms, CUevent start, CUevent end);
CUresult cuStreamIsCapturing(CUstream s, CUstreamCaptureStatus *status);
CUresult cuStreamIsCapturing_ptsz(CUstream s, CUstreamCaptureStatus *status);

/* NVML */
HOOK nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t dev, nvmlMemory_t *mem);
HOOK nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t dev, nvmlMemory_v2_t *mem);
HOOK nvmlReturn_t nvmlDeviceGetComputeRunningProcesses(nvmlDevice_t dev, unsigned *count, nvmlProcessInfo_v1_t *infos);
HOOK nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v2(nvmlDevice_t dev, unsigned *count, nvmlProcessInfo_t *infos);
HOOK nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t dev, unsigned *count, nvmlProcessInfo_t *infos);
/* the v1 ABI, whose symbol every driver keeps: advice for a managed range (oversubscription, spill.c) */
CUresult cuMemAdvise(CUdeviceptr ptr, size_t count, int advice, CUdevice dev);
nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t dev, char *uuid, unsigned len);
nvmlReturn_t nvmlInit_v2(void);
nvmlReturn_t nvmlDeviceGetHandleByUUID(const char *uuid, nvmlDevice_t *dev);
nvmlReturn_t nvmlDeviceGetIndex(nvmlDevice_t dev, unsigned *index);

#define CUDA_HOOKS(X)                                                                                       \
    X(cuGetProcAddress) X(cuGetProcAddress_v2) X(cuMemAlloc_v2) X(cuMemAllocPitch_v2) X(cuMemAllocManaged)  \
    X(cuMemFree_v2) X(cuMemAllocAsync) X(cuMemAllocAsync_ptsz) X(cuMemAllocFromPoolAsync)                   \
    X(cuMemAllocFromPoolAsync_ptsz) X(cuMemFreeAsync) X(cuMemFreeAsync_ptsz) X(cuMemCreate) X(cuMemRelease) \
    X(cuArrayCreate_v2) X(cuArray3DCreate_v2) X(cuArrayDestroy) X(cuMipmappedArrayCreate)                   \
    X(cuMipmappedArrayDestroy) X(cuMemGetInfo_v2) X(cuDeviceTotalMem_v2) X(cuLaunchKernel)                  \
    X(cuLaunchKernel_ptsz) X(cuLaunchKernelEx) X(cuLaunchKernelEx_ptsz) X(cuLaunchCooperativeKernel)        \
    X(cuLaunchCooperativeKernel_ptsz) X(cuGraphLaunch) X(cuGraphLaunch_ptsz) X(cuMemAlloc) X(cuMemAllocPitch)  \
    X(cuMemFree) X(cuMemGetInfo) X(cuDeviceTotalMem) X(cuArrayCreate) X(cuArray3DCreate) X(cuCtxCreate_v2)    \
    X(cuCtxCreate_v3) X(cuCtxCreate_v4) X(cuCtxDestroy_v2) X(cuDevicePrimaryCtxRetain)                        \
    X(cuDevicePrimaryCtxRelease) X(cuDevicePrimaryCtxRelease_v2) X(cuDevicePrimaryCtxReset)                   \
    X(cuDevicePrimaryCtxReset_v2) X(cuStreamBeginCapture) X(cuStreamBeginCapture_ptsz) X(cuStreamBeginCapture_v2) \
    X(cuStreamBeginCapture_v2_ptsz) X(cuStreamBeginCaptureToGraph) X(cuStreamBeginCaptureToGraph_ptsz)        \
    X(cuStreamEndCapture) X(cuStreamEndCapture_ptsz) X(cuMemRetainAllocationHandle) X(cuMemMap) X(cuMemUnmap)
#define CUDA_USED(X)                                                                                        \
    X(cuCtxGetDevice) X(cuCtxGetCurrent) X(cuDeviceGetUuid) X(cuEventCreate) X(cuEventDestroy_v2)           \
    X(cuEventRecord) X(cuEventRecord_ptsz) X(cuEventQuery) X(cuEventSynchronize) X(cuEventElapsedTime)     \
    X(cuStreamIsCapturing) X(cuStreamIsCapturing_ptsz) X(cuMemAdvise)
#define NVML_HOOKS(X)                                                                                       \
    X(nvmlDeviceGetMemoryInfo) X(nvmlDeviceGetMemoryInfo_v2) X(nvmlDeviceGetComputeRunningProcesses)        \
    X(nvmlDeviceGetComputeRunningProcesses_v2) X(nvmlDeviceGetComputeRunningProcesses_v3)
#define NVML_USED(X) X(nvmlDeviceGetUUID) X(nvmlDeviceGetIndex) X(nvmlInit_v2) X(nvmlDeviceGetHandleByUUID)

/* The real entry points (NULL until the library is loaded and resolved, or
 * when the driver lacks one). Written once by resolve.c, read everywhere: the
 * launch hooks' fast path is one load of one of these. */
#define DECLARE_REAL(n) extern __typeof__(&n) r_##n;
CUDA_HOOKS(DECLARE_REAL)
CUDA_USED(DECLARE_REAL)
NVML_HOOKS(DECLARE_REAL)
NVML_USED(DECLARE_REAL)
#undef DECLARE_REAL

/* Whether libcuda / libnvidia-ml is loaded (loading it if needed: a hook was
 * called, so the program uses it) and its r_<name> pointers are resolved. */
int cuda_ready(void);
int nvml_ready(void);
/* Our hook for a real libcuda entry point, or `real` itself. */
void *cuda_hook_for(void *real);
/* Resolves the real dlsym (first thing at start-up). */
void resolve_init(void);

#pragma GCC visibility pop

#endif
