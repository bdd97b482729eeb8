/* The node's priority view of a GPU, mapped read-only. Only the node daemon
 * writes the file, and containers see it through a read-only mount, so no
 * claim can hold another back. A view that cannot be used costs one log line
 * and no priority hold. */
#include <errno.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "util.h"
#include "view.h"

/* a hold longer than this is not believed (a torn or stale write): priority never freezes a claim */
#define MAX_HOLD_NS 2000000000ull

const struct tv_view *view_open(const char *path)
{
    int fd = open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) {
        tlog(LOG_INFO, "%s: no priority view (errno %d); this GPU's launches are never held back", path, errno);
        return NULL;
    }
    struct stat st;
    const char *why = NULL;
    void *m = MAP_FAILED;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode))
        why = "not a regular file";
    else if (st.st_size != TV_FILE_SIZE)
        why = "wrong size";
    else if ((m = mmap(NULL, TV_FILE_SIZE, PROT_READ, MAP_SHARED, fd, 0)) == MAP_FAILED)
        why = "mmap failed";
    else if (((const struct tv_view *)m)->magic != TV_MAGIC || ((const struct tv_view *)m)->version < TV_VERSION_MIN ||
             ((const struct tv_view *)m)->version > TV_VERSION)
        why = "bad magic or version";
    close(fd);
    if (why) {
        tlog(LOG_WARN, "%s: %s; this GPU's launches are never held back for priority", path, why);
        if (m != MAP_FAILED)
            munmap(m, TV_FILE_SIZE);
        return NULL;
    }
    return m;
}

void view_phase(const struct tv_view *v, uint32_t slot, struct tv_phase *p)
{
    uint32_t s1 = __atomic_load_n(&v->seq, __ATOMIC_ACQUIRE);
    if (s1 == p->seq && p->seq)
        return;
    for (int tries = 0; tries < 100; tries++, s1 = __atomic_load_n(&v->seq, __ATOMIC_ACQUIRE)) {
        if (s1 & 1)
            continue; /* being written */
        struct tv_phase n = { s1, 0, 0, 0, 0, 0 };
        uint32_t frame = __atomic_load_n(&v->frame_us, __ATOMIC_RELAXED);
        uint32_t ns = __atomic_load_n(&v->nslots, __ATOMIC_RELAXED);
        for (uint32_t i = 0; i < ns && i < TV_MAX_SLOTS && !n.found; i++) {
            if (__atomic_load_n(&v->slots[i].id, __ATOMIC_RELAXED) != slot)
                continue;
            uint32_t a = __atomic_load_n(&v->slots[i].start_us, __ATOMIC_RELAXED);
            uint32_t b = __atomic_load_n(&v->slots[i].end_us, __ATOMIC_RELAXED);
            uint32_t pct = __atomic_load_n(&v->slots[i].free_pct, __ATOMIC_RELAXED);
            if (frame > 0 && a < b && b <= frame)
                n.found = TV_PART;
            else if (frame > 0 && a == b && pct >= 1 && pct <= 100)
                n.found = TV_FREE; /* a version-1 view has 0 here: such an entry is not found, as before */
            n.free_pct = pct;
            n.frame_ns = (uint64_t)frame * 1000;
            n.start_ns = (uint64_t)a * 1000;
            n.end_ns = (uint64_t)b * 1000;
        }
        __atomic_thread_fence(__ATOMIC_ACQUIRE);
        if (__atomic_load_n(&v->seq, __ATOMIC_RELAXED) == s1) {
            *p = n;
            return;
        }
    }
}

uint64_t view_hold_until(const struct tv_view *v)
{
    uint64_t h = __atomic_load_n(&v->hold_until_ns, __ATOMIC_ACQUIRE);
    return h > mono_ns() + MAX_HOLD_NS ? 0 : h;
}
