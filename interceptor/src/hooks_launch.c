/* Launch hooks. Without an SM limit the hook is a load, a test and a tail call
 * to the driver; with one, launches go through the limiter (limiter.c). */

#include "devices.h"
#include "hooks.h"
#include "hooks_launch.h"
#include "limiter.h"
#include "util.h"

static int g_sm_any; /* set once at init: some GPU may have an SM limit */

void launch_init(int sm_any)
{
    g_sm_any = sm_any;
}

#define LAUNCH_HOOK(name, params, args, stream, ptsz)                                   \
    static __attribute__((noinline)) CUresult slow_##name(params)                       \
    {                                                                                   \
        if (!cuda_ready() || !r_##name)                                                 \
            return CUDA_ERROR_NOT_INITIALIZED;                                          \
        struct dev_rec *d = (!g_sm_any || t_in_hook) ? NULL : sm_rec();                 \
        if (!d)                                                                         \
            return r_##name(args);                                                      \
        t_in_hook++;                                                                    \
        CUstream s_ = (stream);                                                         \
        struct ring_ent *x = sm_before(d, s_, (ptsz));                                  \
        CUresult rc = r_##name(args);                                                   \
        sm_after(d, x, rc, s_, (ptsz));                                                 \
        t_in_hook--;                                                                    \
        return rc;                                                                      \
    }                                                                                   \
    HOOK CUresult name(params)                                                          \
    {                                                                                   \
        __typeof__(r_##name) real = __atomic_load_n(&r_##name, __ATOMIC_RELAXED);       \
        if (__builtin_expect(real != NULL && !g_sm_any, 1))                             \
            return real(args);                                                          \
        return slow_##name(args);                                                       \
    }

#define P_LAUNCH LAUNCH_PARAMS
#define A_LAUNCH f, gx, gy, gz, bx, by, bz, shmem, s, params, extra
LAUNCH_HOOK(cuLaunchKernel, P_LAUNCH, A_LAUNCH, s, 0)
LAUNCH_HOOK(cuLaunchKernel_ptsz, P_LAUNCH, A_LAUNCH, s, 1)

#define P_EX const CUlaunchConfig *cfg, CUfunction f, void **params, void **extra
#define A_EX cfg, f, params, extra
LAUNCH_HOOK(cuLaunchKernelEx, P_EX, A_EX, cfg ? cfg->hStream : NULL, 0)
LAUNCH_HOOK(cuLaunchKernelEx_ptsz, P_EX, A_EX, cfg ? cfg->hStream : NULL, 1)

#define P_COOP CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz, \
               unsigned shmem, CUstream s, void **params
#define A_COOP f, gx, gy, gz, bx, by, bz, shmem, s, params
LAUNCH_HOOK(cuLaunchCooperativeKernel, P_COOP, A_COOP, s, 0)
LAUNCH_HOOK(cuLaunchCooperativeKernel_ptsz, P_COOP, A_COOP, s, 1)

#define P_GRAPH CUgraphExec g, CUstream s
#define A_GRAPH g, s
LAUNCH_HOOK(cuGraphLaunch, P_GRAPH, A_GRAPH, s, 0)
LAUNCH_HOOK(cuGraphLaunch_ptsz, P_GRAPH, A_GRAPH, s, 1)
