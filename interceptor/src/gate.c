/* The limiter's gates (gate.h). A claim's entry can hold any value its own
 * processes wrote; the arithmetic below never wraps or loops on garbage. */
#include "gate.h"

/* how far ahead a free claim may queue work: a few kernels keep the GPU busy, and no more than this
 * runs behind a neighbour that wakes up */
#define FREE_AHEAD_NS 10000000ull

static uint64_t umax(uint64_t a, uint64_t b) { return a > b ? a : b; }
static uint64_t umin(uint64_t a, uint64_t b) { return a < b ? a : b; }

int gate_bucket(struct tr_gpu *e, uint64_t now, uint32_t cores, int64_t cap_ns, int64_t est_ns, uint64_t window_ns,
                uint64_t *wake_ns)
{
    if (now > e->refill_ns) {
        uint64_t dt = umin(now - e->refill_ns, 1000000000000ull);
        int64_t t = e->tokens_ns + (int64_t)(dt * cores / 100);
        e->tokens_ns = t > cap_ns ? cap_ns : t;
        e->refill_ns = now;
    } else if (e->refill_ns > now + window_ns) {
        e->refill_ns = now; /* a clock from the future: start again */
    }
    if (e->tokens_ns < -(int64_t)(window_ns * 100))
        e->tokens_ns = -(int64_t)(window_ns * 100);
    if (e->tokens_ns > 0) {
        e->tokens_ns -= est_ns > 0 ? est_ns : 0;
        return 1;
    }
    uint64_t wait = (uint64_t)(-e->tokens_ns) * 100 / (cores ? cores : 1) + 20000;
    *wake_ns = now + umin(wait, window_ns);
    return 0;
}

/* The part of the frame at or after t: [*s, *e). */
static void part_at(const struct tv_phase *p, uint64_t t, uint64_t *s, uint64_t *e)
{
    uint64_t base = t - t % p->frame_ns;
    if (t >= base + p->end_ns)
        base += p->frame_ns;
    *s = base + p->start_ns;
    *e = base + p->end_ns;
}

int gate_phase(struct tr_gpu *e, const struct tv_phase *p, uint64_t now, int64_t est_ns, uint64_t *wake_ns)
{
    uint64_t est = est_ns > 0 ? (uint64_t)est_ns : 0, len = p->end_ns - p->start_ns;
    if (e->queued_until_ns > now + 4 * p->frame_ns)
        e->queued_until_ns = now; /* nothing of ours can be queued that far ahead */
    if (e->debt_ns > 64 * p->frame_ns)
        e->debt_ns = 64 * p->frame_ns;
    uint64_t start = umax(now, e->queued_until_ns), s, end;
    part_at(p, start, &s, &end);
    /* repay debt once per part: the part starts late */
    uint64_t from = s;
    if (e->skip_until_ns >= s && e->skip_until_ns <= end) {
        from = e->skip_until_ns;
    } else if (e->debt_ns) {
        uint64_t pay = umin(e->debt_ns, len);
        e->debt_ns -= pay;
        e->skip_until_ns = from = s + pay;
    }
    if (start >= from && start < end) {
        uint64_t done = start + est;
        if (done > end)
            e->debt_ns += done - end;
        e->queued_until_ns = umax(e->queued_until_ns, done);
        return 1;
    }
    /* before the part (or its late start): wait for it; too late in it: wait for the next frame's */
    *wake_ns = start < from ? from : s + p->frame_ns;
    return 0;
}

int gate_free(struct tr_gpu *e, const struct tv_phase *p, uint64_t now, int64_t est_ns, uint64_t *wake_ns)
{
    if (e->queued_until_ns > now + 4 * p->frame_ns)
        e->queued_until_ns = now; /* nothing of ours can be queued that far ahead */
    if (e->queued_until_ns > now + FREE_AHEAD_NS) {
        *wake_ns = e->queued_until_ns - FREE_AHEAD_NS;
        return 0;
    }
    int64_t cap = (int64_t)(p->frame_ns * p->free_pct / 100);
    if (!gate_bucket(e, now, p->free_pct, cap, est_ns, p->frame_ns, wake_ns))
        return 0;
    e->queued_until_ns = umax(now, e->queued_until_ns) + (est_ns > 0 ? (uint64_t)est_ns : 0);
    /* what it owed a part it no longer has is forgiven: a later part starts on time */
    e->debt_ns = 0;
    e->skip_until_ns = 0;
    return 1;
}

void gate_meter(struct tr_gpu *e, uint64_t now, uint32_t cores, uint64_t tolerance_ns, uint64_t charged)
{
    if (!cores || cores >= 100 || !charged || now < tolerance_ns)
        return;
    uint64_t v = e->meter_ns;
    if (v < now - tolerance_ns || v > now)
        v = now - tolerance_ns; /* idle for a while (or garbage): a full tolerance again */
    v += umin(charged, 1000000000000ull) * 100 / cores; /* when the guarantee would have paid for it */
    if (v > now) {
        e->burst_ns += (v - now) * cores / 100;
        v = now;
    }
    e->meter_ns = v;
}
