/* devices.c: one record per GPU UUID this process has seen (its limits and its
 * entry in a claim's region), the CUDA-ordinal and NVML-handle maps onto the
 * records, and whether accounting is on at all. devices_after_fork forgets
 * every record (they point at the parent's region slots). */
#ifndef TESSERA_DEVICES_H
#define TESSERA_DEVICES_H

#include <stdint.h>

#include "region_handle.h"
#include "view.h"
#include "tessera_cuda.h"

#pragma GCC visibility push(hidden)

#define MAX_RECS 64

struct dev_rec {
    char uuid[TR_UUID_LEN];
    uint64_t limit;  /* bytes, 0 = unlimited */
    uint32_t cores;  /* percent; 0 = unlimited */
    int32_t priority;
    uint64_t ctx_default; /* bytes charged per context when it cannot be measured */
    nvmlDevice_t nvml_h;  /* for measuring contexts; set once */
    int sm_limited;  /* cores in 1..99 and policy allows */
    int stamps;      /* high priority: launches are stamped in the region for the node's priority relay */
    const struct tv_view *view; /* normal priority: the GPU's view (holds, schedule), NULL none */
    uint32_t slot;   /* this claim's slot in the view's schedule, 0 none: then the token bucket limits */
    uint32_t ceiling; /* percent it may burst to (> cores), 0 none: then nothing is metered as burst */
    int watched;     /* launches go through the limiter: sm_limited || stamps || view */
    /* what this process's launches owe the claim's GPU entry, settled in the limiter's next transaction */
    int64_t pend_tokens; /* bucket corrections: measured cost − estimate */
    uint64_t pend_gpu_ns, pend_throttled_ns, pend_held_ns, pend_launches;
    uint64_t stamped_ns; /* when this process last stamped the entry's active_ns */
    int64_t cap_ns;  /* token bucket capacity */
    struct region_handle *rh; /* NULL: not accounted */
    int g;           /* GPU entry in the region */
    /* opted into memory oversubscription (limits file `resident`): `limit` is the claim's whole limit, of
     * which the device holds `resident` bytes, counted in the region's entry res_g ("<uuid>+resident") */
    int spill;
    uint64_t resident;
    int res_g;
};

/* In an allocation table's record index: the entry's bytes are also held on the device for an
 * oversubscribed claim (counted in res_g too). */
#define REC_HELD 0x80u

/* Decides once, from the configuration, whether anything is accounted; returns it. */
int devices_init(void);
int acct_on(void);

/* Records of accounted devices, or NULL (not accounted, or unknown). */
struct dev_rec *rec_for_cuda(CUdevice dev);
struct dev_rec *rec_current(void); /* the current context's device */
/* The same, but NULL when accounting is off or this thread is inside a hook. */
struct dev_rec *acct_current(void);
struct dev_rec *acct_cuda(CUdevice dev);
struct dev_rec *acct_nvml(nvmlDevice_t h);

/* A record as a small index (what the allocation tables store) and back;
 * rec_at is NULL for an index that names no accounted record. */
unsigned rec_index(const struct dev_rec *d);
struct dev_rec *rec_at(unsigned i);

/* 1 granted, 0 over the limit (inline: every allocation and free passes here) */
static inline int acct_reserve(struct dev_rec *d, uint64_t size)
{
    return region_reserve(d->rh, d->g, size, d->limit);
}

static inline void acct_release(struct dev_rec *d, uint64_t size)
{
    region_release(d->rh, d->g, size);
}

/* An oversubscribed claim's device-held bytes (all its processes): 1 granted, 0 past `resident`. */
static inline int acct_reserve_held(struct dev_rec *d, uint64_t size)
{
    return region_reserve(d->rh, d->res_g, size, d->resident);
}

static inline void acct_release_held(struct dev_rec *d, uint64_t size)
{
    region_release(d->rh, d->res_g, size);
}

/* Gives back an allocation table entry's bytes: its record's, and its held bytes when marked REC_HELD. */
void rec_release(unsigned rec, uint64_t size);

/* Bytes the claim holds on this device, and the limit it sees as total. */
void acct_view(struct dev_rec *d, uint64_t real_total, uint64_t real_free, uint64_t *total, uint64_t *free_b,
               uint64_t *used);

void devices_after_fork(void);

#pragma GCC visibility pop

#endif
