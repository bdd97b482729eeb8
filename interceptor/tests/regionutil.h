/* Reading a claim's region in tests (the library's layout, src/region.h). */
#ifndef TESSERA_REGIONUTIL_H
#define TESSERA_REGIONUTIL_H

#include <fcntl.h>
#include <stdio.h>
#include <sys/mman.h>
#include <unistd.h>

#include "region.h"
#include "testutil.h"

/* The claim's bytes on GPU entry g as the library counts them: the sum of its live slots. */
static inline uint64_t claim_total(const struct tr_region *r, int g)
{
    uint64_t sum = 0;
    uint32_t hi = __atomic_load_n(&r->proc_high, __ATOMIC_RELAXED);
    for (uint32_t i = 0; i < hi && i < TR_MAX_PROCS; i++)
        if (__atomic_load_n(&r->procs[i].state, __ATOMIC_RELAXED) == 1)
            sum += __atomic_load_n(&r->procs[i].used[g], __ATOMIC_RELAXED);
    return sum;
}

static inline struct tr_region *map_region(const char *dir)
{
    char path[512];
    snprintf(path, sizeof path, "%s/region", dir);
    int fd = open(path, O_RDONLY);
    CHECK(fd >= 0, "open %s", path);
    void *m = mmap(NULL, sizeof(struct tr_region), PROT_READ, MAP_SHARED, fd, 0);
    close(fd);
    CHECK(m != MAP_FAILED, "mmap region");
    return m;
}

#endif
