/* SM limiter: a token bucket of GPU nanoseconds per (claim, GPU), kept in the
 * claim's region so all its processes share it. It refills at cores% of wall
 * time up to cores% of one window. A launch waits while the bucket is empty,
 * is charged its key's solo-time estimate up front (estimate.c), and is
 * charged the difference once its real GPU time is known: the hook brackets
 * it with a pair of timing events and, when the end completed, charges the
 * measured time capped at the key's solo time — never time it spent waiting
 * behind another claim's timeslices. A small per-thread ring of event pairs
 * bounds how far a thread runs ahead.
 *
 * Stream capture (capture.c): a launch on a capturing stream does not run, so
 * it passes untouched; while any capture is in progress, launches on other
 * streams are throttled and charged their estimate only (no event is created,
 * recorded, queried or synchronized, which the capture modes may forbid).
 *
 * Time division (phase.c): a normal-priority claim that has a slot in the
 * node's schedule for its GPU (view.h) runs its kernels only in its part of
 * each frame instead of drawing on the bucket, so claims sharing a GPU never
 * run at the same time and each gets exactly its part.
 *
 * Priority: a high-priority claim stamps its launches in its region; the node
 * daemon turns that into the GPU's read-only view (view.c), and launches of
 * normal-priority claims wait while the view says a high one has work. */
#include <pthread.h>
#include <string.h>

#include "capture.h"
#include "config.h"
#include "devices.h"
#include "estimate.h"
#include "hooks.h"
#include "limiter.h"
#include "phase.h"
#include "util.h"
#include "view.h"

#define RING 16
#define HOLD_POLL_NS 5000000ull

struct ring_ent {
    CUevent s, e;
    int64_t est;
    uint64_t key;
    struct dev_rec *rec;
    int phased; /* started in the claim's part of the frame: no tokens to settle */
};

struct tring {
    CUcontext ctx;
    int keyed; /* registered for ring_thread_exit */
    unsigned head, tail;
    int64_t ewma_ns; /* recent charges of this thread: the estimate for a key never measured */
    struct ring_ent ent[RING];
};

static __thread struct tring t_ring __attribute__((tls_model("initial-exec")));
/* this thread's copy of its claim's part of the frame (for the last record it launched on) */
static __thread struct {
    const struct dev_rec *d;
    struct tv_phase p;
} t_phase __attribute__((tls_model("initial-exec")));

/* The claim's part of the frame, or NULL when the schedule has none (then the bucket limits). */
static const struct tv_phase *phase_of(struct dev_rec *d)
{
    if (!d->slot)
        return NULL;
    if (t_phase.d != d) {
        t_phase.d = d;
        t_phase.p.seq = 0;
    }
    view_phase(d->view, d->slot, &t_phase.p);
    return t_phase.p.found ? &t_phase.p : NULL;
}

static struct tr_gpu *gpu_of(struct dev_rec *d)
{
    return &d->rh->r->gpus[d->g];
}

static void bucket_refill(struct dev_rec *d)
{
    struct tr_gpu *gp = gpu_of(d);
    uint64_t now = mono_ns();
    uint64_t last = __atomic_load_n(&gp->refill_ns, __ATOMIC_ACQUIRE);
    if (now <= last || !__atomic_compare_exchange_n(&gp->refill_ns, &last, now, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
        return;
    uint64_t dt = now - last;
    if (dt > 1000000000000ull)
        dt = 1000000000000ull;
    int64_t add = (int64_t)(dt * d->cores / 100);
    int64_t t = __atomic_add_fetch(&gp->tokens_ns, add, __ATOMIC_ACQ_REL);
    while (t > d->cap_ns && !__atomic_compare_exchange_n(&gp->tokens_ns, &t, d->cap_ns, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
    }
}

static void bucket_charge(struct dev_rec *d, int64_t ns)
{
    if (ns)
        __atomic_sub_fetch(&gpu_of(d)->tokens_ns, ns, __ATOMIC_ACQ_REL);
}

/* Waits until the bucket holds tokens. */
static void bucket_wait(struct dev_rec *d)
{
    uint64_t t0 = 0;
    for (;;) {
        bucket_refill(d);
        int64_t t = __atomic_load_n(&gpu_of(d)->tokens_ns, __ATOMIC_ACQUIRE);
        if (t > 0)
            break;
        if (!t0)
            t0 = mono_ns();
        uint64_t wait = (uint64_t)(-t) * 100 / d->cores + 20000;
        if (wait > cfg_window_ns())
            wait = cfg_window_ns();
        sleep_ns(wait);
    }
    if (t0)
        __atomic_add_fetch(&gpu_of(d)->throttled_ns, mono_ns() - t0, __ATOMIC_RELAXED);
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
        __atomic_add_fetch(&gpu_of(d)->held_ns, mono_ns() - t0, __ATOMIC_RELAXED);
}

/* Charges what a completed launch cost: its measured time, capped at its key's solo time. */
static void charge_measured(struct tring *r, struct ring_ent *x, int64_t elapsed)
{
    int64_t cost = est_observe(x->key, elapsed);
    r->ewma_ns = r->ewma_ns ? (r->ewma_ns * 7 + cost) / 8 : cost;
    if (!x->phased)
        bucket_charge(x->rec, cost - x->est);
    __atomic_add_fetch(&gpu_of(x->rec)->gpu_ns, (uint64_t)cost, __ATOMIC_RELAXED);
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
            __atomic_add_fetch(&gpu_of(x->rec)->gpu_ns, (uint64_t)x->est, __ATOMIC_RELAXED);
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
    t->x = NULL;
    t->est = 0;
    t->charged = 0;
    t->phased = 0;
    int capturing = capture_active();
    if (capturing && capture_stream_capturing(s, ptsz))
        return; /* captured, not run: it is charged when the graph is launched */
    if (d->stamps)
        __atomic_store_n(&gpu_of(d)->active_ns, mono_ns(), __ATOMIC_RELAXED);
    if (d->view)
        priority_wait(d);
    const struct tv_phase *ph = d->view && cfg_priority_applies() ? phase_of(d) : NULL;
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
        if (r->head - r->tail == RING)
            ring_harvest(r, 1);
    }
    int64_t est = est_get(key);
    t->est = est ? est : r->ewma_ns;
    if (ph) {
        phase_gate(d, ph, t->est); /* the part of the frame is the limit: no tokens */
        t->phased = 1;
    } else {
        bucket_wait(d);
        bucket_charge(d, t->est);
    }
    __atomic_add_fetch(&gpu_of(d)->launches, 1, __ATOMIC_RELAXED);
    t->charged = 1;
    struct ring_ent *x = capturing || r->head - r->tail == RING ? NULL : ring_next(r);
    if (!x || record(x->s, s, ptsz) != CUDA_SUCCESS) {
        __atomic_add_fetch(&gpu_of(d)->gpu_ns, (uint64_t)t->est, __ATOMIC_RELAXED);
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
            bucket_charge(d, -t->est);
        if (!t->x)
            __atomic_sub_fetch(&gpu_of(d)->gpu_ns, (uint64_t)t->est, __ATOMIC_RELAXED);
        return;
    }
    if (t->x && record(t->x->e, s, ptsz) == CUDA_SUCCESS)
        t_ring.head++;
    else if (t->x)
        __atomic_add_fetch(&gpu_of(d)->gpu_ns, (uint64_t)t->est, __ATOMIC_RELAXED);
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
}
