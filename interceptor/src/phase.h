/* phase.c: time division. With the node's schedule (view.h) a claim's kernels
 * start only inside its part of each frame, so claims on one GPU never wait
 * behind each other's timeslices, and a kernel that runs past the part is
 * repaid by starting the next part later. State is claim-wide, in the region;
 * nothing per process, so nothing to reset after fork. */
#ifndef TESSERA_PHASE_H
#define TESSERA_PHASE_H

#include <stdint.h>

#include "devices.h"
#include "view.h"

#pragma GCC visibility push(hidden)

/* Waits until a kernel expected to run est ns (0: unknown) may start inside the claim's part of the frame,
 * and books it. Time spent waiting is added to the region's throttled_ns. */
void phase_gate(struct dev_rec *d, const struct tv_phase *p, int64_t est);

#pragma GCC visibility pop

#endif
