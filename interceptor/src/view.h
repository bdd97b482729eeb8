/* view.c: the node's read-only view of one GPU (file `view`, written by the
 * node daemon, mounted read-only into containers). It says
 * - until when normal-priority claims must hold their launches back, because a
 *   high-priority claim on the GPU has work (hold_until_ns);
 * - the GPU's time-division schedule: a frame of frame_us microseconds that
 *   repeats on CLOCK_MONOTONIC, and for each claim (by the slot number the
 *   daemon wrote in that claim's limits file) the part [start_us, end_us) of
 *   every frame in which its kernels run. Claims with an SM share get disjoint
 *   parts, so none ever waits behind another's timeslices;
 * - (version 2) for a claim whose slot entry has no part but a free_pct: it is
 *   the GPU's only claim with work, or it is idle, so its launches need no
 *   place in the frame and start at once, up to free_pct % of the GPU's time
 *   (its ceiling). The daemon moves claims between the two as their work comes
 *   and goes (dra_driver/core/sm_schedule.py).
 * Fixed-width fields, magic "TSGPUVW", version 2 (version 1, without free_pct,
 * is read too), in a 4096-byte file;
 * the node daemon writes it; its Python side (layout, MAX_SLOTS, encoding) is
 * dra_driver/libtessera/view_layout.py. The schedule is written under a
 * sequence lock: seq is odd while it changes. */
#ifndef TESSERA_VIEW_H
#define TESSERA_VIEW_H

#include <stddef.h>
#include <stdint.h>

#define TV_MAGIC 0x0057565550475354ull /* "TSGPUVW\0" little-endian */
#define TV_VERSION 2u
#define TV_VERSION_MIN 1u
#define TV_FILE_SIZE 4096
#define TV_MAX_SLOTS 64

struct tv_slot {
    uint32_t id; /* the claim's slot on this GPU (limits file `slot`); 0 = unused entry */
    uint32_t start_us, end_us;
    uint32_t free_pct; /* version 2: no part (start == end) and this > 0: start at once, up to this % */
};

struct tv_view {
    uint64_t magic;
    uint32_t version;
    uint32_t size;          /* sizeof(struct tv_view) */
    uint64_t hold_until_ns; /* CLOCK_MONOTONIC: normal-priority launches wait until then */
    uint64_t updated_ns;    /* when the daemon last wrote the hold */
    uint64_t high_active;   /* high-priority claims with recent work (diagnostics) */
    uint32_t seq;           /* schedule sequence lock: even = stable */
    uint32_t nslots;
    uint32_t frame_us;
    uint32_t reserved0;
    uint64_t reserved1;
    struct tv_slot slots[TV_MAX_SLOTS];
};

_Static_assert(sizeof(struct tv_slot) == 16, "tv_slot is 16 bytes");
_Static_assert(offsetof(struct tv_slot, free_pct) == 12, "free_pct is the slot's last word");
_Static_assert(offsetof(struct tv_view, hold_until_ns) == 16, "hold_until_ns at 16");
_Static_assert(offsetof(struct tv_view, seq) == 40 && offsetof(struct tv_view, frame_us) == 48, "schedule header");
_Static_assert(offsetof(struct tv_view, slots) == 64, "slots at 64");
_Static_assert(sizeof(struct tv_view) == 64 + 16 * TV_MAX_SLOTS && sizeof(struct tv_view) <= TV_FILE_SIZE, "size");

#pragma GCC visibility push(hidden)

#define TV_PART 1 /* the claim runs in its part [start_ns, end_ns) of every frame */
#define TV_FREE 2 /* the claim runs at once, up to free_pct % of the time */

/* A claim's part of the frame, as last read. */
struct tv_phase {
    uint32_t seq;       /* the schedule generation this was read from */
    int found;          /* 0: the slot is not in the schedule; TV_PART or TV_FREE */
    uint64_t frame_ns, start_ns, end_ns;
    uint32_t free_pct;
};

/* Maps the view at path (read-only, a regular file of TV_FILE_SIZE bytes with the right magic), or NULL
 * with one log line. Not a hot path. */
const struct tv_view *view_open(const char *path);
/* Until when normal-priority launches must wait; 0 when they need not. */
uint64_t view_hold_until(const struct tv_view *v);
/* Refreshes *p for slot when the schedule changed (one load when it did not). */
void view_phase(const struct tv_view *v, uint32_t slot, struct tv_phase *p);

#pragma GCC visibility pop

#endif
