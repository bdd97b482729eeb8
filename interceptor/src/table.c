/* Per-process maps from an allocation (device pointer, generic handle, array)
 * to its size and device record: lock-free open addressing over an mmap'd
 * array, so the hooks never call malloc or take a lock. */
#include <stddef.h>
#include <sys/mman.h>

#include "table.h"

#define TAB_EMPTY 0ull
#define TAB_TOMB 1ull
#define TAB_MAX_PROBE 4096
#define TAB_SIZE_BITS 56
#define TAB_SIZE_MASK ((1ull << TAB_SIZE_BITS) - 1)

int tab_init(struct tab *t)
{
    size_t n = (size_t)1 << t->bits;
    void *m = mmap(NULL, n * sizeof(struct tab_ent), PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (m == MAP_FAILED)
        return -1;
    t->mask = n - 1;
    __atomic_store_n(&t->e, (struct tab_ent *)m, __ATOMIC_RELEASE);
    return 0;
}

void tab_reset(struct tab *t)
{
    if (t->e)
        munmap(t->e, (size_t)(t->mask + 1) * sizeof(struct tab_ent));
    t->e = NULL;
    t->mask = 0;
    tab_init(t);
}

static uint64_t tab_hash(const struct tab *t, uint64_t k)
{
    return (k * 0x9E3779B97F4A7C15ull) >> (64 - t->bits);
}

int tab_put(struct tab *t, uint64_t key, uint64_t size, unsigned rec)
{
    struct tab_ent *e = __atomic_load_n(&t->e, __ATOMIC_ACQUIRE);
    uint64_t k = key + 2;
    if (!e || k < 2 || size > TAB_SIZE_MASK)
        return 0;
    uint64_t i = tab_hash(t, k);
    for (int n = 0; n < TAB_MAX_PROBE; n++, i = (i + 1) & t->mask) {
        uint64_t cur = __atomic_load_n(&e[i].key, __ATOMIC_ACQUIRE);
        while (cur == TAB_EMPTY || cur == TAB_TOMB) {
            if (__atomic_compare_exchange_n(&e[i].key, &cur, k, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
                /* nobody looks this key up before the allocation call returns */
                __atomic_store_n(&e[i].val, size | ((uint64_t)rec << TAB_SIZE_BITS), __ATOMIC_RELEASE);
                return 1;
            }
        }
    }
    return 0;
}

int tab_take(struct tab *t, uint64_t key, uint64_t *size, unsigned *rec)
{
    struct tab_ent *e = __atomic_load_n(&t->e, __ATOMIC_ACQUIRE);
    uint64_t k = key + 2;
    if (!e || k < 2)
        return 0;
    uint64_t i = tab_hash(t, k);
    for (int n = 0; n < TAB_MAX_PROBE; n++, i = (i + 1) & t->mask) {
        uint64_t cur = __atomic_load_n(&e[i].key, __ATOMIC_ACQUIRE);
        if (cur == TAB_EMPTY)
            return 0;
        if (cur == k) {
            uint64_t v = __atomic_load_n(&e[i].val, __ATOMIC_RELAXED);
            if (!__atomic_compare_exchange_n(&e[i].key, &cur, TAB_TOMB, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
                return 0; /* a concurrent free of the same pointer won */
            *size = v & TAB_SIZE_MASK;
            *rec = (unsigned)(v >> TAB_SIZE_BITS);
            return 1;
        }
    }
    return 0;
}
