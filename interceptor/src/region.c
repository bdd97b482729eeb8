/* The shared accounting region: one file per claim, used by every process of
 * the claim. The file is writable by the claim's containers, so it is never
 * mapped (truncating a mapped file would kill this process with SIGBUS, and no
 * signal handler of ours may be installed): it is read and written with
 * pread/pwrite, under an OFD lock on one byte of the file taken with a timeout
 * (a stuck or hostile holder cannot hang us), and each process writes only its
 * own slot's byte counts, so the claim's total is their sum and no crash in the
 * middle of an update can leave it wrong. Each slot's liveness is an OFD lock
 * on another byte, which the kernel drops when the process dies (across pid
 * namespaces too). When the file cannot be used — missing, not a regular file,
 * wrong size or version, unreadable later, lock held too long — the process
 * goes on, with one log line, with a region of its own in private memory, and
 * fails closed: it no longer sees what the claim's other processes hold, so
 * giving it the claim's limit would give N processes N times the limit (one
 * corrupted byte, which any tenant can write, would do). So it keeps what it
 * holds, frees still count, and every new allocation is refused with
 * out-of-memory (region_closed; a claim without a memory limit is not
 * affected); the SM limiter then holds it to time windows that need no
 * shared state (limiter.c). */

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "config.h"
#include "region_handle.h"
#include "util.h"

struct region_handle {
    int fd;                 /* the claim's region file; -1 when private */
    struct tr_region *mem;  /* the private region (no usable file); NULL while the file is used */
    pthread_mutex_t mu;     /* this process's threads (an OFD lock does not exclude threads sharing the fd) */
    int slot;               /* our procs[] index */
    int state;              /* 0 not attached, 1 attached, -1 failed (pass through) */
    int locked_file;        /* the file's lock byte is held */
    int closed;             /* the claim's file was wanted but is unusable: no new bytes (read atomically) */
    uint64_t mine[TR_MAX_GPUS];         /* bytes this process holds per GPU entry */
    char uuid[TR_MAX_GPUS][TR_UUID_LEN]; /* GPU entries this process registered */
    char path[PATH_CAP + 16]; /* empty: process-private region */
    const char *name;         /* for log lines */
};

/* index MAX_CLAIMS is the HAMi-core fallback region */
static struct region_handle g_regions[MAX_CLAIMS + 1];

#define LOCK_TIMEOUT_NS 2000000000ull

static int byte_lock(int fd, off_t byte, int type, int cmd)
{
    struct flock fl;
    memset(&fl, 0, sizeof fl);
    fl.l_type = (short)type;
    fl.l_whence = SEEK_SET;
    fl.l_start = byte;
    fl.l_len = 1;
    if (fcntl(fd, cmd, &fl) != 0)
        return -1;
    return fl.l_type;
}

/* ---- raw access: the file, or the private region ---- */

static int rd(struct region_handle *h, size_t off, void *buf, size_t n)
{
    if (h->mem) {
        memcpy(buf, (const char *)h->mem + off, n);
        return 0;
    }
    size_t done = 0;
    while (done < n) {
        ssize_t r = pread(h->fd, (char *)buf + done, n - done, (off_t)(off + done));
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return -1; /* truncated, or an I/O error */
        done += (size_t)r;
    }
    return 0;
}

static int wr(struct region_handle *h, size_t off, const void *buf, size_t n)
{
    if (h->mem) {
        memcpy((char *)h->mem + off, buf, n);
        return 0;
    }
    size_t done = 0;
    while (done < n) {
        ssize_t r = pwrite(h->fd, (const char *)buf + done, n - done, (off_t)(off + done));
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return -1;
        done += (size_t)r;
    }
    return 0;
}

#define GPU_OFF(g) (offsetof(struct tr_region, gpus) + (size_t)(g) * sizeof(struct tr_gpu))
#define PROC_OFF(i) (offsetof(struct tr_region, procs) + (size_t)(i) * sizeof(struct tr_proc))

static void format_mem(struct tr_region *r)
{
    memset(r, 0, sizeof *r);
    r->version = TR_VERSION;
    r->header_size = (uint32_t)offsetof(struct tr_region, gpus);
    r->total_size = sizeof(struct tr_region);
    r->max_gpus = TR_MAX_GPUS;
    r->max_procs = TR_MAX_PROCS;
    r->magic = TR_MAGIC;
}

/* Switches the handle to a private region holding what this process knows: its GPU entries and its bytes,
 * and closes it to new bytes (see the top). Called with h->mu held (or before anyone else sees the handle). */
static void fall_back(struct region_handle *h, const char *why)
{
    if (h->mem)
        return;
    struct tr_region *m = mmap(NULL, sizeof *m, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED) {
        tlog(LOG_ERROR, "%s: %s, and no memory for a private region; limits off for this claim", h->name, why);
        h->state = -1;
        return;
    }
    format_mem(m);
    for (int g = 0; g < TR_MAX_GPUS; g++) {
        str_copy(m->gpus[g].uuid, TR_UUID_LEN, h->uuid[g]);
        m->procs[0].used[g] = h->mine[g];
        m->gpus[g].used = h->mine[g];
    }
    m->procs[0].pid = (int32_t)getpid();
    m->procs[0].state = 1;
    m->proc_high = 1;
    if (h->fd >= 0) {
        if (h->locked_file)
            byte_lock(h->fd, TR_LOCK_BYTE, F_UNLCK, F_OFD_SETLK);
        close(h->fd); /* drops our slot's liveness lock: the claim's other processes sweep our bytes */
    }
    h->fd = -1;
    h->locked_file = 0;
    h->slot = 0;
    h->mem = m;
    uint64_t held = 0;
    for (int g = 0; g < TR_MAX_GPUS; g++)
        held += h->mine[g];
    __atomic_store_n(&h->closed, 1, __ATOMIC_RELEASE);
    tlog(LOG_ERROR,
         "%s: %s; failing closed: new allocations are refused (this process keeps its %llu bytes, frees still "
         "count) and kernels run only in the claim's part of each frame",
         h->name, why, (unsigned long long)held);
}

int region_closed(struct region_handle *h)
{
    return __atomic_load_n(&h->closed, __ATOMIC_ACQUIRE);
}

/* ---- the lock ---- */

int region_lock(struct region_handle *h)
{
    pthread_mutex_lock(&h->mu);
    if (h->mem || h->fd < 0)
        return 0;
    uint64_t t0 = 0;
    for (;;) {
        if (byte_lock(h->fd, TR_LOCK_BYTE, F_WRLCK, F_OFD_SETLK) >= 0) {
            h->locked_file = 1;
            return 0;
        }
        if (errno != EAGAIN && errno != EACCES && errno != EINTR)
            break;
        uint64_t now = mono_ns();
        if (!t0)
            t0 = now;
        else if (now - t0 > LOCK_TIMEOUT_NS)
            break;
        sleep_ns(100000);
    }
    fall_back(h, "its lock is held too long (a stuck or hostile process of the claim)");
    if (h->state < 0) {
        pthread_mutex_unlock(&h->mu);
        return -1;
    }
    return 0;
}

void region_unlock(struct region_handle *h)
{
    if (h->locked_file && h->fd >= 0)
        byte_lock(h->fd, TR_LOCK_BYTE, F_UNLCK, F_OFD_SETLK);
    h->locked_file = 0;
    pthread_mutex_unlock(&h->mu);
}

/* ---- process slots ---- */

/* A slot is alive while some open file description holds its byte lock. */
static int slot_alive(struct region_handle *h, int i)
{
    if (i == h->slot || h->mem)
        return 1;
    int t = byte_lock(h->fd, TR_LOCK_BASE + i, F_WRLCK, F_OFD_GETLK);
    return t < 0 || t != F_UNLCK; /* when unsure, treat as alive */
}

static uint32_t proc_high(struct region_handle *h)
{
    uint32_t hi = 0;
    if (rd(h, offsetof(struct tr_region, proc_high), &hi, sizeof hi))
        fall_back(h, "it cannot be read (truncated?)");
    return hi > TR_MAX_PROCS ? TR_MAX_PROCS : hi;
}

#define SLOT_BATCH 32
#define HEAD_AND_BATCH (offsetof(struct tr_region, procs) + SLOT_BATCH * sizeof(struct tr_proc))

/* Under the lock: the bytes the claim's live slots hold on entry g — the sum of every slot's own count, so no
 * crash in the middle of an update can leave a total wrong (dead slots swept first when sweep is set). One
 * pread reads the header and the first SLOT_BATCH slots; more slots take one pread per batch. */
static uint64_t claim_used(struct region_handle *h, int g, int sweep)
{
    static __thread unsigned char buf[HEAD_AND_BATCH] __attribute__((aligned(16)));
    if (h->mem)
        return h->mine[g];
    if (rd(h, 0, buf, HEAD_AND_BATCH)) {
        fall_back(h, "it cannot be read (truncated?)");
        return h->mine[g];
    }
    uint32_t hi;
    memcpy(&hi, buf + offsetof(struct tr_region, proc_high), sizeof hi);
    hi = hi > TR_MAX_PROCS ? TR_MAX_PROCS : hi;
    uint64_t sum = 0;
    const struct tr_proc *batch = (const struct tr_proc *)(const void *)(buf + offsetof(struct tr_region, procs));
    for (uint32_t at = 0; at < hi; at += SLOT_BATCH) {
        uint32_t n = hi - at < SLOT_BATCH ? hi - at : SLOT_BATCH;
        if (at && rd(h, PROC_OFF(at), buf + offsetof(struct tr_region, procs), n * sizeof(struct tr_proc))) {
            fall_back(h, "it cannot be read (truncated?)");
            return h->mine[g];
        }
        for (uint32_t k = 0; k < n; k++) {
            uint32_t i = at + k;
            const struct tr_proc *p = &batch[k];
            if (p->state != 1 || (int)i == h->slot)
                continue;
            if (sweep && !slot_alive(h, (int)i)) {
                tlog(LOG_INFO, "%s: reclaiming slot %u of dead pid %d", h->name, i, p->pid);
                uint32_t free_state = 0;
                wr(h, PROC_OFF(i) + offsetof(struct tr_proc, state), &free_state, sizeof free_state);
                continue;
            }
            sum += p->used[g] > (1ull << 56) ? (1ull << 56) : p->used[g]; /* garbage cannot wrap the sum */
        }
    }
    return sum + h->mine[g];
}

/* Writes our slot's count for entry g: only this process writes its slot, so it needs no lock. */
static void publish_mine(struct region_handle *h, int g)
{
    if (wr(h, PROC_OFF(h->slot) + offsetof(struct tr_proc, used) + (size_t)g * 8, &h->mine[g], 8))
        fall_back(h, "it cannot be written");
}

static int take_slot(struct region_handle *h)
{
    if (region_lock(h))
        return -1;
    int got = -1;
    uint32_t hi = proc_high(h);
    for (int i = 0; i < TR_MAX_PROCS && got < 0 && !h->mem; i++) {
        struct tr_proc p;
        if ((uint32_t)i < hi && rd(h, PROC_OFF(i), &p, sizeof p))
            break;
        if ((uint32_t)i < hi && p.state == 1 && slot_alive(h, i))
            continue;
        if (byte_lock(h->fd, TR_LOCK_BASE + i, F_WRLCK, F_OFD_SETLK) < 0)
            continue; /* a live process holds it but has not marked it yet */
        memset(&p, 0, sizeof p);
        p.pid = (int32_t)getpid();
        p.attach_ns = mono_ns();
        p.state = 1;
        uint32_t nh = (uint32_t)i + 1;
        if (wr(h, PROC_OFF(i), &p, sizeof p) || ((uint32_t)i >= hi && wr(h, offsetof(struct tr_region, proc_high), &nh, 4)))
            break;
        got = i;
    }
    if (got >= 0)
        h->slot = got;
    else if (!h->mem)
        fall_back(h, "no process slot could be taken");
    region_unlock(h);
    return h->state < 0 ? -1 : 0;
}

/* ---- opening ---- */

static const char *check_header(const struct tr_region *r)
{
    if (r->magic != TR_MAGIC)
        return "bad magic";
    if (r->version != TR_VERSION)
        return "unsupported version";
    if (r->header_size != offsetof(struct tr_region, gpus) || r->total_size != sizeof(struct tr_region) ||
        r->max_gpus != TR_MAX_GPUS || r->max_procs != TR_MAX_PROCS)
        return "layout mismatch";
    return NULL;
}

/* Formats an empty file: sized, header written, the magic last. */
static const char *format_file(int fd)
{
    static const struct tr_region zero;
    struct tr_region head = zero;
    format_mem(&head);
    uint64_t magic = head.magic;
    head.magic = 0;
    if (ftruncate(fd, (off_t)sizeof(struct tr_region)) != 0 ||
        pwrite(fd, &head, offsetof(struct tr_region, gpus), 0) != (ssize_t)offsetof(struct tr_region, gpus) ||
        pwrite(fd, &magic, sizeof magic, 0) != (ssize_t)sizeof magic)
        return "cannot be written";
    return NULL;
}

static int flock_timed(int fd, int op)
{
    uint64_t t0 = mono_ns();
    while (flock(fd, op | LOCK_NB) != 0) {
        if (errno != EWOULDBLOCK && errno != EINTR)
            return -1;
        if (mono_ns() - t0 > LOCK_TIMEOUT_NS)
            return -1;
        sleep_ns(1000000);
    }
    return 0;
}

/* Opens and validates the region file (creating it when absent); NULL on success, else why not. */
static const char *open_file(struct region_handle *h)
{
    const int flags = O_RDWR | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC;
    int fd = open(h->path, flags);
    if (fd < 0 && errno == ENOENT) {
        /* without the node daemon (which creates it): make it, usable by every uid of the claim */
        fd = open(h->path, flags | O_CREAT | O_EXCL, 0666);
        if (fd >= 0 && fchmod(fd, 0666) != 0) {
        }
        if (fd < 0 && errno == EEXIST)
            fd = open(h->path, flags);
    }
    if (fd < 0)
        return errno == ELOOP ? "it is a symbolic link" : errno == EISDIR ? "it is not a regular file" : "it cannot be opened";
    struct stat st;
    const char *why = NULL;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        why = "it is not a regular file";
    } else if (flock_timed(fd, LOCK_EX)) {
        why = "its creation lock is held too long";
    } else {
        struct tr_region head;
        if (fstat(fd, &st) != 0)
            why = "it cannot be examined";
        else if (st.st_size == 0)
            why = format_file(fd);
        else if ((uint64_t)st.st_size != sizeof(struct tr_region))
            why = "it has the wrong size (damaged, or written by another version)";
        else if (pread(fd, &head, offsetof(struct tr_region, gpus), 0) != (ssize_t)offsetof(struct tr_region, gpus))
            why = "it cannot be read";
        else
            why = check_header(&head);
        flock(fd, LOCK_UN);
    }
    if (why) {
        close(fd);
        return why;
    }
    h->fd = fd;
    return NULL;
}

/* Called under the device-record lock (devices.c). */
static int region_attach(struct region_handle *h)
{
    if (h->state)
        return h->state > 0 ? 0 : -1;
    pthread_mutex_init(&h->mu, NULL);
    h->fd = -1;
    h->mem = NULL;
    h->slot = -1;
    h->state = 1;
    h->closed = 0;
    memset(h->mine, 0, sizeof h->mine);
    memset(h->uuid, 0, sizeof h->uuid);
    h->name = h->path[0] ? h->path : "(process-private region)";
    const char *why = h->path[0] ? open_file(h) : "";
    if (why) {
        if (*why) {
            fall_back(h, why);
        } else {
            /* no file wanted (HAMi variables without a shared cache): private from the start, quietly */
            struct tr_region *m = mmap(NULL, sizeof *m, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
            if (m == MAP_FAILED) {
                h->state = -1;
                return -1;
            }
            format_mem(m);
            m->procs[0].pid = (int32_t)getpid();
            m->procs[0].state = 1;
            m->proc_high = 1;
            h->mem = m;
            h->slot = 0;
        }
        return h->state > 0 ? 0 : -1;
    }
    if (take_slot(h))
        return -1;
    tlog(LOG_INFO, "%s: attached as slot %d", h->name, h->slot);
    return 0;
}

/* ---- GPU entries ---- */

int region_gpu_slot(struct region_handle *h, const char *uuid, uint64_t limit, uint32_t cores, int32_t priority)
{
    if (region_lock(h))
        return -1;
    int g = -1, empty = -1;
    for (int i = 0; i < TR_MAX_GPUS && g < 0; i++) {
        char u[TR_UUID_LEN];
        if (rd(h, GPU_OFF(i), u, sizeof u)) {
            fall_back(h, "it cannot be read (truncated?)");
            g = empty = i = -1; /* start again, on the private region */
            continue;
        }
        u[TR_UUID_LEN - 1] = '\0';
        if (!strncmp(u, uuid, TR_UUID_LEN))
            g = i;
        else if (!u[0] && empty < 0)
            empty = i;
    }
    if (g < 0 && empty >= 0) {
        struct tr_gpu e;
        memset(&e, 0, sizeof e);
        str_copy(e.uuid, TR_UUID_LEN, uuid);
        if (wr(h, GPU_OFF(empty), &e, sizeof e) == 0)
            g = empty;
    }
    if (g >= 0) {
        str_copy(h->uuid[g], TR_UUID_LEN, uuid);
        struct {
            uint64_t limit;
        } l = { limit };
        struct {
            uint32_t cores;
            int32_t priority;
        } cp = { cores, priority };
        if (wr(h, GPU_OFF(g) + offsetof(struct tr_gpu, limit), &l, sizeof l) ||
            wr(h, GPU_OFF(g) + offsetof(struct tr_gpu, cores), &cp, sizeof cp))
            fall_back(h, "it cannot be written");
    }
    region_unlock(h);
    if (g < 0)
        tlog(LOG_ERROR, "%s: no free GPU entry for %s; limits off for it", h->name, uuid);
    return g;
}

int region_gpu_begin(struct region_handle *h, int g, struct tr_gpu *e)
{
    if (region_lock(h))
        return -1;
    if (rd(h, GPU_OFF(g), e, sizeof *e)) {
        fall_back(h, "it cannot be read (truncated?)");
        if (h->state < 0 || rd(h, GPU_OFF(g), e, sizeof *e)) {
            region_unlock(h);
            return -1;
        }
    }
    return 0;
}

void region_gpu_end(struct region_handle *h, int g, const struct tr_gpu *e)
{
    /* the identity, limit and byte total are not the limiter's to write */
    size_t from = offsetof(struct tr_gpu, tokens_ns);
    if (wr(h, GPU_OFF(g) + from, (const char *)e + from, sizeof *e - from))
        fall_back(h, "it cannot be written");
    region_unlock(h);
}

/* ---- bytes ---- */

/* Closed (the claim's total is unknown since the file failed, maybe just now, in claim_used): nothing new,
 * however little, while a limit applies. */
static int shut(const struct region_handle *h, uint64_t size, uint64_t limit)
{
    return h->closed && limit && size;
}

int region_reserve(struct region_handle *h, int g, uint64_t size, uint64_t limit)
{
    if (region_lock(h))
        return 1;
    uint64_t used = claim_used(h, g, 0);
#define FITS(u) (limit == 0 || ((u) <= limit && size <= limit - (u)))
    int ok = !shut(h, size, limit) && FITS(used);
    if (!ok && !shut(h, size, limit)) {
        used = claim_used(h, g, 1); /* bytes of processes that died do not count */
        ok = !shut(h, size, limit) && FITS(used);
    }
#undef FITS
    if (ok) {
        h->mine[g] += size;
        publish_mine(h, g);
    } else {
        uint64_t n = 0;
        if (rd(h, GPU_OFF(g) + offsetof(struct tr_gpu, oom_refusals), &n, 8) == 0) {
            n++;
            wr(h, GPU_OFF(g) + offsetof(struct tr_gpu, oom_refusals), &n, 8);
        }
    }
    region_unlock(h);
    return ok;
}

void region_release(struct region_handle *h, int g, uint64_t size)
{
    /* our own slot only: the thread mutex orders it with this process's other updates, no file lock */
    pthread_mutex_lock(&h->mu);
    uint64_t take = h->mine[g] >= size ? size : h->mine[g]; /* never give back what this process did not reserve */
    h->mine[g] -= take;
    publish_mine(h, g);
    pthread_mutex_unlock(&h->mu);
}

/* Context memory: the driver already spent it; the limit then refuses later allocations. */
void region_charge_locked(struct region_handle *h, int g, uint64_t size)
{
    h->mine[g] += size;
    publish_mine(h, g);
}

/* Views sweep first so that a dead process's bytes do not linger in them. */
void region_refresh(struct region_handle *h)
{
    if (region_lock(h) == 0) {
        for (int g = 0; g < TR_MAX_GPUS; g++)
            if (h->uuid[g][0])
                claim_used(h, g, 1);
        region_unlock(h);
    }
}

uint64_t region_used(struct region_handle *h, int g)
{
    if (region_lock(h))
        return 0;
    uint64_t u = claim_used(h, g, 0);
    region_unlock(h);
    return u;
}

/* In a forked child: the parent's slot and file description are not ours. */
static void region_forget(struct region_handle *h)
{
    if (h->state != 1)
        return;
    if (h->mem)
        munmap(h->mem, sizeof(struct tr_region));
    if (h->fd >= 0)
        close(h->fd);
    h->mem = NULL;
    h->fd = -1;
    h->slot = -1;
    h->state = 0;
    h->closed = 0;
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

unsigned region_procs(struct region_handle *h, int g, unsigned cap, unsigned *pids, uint64_t *bytes)
{
    unsigned n = 0;
    if (region_lock(h))
        return 0;
    uint32_t hi = proc_high(h);
    for (uint32_t i = 0; i < hi; i++) {
        struct tr_proc p;
        if (rd(h, PROC_OFF(i), &p, sizeof p))
            break;
        uint64_t u = (int)i == h->slot ? h->mine[g] : p.used[g];
        if (p.state != 1 || !u || !slot_alive(h, (int)i))
            continue;
        if (n < cap) {
            pids[n] = (unsigned)p.pid;
            bytes[n] = u;
        }
        n++;
    }
    region_unlock(h);
    return n;
}

void region_after_fork(void)
{
    for (int i = 0; i <= MAX_CLAIMS; i++)
        region_forget(&g_regions[i]);
}
