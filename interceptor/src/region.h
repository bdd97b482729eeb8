/* Layout of the shared accounting region (file `region` in a claim directory).
 * Fixed-width fields only. Every process of a claim reads and writes it with
 * pread/pwrite (never a mapping: the claim's containers can truncate it), under
 * an OFD lock on byte 2^30 - 1; byte 2^30 + i is slot i's liveness lock.
 * Version 2 (1 had a 128-byte tr_gpu without the usage counters and a robust
 * mutex in the header). Any change to this layout must bump TR_VERSION; giving
 * a reserved word a meaning does not, when zero means what older libraries did
 * (burst_ns and meter_ns: zero in their regions, read as "never burst"). The node daemon reads it too (metrics,
 * the priority relay): dra_driver/libtessera/region_layout.py mirrors this
 * layout. */
#ifndef TESSERA_REGION_H
#define TESSERA_REGION_H

#include <stddef.h>
#include <stdint.h>

#define TR_MAGIC 0x4e4f494745525354ull /* "TSREGION" little-endian */
#define TR_VERSION 2u
#define TR_MAX_GPUS 16
#define TR_MAX_PROCS 1024
#define TR_UUID_LEN 64
#define TR_LOCK_BASE (1ll << 30)        /* byte TR_LOCK_BASE + i: slot i's liveness lock */
#define TR_LOCK_BYTE (TR_LOCK_BASE - 1) /* the region's lock */
/* The GPU entry "<uuid>" TR_HELD_SUFFIX counts what the device holds for a claim that opted into memory
 * oversubscription (its `resident`); its "<uuid>" entry counts all of its memory. */
#define TR_HELD_SUFFIX "+resident"

struct tr_gpu {                 /* 192 bytes */
    char uuid[TR_UUID_LEN];     /* "GPU-…", NUL-terminated; empty = free slot */
    uint64_t used;              /* unused since version 2: the claim's bytes are the sum of its live slots' used[i] */
    uint64_t limit;             /* bytes, as last written by an attaching process */
    int64_t tokens_ns;          /* SM token bucket, atomic */
    uint64_t refill_ns;         /* CLOCK_MONOTONIC of the last refill, atomic */
    uint32_t cores;             /* percent, 0 = unlimited */
    int32_t priority;           /* 0 high, else normal; as configured */
    uint64_t launches;          /* launches through the limiter, atomic */
    uint64_t active_ns;         /* CLOCK_MONOTONIC of the claim's last launch (high priority only), atomic */
    uint64_t gpu_ns;            /* GPU time charged to the claim (its own kernels' solo time), atomic */
    uint64_t throttled_ns;      /* time launches waited for the SM limiter, atomic */
    uint64_t oom_refusals;      /* allocations refused by the memory limit, atomic */
    uint64_t held_ns;           /* time launches waited behind a high-priority claim, atomic */
    uint64_t queued_until_ns;   /* when the claim's launched work should be done, running alone, atomic */
    uint64_t debt_ns;           /* time-division: how far kernels ran past the claim's part of the frame, atomic */
    uint64_t skip_until_ns;     /* time-division: a part of the frame starts late until then, to repay debt */
    uint64_t burst_ns;          /* GPU time charged above the claim's guaranteed cores (bursting), atomic */
    uint64_t meter_ns;          /* the guarantee meter's virtual clock (gate_meter), atomic */
};

struct tr_proc {                /* 16 + 8 * TR_MAX_GPUS = 144 bytes */
    int32_t pid;                /* in the pid namespace of the process that wrote it */
    uint32_t state;             /* 0 free, 1 live */
    uint64_t attach_ns;
    uint64_t used[TR_MAX_GPUS]; /* bytes this process holds on region gpu slot i */
};

struct tr_region {
    uint64_t magic;             /* written last at creation */
    uint32_t version;
    uint32_t header_size;       /* offsetof(struct tr_region, gpus) */
    uint64_t total_size;        /* sizeof(struct tr_region) */
    uint32_t max_gpus;
    uint32_t max_procs;
    uint32_t proc_high;         /* slots [0, proc_high) have ever been used */
    uint32_t reserved0;
    uint64_t reserved1;
    uint8_t reserved_lock[64];  /* unused: the lock is an OFD lock on byte 2^30 - 1 of the file */
    struct tr_gpu gpus[TR_MAX_GPUS];
    struct tr_proc procs[TR_MAX_PROCS];
};

_Static_assert(sizeof(struct tr_gpu) == 192, "tr_gpu is 192 bytes");
_Static_assert(sizeof(struct tr_proc) == 144, "tr_proc is 144 bytes");
_Static_assert(offsetof(struct tr_region, reserved_lock) == 48, "reserved lock bytes at 48");
_Static_assert(offsetof(struct tr_region, gpus) == 112, "gpus at 112");
_Static_assert(offsetof(struct tr_region, procs) == 112 + 192 * TR_MAX_GPUS, "procs after gpus");
_Static_assert(sizeof(struct tr_region) == 112 + 192 * TR_MAX_GPUS + 144 * TR_MAX_PROCS, "no hidden padding");
_Static_assert(offsetof(struct tr_gpu, used) == 64 && offsetof(struct tr_gpu, tokens_ns) == 80, "tr_gpu fields");
_Static_assert(offsetof(struct tr_gpu, active_ns) == 112 && offsetof(struct tr_gpu, held_ns) == 144, "usage fields");
_Static_assert(offsetof(struct tr_gpu, burst_ns) == 176 && offsetof(struct tr_gpu, meter_ns) == 184, "burst fields");

#endif
