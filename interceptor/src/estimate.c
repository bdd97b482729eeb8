/* Solo-time estimates. On a GPU shared by time-slicing, a kernel's
 * event-to-event time includes whole timeslices in which other contexts ran
 * (2.4 ms at a time on an H100), so charging it makes every sharing claim pay
 * for its neighbours' work. A kernel's time when it ran alone is the smallest
 * time it is ever measured at (waiting only ever adds), so each launch key
 * keeps the minimum of its recent measurements: two rotating windows of at
 * least EPOCH each, so a kernel that really got slower (other data, lower
 * clocks) is believed after at most two epochs. Claims that share a GPU are
 * throttled, so each one's kernels keep running alone part of the time.
 * Lock-free; a lost update between threads only costs one sample. */
#include "estimate.h"
#include "util.h"

#define SLOTS 1024
#define PROBE 8
#define EPOCH_NS 1000000000ull

struct est {
    uint64_t key;
    int64_t cur, prev; /* minimum of this and of the previous epoch; 0 none */
    uint64_t epoch_ns; /* when the current epoch began */
};

static struct est g_est[SLOTS];

static uint64_t mix(uint64_t x)
{
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ull;
    x ^= x >> 33;
    return x;
}

uint64_t est_kernel_key(const void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                        unsigned shmem)
{
    uint64_t k = mix((uint64_t)(uintptr_t)f);
    k = mix(k ^ (((uint64_t)gx << 32) | gy));
    k = mix(k ^ (((uint64_t)gz << 32) | bx));
    k = mix(k ^ (((uint64_t)by << 32) | bz));
    k = mix(k ^ shmem);
    return k | 1;
}

uint64_t est_graph_key(const void *graph_exec)
{
    return mix((uint64_t)(uintptr_t)graph_exec ^ 0x6772617068ull) | 1;
}

static struct est *find(uint64_t key, int create)
{
    uint64_t h = key % SLOTS;
    struct est *oldest = NULL;
    for (int i = 0; i < PROBE; i++) {
        struct est *e = &g_est[(h + (uint64_t)i) % SLOTS];
        uint64_t k = __atomic_load_n(&e->key, __ATOMIC_ACQUIRE);
        if (k == key)
            return e;
        if (!create)
            continue;
        if (k == 0 && __atomic_compare_exchange_n(&e->key, &k, key, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
            e->epoch_ns = mono_ns();
            return e;
        }
        if (!oldest || e->epoch_ns < oldest->epoch_ns)
            oldest = e;
    }
    if (!oldest)
        return NULL;
    /* full neighbourhood: the least recently refreshed key makes room */
    __atomic_store_n(&oldest->cur, 0, __ATOMIC_RELAXED);
    __atomic_store_n(&oldest->prev, 0, __ATOMIC_RELAXED);
    oldest->epoch_ns = mono_ns();
    __atomic_store_n(&oldest->key, key, __ATOMIC_RELEASE);
    return oldest;
}

static int64_t best(const struct est *e)
{
    int64_t c = __atomic_load_n(&e->cur, __ATOMIC_RELAXED), p = __atomic_load_n(&e->prev, __ATOMIC_RELAXED);
    if (!c)
        return p;
    return p && p < c ? p : c;
}

int64_t est_get(uint64_t key)
{
    struct est *e = find(key, 0);
    return e ? best(e) : 0;
}

int64_t est_observe(uint64_t key, int64_t elapsed)
{
    if (elapsed <= 0)
        return 0;
    struct est *e = find(key, 1);
    if (!e)
        return elapsed;
    int64_t known = best(e);
    uint64_t now = mono_ns(), ep = __atomic_load_n(&e->epoch_ns, __ATOMIC_RELAXED);
    if (now - ep >= EPOCH_NS && __atomic_compare_exchange_n(&e->epoch_ns, &ep, now, 0, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED)) {
        __atomic_store_n(&e->prev, __atomic_load_n(&e->cur, __ATOMIC_RELAXED), __ATOMIC_RELAXED);
        __atomic_store_n(&e->cur, 0, __ATOMIC_RELAXED);
    }
    int64_t c = __atomic_load_n(&e->cur, __ATOMIC_RELAXED);
    while ((c == 0 || elapsed < c) && !__atomic_compare_exchange_n(&e->cur, &c, elapsed, 0, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED)) {
    }
    return known && known < elapsed ? known : elapsed;
}
