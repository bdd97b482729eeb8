/* SM limiter. A watched launch (the claim has an SM limit, high priority or a
 * view of its GPU) goes through, in this order:
 *
 * - Stream capture (capture.c): a launch on a capturing stream does not run,
 *   so it passes untouched; while any capture is in progress, launches on
 *   other streams are gated and charged their estimate only (no event is
 *   created, recorded, queried or synchronized: the capture modes may forbid
 *   it).
 * - Priority: a high-priority claim stamps its claim entry (active_ns and its
 *   launch count, at most every STAMP_EVERY); the node daemon's relay holds
 *   only while the count moves (a stamp alone is a tenant's word) through the GPU's
 *   read-only view (view.c), and a normal-priority claim waits while the view
 *   says a high one has work.
 * - The gate (gate.c), one read-modify-write of the claim's GPU entry under the
 *   region's lock: time division against the node's schedule when the claim
 *   has a part of the frame; at once up to its ceiling when the schedule says
 *   it is free (alone with work, or idle: work-conserving burst); else the
 *   token bucket. A claim whose region failed closed gets time division only
 *   (closed_phase).
 *
 * Each gated launch is bracketed by a pair of timing events (a per-thread ring
 * of 16 pairs bounds how far a thread runs ahead); once the end completed, the
 * launch costs its measured time capped at its key's solo time (estimate.c),
 * never time it waited behind another claim. What launches owe the entry
 * (bucket corrections, GPU time, throttled and held time) is kept in the
 * device record and settled in the next transaction: one region transaction
 * per launch. */
#include <pthread.h>
#include <string.h>

#include "capture.h"
#include "config.h"
#include "devices.h"
#include "estimate.h"
#include "gate.h"
#include "hooks.h"
#include "limiter.h"
#include "util.h"
#include "view.h"

#define RING 16
#define HOLD_POLL_NS 5000000ull
#define STAMP_EVERY_NS 5000000ull
#define CLOSED_FRAME_NS 50000000ull /* the daemon's frame (sm_schedule.py DEFAULT_FRAME_US) */

struct ring_ent {
    CUevent s, e;
    int64_t est;
    uint64_t key;
    struct dev_rec *rec;
    int phased; /* gated by the schedule: no tokens to settle */
};

struct tring {
    CUcontext ctx;
    int keyed; /* registered for ring_thread_exit */
    unsigned head, tail;
    int64_t ewma_ns; /* recent costs of this thread: the estimate for a key never measured */
    struct ring_ent ent[RING];
};

static __thread struct tring t_ring __attribute__((tls_model("initial-exec")));
/* this thread's copy of its claim's part of the frame (for the last record it launched on) */
static __thread struct {
    const struct dev_rec *d;
    struct tv_phase p;
} t_phase __attribute__((tls_model("initial-exec")));

static void owe(uint64_t *counter, uint64_t n)
{
    if (n)
        __atomic_add_fetch(counter, n, __ATOMIC_RELAXED);
}

/* Adds what the process owes into the entry (inside a transaction). A claim that may burst meters its GPU
 * time against its guarantee (over one window), so what it got above it shows as burst_ns. */
static void settle(struct dev_rec *d, struct tr_gpu *e)
{
    e->tokens_ns -= __atomic_exchange_n(&d->pend_tokens, 0, __ATOMIC_ACQ_REL);
    uint64_t gpu = __atomic_exchange_n(&d->pend_gpu_ns, 0, __ATOMIC_ACQ_REL);
    e->gpu_ns += gpu;
    if (d->ceiling)
        gate_meter(e, mono_ns(), d->cores, cfg_window_ns(), gpu);
    e->throttled_ns += __atomic_exchange_n(&d->pend_throttled_ns, 0, __ATOMIC_ACQ_REL);
    e->held_ns += __atomic_exchange_n(&d->pend_held_ns, 0, __ATOMIC_ACQ_REL);
    e->launches += __atomic_exchange_n(&d->pend_launches, 0, __ATOMIC_ACQ_REL);
}

/* The claim's part of the frame, or NULL when the schedule has none (then the bucket limits). */
static const struct tv_phase *phase_of(struct dev_rec *d)
{
    if (!d->slot || !d->view)
        return NULL;
    if (t_phase.d != d) {
        t_phase.d = d;
        t_phase.p.seq = 0;
    }
    view_phase(d->view, d->slot, &t_phase.p);
    return t_phase.p.found ? &t_phase.p : NULL;
}

/* A claim whose region failed closed (region_closed) shares no bucket, meter or queue any more: a bucket or a
 * free entry per process would give N processes N times the share. A part of the frame needs no shared state
 * (the frame runs on CLOCK_MONOTONIC, the node's clock), so every process of the claim launches only inside
 * the same part: the view's, when it gives the claim one, else the first `cores` % of the frame. Together they
 * get the share, never more, and never burst. */
static const struct tv_phase *closed_phase(const struct dev_rec *d, const struct tv_phase *ph)
{
    static __thread struct tv_phase p __attribute__((tls_model("initial-exec")));
    if (ph && ph->found == TV_PART)
        return ph;
    p.found = TV_PART;
    p.frame_ns = ph && ph->frame_ns ? ph->frame_ns : CLOSED_FRAME_NS;
    p.start_ns = 0;
    p.end_ns = p.frame_ns * d->cores / 100;
    return &p;
}

/* Work this thread launched that has not finished yet, at its estimates: the prediction the gates keep
 * (queued_until) assumes the claim's work runs back to back alone, and when it did not (a neighbour's work
 * ran in between, e.g. while the node's layout changes), the launches still queued say so. */
static uint64_t backlog_ns(const struct tring *r, const struct dev_rec *d)
{
    uint64_t sum = 0;
    for (unsigned i = r->tail; i != r->head; i++)
        if (r->ent[i % RING].rec == d && r->ent[i % RING].est > 0) /* this claim's GPU only */
            sum += (uint64_t)r->ent[i % RING].est;
    return sum;
}

/* Waits until the gate lets a launch charged est through; `backlog` ns of this thread's work are still
 * queued. */
static void gate(struct dev_rec *d, const struct tv_phase *ph, int64_t est, uint64_t backlog)
{
    uint64_t t0 = 0, floor = backlog ? mono_ns() + backlog : 0; /* fixed once: the gates' waits chase no clock */
    for (;;) {
        struct tr_gpu e;
        if (region_gpu_begin(d->rh, d->g, &e))
            return; /* no region at all: nothing to hold against */
        settle(d, &e);
        uint64_t now = mono_ns(), wake = now;
        if (ph && e.queued_until_ns < floor)
            e.queued_until_ns = floor; /* the claim's queue is at least what this thread still has queued */
        int go = !ph                   ? gate_bucket(&e, now, d->cores, d->cap_ns, est, cfg_window_ns(), &wake)
                 : ph->found == TV_FREE ? gate_free(&e, ph, now, est, &wake)
                                        : gate_phase(&e, ph, now, est, &wake);
        if (go) {
            e.launches++;
            if (t0)
                e.throttled_ns += now - t0;
        }
        region_gpu_end(d->rh, d->g, &e);
        if (go)
            return;
        if (!t0)
            t0 = now;
        uint64_t nap = wake > now ? wake - now : 0;
        sleep_ns(nap > cfg_window_ns() ? cfg_window_ns() : nap + 1000);
    }
}

/* High priority: tell the node's relay this claim has work. */
static void stamp(struct dev_rec *d)
{
    uint64_t now = mono_ns(), last = __atomic_load_n(&d->stamped_ns, __ATOMIC_RELAXED);
    if (now - last < STAMP_EVERY_NS || !__atomic_compare_exchange_n(&d->stamped_ns, &last, now, 0, __ATOMIC_ACQ_REL,
                                                                     __ATOMIC_RELAXED))
        return;
    struct tr_gpu e;
    if (region_gpu_begin(d->rh, d->g, &e) == 0) {
        settle(d, &e);
        e.active_ns = now;
        region_gpu_end(d->rh, d->g, &e);
    }
}

/* Normal priority: wait while the GPU's view says a high-priority claim has work. */
static void priority_wait(struct dev_rec *d)
{
    uint64_t t0 = 0;
    for (;;) {
        uint64_t until = view_hold_until(d->view), now = mono_ns();
        if (until <= now)
            break;
        if (!t0)
            t0 = now;
        sleep_ns(until - now < HOLD_POLL_NS ? until - now : HOLD_POLL_NS);
    }
    if (t0)
        owe(&d->pend_held_ns, mono_ns() - t0);
}

/* What a completed launch cost: its measured time, capped at its key's solo time. */
static void charge_measured(struct tring *r, struct ring_ent *x, int64_t elapsed)
{
    int64_t cost = est_observe(x->key, elapsed);
    r->ewma_ns = r->ewma_ns ? (r->ewma_ns * 7 + cost) / 8 : cost;
    if (!x->phased)
        __atomic_add_fetch(&x->rec->pend_tokens, cost - x->est, __ATOMIC_RELAXED);
    owe(&x->rec->pend_gpu_ns, (uint64_t)cost);
}

/* Charges the measured time of completed launches; with block, waits for the oldest. Never called while a
 * capture is in progress. */
static void ring_harvest(struct tring *r, int block)
{
    while (r->tail != r->head) {
        struct ring_ent *x = &r->ent[r->tail % RING];
        if (block) {
            r_cuEventSynchronize(x->e);
            block = 0;
        }
        CUresult q = r_cuEventQuery(x->e);
        if (q == CUDA_ERROR_NOT_READY)
            return;
        float ms = 0;
        if (q == CUDA_SUCCESS && r_cuEventElapsedTime(&ms, x->s, x->e) == CUDA_SUCCESS && ms >= 0)
            charge_measured(r, x, (int64_t)((double)ms * 1e6));
        else
            owe(&x->rec->pend_gpu_ns, (uint64_t)x->est);
        r->tail++;
    }
}

static void ring_reset(struct tring *r)
{
    while (r->tail != r->head)
        ring_harvest(r, 1);
    for (int i = 0; i < RING; i++) {
        if (r->ent[i].s)
            r_cuEventDestroy_v2(r->ent[i].s);
        if (r->ent[i].e)
            r_cuEventDestroy_v2(r->ent[i].e);
        r->ent[i].s = r->ent[i].e = NULL;
    }
    r->head = r->tail = 0;
}

/* Thread exit (pthread key destructor): destroy the thread's events while its
 * context is still current; a ring whose context is no longer current is
 * left alone (its events may have died with that context). */
static pthread_key_t g_ring_key;
static int g_ring_key_ok;

static void ring_thread_exit(void *p)
{
    struct tring *r = p;
    CUcontext cur = NULL;
    if (!capture_active() && r_cuCtxGetCurrent && r_cuCtxGetCurrent(&cur) == CUDA_SUCCESS && cur == r->ctx) {
        t_in_hook++;
        ring_reset(r);
        t_in_hook--;
    }
    r->keyed = 0;
}

/* The ring entry for the next launch with its events created, or NULL (then the estimate is the charge). */
static struct ring_ent *ring_next(struct tring *r)
{
    struct ring_ent *x = &r->ent[r->head % RING];
    if (!x->s) {
        if (r_cuEventCreate(&x->s, 0) != CUDA_SUCCESS || r_cuEventCreate(&x->e, 0) != CUDA_SUCCESS) {
            if (x->s)
                r_cuEventDestroy_v2(x->s);
            x->s = x->e = NULL;
            return NULL;
        }
        /* first events of this thread: have them destroyed when it exits */
        if (!r->keyed && g_ring_key_ok && pthread_setspecific(g_ring_key, r) == 0)
            r->keyed = 1;
    }
    return x;
}

static CUresult record(CUevent e, CUstream s, int ptsz)
{
    return ptsz && r_cuEventRecord_ptsz ? r_cuEventRecord_ptsz(e, s) : r_cuEventRecord(e, s);
}

void sm_before(struct dev_rec *d, CUstream s, int ptsz, uint64_t key, struct sm_ticket *t)
{
    memset(t, 0, sizeof *t);
    int capturing = capture_active();
    if (capturing && capture_stream_capturing(s, ptsz))
        return; /* captured, not run: it is charged when the graph is launched */
    if (d->stamps) {
        /* a high claim has no part of the frame, so without an SM limit the gate never counts its launch:
         * count it here, settled by the stamp; the relay holds others only while this count moves */
        if (!d->sm_limited)
            owe(&d->pend_launches, 1);
        stamp(d);
    }
    if (d->view)
        priority_wait(d);
    const struct tv_phase *ph = cfg_priority_applies() ? phase_of(d) : NULL;
    int closed = d->sm_limited && region_closed(d->rh);
    if (closed)
        ph = closed_phase(d, ph);
    if (!d->sm_limited && !ph)
        return;
    struct tring *r = &t_ring;
    if (!capturing) {
        CUcontext ctx = NULL;
        if (r_cuCtxGetCurrent(&ctx) != CUDA_SUCCESS)
            ctx = NULL;
        if (ctx != r->ctx) {
            ring_reset(r);
            r->ctx = ctx;
        }
        ring_harvest(r, 0);
        /* closed: each process predicts its work as if alone, so N processes would each queue a part's worth
         * and run N parts; with its last launch finished first, a thread's kernels start only inside the part */
        while (r->tail != r->head && (closed || r->head - r->tail == RING))
            ring_harvest(r, 1);
    }
    int64_t est = est_get(key);
    t->est = est ? est : r->ewma_ns;
    t->phased = ph && ph->found == TV_PART; /* the part of the frame is the limit: no tokens */
    gate(d, ph, t->est, capturing || !ph ? 0 : backlog_ns(r, d));
    t->charged = 1;
    struct ring_ent *x = capturing || r->head - r->tail == RING ? NULL : ring_next(r);
    if (!x || record(x->s, s, ptsz) != CUDA_SUCCESS) {
        owe(&d->pend_gpu_ns, (uint64_t)t->est);
        return;
    }
    x->est = t->est;
    x->key = key;
    x->rec = d;
    x->phased = t->phased;
    t->x = x;
}

void sm_after(struct dev_rec *d, const struct sm_ticket *t, CUresult launched, CUstream s, int ptsz)
{
    if (!t->charged)
        return;
    if (launched != CUDA_SUCCESS) {
        if (!t->phased)
            __atomic_sub_fetch(&d->pend_tokens, t->est, __ATOMIC_RELAXED);
        if (!t->x)
            __atomic_sub_fetch(&d->pend_gpu_ns, (uint64_t)t->est, __ATOMIC_RELAXED);
        return;
    }
    if (t->x && record(t->x->e, s, ptsz) == CUDA_SUCCESS)
        t_ring.head++;
    else if (t->x)
        owe(&d->pend_gpu_ns, (uint64_t)t->est);
}

struct dev_rec *sm_rec(void)
{
    struct dev_rec *d = rec_current();
    return d && d->watched ? d : NULL;
}

void limiter_init(void)
{
    if (pthread_key_create(&g_ring_key, ring_thread_exit) == 0)
        g_ring_key_ok = 1;
}

/* In a forked child the ring's events belong to the parent's contexts. */
void limiter_after_fork(void)
{
    memset(&t_ring, 0, sizeof t_ring);
    memset(&t_phase, 0, sizeof t_phase);
}
