/* The shared accounting region: one file per claim, mapped by every process of
 * the claim. A robust process-shared mutex guards the byte counters; each
 * process owns a slot whose liveness is an OFD lock on one byte of the file,
 * which the kernel drops when the process dies (across pid namespaces too). */

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "config.h"
#include "region_handle.h"
#include "util.h"

/* index MAX_CLAIMS is the HAMi-core fallback region */
static struct region_handle g_regions[MAX_CLAIMS + 1];

#define TR_LOCK_BASE (1ll << 30)

static int slot_lock(int fd, int slot, int type, int cmd)
{
    struct flock fl;
    memset(&fl, 0, sizeof fl);
    fl.l_type = (short)type;
    fl.l_whence = SEEK_SET;
    fl.l_start = TR_LOCK_BASE + slot;
    fl.l_len = 1;
    if (fcntl(fd, cmd, &fl) != 0)
        return -1;
    return fl.l_type;
}

/* A slot is alive while some open file description holds its byte lock. */
static int slot_alive(struct region_handle *h, int i)
{
    if (i == h->slot)
        return 1;
    if (h->fd < 0)
        return 1;
    int t = slot_lock(h->fd, i, F_WRLCK, F_OFD_GETLK);
    return t < 0 || t != F_UNLCK; /* when unsure, treat as alive */
}

static void slot_reclaim(struct tr_region *r, int i)
{
    struct tr_proc *p = &r->procs[i];
    for (int g = 0; g < TR_MAX_GPUS; g++) {
        uint64_t u = p->used[g];
        r->gpus[g].used = r->gpus[g].used >= u ? r->gpus[g].used - u : 0;
        p->used[g] = 0;
    }
    p->pid = 0;
    __atomic_store_n(&p->state, 0u, __ATOMIC_RELEASE);
}

/* Under the lock: give back the bytes of processes that died. */
static int region_sweep(struct region_handle *h)
{
    struct tr_region *r = h->r;
    int n = 0;
    uint32_t hi = r->proc_high > TR_MAX_PROCS ? TR_MAX_PROCS : r->proc_high;
    for (uint32_t i = 0; i < hi; i++) {
        if (r->procs[i].state == 1 && !slot_alive(h, (int)i)) {
            tlog(LOG_INFO, "%s: reclaiming slot %u of dead pid %d", h->name, i, r->procs[i].pid);
            slot_reclaim(r, (int)i);
            n++;
        }
    }
    return n;
}

/* After a holder died mid-update the totals may be off: rebuild them from the
 * per-process counters, which are always written first. */
static void region_repair(struct region_handle *h)
{
    struct tr_region *r = h->r;
    region_sweep(h);
    for (int g = 0; g < TR_MAX_GPUS; g++) {
        uint64_t sum = 0;
        for (int i = 0; i < TR_MAX_PROCS; i++)
            if (r->procs[i].state == 1)
                sum += r->procs[i].used[g];
        r->gpus[g].used = sum;
    }
}

int region_lock(struct region_handle *h)
{
    int rc = pthread_mutex_lock(&h->r->lock.mutex);
    if (rc == EOWNERDEAD) {
        region_repair(h);
        pthread_mutex_consistent(&h->r->lock.mutex);
        tlog(LOG_WARN, "%s: a process died holding the region lock; counters rebuilt", h->name);
        return 0;
    }
    if (rc != 0) {
        tlog(LOG_ERROR, "%s: region lock failed (%d); limits off for this claim", h->name, rc);
        h->state = -1;
        return -1;
    }
    return 0;
}

void region_unlock(struct region_handle *h)
{
    pthread_mutex_unlock(&h->r->lock.mutex);
}

static void region_format(struct tr_region *r)
{
    memset(r, 0, sizeof *r);
    pthread_mutexattr_t a;
    pthread_mutexattr_init(&a);
    pthread_mutexattr_setpshared(&a, PTHREAD_PROCESS_SHARED);
    pthread_mutexattr_setrobust(&a, PTHREAD_MUTEX_ROBUST);
    pthread_mutex_init(&r->lock.mutex, &a);
    pthread_mutexattr_destroy(&a);
    r->version = TR_VERSION;
    r->header_size = (uint32_t)offsetof(struct tr_region, gpus);
    r->total_size = sizeof(struct tr_region);
    r->max_gpus = TR_MAX_GPUS;
    r->max_procs = TR_MAX_PROCS;
    __atomic_store_n(&r->magic, TR_MAGIC, __ATOMIC_RELEASE);
}

static const char *region_check(const struct tr_region *r)
{
    if (__atomic_load_n(&r->magic, __ATOMIC_ACQUIRE) != TR_MAGIC)
        return "bad magic";
    if (r->version != TR_VERSION)
        return "unsupported version";
    if (r->header_size != offsetof(struct tr_region, gpus) || r->total_size != sizeof(struct tr_region) ||
        r->max_gpus != TR_MAX_GPUS || r->max_procs != TR_MAX_PROCS)
        return "layout mismatch";
    return NULL;
}

/* Opens (creating if needed) and validates the region file, then takes a slot. */
static int region_open_file(struct region_handle *h)
{
    int fd = open(h->path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0666);
    if (fd < 0) {
        tlog(LOG_ERROR, "%s: cannot open the accounting region (errno %d); limits off for this claim", h->name, errno);
        return -1;
    }
    while (flock(fd, LOCK_EX) != 0 && errno == EINTR) {
    }
    struct stat st;
    const char *why = NULL;
    void *m = MAP_FAILED;
    if (fstat(fd, &st) != 0) {
        why = "fstat failed";
    } else if (st.st_size == 0) {
        if (ftruncate(fd, (off_t)sizeof(struct tr_region)) != 0) {
            why = "cannot size the file";
        } else {
            m = mmap(NULL, sizeof(struct tr_region), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
            if (m == MAP_FAILED)
                why = "mmap failed";
            else
                region_format((struct tr_region *)m);
            /* other users of the claim may run as other uids; umask must not narrow it */
            if (fchmod(fd, 0666) != 0) {
            }
        }
    } else if ((uint64_t)st.st_size != sizeof(struct tr_region)) {
        why = "wrong size (corrupt, or written by another version)";
    } else {
        m = mmap(NULL, sizeof(struct tr_region), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        if (m == MAP_FAILED)
            why = "mmap failed";
        else
            why = region_check((struct tr_region *)m);
    }
    flock(fd, LOCK_UN);
    if (why) {
        tlog(LOG_ERROR, "%s: %s; memory and SM limits are off for this claim (remove the file when no process uses it)", h->name, why);
        if (m != MAP_FAILED)
            munmap(m, sizeof(struct tr_region));
        close(fd);
        return -1;
    }
    h->r = (struct tr_region *)m;
    h->fd = fd;
    return 0;
}

static int region_take_slot(struct region_handle *h)
{
    struct tr_region *r = h->r;
    if (region_lock(h))
        return -1;
    int got = -1;
    for (int i = 0; i < TR_MAX_PROCS && got < 0; i++) {
        struct tr_proc *p = &r->procs[i];
        if (p->state == 1 && (h->fd < 0 || slot_alive(h, i)))
            continue;
        if (h->fd >= 0 && slot_lock(h->fd, i, F_WRLCK, F_OFD_SETLK) < 0)
            continue; /* a live process holds it but has not marked it yet */
        if (p->state == 1)
            slot_reclaim(r, i);
        memset(p->used, 0, sizeof p->used);
        p->pid = (int32_t)getpid();
        p->attach_ns = mono_ns();
        __atomic_store_n(&p->state, 1u, __ATOMIC_RELEASE);
        if ((uint32_t)i >= r->proc_high)
            r->proc_high = (uint32_t)i + 1;
        got = i;
    }
    region_unlock(h);
    if (got < 0) {
        tlog(LOG_ERROR, "%s: all %d process slots are in use; limits off in this process", h->name, TR_MAX_PROCS);
        return -1;
    }
    h->slot = got;
    return 0;
}

/* Called under the device-record lock (devices.c). */
static int region_attach(struct region_handle *h)
{
    if (h->state)
        return h->state > 0 ? 0 : -1;
    h->fd = -1;
    h->slot = -1;
    h->name = h->path[0] ? h->path : "(process-private region)";
    if (h->path[0]) {
        if (region_open_file(h)) {
            h->state = -1;
            return -1;
        }
    } else {
        /* private: a forked child gets its own copy, which it then re-creates */
        void *m = mmap(NULL, sizeof(struct tr_region), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (m == MAP_FAILED) {
            h->state = -1;
            return -1;
        }
        h->r = (struct tr_region *)m;
        region_format(h->r);
    }
    if (region_take_slot(h)) {
        h->state = -1;
        return -1;
    }
    h->state = 1;
    tlog(LOG_INFO, "%s: attached as slot %d", h->name, h->slot);
    return 0;
}

int region_gpu_slot(struct region_handle *h, const char *uuid, uint64_t limit, uint32_t cores, int32_t priority)
{
    struct tr_region *r = h->r;
    if (region_lock(h))
        return -1;
    int g = -1;
    for (int i = 0; i < TR_MAX_GPUS && g < 0; i++)
        if (!strncmp(r->gpus[i].uuid, uuid, TR_UUID_LEN))
            g = i;
    for (int i = 0; i < TR_MAX_GPUS && g < 0; i++) {
        if (!r->gpus[i].uuid[0]) {
            memset(&r->gpus[i], 0, sizeof r->gpus[i]);
            str_copy(r->gpus[i].uuid, TR_UUID_LEN, uuid);
            g = i;
        }
    }
    if (g >= 0) {
        r->gpus[g].limit = limit;
        r->gpus[g].cores = cores;
        r->gpus[g].priority = priority;
    }
    region_unlock(h);
    if (g < 0)
        tlog(LOG_ERROR, "%s: no free GPU entry for %s; limits off for it", h->name, uuid);
    return g;
}

int region_reserve(struct region_handle *h, int g, uint64_t size, uint64_t limit)
{
    if (region_lock(h))
        return 1;
    struct tr_region *r = h->r;
    struct tr_gpu *gp = &r->gpus[g];
#define FITS (limit == 0 || (gp->used <= limit && size <= limit - gp->used))
    int ok = FITS;
    if (!ok && region_sweep(h) > 0)
        ok = FITS;
#undef FITS
    if (ok) {
        r->procs[h->slot].used[g] += size;
        gp->used += size;
    }
    region_unlock(h);
    return ok;
}

void region_release(struct region_handle *h, int g, uint64_t size)
{
    if (region_lock(h))
        return;
    struct tr_region *r = h->r;
    uint64_t *mine = &r->procs[h->slot].used[g];
    uint64_t take = *mine >= size ? size : *mine; /* never give back what this process did not reserve */
    *mine -= take;
    r->gpus[g].used = r->gpus[g].used >= take ? r->gpus[g].used - take : 0;
    region_unlock(h);
}

/* Context memory: the driver already spent it; the limit then refuses later allocations. */
void region_charge_locked(struct region_handle *h, int g, uint64_t size)
{
    h->r->procs[h->slot].used[g] += size;
    h->r->gpus[g].used += size;
}

/* Views sweep first so that a dead process's bytes do not linger in them. */
void region_refresh(struct region_handle *h)
{
    if (region_lock(h) == 0) {
        region_sweep(h);
        region_unlock(h);
    }
}

uint64_t region_used(struct region_handle *h, int g)
{
    return __atomic_load_n(&h->r->gpus[g].used, __ATOMIC_RELAXED);
}

/* In a forked child: the parent's slot and file description are not ours. */
static void region_forget(struct region_handle *h)
{
    if (h->state != 1)
        return;
    munmap(h->r, sizeof(struct tr_region));
    if (h->fd >= 0)
        close(h->fd);
    h->r = NULL;
    h->fd = -1;
    h->slot = -1;
    h->state = 0;
}

struct region_handle *region_of_claim(int claim)
{
    struct region_handle *h = &g_regions[claim];
    if (!h->state && !h->path[0]) {
        if (claim < MAX_CLAIMS)
            fmt_s(h->path, sizeof h->path, "%s/region", cfg_claim_dir(claim));
        else if (cfg_shared_cache()[0])
            str_copy(h->path, sizeof h->path, cfg_shared_cache());
    }
    return region_attach(h) == 0 ? h : NULL;
}

/* Reads without the lock: a view, and pids as the processes themselves saw them. */
unsigned region_procs(struct region_handle *h, int g, unsigned cap, unsigned *pids, uint64_t *bytes)
{
    struct tr_region *r = h->r;
    unsigned n = 0;
    uint32_t hi = __atomic_load_n(&r->proc_high, __ATOMIC_ACQUIRE);
    if (hi > TR_MAX_PROCS)
        hi = TR_MAX_PROCS;
    for (uint32_t i = 0; i < hi; i++) {
        struct tr_proc *p = &r->procs[i];
        if (__atomic_load_n(&p->state, __ATOMIC_ACQUIRE) != 1)
            continue;
        uint64_t u = __atomic_load_n(&p->used[g], __ATOMIC_RELAXED);
        if (!u || !slot_alive(h, (int)i))
            continue;
        if (n < cap) {
            pids[n] = (unsigned)p->pid;
            bytes[n] = u;
        }
        n++;
    }
    return n;
}

void region_after_fork(void)
{
    for (int i = 0; i <= MAX_CLAIMS; i++)
        region_forget(&g_regions[i]);
}
