/* table.c: lock-free per-process maps from an allocation (device pointer,
 * generic handle, array, context) to its size and device record index. The
 * modules that own a table define it and reset it after fork. */
#ifndef TESSERA_TABLE_H
#define TESSERA_TABLE_H

#include <stdint.h>

#pragma GCC visibility push(hidden)

struct tab_ent {
    uint64_t key; /* stored as key + 2 so that 0 and 1 can mark empty and deleted */
    uint64_t val; /* size | record index << 56 */
};

struct tab {
    struct tab_ent *e; /* NULL until mapped */
    uint64_t mask;
    unsigned bits;     /* 2^bits entries */
};

#define TAB_INIT(bits) { NULL, 0, (bits) }

int tab_init(struct tab *t);       /* 0 on success */
void tab_reset(struct tab *t);     /* unmaps and maps a fresh one (a forked child) */
int tab_put(struct tab *t, uint64_t key, uint64_t size, unsigned rec); /* 1 when stored */
/* Removes key; returns 1 and its size and record when it was there. */
int tab_take(struct tab *t, uint64_t key, uint64_t *size, unsigned *rec);

#pragma GCC visibility pop

#endif
