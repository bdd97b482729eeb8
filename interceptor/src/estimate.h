/* estimate.c: per-process estimates of how long a kernel (or a graph) runs on
 * the GPU when it has the GPU to itself, learned from the event-to-event times
 * the limiter measures. estimate_after_fork keeps them (same code, same GPU). */
#ifndef TESSERA_ESTIMATE_H
#define TESSERA_ESTIMATE_H

#include <stdint.h>

#pragma GCC visibility push(hidden)

/* The solo-time estimate for a launch key, or 0 when none is known yet. */
int64_t est_get(uint64_t key);
/* Records a measured event-to-event time for key and returns the GPU time to charge for it: the measured
 * time, but never more than what the key takes when it runs alone. */
int64_t est_observe(uint64_t key, int64_t elapsed_ns);

/* Launch keys: the same kernel with the same launch shape, or the same graph. Never 0. */
uint64_t est_kernel_key(const void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                        unsigned shmem);
uint64_t est_graph_key(const void *graph_exec);

#pragma GCC visibility pop

#endif
