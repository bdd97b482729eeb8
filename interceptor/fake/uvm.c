/* Device memory shared by processes, managed memory and its paging, for the oversubscription tests. Only
 * with FAKE_GPU_MEM=<path> (a file every process of a test maps): then a GPU's memory (FAKE_GPU_MEM_MB) is
 * one pool for all of them, as on a real GPU, instead of each process's own. Without it nothing here is
 * used and the fake behaves as before (managed memory is device memory of the calling process).
 *
 * The model, a small UVM: cuMemAllocManaged takes no device memory. fakeMemTouch(p, n) stands for a kernel
 * reading n bytes of an allocation: device memory costs nothing; a managed allocation's pages that are not
 * on the device move there (taking free device memory, first evicting this process's least recently
 * touched managed pages, then any process's), each moved byte costing time (FAKE_PAGE_MBPS, default
 * 10000 MB/s: a PCIe 4 x16 link); what still does not fit is read over the link from host memory at the
 * same cost without staying. A plain allocation (cuMemAlloc, ...) that finds the device full of managed
 * pages evicts them, as the driver does; it fails only when plain allocations fill the device. Another
 * process's evicted pages are owed as `debt`: their owner drops that many of its resident bytes when it
 * next touches or frees. Every move is also written down as traffic on the GPU's PCIe link (uvm_state.h),
 * which the fake NVML reports as nvmlDeviceGetPcieThroughput: a claim that pages shows a busy link, one whose
 * memory stays on the device does not. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fake.h"
#include "uvm_state.h"

_Static_assert(UVM_DEVS == FAKE_MAXDEV, "one link per fake GPU");

#define UVM_RANGES 1024

/* this process's managed allocations */
static struct range {
    uint64_t p, size, resident, touched;
    int dev;
    unsigned advice; /* bit per cuMemAdvise advice given */
} g_r[UVM_RANGES];
static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static struct uvm_file *g_f;
static int g_fd = -1;
static uint64_t g_clock, g_rate_bps = 10000ull * 1000000ull;
static uint64_t g_migrated, g_evicted, g_remote, g_paging_ns; /* this process's paging, for fakeMemStats */
static pthread_once_t g_once = PTHREAD_ONCE_INIT;

static void open_once(void)
{
    const char *path = getenv("FAKE_GPU_MEM");
    const char *mbps = getenv("FAKE_PAGE_MBPS");
    if (mbps && *mbps && strtoull(mbps, NULL, 10))
        g_rate_bps = strtoull(mbps, NULL, 10) * 1000000ull;
    if (!path || !*path)
        return;
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0666);
    if (fd < 0)
        return;
    flock(fd, LOCK_EX);
    struct stat st;
    void *m = MAP_FAILED;
    if (fstat(fd, &st) == 0 && (st.st_size == 0 || (uint64_t)st.st_size == sizeof(struct uvm_file)) &&
        (st.st_size || ftruncate(fd, sizeof(struct uvm_file)) == 0))
        m = mmap(NULL, sizeof(struct uvm_file), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (m != MAP_FAILED &&
        (((struct uvm_file *)m)->magic != UVM_MAGIC || ((struct uvm_file *)m)->version != UVM_VERSION)) {
        memset(m, 0, sizeof(struct uvm_file));
        ((struct uvm_file *)m)->magic = UVM_MAGIC;
        ((struct uvm_file *)m)->version = UVM_VERSION;
    }
    flock(fd, LOCK_UN);
    if (m == MAP_FAILED) {
        close(fd);
        return;
    }
    g_f = m;
    g_fd = fd;
}

int uvm_on(void)
{
    pthread_once(&g_once, open_once);
    return g_f != NULL;
}

/* The shared counters are changed under an flock of the file (every process) and g_mu (this one's threads). */
static void lock(void)
{
    pthread_mutex_lock(&g_mu);
    flock(g_fd, LOCK_EX);
}

static void unlock(void)
{
    flock(g_fd, LOCK_UN);
    pthread_mutex_unlock(&g_mu);
}

/* Under the lock: rx bytes to dev and tx bytes from it cross its link from now on, at the paging rate (what
 * pay() then sleeps). Merged into the newest span while that one runs or ended less than a millisecond ago,
 * so a process that pages in many small steps fills few spans. */
static void carry(int dev, uint64_t rx, uint64_t tx)
{
    if (!rx && !tx)
        return;
    struct uvm_dev *u = &g_f->dev[dev];
    uint64_t now = fake_now_ns(), end = now + (rx + tx) * 1000000000ull / g_rate_bps;
    struct uvm_span *last = u->spans ? &u->span[(u->spans - 1) % UVM_SPANS] : NULL;
    if (last && last->start_ns <= now && now <= last->end_ns + 1000000ull) {
        last->end_ns = end > last->end_ns ? end : last->end_ns;
        last->rx += rx;
        last->tx += tx;
        return;
    }
    u->span[u->spans % UVM_SPANS] = (struct uvm_span){ .start_ns = now, .end_ns = end, .rx = rx, .tx = tx };
    u->spans++;
}

static void pay(uint64_t bytes)
{
    if (!bytes)
        return;
    uint64_t ns = bytes * 1000000000ull / g_rate_bps;
    g_paging_ns += ns;
    fake_sleep_until(fake_now_ns() + ns);
}

/* Under the lock: drops up to `want` resident bytes of this process's managed pages on dev, least recently
 * touched first, skipping `keep`; returns how many were dropped. The caller fixes the shared counters. */
static uint64_t drop_own(int dev, uint64_t want, const struct range *keep)
{
    uint64_t dropped = 0;
    while (dropped < want) {
        struct range *lru = NULL;
        for (int i = 0; i < UVM_RANGES; i++) {
            struct range *r = &g_r[i];
            if (r->p && r->dev == dev && r->resident && r != keep && (!lru || r->touched < lru->touched))
                lru = r;
        }
        if (!lru)
            break;
        uint64_t take = lru->resident < want - dropped ? lru->resident : want - dropped;
        lru->resident -= take;
        dropped += take;
    }
    return dropped;
}

/* Under the lock: what other processes evicted of ours, no longer resident. */
static void settle_debt(int dev)
{
    struct uvm_dev *u = &g_f->dev[dev];
    if (u->debt)
        u->debt -= drop_own(dev, u->debt, NULL);
}

/* Under the lock: makes `need` bytes free on dev by evicting managed pages, ours first; 0 when it cannot. */
static int make_room(int dev, uint64_t cap, uint64_t need, const struct range *keep, uint64_t *evicted)
{
    struct uvm_dev *u = &g_f->dev[dev];
    uint64_t free_b = u->used < cap ? cap - u->used : 0;
    if (free_b >= need)
        return 1;
    uint64_t short_b = need - free_b;
    uint64_t own = drop_own(dev, short_b, keep);
    u->used -= own;
    u->managed -= own;
    *evicted += own;
    short_b -= own;
    uint64_t others = u->managed > u->debt ? u->managed - u->debt : 0; /* theirs, still resident */
    if (keep)
        others = others > keep->resident ? others - keep->resident : 0;
    if (short_b > others)
        return 0;
    u->used -= short_b;
    u->managed -= short_b;
    u->debt += short_b;
    *evicted += short_b;
    return 1;
}

CUresult uvm_take(int dev, uint64_t size, uint64_t cap)
{
    lock();
    uint64_t evicted = 0;
    settle_debt(dev);
    struct uvm_dev *u = &g_f->dev[dev];
    /* plain allocations may evict managed pages, never other plain ones */
    int ok = u->used - u->managed + size <= cap && make_room(dev, cap, size, NULL, &evicted);
    if (ok)
        u->used += size;
    g_evicted += evicted;
    carry(dev, 0, evicted);
    unlock();
    pay(evicted);
    return ok ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}

void uvm_give(int dev, uint64_t size)
{
    lock();
    g_f->dev[dev].used -= size;
    unlock();
}

uint64_t uvm_used(int dev)
{
    return __atomic_load_n(&g_f->dev[dev].used, __ATOMIC_SEQ_CST);
}

static struct range *find_locked(uint64_t p)
{
    for (int i = 0; i < UVM_RANGES; i++)
        if (g_r[i].p && p >= g_r[i].p && p < g_r[i].p + g_r[i].size)
            return &g_r[i];
    return NULL;
}

int uvm_managed_add(uint64_t p, uint64_t size, int dev)
{
    pthread_mutex_lock(&g_mu);
    struct range *r = NULL;
    for (int i = 0; i < UVM_RANGES && !r; i++)
        if (!g_r[i].p)
            r = &g_r[i];
    if (r)
        *r = (struct range){ .p = p, .size = size, .dev = dev };
    pthread_mutex_unlock(&g_mu);
    return r != NULL;
}

void uvm_managed_free(uint64_t p)
{
    lock();
    struct range *r = find_locked(p);
    if (r && r->p == p) {
        settle_debt(r->dev);
        g_f->dev[r->dev].used -= r->resident;
        g_f->dev[r->dev].managed -= r->resident;
        memset(r, 0, sizeof *r);
    }
    unlock();
}

CUresult uvm_advise(uint64_t p, int advice)
{
    pthread_mutex_lock(&g_mu);
    struct range *r = find_locked(p);
    if (r && advice >= 0 && advice < 32)
        r->advice |= 1u << advice;
    pthread_mutex_unlock(&g_mu);
    return r ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

/* A kernel reading the first `n` bytes of the allocation holding p (device memory: free). */
API CUresult fakeMemTouch(CUdeviceptr p, size_t n)
{
    if (!uvm_on())
        return CUDA_ERROR_NOT_INITIALIZED;
    uint64_t cap = fake_gpu_mem();
    lock();
    struct range *r = find_locked(p);
    if (!r) {
        unlock();
        return CUDA_SUCCESS;
    }
    settle_debt(r->dev);
    r->touched = ++g_clock;
    uint64_t want = n < r->size ? n : r->size;
    uint64_t need = want > r->resident ? want - r->resident : 0, evicted = 0, moved = 0;
    struct uvm_dev *u = &g_f->dev[r->dev];
    for (uint64_t step = need; step && !moved; step /= 2) /* as much as the device can hold */
        if (make_room(r->dev, cap, step, r, &evicted)) {
            u->used += step;
            u->managed += step;
            r->resident += step;
            moved = step;
        }
    g_migrated += moved;
    g_evicted += evicted;
    g_remote += need - moved;
    carry(r->dev, need, evicted); /* migrated and read remotely: to the device; evicted: from it */
    unlock();
    pay(moved + evicted + (need - moved));
    return CUDA_SUCCESS;
}

/* Whether p lies in managed memory, how much of that allocation is on the device, and its advice bits. */
API CUresult fakeMemInfo(CUdeviceptr p, int *managed, uint64_t *resident, unsigned *advice)
{
    pthread_mutex_lock(&g_mu);
    struct range *r = find_locked(p);
    *managed = r != NULL;
    *resident = r ? r->resident : 0;
    *advice = r ? r->advice : 0;
    pthread_mutex_unlock(&g_mu);
    return CUDA_SUCCESS;
}

/* This process's paging: bytes moved to the device, evicted from it, read remotely, and the time it took. */
API void fakeMemStats(uint64_t *migrated, uint64_t *evicted, uint64_t *remote, uint64_t *paging_ns)
{
    pthread_mutex_lock(&g_mu);
    *migrated = g_migrated;
    *evicted = g_evicted;
    *remote = g_remote;
    *paging_ns = g_paging_ns;
    pthread_mutex_unlock(&g_mu);
}
