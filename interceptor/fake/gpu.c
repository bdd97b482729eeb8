/* The simulated GPUs, shared by every process that loads the fake driver: one
 * file (FAKE_GPU_STATE, default /tmp/tessera-fake-gpu-<uid>) holds, per GPU,
 * a timeline, and per process and GPU a channel: a queue of work. A GPU
 * without MPS runs one context at a time and time-slices between contexts that
 * have work: the holder keeps the GPU for a timeslice (FAKE_TIMESLICE_US,
 * default 2090 µs, as measured on an H100) while another context waits, then a
 * context switch (FAKE_SWITCH_US, default 100 µs) hands it to the next channel
 * with work, round robin. A context alone on the GPU is never switched out.
 * Time is CLOCK_MONOTONIC; the timeline is simulated lazily, up to "now", by
 * whichever process looks at it, so an event's timestamp includes the time its
 * work waited behind other contexts, as on a real GPU.
 * MPS: the clients of one MPS server (mps_client.c) are one context to the GPU.
 * While it holds the GPU their kernels run concurrently, each at a rate
 * calibrated on the H100 from its active thread percentage and its busy
 * neighbours' (mps_rate); against other contexts the server's clients are
 * time-sliced like any context. A kernel's length is its solo time on the
 * whole GPU, so a client at rate 248 per mille runs it in 1/0.248 the time. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fake.h"

#define FG_MAGIC 0x5550474b454b4146ull /* "FAKEKGPU" */
#define FG_VERSION 1u
#define FG_CHANNELS 128
#define FG_QUEUE 1024
#define FG_EVENTS 4096
#define FG_LOCK_BASE (1ll << 30)
#define FG_LIVENESS_NS 50000000ull

struct fg_item {
    uint64_t ns_left;   /* kernel time still to run; 0 for a marker */
    uint64_t submit_ns;
    int32_t ev;         /* event slot a marker stamps, -1 none */
    uint32_t pad;
    uint64_t gen;
};

struct fg_evslot {
    uint64_t gen; /* the last generation that completed */
    uint64_t ts;
};

struct fg_chan {
    int32_t pid;
    uint32_t state; /* 0 free, 1 live */
    int32_t dev;
    uint32_t pad;
    uint64_t submitted, completed; /* sequence numbers; item s sits at q[s % FG_QUEUE] */
    uint64_t busy_ns;              /* kernel time this channel ran */
    uint64_t last_done_ns;         /* when its last item completed */
    uint32_t mps_pct;              /* an MPS client's active thread percentage x10 (1..1000); 0: none */
    uint32_t pad2;
    uint64_t mps_group;            /* its MPS server: the server's clients share one context; 0: none */
    struct fg_item q[FG_QUEUE];
    struct fg_evslot ev[FG_EVENTS];
};

struct fg_dev {
    uint64_t sim_ns;     /* simulated up to here */
    int32_t cur;         /* channel holding the GPU, -1 none */
    int32_t next;        /* channel a switch in progress hands it to, -1 none */
    uint64_t switch_end;
    uint64_t slice_end;
    uint64_t busy_ns;
    uint64_t switches;
    uint64_t checked_ns; /* last sweep for dead channels */
    uint64_t reserved[2];
};

struct fg_file {
    uint64_t magic; /* written last */
    uint32_t version;
    uint32_t channels;
    uint64_t size;
    uint64_t slice_ns, switch_ns;
    union {
        pthread_mutex_t mu; /* process-shared, robust */
        uint8_t bytes[64];
    } lock;
    struct fg_dev dev[FAKE_MAXDEV];
    struct fg_chan chan[FG_CHANNELS];
};

static struct fg_file *g_f;
static int g_fd = -1;
static int g_chan[FAKE_MAXDEV]; /* this process's channel per GPU, -1 none */
static uint64_t g_ev_used[FAKE_MAXDEV][FG_EVENTS / 64];
static pthread_mutex_t g_local = PTHREAD_MUTEX_INITIALIZER;
static pthread_once_t g_once = PTHREAD_ONCE_INIT;

static uint64_t env_u64(const char *name, uint64_t def)
{
    const char *v = getenv(name);
    return v && *v ? strtoull(v, NULL, 10) : def;
}

static int chan_lock(int idx, int cmd, short type)
{
    struct flock fl;
    memset(&fl, 0, sizeof fl);
    fl.l_type = type;
    fl.l_whence = SEEK_SET;
    fl.l_start = FG_LOCK_BASE + idx;
    fl.l_len = 1;
    if (fcntl(g_fd, cmd, &fl) != 0)
        return -1;
    return fl.l_type;
}

static void file_format(struct fg_file *f)
{
    memset(f, 0, offsetof(struct fg_file, dev));
    pthread_mutexattr_t a;
    pthread_mutexattr_init(&a);
    pthread_mutexattr_setpshared(&a, PTHREAD_PROCESS_SHARED);
    pthread_mutexattr_setrobust(&a, PTHREAD_MUTEX_ROBUST);
    pthread_mutex_init(&f->lock.mu, &a);
    pthread_mutexattr_destroy(&a);
    for (int d = 0; d < FAKE_MAXDEV; d++) {
        f->dev[d].cur = f->dev[d].next = -1;
        f->dev[d].sim_ns = fake_now_ns();
    }
    f->version = FG_VERSION;
    f->channels = FG_CHANNELS;
    f->size = sizeof *f;
    f->slice_ns = env_u64("FAKE_TIMESLICE_US", 2090) * 1000ull;
    f->switch_ns = env_u64("FAKE_SWITCH_US", 100) * 1000ull;
    __atomic_store_n(&f->magic, FG_MAGIC, __ATOMIC_RELEASE);
}

static int file_valid(const struct fg_file *f)
{
    return __atomic_load_n(&f->magic, __ATOMIC_ACQUIRE) == FG_MAGIC && f->version == FG_VERSION &&
           f->channels == FG_CHANNELS && f->size == sizeof *f;
}

static void after_fork_child(void)
{
    /* the parent's channels and file description (which holds their liveness locks) are not ours */
    for (int d = 0; d < FAKE_MAXDEV; d++)
        g_chan[d] = -1;
    memset(g_ev_used, 0, sizeof g_ev_used);
    pthread_mutex_init(&g_local, NULL);
    if (g_fd >= 0) {
        char p[64];
        snprintf(p, sizeof p, "/proc/self/fd/%d", g_fd);
        int fd = open(p, O_RDWR | O_CLOEXEC);
        close(g_fd);
        g_fd = fd;
    }
}

static void release_all(void);

/* Maps the shared file; without it (unwritable path, bad file) this process gets a private GPU and says so. */
static void open_once(void)
{
    for (int d = 0; d < FAKE_MAXDEV; d++)
        g_chan[d] = -1;
    char def[96];
    const char *path = getenv("FAKE_GPU_STATE");
    if (!path || !*path) {
        snprintf(def, sizeof def, "/tmp/tessera-fake-gpu-%u", (unsigned)getuid());
        path = def;
    }
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0666);
    void *m = MAP_FAILED;
    if (fd >= 0) {
        while (flock(fd, LOCK_EX) != 0 && errno == EINTR) {
        }
        struct stat st;
        if (fstat(fd, &st) == 0 && (st.st_size == 0 || (uint64_t)st.st_size == sizeof(struct fg_file))) {
            int fresh = st.st_size == 0;
            if (!fresh || ftruncate(fd, sizeof(struct fg_file)) == 0)
                m = mmap(NULL, sizeof(struct fg_file), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
            if (m != MAP_FAILED && fresh) {
                file_format(m);
                if (fchmod(fd, 0666) != 0) {
                }
            }
            if (m != MAP_FAILED && !file_valid(m)) {
                munmap(m, sizeof(struct fg_file));
                m = MAP_FAILED;
            }
        }
        flock(fd, LOCK_UN);
    }
    if (m == MAP_FAILED) {
        fprintf(stderr, "fake libcuda: cannot use the shared GPU state %s; this process gets a GPU of its own\n", path);
        if (fd >= 0)
            close(fd);
        fd = -1;
        m = mmap(NULL, sizeof(struct fg_file), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (m == MAP_FAILED)
            return;
        file_format(m);
    }
    g_fd = fd;
    g_f = m;
    pthread_atfork(NULL, NULL, after_fork_child);
    atexit(release_all);
}

static void file_lock(void)
{
    if (pthread_mutex_lock(&g_f->lock.mu) == EOWNERDEAD)
        pthread_mutex_consistent(&g_f->lock.mu); /* a process died mid-update: the timeline stays usable */
}

static void file_unlock(void)
{
    pthread_mutex_unlock(&g_f->lock.mu);
}

/* ---- the timeline (all under the file lock) ---- */

static int chan_alive(int i)
{
    if (g_fd < 0)
        return 1;
    for (int d = 0; d < FAKE_MAXDEV; d++)
        if (g_chan[d] == i)
            return 1;
    int t = chan_lock(i, F_OFD_GETLK, F_WRLCK);
    return t < 0 || t != F_UNLCK;
}

static void chan_free(struct fg_chan *c)
{
    c->completed = c->submitted;
    c->pid = 0;
    c->state = 0;
}

/* A process that died took its context with it: its queued work never runs. */
static void sweep_dead(int dev, uint64_t now)
{
    struct fg_dev *d = &g_f->dev[dev];
    if (now - d->checked_ns < FG_LIVENESS_NS)
        return;
    d->checked_ns = now;
    for (int i = 0; i < FG_CHANNELS; i++) {
        struct fg_chan *c = &g_f->chan[i];
        if (c->state == 1 && c->dev == dev && !chan_alive(i))
            chan_free(c);
    }
}

/* Completes the holder's items at the head that take no GPU time (markers, empty kernels). A marker (an
 * event record) is executed by the GPU for its channel like any other work, so it waits for its channel to be
 * scheduled: an event's timestamp never includes the time before its channel got the GPU. */
static void flush_zero(struct fg_chan *c, uint64_t now)
{
    while (c->completed < c->submitted) {
        struct fg_item *it = &c->q[(c->completed + 1) % FG_QUEUE];
        if (it->ns_left)
            return;
        /* generations only grow (process-wide): a destroyed event's late marker cannot complete a newer one */
        if (it->ev >= 0 && it->ev < FG_EVENTS && it->gen > c->ev[it->ev].gen) {
            c->ev[it->ev].ts = now;
            c->ev[it->ev].gen = it->gen;
        }
        c->last_done_ns = now;
        c->completed++;
    }
}

static int chan_has_work(int i, int dev)
{
    const struct fg_chan *c = &g_f->chan[i];
    return c->state == 1 && c->dev == dev && c->completed < c->submitted;
}

/* Whether channels a and b are one context to the GPU: the same channel, or clients of one MPS server. */
static int same_ctx(int a, int b)
{
    if (a == b)
        return 1;
    if (a < 0 || b < 0)
        return 0;
    uint64_t g = g_f->chan[a].mps_group;
    return g && g == g_f->chan[b].mps_group;
}

static int ctx_has_work(int i, int dev)
{
    if (i < 0)
        return 0;
    if (chan_has_work(i, dev))
        return 1;
    if (!g_f->chan[i].mps_group)
        return 0;
    for (int k = 0; k < FG_CHANNELS; k++)
        if (same_ctx(i, k) && chan_has_work(k, dev))
            return 1;
    return 0;
}

/* The next channel after `after` (round robin) with work, in another context than `after`; -1 none. */
static int next_with_work(int dev, int after)
{
    for (int k = 1; k <= FG_CHANNELS; k++) {
        int i = ((after < 0 ? -1 : after) + k + FG_CHANNELS) % FG_CHANNELS;
        if (!same_ctx(i, after) && chan_has_work(i, dev))
            return i;
    }
    return -1;
}

static void start_switch(struct fg_dev *d, int to)
{
    d->next = to;
    d->switch_end = d->sim_ns + (d->cur < 0 ? 0 : g_f->switch_ns);
    d->switches++;
}

/* Runs the holder's queue until `until`. */
static void run_holder(struct fg_dev *d, struct fg_chan *c, uint64_t until)
{
    flush_zero(c, d->sim_ns);
    while (d->sim_ns < until && c->completed < c->submitted) {
        struct fg_item *it = &c->q[(c->completed + 1) % FG_QUEUE];
        uint64_t dt = until - d->sim_ns < it->ns_left ? until - d->sim_ns : it->ns_left;
        it->ns_left -= dt;
        d->sim_ns += dt;
        d->busy_ns += dt;
        c->busy_ns += dt;
        if (it->ns_left)
            return;
        c->last_done_ns = d->sim_ns;
        c->completed++;
        flush_zero(c, d->sim_ns);
    }
}

static uint64_t mps_pct(const struct fg_chan *c) { return c->mps_pct ? c->mps_pct : 1000; }

/* How fast MPS clients run, calibrated on the H100 with a 4096² fp32 matmul (shared/facts/real-gpu-h100.md),
 * in per mille of the kernel's solo speed on the whole GPU. A client alone runs at its solo curve: the
 * active thread % caps SMs, and a big GEMM loses to wave quantization (30 -> 24.8 %, 50 -> 42.4 %,
 * 100 -> 100.8 %). Busy clients together overlap but contend for memory bandwidth: their total follows the
 * sum of their percentages (30:70 and 50:50 both gave 76.7 %, 100:100 gave 111.5 %), split in proportion to
 * each one's percentage (30:70 -> 22.6 / 54.0). Between the measured points: linear. */
static const uint64_t SOLO_X[] = {0, 300, 500, 1000}, SOLO_Y[] = {0, 248, 424, 1000};
static const uint64_t SUM_X[] = {0, 1000, 2000}, SUM_Y[] = {0, 767, 1115};

static uint64_t curve(const uint64_t *x, const uint64_t *y, int n, uint64_t at)
{
    if (at >= x[n - 1])
        return y[n - 1];
    int i = 1;
    while (at > x[i])
        i++;
    return y[i - 1] + (y[i] - y[i - 1]) * (at - x[i - 1]) / (x[i] - x[i - 1]);
}

static uint64_t solo_rate(const struct fg_chan *c)
{
    uint64_t r = curve(SOLO_X, SOLO_Y, 4, mps_pct(c));
    return r ? r : 1;
}

/* Each busy client's rate (per mille of solo speed), given the sum of their percentages (x10) and their count. */
static uint64_t mps_rate(const struct fg_chan *c, uint64_t total, int n)
{
    if (n == 1)
        return solo_rate(c);
    uint64_t r = curve(SUM_X, SUM_Y, 3, total) * mps_pct(c) / total;
    return r ? r : 1;
}

/* Runs the MPS server whose client `cur` is until `until`: every client's head kernel at once, each at its
 * calibrated rate (mps_rate). */
static void run_mps(struct fg_dev *d, int dev, int cur, uint64_t until)
{
    int idx[FG_CHANNELS];
    while (d->sim_ns < until) {
        int n = 0;
        uint64_t total = 0;
        for (int k = 0; k < FG_CHANNELS; k++) {
            struct fg_chan *c = &g_f->chan[k];
            if (!same_ctx(cur, k) || c->state != 1 || c->dev != dev)
                continue;
            flush_zero(c, d->sim_ns);
            if (c->completed < c->submitted) {
                idx[n++] = k;
                total += mps_pct(c);
            }
        }
        if (!n)
            return;
        uint64_t dt = until - d->sim_ns;
        for (int i = 0; i < n; i++) { /* up to the first kernel that completes */
            struct fg_chan *c = &g_f->chan[idx[i]];
            uint64_t left = c->q[(c->completed + 1) % FG_QUEUE].ns_left, r = mps_rate(c, total, n);
            uint64_t t = (left * 1000 + r - 1) / r;
            if (t < dt)
                dt = t;
        }
        for (int i = 0; i < n; i++) {
            struct fg_chan *c = &g_f->chan[idx[i]];
            struct fg_item *it = &c->q[(c->completed + 1) % FG_QUEUE];
            uint64_t r = mps_rate(c, total, n), t = (it->ns_left * 1000 + r - 1) / r;
            uint64_t w = t <= dt ? it->ns_left : dt * r / 1000;
            it->ns_left -= w;
            c->busy_ns += w;
            d->busy_ns += w;
            if (!it->ns_left) {
                c->last_done_ns = d->sim_ns + dt;
                c->completed++;
            }
        }
        d->sim_ns += dt;
    }
}

static void advance(int dev, uint64_t t)
{
    struct fg_dev *d = &g_f->dev[dev];
    sweep_dead(dev, t);
    while (d->sim_ns < t) {
        if (d->next >= 0) {
            if (t < d->switch_end) {
                d->sim_ns = t;
                return;
            }
            d->sim_ns = d->switch_end;
            d->cur = d->next;
            d->next = -1;
            d->slice_end = d->sim_ns + g_f->slice_ns;
            continue;
        }
        int cur = d->cur;
        int busy = ctx_has_work(cur, dev);
        int other = next_with_work(dev, cur);
        if (!busy) {
            if (other < 0) {
                d->sim_ns = t;
                return;
            }
            start_switch(d, other);
            continue;
        }
        uint64_t until = t;
        if (d->slice_end <= d->sim_ns) {
            if (other >= 0) {
                start_switch(d, other);
                continue;
            }
            d->slice_end = d->sim_ns + g_f->slice_ns; /* alone: a newcomer waits at most one slice */
        }
        if (other >= 0 && d->slice_end < until)
            until = d->slice_end;
        if (g_f->chan[cur].mps_group)
            run_mps(d, dev, cur, until);
        else
            run_holder(d, &g_f->chan[cur], until);
    }
}

/* ---- this process's channels ---- */

static int ready(void)
{
    pthread_once(&g_once, open_once);
    return g_f != NULL;
}

static int channel(int dev)
{
    if (dev < 0 || dev >= FAKE_MAXDEV || !ready())
        return -1;
    int i = g_chan[dev];
    if (i >= 0)
        return i;
    pthread_mutex_lock(&g_local);
    i = g_chan[dev];
    if (i < 0) {
        file_lock();
        for (int k = 0; k < FG_CHANNELS && i < 0; k++) {
            struct fg_chan *c = &g_f->chan[k];
            if (c->state == 1 && chan_alive(k))
                continue;
            if (g_fd >= 0 && chan_lock(k, F_OFD_SETLK, F_WRLCK) < 0)
                continue;
            memset(c, 0, offsetof(struct fg_chan, q));
            const struct fake_mps *m = mps_client();
            c->mps_pct = m ? (uint32_t)m->atp10 : 0;
            c->mps_group = m ? (uint64_t)m->server : 0;
            c->pid = (int32_t)getpid();
            c->dev = dev;
            c->last_done_ns = fake_now_ns();
            c->state = 1;
            for (int e = 0; e < FG_EVENTS; e++)
                c->ev[e].gen = 0;
            i = k;
        }
        file_unlock();
        if (i < 0)
            fprintf(stderr, "fake libcuda: all %d GPU channels are in use\n", FG_CHANNELS);
        g_chan[dev] = i;
    }
    pthread_mutex_unlock(&g_local);
    return i;
}

static void release_all(void)
{
    if (!g_f)
        return;
    file_lock();
    for (int d = 0; d < FAKE_MAXDEV; d++) {
        if (g_chan[d] >= 0) {
            advance(d, fake_now_ns());
            chan_free(&g_f->chan[g_chan[d]]);
            if (g_fd >= 0)
                chan_lock(g_chan[d], F_OFD_SETLK, F_UNLCK);
            g_chan[d] = -1;
        }
    }
    file_unlock();
}

static void wait_phys(int dev, uint64_t seq);

uint64_t gpu_submit(int dev, uint64_t ns, int ev, uint64_t gen)
{
    dev = fake_phys(dev); /* the shared state is per physical GPU */
    int i = channel(dev);
    if (i < 0)
        return 0;
    struct fg_chan *c = &g_f->chan[i];
    for (;;) {
        file_lock();
        uint64_t now = fake_now_ns();
        advance(dev, now);
        if (c->submitted - c->completed < FG_QUEUE) {
            uint64_t s = ++c->submitted;
            struct fg_item *it = &c->q[s % FG_QUEUE];
            it->ns_left = ns;
            it->submit_ns = now;
            it->ev = ev;
            it->gen = gen;
            file_unlock();
            return s;
        }
        uint64_t head = c->completed + 1;
        file_unlock();
        wait_phys(dev, head); /* the queue is full: like the driver, block until there is room */
    }
}

int gpu_done(int dev, uint64_t seq)
{
    dev = fake_phys(dev);
    int i = channel(dev);
    if (i < 0 || seq == 0)
        return 1;
    file_lock();
    advance(dev, fake_now_ns());
    int done = g_f->chan[i].completed >= seq;
    file_unlock();
    return done;
}

/* Sleeps until item seq completed: at least until the earliest moment it could (its remaining work if this
 * channel had the GPU to itself), then looks again. Functions below take CUDA ordinals; the shared state is
 * indexed by physical GPU (fake_phys). */
static void wait_phys(int dev, uint64_t seq)
{
    int i = channel(dev);
    if (i < 0 || seq == 0)
        return;
    struct fg_chan *c = &g_f->chan[i];
    for (;;) {
        file_lock();
        uint64_t now = fake_now_ns();
        advance(dev, now);
        if (c->completed >= seq || c->submitted < seq) {
            file_unlock();
            return;
        }
        struct fg_dev *d = &g_f->dev[dev];
        uint64_t left = 0;
        for (uint64_t s = c->completed + 1; s <= seq; s++)
            left += c->q[s % FG_QUEUE].ns_left;
        left = left * 1000 / solo_rate(c); /* at least this long: it runs no faster than alone */
        if (d->cur != i)
            left += d->next == i ? d->switch_end - d->sim_ns : g_f->switch_ns;
        file_unlock();
        fake_sleep_until(now + (left > 20000 ? left : 20000));
    }
}

void gpu_wait(int dev, uint64_t seq) { wait_phys(fake_phys(dev), seq); }

uint64_t gpu_last_seq(int dev)
{
    dev = fake_phys(dev);
    int i = channel(dev);
    return i < 0 ? 0 : __atomic_load_n(&g_f->chan[i].submitted, __ATOMIC_ACQUIRE);
}

int gpu_event_slot_new(int dev)
{
    dev = fake_phys(dev);
    int i = channel(dev);
    if (i < 0)
        return -1;
    int got = -1;
    pthread_mutex_lock(&g_local);
    for (int w = 0; w < FG_EVENTS / 64 && got < 0; w++) {
        if (~g_ev_used[dev][w]) {
            int b = __builtin_ctzll(~g_ev_used[dev][w]);
            g_ev_used[dev][w] |= 1ull << b;
            got = w * 64 + b;
        }
    }
    pthread_mutex_unlock(&g_local);
    return got;
}

void gpu_event_slot_free(int dev, int slot)
{
    dev = fake_phys(dev);
    if (dev < 0 || dev >= FAKE_MAXDEV || slot < 0 || slot >= FG_EVENTS)
        return;
    pthread_mutex_lock(&g_local);
    g_ev_used[dev][slot / 64] &= ~(1ull << (slot % 64));
    pthread_mutex_unlock(&g_local);
}

int gpu_event_slot_done(int dev, int slot, uint64_t gen, uint64_t *ts)
{
    dev = fake_phys(dev);
    int i = channel(dev);
    if (i < 0 || slot < 0 || slot >= FG_EVENTS)
        return 1;
    file_lock();
    advance(dev, fake_now_ns());
    struct fg_evslot *e = &g_f->chan[i].ev[slot];
    int done = e->gen >= gen;
    if (done && ts)
        *ts = e->ts;
    file_unlock();
    return done;
}

/* ---- what tests read ---- */

/* GPU time this process's work ran on dev (its share of the GPU). */
API uint64_t fakeBusyNs(int dev)
{
    dev = fake_phys(dev);
    int i = channel(dev);
    if (i < 0)
        return 0;
    file_lock();
    advance(dev, fake_now_ns());
    uint64_t b = g_f->chan[i].busy_ns;
    file_unlock();
    return b;
}

/* GPU time all processes' work ran on dev. */
API uint64_t fakeGpuBusyNs(int dev)
{
    dev = fake_phys(dev);
    if (dev < 0 || dev >= FAKE_MAXDEV || !ready())
        return 0;
    file_lock();
    advance(dev, fake_now_ns());
    uint64_t b = g_f->dev[dev].busy_ns;
    file_unlock();
    return b;
}

/* Context switches on dev so far. */
API uint64_t fakeGpuSwitches(int dev)
{
    dev = fake_phys(dev);
    if (dev < 0 || dev >= FAKE_MAXDEV || !ready())
        return 0;
    return __atomic_load_n(&g_f->dev[dev].switches, __ATOMIC_RELAXED);
}
