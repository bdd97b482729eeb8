/* region.c: one process's handle on a claim's accounting region (the layout
 * is region.h), through pread/pwrite under a timed OFD lock, or a private
 * region when the file cannot be used. Owns the handles of every claim (and
 * the HAMi-core fallback); region_after_fork drops the parent's slots in a
 * forked child. */
#ifndef TESSERA_REGION_HANDLE_H
#define TESSERA_REGION_HANDLE_H

#include <stdint.h>

#include "config.h"
#include "region.h"

#pragma GCC visibility push(hidden)

struct region_handle;

/* The attached region of a claim (MAX_CLAIMS: the HAMi-core fallback), or
 * NULL when it cannot be used at all. Called under the device-record lock. */
struct region_handle *region_of_claim(int claim);
/* Finds or creates the region's entry for a GPU; -1 when full. */
int region_gpu_slot(struct region_handle *h, const char *uuid, uint64_t limit, uint32_t cores, int32_t priority);

/* Whether the claim's region file became unusable: this process keeps what it holds and gets no new bytes
 * under a memory limit (region_reserve refuses), and the limiter keeps it to time windows. */
int region_closed(struct region_handle *h);
/* 0 when locked; -1 when the region cannot be used at all. */
int region_lock(struct region_handle *h);
void region_unlock(struct region_handle *h);
/* Reserves `size` bytes on region GPU g; 1 = granted, 0 = over the limit (counted as a refusal). */
int region_reserve(struct region_handle *h, int g, uint64_t size, uint64_t limit);
void region_release(struct region_handle *h, int g, uint64_t size);
/* Under the lock: charges bytes whatever the limit. */
void region_charge_locked(struct region_handle *h, int g, uint64_t size);
/* Sweeps dead processes, for views. */
void region_refresh(struct region_handle *h);
/* The bytes the claim's live processes hold on GPU g. */
uint64_t region_used(struct region_handle *h, int g);
/* The claim's live processes holding bytes on GPU g: fills up to cap pids and
 * byte counts, returns how many there are. */
unsigned region_procs(struct region_handle *h, int g, unsigned cap, unsigned *pids, uint64_t *bytes);
/* The limiter's read-modify-write of GPU entry g: begin locks and reads it (0), or fails (-1, not locked);
 * end writes back its limiter fields (from tokens_ns on) and unlocks. */
int region_gpu_begin(struct region_handle *h, int g, struct tr_gpu *e);
void region_gpu_end(struct region_handle *h, int g, const struct tr_gpu *e);

void region_after_fork(void);

#pragma GCC visibility pop

#endif
