/* tview <file> <frame_us> <hold_until_ms_from_now|0> [id:start_us:end_us ...]
 * Writes a GPU view as the node daemon would (the daemon's own writer is tested against the C layout in the
 * Python suite). It links no CUDA driver, so gpu-check can run it beside the real libcuda.so.1 on a GPU node
 * as well as beside the fake one here. */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "view.h"

static int fail(const char *what, const char *arg)
{
    fprintf(stderr, "tview: %s%s\n", what, arg ? arg : "");
    return 1;
}

int main(int argc, char **argv)
{
    if (argc < 4)
        return fail("usage: tview <file> <frame_us> <hold_ms> [id:start_us:end_us ...]", NULL);
    static struct {
        struct tv_view v;
        char pad[TV_FILE_SIZE - sizeof(struct tv_view)];
    } f;
    memset(&f, 0, sizeof f);
    f.v.magic = TV_MAGIC;
    f.v.version = TV_VERSION;
    f.v.size = sizeof f.v;
    f.v.frame_us = (uint32_t)strtoul(argv[2], NULL, 10);
    uint64_t hold = strtoull(argv[3], NULL, 10);
    if (hold) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts); /* the library's clock */
        f.v.hold_until_ns = (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec + hold * 1000000ull;
    }
    f.v.seq = 2;
    for (int i = 4; i < argc; i++) {
        if (f.v.nslots == TV_MAX_SLOTS)
            return fail("more slots than a view holds: ", argv[i]);
        struct tv_slot *sl = &f.v.slots[f.v.nslots++];
        if (sscanf(argv[i], "%u:%u:%u", &sl->id, &sl->start_us, &sl->end_us) != 3)
            return fail("a slot is id:start_us:end_us, not ", argv[i]);
    }
    char tmp[600];
    snprintf(tmp, sizeof tmp, "%s.tmp", argv[1]);
    FILE *o = fopen(tmp, "wb");
    if (!o || fwrite(&f, sizeof f, 1, o) != 1 || fclose(o) != 0 || rename(tmp, argv[1]) != 0)
        return fail("cannot write ", argv[1]);
    return 0;
}
