/* config.c: the limits files of the claim directories and HAMi-core's
 * variables, read once at start-up (cfg_load) and read-only afterwards, so it
 * needs no after-fork reset. */
#ifndef TESSERA_CONFIG_H
#define TESSERA_CONFIG_H

#include <stdint.h>

#pragma GCC visibility push(hidden)

#define MAX_CLAIMS 8 /* claim directories; index MAX_CLAIMS is the HAMi-core fallback */
#define PATH_CAP 256

void cfg_load(void);

struct gpu_limits {
    uint64_t memory;  /* bytes, 0 = unlimited */
    uint32_t cores;   /* percent, 0 or 100 = unlimited */
    int32_t priority; /* 0 high, else normal */
    uint64_t context; /* bytes charged per context when its cost cannot be measured */
    const char *view; /* path of the node's view of this GPU, "" none */
    uint32_t slot;    /* the claim's slot in the view's schedule, 0 none */
    uint32_t ceiling; /* percent it may burst to above cores in idle time (limits file version 2); 0 none */
    int spill;        /* opted into oversubscription (limits file version 3): past `resident`, managed memory */
    uint64_t resident; /* with spill: the bytes of `memory` the device holds for the claim */
};

/* The limits for one GPU: a claim's limits file by UUID first, then the
 * HAMi-core variables by CUDA ordinal. Returns the claim index, MAX_CLAIMS for
 * the environment fallback, or -1 when nothing limits this GPU. */
int cfg_lookup(const char *uuid, int ordinal, struct gpu_limits *out);
/* Whether a GPU with this share and priority is throttled under the policy. */
int cfg_sm_applies(uint32_t cores, int32_t prio);
/* Whether anything can limit SM time / anything is configured at all. */
int cfg_sm_any(void);
int cfg_acct_any(void);
/* Whether priority arbitration applies at all (not under policy `disable`). */
int cfg_priority_applies(void);
/* Whether any launch may need the limiter: an SM limit, a high-priority claim or a priority view. */
int cfg_watch_any(void);

int cfg_nclaims(void);
int cfg_nlimits(void);
const char *cfg_claim_dir(int claim);
const char *cfg_shared_cache(void); /* "" when unset */
const char *cfg_policy_name(void);
uint64_t cfg_window_ns(void);

#pragma GCC visibility pop

#endif
