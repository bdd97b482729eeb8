/* SM limiter: a token bucket of GPU nanoseconds per (claim, GPU), kept in the
 * claim's region so all its processes share it. It refills at cores% of wall
 * time up to cores% of one window. A launch waits while the bucket is empty,
 * is charged the thread's recent average kernel time up front, and is charged
 * the difference once its real GPU time is known: the hook brackets it with a
 * pair of timing events and reads their elapsed time when the end completes.
 * A small per-thread ring of event pairs bounds how far a thread runs ahead. */
#include <pthread.h>
#include <string.h>

#include "config.h"
#include "devices.h"
#include "hooks.h"
#include "limiter.h"
#include "util.h"

#define RING 16

struct ring_ent {
    CUevent s, e;
    int64_t est;
    struct dev_rec *rec;
};

struct tring {
    CUcontext ctx;
    int keyed; /* registered for ring_thread_exit */
    unsigned head, tail;
    int64_t ewma_ns;
    struct ring_ent ent[RING];
};

static __thread struct tring t_ring __attribute__((tls_model("initial-exec")));

static void bucket_refill(struct dev_rec *d)
{
    struct tr_gpu *gp = &d->rh->r->gpus[d->g];
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
        __atomic_sub_fetch(&d->rh->r->gpus[d->g].tokens_ns, ns, __ATOMIC_ACQ_REL);
}

/* Waits until the bucket holds tokens. */
static void bucket_wait(struct dev_rec *d)
{
    for (;;) {
        bucket_refill(d);
        int64_t t = __atomic_load_n(&d->rh->r->gpus[d->g].tokens_ns, __ATOMIC_ACQUIRE);
        if (t > 0)
            return;
        uint64_t wait = (uint64_t)(-t) * 100 / d->cores + 20000;
        if (wait > cfg_window_ns())
            wait = cfg_window_ns();
        sleep_ns(wait);
    }
}

/* Charges the measured time of completed launches; with block, waits for the oldest. */
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
        int64_t actual = x->est;
        float ms = 0;
        if (q == CUDA_SUCCESS && r_cuEventElapsedTime(&ms, x->s, x->e) == CUDA_SUCCESS && ms >= 0) {
            actual = (int64_t)((double)ms * 1e6);
            r->ewma_ns = r->ewma_ns ? (r->ewma_ns * 7 + actual) / 8 : actual;
        }
        bucket_charge(x->rec, actual - x->est);
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
    if (r_cuCtxGetCurrent && r_cuCtxGetCurrent(&cur) == CUDA_SUCCESS && cur == r->ctx) {
        t_in_hook++;
        ring_reset(r);
        t_in_hook--;
    }
    r->keyed = 0;
}

/* Before a limited launch: wait for tokens, charge the estimate, and record the
 * start event. Returns the ring entry to complete, or NULL (estimate only). */
struct ring_ent *sm_before(struct dev_rec *d, CUstream s, int ptsz)
{
    struct tring *r = &t_ring;
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
    bucket_wait(d);
    __atomic_add_fetch(&d->rh->r->gpus[d->g].launches, 1, __ATOMIC_RELAXED);
    struct ring_ent *x = &r->ent[r->head % RING];
    x->est = r->ewma_ns;
    x->rec = d;
    bucket_charge(d, x->est);
    if (!x->s) {
        if (r_cuEventCreate(&x->s, 0) != CUDA_SUCCESS || r_cuEventCreate(&x->e, 0) != CUDA_SUCCESS) {
            x->s = x->e = NULL;
            return NULL;
        }
        /* first events of this thread: have them destroyed when it exits */
        if (!r->keyed && g_ring_key_ok && pthread_setspecific(g_ring_key, r) == 0)
            r->keyed = 1;
    }
    CUresult rc = ptsz && r_cuEventRecord_ptsz ? r_cuEventRecord_ptsz(x->s, s) : r_cuEventRecord(x->s, s);
    return rc == CUDA_SUCCESS ? x : NULL;
}

void sm_after(struct dev_rec *d, struct ring_ent *x, CUresult launched, CUstream s, int ptsz)
{
    struct tring *r = &t_ring;
    if (launched != CUDA_SUCCESS) {
        bucket_charge(d, -r->ewma_ns);
        return;
    }
    if (!x)
        return;
    CUresult rc = ptsz && r_cuEventRecord_ptsz ? r_cuEventRecord_ptsz(x->e, s) : r_cuEventRecord(x->e, s);
    if (rc == CUDA_SUCCESS)
        r->head++;
}

/* The record to throttle the current launch against, or NULL. */
struct dev_rec *sm_rec(void)
{
    struct dev_rec *d = rec_current();
    return d && d->sm_limited ? d : NULL;
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
