/* Time division against the node's schedule. The claim's work is predicted to
 * run back to back, alone, from max(now, queued_until); a kernel may start when
 * that predicted start lies in the claim's part [S, E) of the frame. What runs
 * past E is debt: the next part starts that much later (at most a whole part per
 * frame), so the claim's share holds exactly over time, also with kernels longer
 * than its part, and the neighbour's part is shifted, never shortened. */
#include "phase.h"
#include "util.h"

static uint64_t umax(uint64_t a, uint64_t b) { return a > b ? a : b; }
static uint64_t umin(uint64_t a, uint64_t b) { return a < b ? a : b; }

/* The part of the frame at or after t: [*s, *e). */
static void part_at(const struct tv_phase *p, uint64_t t, uint64_t *s, uint64_t *e)
{
    uint64_t base = t - t % p->frame_ns;
    if (t >= base + p->end_ns)
        base += p->frame_ns;
    *s = base + p->start_ns;
    *e = base + p->end_ns;
}

/* Repays debt at the start of a part once: returns when this part really starts. */
static uint64_t part_start(struct tr_gpu *gp, uint64_t s, uint64_t e)
{
    uint64_t skip = __atomic_load_n(&gp->skip_until_ns, __ATOMIC_ACQUIRE);
    if (skip >= s)
        return umin(skip, e);
    uint64_t debt = __atomic_load_n(&gp->debt_ns, __ATOMIC_ACQUIRE);
    if (!debt)
        return s;
    uint64_t pay = umin(debt, e - s);
    /* one process of the claim repays for this part; the others see skip_until */
    if (__atomic_compare_exchange_n(&gp->skip_until_ns, &skip, s + pay, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
        __atomic_sub_fetch(&gp->debt_ns, pay, __ATOMIC_ACQ_REL);
        return s + pay;
    }
    return umin(umax(skip, s), e);
}

void phase_gate(struct dev_rec *d, const struct tv_phase *p, int64_t est_ns)
{
    struct tr_gpu *gp = &d->rh->r->gpus[d->g];
    uint64_t est = est_ns > 0 ? (uint64_t)est_ns : 0, t0 = 0;
    for (;;) {
        uint64_t now = mono_ns();
        uint64_t q = __atomic_load_n(&gp->queued_until_ns, __ATOMIC_ACQUIRE);
        uint64_t start = umax(now, q), s, e;
        part_at(p, start, &s, &e);
        uint64_t from = part_start(gp, s, e);
        if (start >= from && start < e) {
            uint64_t end = start + est;
            if (end > e)
                __atomic_add_fetch(&gp->debt_ns, end - e, __ATOMIC_ACQ_REL);
            while (q < end && !__atomic_compare_exchange_n(&gp->queued_until_ns, &q, end, 0, __ATOMIC_ACQ_REL,
                                                           __ATOMIC_ACQUIRE)) {
            }
            break;
        }
        /* before the part (or its repaid start): wait for it; too late in it: wait for the next frame's */
        uint64_t next = start < from ? from : s + p->frame_ns;
        if (!t0)
            t0 = now;
        sleep_ns(umin(next > now ? next - now : 0, p->frame_ns) + 1000);
    }
    if (t0)
        __atomic_add_fetch(&gp->throttled_ns, mono_ns() - t0, __ATOMIC_RELAXED);
}
