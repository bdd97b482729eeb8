/* limiter.c: the SM limiter (token bucket in the region, per-thread ring of
 * timing events). limiter_after_fork empties the forking thread's ring: its
 * events belong to the parent's contexts. */
#ifndef TESSERA_LIMITER_H
#define TESSERA_LIMITER_H

#include "devices.h"
#include "tessera_cuda.h"

#pragma GCC visibility push(hidden)

struct ring_ent;

/* The record to throttle the current launch against, or NULL. */
struct dev_rec *sm_rec(void);
/* Before a limited launch: wait for tokens, charge the estimate, record the
 * start event. Returns the ring entry to complete, or NULL (estimate only). */
struct ring_ent *sm_before(struct dev_rec *d, CUstream s, int ptsz);
void sm_after(struct dev_rec *d, struct ring_ent *x, CUresult launched, CUstream s, int ptsz);

void limiter_init(void); /* registers the thread-exit destructor of the rings */
void limiter_after_fork(void);

#pragma GCC visibility pop

#endif
