/* What the test programs share: driver prototypes (no CUDA toolkit here), the
 * fake driver's test entry points, CHECK, and small process helpers. */
#ifndef TESSERA_TESTUTIL_H
#define TESSERA_TESTUTIL_H

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "tessera_cuda.h"

CUresult cuInit(unsigned);
CUresult cuCtxCreate_v2(CUcontext *, unsigned, CUdevice);
CUresult cuCtxSetCurrent(CUcontext);
CUresult cuCtxGetCurrent(CUcontext *);
CUresult cuCtxSynchronize(void);
CUresult cuMemAlloc_v2(CUdeviceptr *, size_t);
CUresult cuMemFree_v2(CUdeviceptr);
CUresult cuMemAllocPitch_v2(CUdeviceptr *, size_t *, size_t, size_t, unsigned);
CUresult cuMemAllocManaged(CUdeviceptr *, size_t, unsigned);
CUresult cuMemAllocAsync(CUdeviceptr *, size_t, CUstream);
CUresult cuMemAllocAsync_ptsz(CUdeviceptr *, size_t, CUstream);
CUresult cuMemAllocFromPoolAsync(CUdeviceptr *, size_t, CUmemoryPool, CUstream);
CUresult cuMemFreeAsync(CUdeviceptr, CUstream);
CUresult cuMemCreate(CUmemGenericAllocationHandle *, size_t, const CUmemAllocationProp *, unsigned long long);
CUresult cuMemRelease(CUmemGenericAllocationHandle);
CUresult cuArrayCreate_v2(CUarray *, const CUDA_ARRAY_DESCRIPTOR *);
CUresult cuArray3DCreate_v2(CUarray *, const CUDA_ARRAY3D_DESCRIPTOR *);
CUresult cuArrayDestroy(CUarray);
CUresult cuMipmappedArrayCreate(CUmipmappedArray *, const CUDA_ARRAY3D_DESCRIPTOR *, unsigned);
CUresult cuMipmappedArrayDestroy(CUmipmappedArray);
CUresult cuMemGetInfo_v2(size_t *, size_t *);
CUresult cuDeviceTotalMem_v2(size_t *, CUdevice);
CUresult cuIpcGetMemHandle(CUipcMemHandle *, CUdeviceptr);
CUresult cuIpcOpenMemHandle_v2(CUdeviceptr *, CUipcMemHandle, unsigned);
CUresult cuIpcCloseMemHandle(CUdeviceptr);
CUresult cuGetProcAddress(const char *, void **, int, cuuint64_t);
CUresult cuGetProcAddress_v2(const char *, void **, int, cuuint64_t, int *);
CUresult cuLaunchKernel(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, CUstream, void **, void **);
CUresult cuLaunchKernelEx(const CUlaunchConfig *, CUfunction, void **, void **);
CUresult cuGraphLaunch(CUgraphExec, CUstream);
CUresult cuEventCreate(CUevent *, unsigned);
CUresult cuEventRecord(CUevent, CUstream);
CUresult cuEventSynchronize(CUevent);
CUresult cuCtxCreate_v3(CUcontext *, void *, int, unsigned, CUdevice);
CUresult cuCtxCreate_v4(CUcontext *, void *, unsigned, CUdevice);
CUresult cuCtxDestroy_v2(CUcontext);
CUresult cuDevicePrimaryCtxRetain(CUcontext *, CUdevice);
CUresult cuDevicePrimaryCtxRelease(CUdevice);
CUresult cuDevicePrimaryCtxRelease_v2(CUdevice);
CUresult cuDevicePrimaryCtxReset_v2(CUdevice);
CUresult cuMemAlloc(CUdeviceptr_v1 *, unsigned);
CUresult cuMemAllocPitch(CUdeviceptr_v1 *, unsigned *, unsigned, unsigned, unsigned);
CUresult cuMemFree(CUdeviceptr_v1);
CUresult cuMemGetInfo(unsigned *, unsigned *);
CUresult cuDeviceTotalMem(unsigned *, CUdevice);
CUresult cuArrayCreate(CUarray *, const CUDA_ARRAY_DESCRIPTOR_v1 *);
CUresult cuArray3DCreate(CUarray *, const CUDA_ARRAY3D_DESCRIPTOR_v1 *);
CUfunction fakeKernel(uint64_t ns);
int fakeLiveEvents(void);
uint64_t fakeBusyNs(int dev);
uint64_t fakeUsedBytes(int dev);

CUresult cuStreamCreate(CUstream *, unsigned);
CUresult cuStreamDestroy_v2(CUstream);
CUresult cuStreamSynchronize(CUstream);
CUresult cuStreamQuery(CUstream);
CUresult cuStreamWaitEvent(CUstream, CUevent, unsigned);
CUresult cuStreamBeginCapture_v2(CUstream, CUstreamCaptureMode);
CUresult cuStreamEndCapture(CUstream, CUgraph *);
CUresult cuStreamIsCapturing(CUstream, CUstreamCaptureStatus *);
CUresult cuThreadExchangeStreamCaptureMode(CUstreamCaptureMode *);
CUresult cuGraphInstantiateWithFlags(CUgraphExec *, CUgraph, unsigned long long);
CUresult cuGraphExecDestroy(CUgraphExec);
CUresult cuGraphDestroy(CUgraph);
CUresult cuEventQuery(CUevent);
CUresult cuEventElapsedTime(float *, CUevent, CUevent);
CUresult cuEventDestroy_v2(CUevent);
CUresult cuMemAddressReserve(CUdeviceptr *, size_t, size_t, CUdeviceptr, unsigned long long);
CUresult cuMemMap(CUdeviceptr, size_t, size_t, CUmemGenericAllocationHandle, unsigned long long);
CUresult cuMemUnmap(CUdeviceptr, size_t);
CUresult cuMemSetAccess(CUdeviceptr, size_t, const CUmemAccessDesc *, size_t);
CUresult cuMemRetainAllocationHandle(CUmemGenericAllocationHandle *, void *);
CUresult cuMemExportToShareableHandle(void *, CUmemGenericAllocationHandle, int, unsigned long long);
CUresult cuMemImportFromShareableHandle(CUmemGenericAllocationHandle *, void *, int);
uint64_t fakeGpuBusyNs(int dev);
uint64_t fakeGpuSwitches(int dev);
uint64_t fakeGraphNs(CUgraph g);

#define MiB (1ull << 20)
#define GiB (1ull << 30)

static const char *g_test = "?";
#define CHECK(cond, ...)                                                     \
    do {                                                                     \
        if (!(cond)) {                                                       \
            fprintf(stderr, "FAIL %s:%d [%s] %s: ", __FILE__, __LINE__, g_test, #cond); \
            fprintf(stderr, __VA_ARGS__);                                    \
            fprintf(stderr, "\n");                                           \
            exit(1);                                                         \
        }                                                                    \
    } while (0)

struct test_cmd {
    const char *name;
    int (*fn)(int, char **);
};

/* Runs the test argv[1] of a test program with the arguments after it; 2 for a usage error. */
static inline int run_test(const char *prog, const struct test_cmd *cmds, size_t n, int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: %s <test> [args]\n", prog);
        return 2;
    }
    g_test = argv[1];
    for (size_t i = 0; i < n; i++)
        if (!strcmp(cmds[i].name, argv[1]))
            return cmds[i].fn(argc - 2, argv + 2);
    fprintf(stderr, "unknown test %s\n", argv[1]);
    return 2;
}

static inline uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}


static inline void ctx_on(int dev)
{
    CUcontext c;
    CHECK(cuInit(0) == CUDA_SUCCESS, "cuInit");
    CHECK(cuCtxCreate_v2(&c, 0, dev) == CUDA_SUCCESS, "ctx on %d", dev);
}

/* Runs this program again with argv (the environment as it is now). */
static inline pid_t spawn(char *const argv[])
{
    pid_t p = fork();
    if (p == 0) {
        execv("/proc/self/exe", argv);
        _exit(127);
    }
    return p;
}

static inline int wait_ok(pid_t p)
{
    int st;
    while (waitpid(p, &st, 0) < 0 && errno == EINTR) {
    }
    return WIFEXITED(st) && WEXITSTATUS(st) == 0;
}

#endif
