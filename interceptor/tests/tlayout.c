/* Layout test for the shared region: the sizes and offsets below are the
 * on-disk contract (region version 2, with burst_ns and meter_ns in its
 * former reserved words; view version 2); a region written by the library
 * must carry them. Usage: tlayout [region-file]. Prints the view's slot count
 * (view slots N), which tests/integration/test_view_contract.py holds equal to
 * the daemon's (dra_driver/libtessera/view_layout.py MAX_SLOTS). */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "region.h"
#include "view.h"

#define EXPECT(c)                                                     \
    do {                                                              \
        if (!(c)) {                                                   \
            fprintf(stderr, "FAIL tlayout: %s\n", #c);                \
            return 1;                                                 \
        }                                                             \
    } while (0)

int main(int argc, char **argv)
{
    EXPECT(sizeof(struct tr_region) == 150640);
    EXPECT(offsetof(struct tr_region, magic) == 0);
    EXPECT(offsetof(struct tr_region, version) == 8);
    EXPECT(offsetof(struct tr_region, header_size) == 12);
    EXPECT(offsetof(struct tr_region, total_size) == 16);
    EXPECT(offsetof(struct tr_region, proc_high) == 32);
    EXPECT(offsetof(struct tr_region, reserved_lock) == 48);
    EXPECT(offsetof(struct tr_region, gpus) == 112);
    EXPECT(offsetof(struct tr_gpu, uuid) == 0);
    EXPECT(offsetof(struct tr_gpu, used) == 64);
    EXPECT(offsetof(struct tr_gpu, limit) == 72);
    EXPECT(offsetof(struct tr_gpu, tokens_ns) == 80);
    EXPECT(offsetof(struct tr_gpu, refill_ns) == 88);
    EXPECT(offsetof(struct tr_gpu, cores) == 96);
    EXPECT(offsetof(struct tr_gpu, priority) == 100);
    EXPECT(offsetof(struct tr_gpu, launches) == 104);
    EXPECT(offsetof(struct tr_gpu, active_ns) == 112);
    EXPECT(offsetof(struct tr_gpu, gpu_ns) == 120);
    EXPECT(offsetof(struct tr_gpu, throttled_ns) == 128);
    EXPECT(offsetof(struct tr_gpu, oom_refusals) == 136);
    EXPECT(offsetof(struct tr_gpu, held_ns) == 144);
    EXPECT(offsetof(struct tr_gpu, queued_until_ns) == 152);
    EXPECT(offsetof(struct tr_gpu, debt_ns) == 160);
    EXPECT(offsetof(struct tr_gpu, skip_until_ns) == 168);
    EXPECT(offsetof(struct tr_gpu, burst_ns) == 176);
    EXPECT(offsetof(struct tr_gpu, meter_ns) == 184);
    EXPECT(sizeof(struct tr_gpu) == 192);
    EXPECT(offsetof(struct tr_proc, pid) == 0);
    EXPECT(offsetof(struct tr_proc, state) == 4);
    EXPECT(offsetof(struct tr_proc, used) == 16);
    EXPECT(offsetof(struct tr_region, procs) == 112 + 16 * 192);
    /* the GPU's view (version 2: a slot's last word is free_pct; dra_driver/libtessera/view_layout.py) */
    EXPECT(TV_VERSION == 2 && TV_VERSION_MIN == 1);
    EXPECT(offsetof(struct tv_view, seq) == 40 && offsetof(struct tv_view, slots) == 64);
    EXPECT(offsetof(struct tv_slot, start_us) == 4 && offsetof(struct tv_slot, free_pct) == 12);
    EXPECT(sizeof(struct tv_view) == 64 + 16 * TV_MAX_SLOTS);
    EXPECT(TR_MAGIC == 0x4e4f494745525354ull && !memcmp(&(uint64_t){ TR_MAGIC }, "TSREGION", 8));
    if (argc > 1) {
        int fd = open(argv[1], O_RDONLY);
        EXPECT(fd >= 0);
        struct stat st;
        EXPECT(fstat(fd, &st) == 0 && st.st_size == (off_t)sizeof(struct tr_region));
        EXPECT((st.st_mode & 0777) == 0666);
        const struct tr_region *r = mmap(NULL, sizeof *r, PROT_READ, MAP_SHARED, fd, 0);
        EXPECT(r != MAP_FAILED);
        EXPECT(r->magic == TR_MAGIC && r->version == TR_VERSION);
        EXPECT(r->header_size == 112 && r->total_size == sizeof(struct tr_region));
        EXPECT(r->max_gpus == TR_MAX_GPUS && r->max_procs == TR_MAX_PROCS);
        EXPECT(!strncmp(r->gpus[0].uuid, "GPU-", 4));
        EXPECT(r->proc_high >= 1);
    }
    printf("layout ok (%zu bytes)\nview slots %d\n", sizeof(struct tr_region), TV_MAX_SLOTS);
    return 0;
}
