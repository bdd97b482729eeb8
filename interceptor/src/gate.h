/* gate.c: the limiter's decisions, as pure functions of a claim's GPU entry
 * (a copy read from the region under its lock) and the time: may a launch
 * start now, and what does that change in the entry. Two gates: the token
 * bucket, and time division against the node's schedule (view.h). No I/O, no
 * state: nothing to reset after fork. A third function meters what a claim
 * got above its guarantee. */
#ifndef TESSERA_GATE_H
#define TESSERA_GATE_H

#include <stdint.h>

#include "region.h"
#include "view.h"

#pragma GCC visibility push(hidden)

/* Token bucket: refills at cores % of wall time up to cap_ns, then lets a launch charged est_ns through while
 * it holds tokens. Returns 1 (charged) or 0 with *wake_ns = when to look again. */
int gate_bucket(struct tr_gpu *e, uint64_t now, uint32_t cores, int64_t cap_ns, int64_t est_ns, uint64_t window_ns,
                uint64_t *wake_ns);

/* Time division: the claim's work, predicted to run back to back alone from max(now, queued_until), may start
 * when that start lies in the claim's part [S, E) of the frame. What a kernel runs past E becomes debt, repaid by
 * starting a later part that much later (at most one part's length per frame). Returns 1 (booked) or 0 with
 * *wake_ns. */
int gate_phase(struct tr_gpu *e, const struct tv_phase *p, uint64_t now, int64_t est_ns, uint64_t *wake_ns);

/* Free (the view gives the claim no part: it is the GPU's only claim with work, or idle): a launch starts at
 * once while the claim's bucket at free_pct % of the frame holds tokens and its queued work ends less than
 * FREE_AHEAD_NS from now (so the node can put it back into the frame without a long queue behind). Returns 1
 * (booked) or 0 with *wake_ns. */
int gate_free(struct tr_gpu *e, const struct tv_phase *p, uint64_t now, int64_t est_ns, uint64_t *wake_ns);

/* Adds `charged` ns of GPU time to the claim's guarantee meter (a virtual clock running at cores % with a
 * tolerance of tolerance_ns) and counts what exceeds the guarantee in burst_ns. */
void gate_meter(struct tr_gpu *e, uint64_t now, uint32_t cores, uint64_t tolerance_ns, uint64_t charged);

#pragma GCC visibility pop

#endif
