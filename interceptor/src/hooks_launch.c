/* Launch hooks. When no launch needs watching (no SM limit, no priority
 * arbitration) the hook is a load, a test and a tail call to the driver;
 * otherwise launches go through the limiter (limiter.c) with a key naming the
 * kernel and its launch shape, or the graph (estimate.c). */

#include "devices.h"
#include "estimate.h"
#include "hooks.h"
#include "hooks_launch.h"
#include "limiter.h"
#include "util.h"

static int g_watch; /* set once at init: some launch may need the limiter */

void launch_init(int watch)
{
    g_watch = watch;
}

#define LAUNCH_HOOK(name, params, args, stream, ptsz, key)                              \
    static __attribute__((noinline)) CUresult slow_##name(params)                       \
    {                                                                                   \
        if (!cuda_ready() || !r_##name)                                                 \
            return CUDA_ERROR_NOT_INITIALIZED;                                          \
        struct dev_rec *d = (!g_watch || t_in_hook) ? NULL : sm_rec();                  \
        if (!d)                                                                         \
            return r_##name(args);                                                      \
        t_in_hook++;                                                                    \
        CUstream s_ = (stream);                                                         \
        struct sm_ticket t_;                                                            \
        sm_before(d, s_, (ptsz), (key), &t_);                                           \
        CUresult rc = r_##name(args);                                                   \
        sm_after(d, &t_, rc, s_, (ptsz));                                               \
        t_in_hook--;                                                                    \
        return rc;                                                                      \
    }                                                                                   \
    HOOK CUresult name(params)                                                          \
    {                                                                                   \
        __typeof__(r_##name) real = __atomic_load_n(&r_##name, __ATOMIC_RELAXED);       \
        if (__builtin_expect(real != NULL && !g_watch, 1))                              \
            return real(args);                                                          \
        return slow_##name(args);                                                       \
    }

#define P_LAUNCH LAUNCH_PARAMS
#define A_LAUNCH f, gx, gy, gz, bx, by, bz, shmem, s, params, extra
#define K_LAUNCH est_kernel_key(f, gx, gy, gz, bx, by, bz, shmem)
LAUNCH_HOOK(cuLaunchKernel, P_LAUNCH, A_LAUNCH, s, 0, K_LAUNCH)
LAUNCH_HOOK(cuLaunchKernel_ptsz, P_LAUNCH, A_LAUNCH, s, 1, K_LAUNCH)

#define P_EX const CUlaunchConfig *cfg, CUfunction f, void **params, void **extra
#define A_EX cfg, f, params, extra
#define K_EX (cfg ? est_kernel_key(f, cfg->gridDimX, cfg->gridDimY, cfg->gridDimZ, cfg->blockDimX, cfg->blockDimY, \
                                   cfg->blockDimZ, cfg->sharedMemBytes)                                             \
              : est_kernel_key(f, 0, 0, 0, 0, 0, 0, 0))
LAUNCH_HOOK(cuLaunchKernelEx, P_EX, A_EX, cfg ? cfg->hStream : NULL, 0, K_EX)
LAUNCH_HOOK(cuLaunchKernelEx_ptsz, P_EX, A_EX, cfg ? cfg->hStream : NULL, 1, K_EX)

#define P_COOP CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz, \
               unsigned shmem, CUstream s, void **params
#define A_COOP f, gx, gy, gz, bx, by, bz, shmem, s, params
LAUNCH_HOOK(cuLaunchCooperativeKernel, P_COOP, A_COOP, s, 0, K_LAUNCH)
LAUNCH_HOOK(cuLaunchCooperativeKernel_ptsz, P_COOP, A_COOP, s, 1, K_LAUNCH)

#define P_GRAPH CUgraphExec g, CUstream s
#define A_GRAPH g, s
LAUNCH_HOOK(cuGraphLaunch, P_GRAPH, A_GRAPH, s, 0, est_graph_key(g))
LAUNCH_HOOK(cuGraphLaunch_ptsz, P_GRAPH, A_GRAPH, s, 1, est_graph_key(g))
