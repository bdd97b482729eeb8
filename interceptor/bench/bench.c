/* Microbenchmark: ns per call of cuLaunchKernel and of a cuMemAlloc/cuMemFree
 * pair, run with or without libtessera preloaded (bench.sh compares). Usage:
 * bench <launch|alloc> <iterations> */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "tessera_cuda.h"

CUresult cuInit(unsigned);
CUresult cuCtxCreate_v2(CUcontext *, unsigned, CUdevice);
CUresult cuMemAlloc_v2(CUdeviceptr *, size_t);
CUresult cuMemFree_v2(CUdeviceptr);
CUresult cuLaunchKernel(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, CUstream, void **, void **);
CUfunction fakeKernel(uint64_t ns);

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

int main(int argc, char **argv)
{
    if (argc < 3)
        return 2;
    long n = atol(argv[2]);
    CUcontext c;
    cuInit(0);
    cuCtxCreate_v2(&c, 0, 0);
    CUfunction k = fakeKernel(0);
    uint64_t t0 = now_ns();
    if (!strcmp(argv[1], "launch")) {
        for (long i = 0; i < n; i++)
            cuLaunchKernel(k, 1, 1, 1, 1, 1, 1, 0, NULL, NULL, NULL);
    } else {
        for (long i = 0; i < n; i++) {
            CUdeviceptr p;
            if (cuMemAlloc_v2(&p, 1 << 20) == CUDA_SUCCESS)
                cuMemFree_v2(p);
        }
    }
    uint64_t t1 = now_ns();
    printf("%s %.1f ns/call\n", argv[1], n ? (double)(t1 - t0) / (double)n : 0.0);
    return 0;
}
