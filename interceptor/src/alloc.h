/* alloc.c: the accounting steps every allocation hook shares (reserve before
 * the driver call, then keep or give back; on a free, leave the table first),
 * and the count of driver allocation calls in flight that context measurement
 * checks. A hook reads:
 *
 *     if (!alloc_reserve(d, size))
 *         return CUDA_ERROR_OUT_OF_MEMORY;
 *     CUresult rc = r_cuMemAlloc_v2(dptr, size);
 *     return alloc_settle(d, &tab, size, rc, rc == CUDA_SUCCESS ? *dptr : 0);
 *
 * alloc_reserve / free_begin enter the re-entry guard; alloc_settle / free_end
 * leave it. */
#ifndef TESSERA_ALLOC_H
#define TESSERA_ALLOC_H

#include <stdint.h>

#include "devices.h"
#include "table.h"

#pragma GCC visibility push(hidden)

/* Reserves size bytes of device memory, for an oversubscribed claim also of what the device holds for it;
 * 0 (guard not entered) when that would pass either (alloc_held_full() tells which). */
int alloc_reserve(struct dev_rec *d, uint64_t size);
/* Reserves size bytes of managed memory: the limit only, never what the device holds. */
int alloc_reserve_managed(struct dev_rec *d, uint64_t size);
/* After alloc_reserve failed in this thread: 1 when the limit had room but the device memory held for an
 * oversubscribed claim did not (the allocation may be served from managed memory instead). */
int alloc_held_full(void);
/* The record index an allocation reserved in this thread is tracked under (REC_HELD when it is held). */
unsigned alloc_rec(struct dev_rec *d);
/* Moves the reservation to `actual` bytes (a pitch known only afterwards);
 * 0 (reservation unchanged) when growing it would pass the limit. */
int alloc_resize(struct dev_rec *d, uint64_t *size, uint64_t actual);
/* After the driver call: tracks key → size when rc is success, else gives
 * the reservation back. Returns rc. */
CUresult alloc_settle(struct dev_rec *d, struct tab *t, uint64_t size, CUresult rc, uint64_t key);
/* After the driver call, for a caller that keeps its own record of the allocation: leaves the guard and
 * gives the reservation back when rc failed. Returns rc. */
CUresult alloc_finish(struct dev_rec *d, uint64_t size, CUresult rc);
/* Tracks an allocation whose bytes are already charged (given back when the table is full). */
void alloc_track(struct tab *t, uint64_t key, uint64_t size, struct dev_rec *d);

struct freeing {
    struct tab *t;
    uint64_t key, size;
    unsigned rec;
    int had;
};
/* 0 when this free is not accounted (pass it through); else takes the entry
 * out of the table before the driver can hand the address out again. */
int free_begin(struct freeing *f, struct tab *t, uint64_t key);
/* After the driver call: gives the bytes back, or puts the entry back when the
 * free failed. Returns rc. */
CUresult free_end(struct freeing *f, CUresult rc);

/* Driver allocation/free calls in flight, and how many have finished. */
uint64_t drv_inflight(void);
uint64_t drv_done(void);

#pragma GCC visibility pop

#endif
