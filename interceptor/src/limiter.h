/* limiter.c: the SM limiter (token bucket in the region, per-thread ring of
 * timing events, solo-time charging, capture awareness, priority holds).
 * limiter_after_fork empties the forking thread's ring: its events belong to
 * the parent's contexts. */
#ifndef TESSERA_LIMITER_H
#define TESSERA_LIMITER_H

#include <stdint.h>

#include "devices.h"
#include "tessera_cuda.h"

#pragma GCC visibility push(hidden)

struct ring_ent;

/* One watched launch: what sm_before charged and the timing entry sm_after completes. */
struct sm_ticket {
    struct ring_ent *x; /* NULL: charged the estimate only */
    int64_t est;
    int charged;
    int phased; /* gated by the node's schedule, not by tokens */
};

/* The record to watch the current launch against (limited, stamping or held back), or NULL. */
struct dev_rec *sm_rec(void);
/* Before a watched launch with this key (estimate.h): pass a captured launch untouched; stamp or wait for
 * priority; wait for tokens, charge the estimate and record the start event. */
void sm_before(struct dev_rec *d, CUstream s, int ptsz, uint64_t key, struct sm_ticket *t);
void sm_after(struct dev_rec *d, const struct sm_ticket *t, CUresult launched, CUstream s, int ptsz);

void limiter_init(void); /* registers the thread-exit destructor of the rings */
void limiter_after_fork(void);

#pragma GCC visibility pop

#endif
