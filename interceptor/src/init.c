/* libtessera: the CUDA interception library of Tessera (see ../README.md for
 * the contract with the node plugin). This module starts the others once, from
 * the constructor or from the first hook or dlsym call, whichever comes first,
 * and resets them in a forked child. */
#include <pthread.h>

#include "capture.h"
#include "config.h"
#include "devices.h"
#include "hooks.h"
#include "hooks_ctx.h"
#include "hooks_launch.h"
#include "hooks_mem.h"
#include "init.h"
#include "limiter.h"
#include "region_handle.h"
#include "util.h"
#include "vmm.h"

static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static int g_ready;

/* A forked child is a new process for the claim: it must not use the parent's
 * slot, file description, allocation tables or CUDA events. Regions first (the
 * device records point into them), then the records, then what refers to
 * records: the event ring, the context table and primary contexts, the
 * allocation tables. The child has no stream capture of its own. */
static void after_fork_child(void)
{
    capture_after_fork();
    region_after_fork();
    devices_after_fork();
    limiter_after_fork();
    ctx_after_fork();
    mem_after_fork();
    vmm_after_fork();
}

static void init_all(void)
{
    resolve_init();
    cfg_load();
    int acct = devices_init();
    int watch = acct && cfg_watch_any();
    launch_init(watch);
    if (acct) {
        if (mem_init() || ctx_init())
            tlog(LOG_ERROR, "cannot map allocation tables; allocations pass uncounted");
        pthread_atfork(NULL, NULL, after_fork_child);
    }
    if (watch)
        limiter_init();
    tlog(LOG_INFO, "initialised: %d claim dir(s), %d GPU limit line(s), accounting %s, launches %s", cfg_nclaims(),
         cfg_nlimits(), acct ? "on" : "off", watch ? "watched (SM limit or priority)" : "pass through");
    __atomic_store_n(&g_ready, 1, __ATOMIC_RELEASE);
}

void ensure_init(void)
{
    if (!__atomic_load_n(&g_ready, __ATOMIC_ACQUIRE))
        pthread_once(&g_once, init_all);
}

__attribute__((constructor)) static void tessera_ctor(void)
{
    ensure_init();
}
