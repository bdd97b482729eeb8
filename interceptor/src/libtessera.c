/* libtessera: the CUDA interception library of Tessera. One translation unit
 * (the pieces below are #included) so that everything but the hooks is static.
 * See ../README.md for the contract with the node plugin. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <link.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <string.h>
#include <strings.h>
#include <stdlib.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "tessera_cuda.h"
#include "region.h"

#include "util.c"
#include "config.c"
#include "region.c"
#include "table.c"
#include "resolve.c"
#include "devices.c"
#include "limiter.c"
#include "hooks_mem.c"
#include "hooks_ctx.c"
#include "hooks_launch.c"
#include "hooks_nvml.c"

static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static int g_ready;

/* A forked child is a new process for the claim: it must not use the parent's
 * slot, file description, allocation tables or CUDA events. */
static void after_fork_child(void)
{
    for (int i = 0; i <= MAX_CLAIMS; i++)
        region_forget_after_fork(&g_regions[i]);
    pthread_mutex_init(&g_dev_mutex, NULL);
    memset(g_cuda_map, 0, sizeof g_cuda_map);
    g_nnvml = 0;
    g_nrecs = 0;
    memset(&t_ring, 0, sizeof t_ring);
    ctx_forget_after_fork();
    if (g_acct) {
        tab_drop(&g_tab_ptr);
        tab_drop(&g_tab_handle);
        tab_drop(&g_tab_array);
        tab_drop(&g_tab_ctx);
        tab_init(&g_tab_ptr);
        tab_init(&g_tab_handle);
        tab_init(&g_tab_array);
        tab_init(&g_tab_ctx);
    }
}

static void init_all(void)
{
    real_dlsym();
    cfg_load();
    g_acct = cfg_acct_any();
    g_sm_any = g_acct && cfg_sm_any();
    if (g_acct) {
        if (tab_init(&g_tab_ptr) || tab_init(&g_tab_handle) || tab_init(&g_tab_array) || tab_init(&g_tab_ctx))
            tlog(LOG_ERROR, "cannot map allocation tables; allocations pass uncounted");
        pthread_atfork(NULL, NULL, after_fork_child);
    }
    if (g_sm_any && pthread_key_create(&g_ring_key, ring_thread_exit) == 0)
        g_ring_key_ok = 1;
    tlog(LOG_INFO, "initialised: %d claim dir(s), %d GPU limit line(s), accounting %s, SM limiter %s", g_cfg.nclaims,
         g_cfg.nlimits, g_acct ? "on" : "off", g_sm_any ? "on" : "off");
    __atomic_store_n(&g_ready, 1, __ATOMIC_RELEASE);
}

static void ensure_init(void)
{
    if (!__atomic_load_n(&g_ready, __ATOMIC_ACQUIRE))
        pthread_once(&g_once, init_all);
}

__attribute__((constructor)) static void tessera_ctor(void)
{
    ensure_init();
}
