/* The accounting steps shared by every allocation and free hook (memory,
 * arrays, generic handles, contexts): bytes are reserved in the claim's region
 * before the driver is asked and tracked once it answered; a free takes the
 * entry out first and gives the bytes back once the driver freed them. */
#include "alloc.h"
#include "util.h"

/* Driver allocation and free calls of this process in flight, and how many have finished: a context's cost
 * is measured as a drop in free memory, which only means something when none of these moved meanwhile. */
static uint64_t g_drv_inflight, g_drv_done;
/* The allocation this thread is making (between alloc_reserve and alloc_finish; hooks do not nest): whether
 * it also holds device memory of an oversubscribed claim, and why the last reservation failed. */
static __thread int t_held, t_held_full;

static void drv_enter(void)
{
    __atomic_add_fetch(&g_drv_inflight, 1, __ATOMIC_SEQ_CST);
}

static void drv_leave(void)
{
    __atomic_add_fetch(&g_drv_done, 1, __ATOMIC_SEQ_CST);
    __atomic_sub_fetch(&g_drv_inflight, 1, __ATOMIC_SEQ_CST);
}

uint64_t drv_inflight(void)
{
    return __atomic_load_n(&g_drv_inflight, __ATOMIC_SEQ_CST);
}

uint64_t drv_done(void)
{
    return __atomic_load_n(&g_drv_done, __ATOMIC_SEQ_CST);
}

unsigned alloc_rec(struct dev_rec *d)
{
    return rec_index(d) | (t_held ? REC_HELD : 0);
}

void alloc_track(struct tab *t, uint64_t key, uint64_t size, struct dev_rec *d)
{
    unsigned rec = alloc_rec(d);
    if (!tab_put(t, key, size, rec)) {
        static int warned;
        if (!__atomic_exchange_n(&warned, 1, __ATOMIC_RELAXED))
            tlog(LOG_WARN, "allocation table full; some allocations are not counted");
        rec_release(rec, size);
    }
}

int alloc_held_full(void)
{
    return t_held_full;
}

static int reserve(struct dev_rec *d, uint64_t size, int held)
{
    t_in_hook++;
    t_held = t_held_full = 0;
    if (!acct_reserve(d, size)) {
        t_in_hook--;
        return 0;
    }
    if (held && d->spill) {
        if (!acct_reserve_held(d, size)) {
            acct_release(d, size);
            t_held_full = 1;
            t_in_hook--;
            return 0;
        }
        t_held = 1;
    }
    drv_enter();
    return 1;
}

int alloc_reserve(struct dev_rec *d, uint64_t size)
{
    return reserve(d, size, 1);
}

int alloc_reserve_managed(struct dev_rec *d, uint64_t size)
{
    return reserve(d, size, 0);
}

int alloc_resize(struct dev_rec *d, uint64_t *size, uint64_t actual)
{
    if (actual > *size && !acct_reserve(d, actual - *size))
        return 0;
    if (actual > *size && t_held && !acct_reserve_held(d, actual - *size)) {
        acct_release(d, actual - *size);
        return 0;
    }
    if (actual < *size) {
        acct_release(d, *size - actual);
        if (t_held)
            acct_release_held(d, *size - actual);
    }
    *size = actual;
    return 1;
}

CUresult alloc_settle(struct dev_rec *d, struct tab *t, uint64_t size, CUresult rc, uint64_t key)
{
    if (rc == CUDA_SUCCESS)
        alloc_track(t, key, size, d);
    return alloc_finish(d, size, rc);
}

CUresult alloc_finish(struct dev_rec *d, uint64_t size, CUresult rc)
{
    drv_leave();
    if (rc != CUDA_SUCCESS)
        rec_release(alloc_rec(d), size);
    t_held = 0;
    t_in_hook--;
    return rc;
}

/* The entry leaves the table before the driver frees: once the driver has the address back it may hand it
 * to another thread's allocation at once, whose entry must not meet ours. */
int free_begin(struct freeing *f, struct tab *t, uint64_t key)
{
    if (!acct_on() || t_in_hook)
        return 0;
    t_in_hook++;
    f->t = t;
    f->key = key;
    f->size = 0;
    f->rec = 0;
    f->had = tab_take(t, key, &f->size, &f->rec);
    drv_enter();
    return 1;
}

/* A failed free puts the entry back (or, when that fails, gives the bytes back). */
CUresult free_end(struct freeing *f, CUresult rc)
{
    drv_leave();
    if (f->had && (rc == CUDA_SUCCESS || !tab_put(f->t, f->key, f->size, f->rec)))
        rec_release(f->rec, f->size);
    t_in_hook--;
    return rc;
}
