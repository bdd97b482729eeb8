/* Test driver for libtessera against the fake driver. Each subcommand is one
 * check (exit 0 = pass) and prints why it failed. Run under LD_PRELOAD by
 * tests/run.sh, which sets up claim directories and the environment. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "tessera_cuda.h"
#include "region.h"

#include "testutil.h"
#include "regionutil.h"

static uint64_t used_view(void)
{
    size_t f, t;
    CHECK(cuMemGetInfo_v2(&f, &t) == CUDA_SUCCESS, "meminfo");
    return t - f;
}

/* ---------- memory ---------- */

static int t_limit(int argc, char **argv)
{
    CHECK(argc >= 1, "usage: limit <bytes>");
    uint64_t limit = strtoull(argv[0], NULL, 0);
    ctx_on(0);
    size_t f, t, tm;
    CHECK(cuMemGetInfo_v2(&f, &t) == CUDA_SUCCESS && t == limit && f == limit, "fresh view total %zu free %zu", t, f);
    CHECK(cuDeviceTotalMem_v2(&tm, 0) == CUDA_SUCCESS && tm == limit, "cuDeviceTotalMem %zu", tm);
    CUdeviceptr a, b, c, d;
    uint64_t part = limit / 10 * 6;
    CHECK(cuMemAlloc_v2(&a, part) == CUDA_SUCCESS, "first alloc");
    CHECK(cuMemAlloc_v2(&b, limit - part + 1) == CUDA_ERROR_OUT_OF_MEMORY, "one byte over must fail");
    CHECK(fakeUsedBytes(0) == part, "a refused allocation never reached the driver: %llu", (unsigned long long)fakeUsedBytes(0));
    CHECK(cuMemAlloc_v2(&b, limit - part) == CUDA_SUCCESS, "exactly up to the limit");
    CHECK(cuMemGetInfo_v2(&f, &t) == CUDA_SUCCESS && f == 0 && t == limit, "full view free %zu", f);
    CHECK(cuMemAlloc_v2(&c, 1) == CUDA_ERROR_OUT_OF_MEMORY, "full");
    CHECK(cuMemFree_v2(b) == CUDA_SUCCESS, "free b");
    CHECK(used_view() == part, "used after free %llu", (unsigned long long)used_view());
    CHECK(cuMemFree_v2(a) == CUDA_SUCCESS, "free a");
    CHECK(used_view() == 0, "all given back");
    CHECK(cuMemFree_v2(a) != CUDA_SUCCESS, "double free is the driver's error");
    CHECK(used_view() == 0, "double free does not underflow");
    CHECK(cuMemAlloc_v2(&d, limit) == CUDA_SUCCESS, "whole limit in one piece");
    CHECK(cuMemFree_v2(d) == CUDA_SUCCESS, "free d");
    /* the other GPU is not limited by this claim */
    ctx_on(1);
    CHECK(cuMemAlloc_v2(&a, limit * 2) == CUDA_SUCCESS, "GPU 1 unlimited");
    CHECK(cuMemGetInfo_v2(&f, &t) == CUDA_SUCCESS && t > limit * 2, "GPU 1 view is the real one");
    return 0;
}

static int t_paths(int argc, char **argv)
{
    CHECK(argc >= 1, "usage: paths <bytes>");
    uint64_t limit = strtoull(argv[0], NULL, 0);
    ctx_on(0);
    CUdeviceptr p[8];
    size_t pitch;
    /* pitch: 1000 bytes wide rows are padded by the driver (FAKE_PITCH) */
    CHECK(cuMemAllocPitch_v2(&p[0], &pitch, 1000, 1000, 4) == CUDA_SUCCESS, "pitch");
    CHECK(used_view() == (uint64_t)pitch * 1000, "pitch counted as %zu*1000, view %llu", pitch, (unsigned long long)used_view());
    uint64_t u = used_view();
    CHECK(cuMemAllocManaged(&p[1], 3 * MiB, 1) == CUDA_SUCCESS, "managed");
    u += 3 * MiB;
    CHECK(cuMemAllocAsync(&p[2], 5 * MiB, NULL) == CUDA_SUCCESS, "async");
    u += 5 * MiB;
    CHECK(cuMemAllocAsync_ptsz(&p[3], 7 * MiB, NULL) == CUDA_SUCCESS, "async ptsz");
    u += 7 * MiB;
    CHECK(cuMemAllocFromPoolAsync(&p[4], 11 * MiB, NULL, NULL) == CUDA_SUCCESS, "pool");
    u += 11 * MiB;
    CHECK(used_view() == u, "sum of pointer allocations");
    CUmemAllocationProp prop;
    memset(&prop, 0, sizeof prop);
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = 0;
    CUmemGenericAllocationHandle h;
    CHECK(cuMemCreate(&h, 13 * MiB, &prop, 0) == CUDA_SUCCESS, "cuMemCreate");
    u += 13 * MiB;
    CUDA_ARRAY_DESCRIPTOR ad = { 1024, 1024, CU_AD_FORMAT_FLOAT, 4 };
    CUarray arr, arr3;
    CHECK(cuArrayCreate_v2(&arr, &ad) == CUDA_SUCCESS, "array");
    u += 16 * MiB;
    CUDA_ARRAY3D_DESCRIPTOR a3 = { 256, 256, 16, CU_AD_FORMAT_UNSIGNED_INT8, 1, 0 };
    CHECK(cuArray3DCreate_v2(&arr3, &a3) == CUDA_SUCCESS, "3d array");
    u += 1 * MiB;
    CUmipmappedArray mm;
    CUDA_ARRAY3D_DESCRIPTOR am = { 512, 512, 0, CU_AD_FORMAT_FLOAT, 1, 0 };
    CHECK(cuMipmappedArrayCreate(&mm, &am, 2) == CUDA_SUCCESS, "mipmapped");
    u += 1 * MiB + 256 * 1024; /* level 0 + level 1 */
    CHECK(used_view() == u, "all kinds counted: view %llu expected %llu", (unsigned long long)used_view(), (unsigned long long)u);
    /* a cuMemCreate past the limit fails without reaching the driver */
    CUmemGenericAllocationHandle h2;
    uint64_t drv = fakeUsedBytes(0);
    CHECK(cuMemCreate(&h2, limit, &prop, 0) == CUDA_ERROR_OUT_OF_MEMORY, "cuMemCreate over the limit");
    CHECK(cuArrayCreate_v2(&arr, &(CUDA_ARRAY_DESCRIPTOR){ limit, 1, CU_AD_FORMAT_UNSIGNED_INT8, 1 }) == CUDA_ERROR_OUT_OF_MEMORY, "array over the limit");
    CHECK(cuMemAllocManaged(&p[5], limit, 1) == CUDA_ERROR_OUT_OF_MEMORY, "managed over the limit");
    CHECK(fakeUsedBytes(0) == drv, "refusals never reached the driver");
    CHECK(cuMemFree_v2(p[0]) == CUDA_SUCCESS && cuMemFree_v2(p[1]) == CUDA_SUCCESS, "free");
    CHECK(cuMemFreeAsync(p[2], NULL) == CUDA_SUCCESS && cuMemFreeAsync(p[3], NULL) == CUDA_SUCCESS && cuMemFreeAsync(p[4], NULL) == CUDA_SUCCESS, "free async");
    CHECK(cuMemRelease(h) == CUDA_SUCCESS, "release");
    CHECK(cuArrayDestroy(arr) == CUDA_SUCCESS && cuArrayDestroy(arr3) == CUDA_SUCCESS, "array destroy");
    CHECK(cuMipmappedArrayDestroy(mm) == CUDA_SUCCESS, "mipmapped destroy");
    CHECK(used_view() == 0, "everything given back, view %llu", (unsigned long long)used_view());
    return 0;
}

typedef CUresult (*alloc_fn)(CUdeviceptr *, size_t);
typedef CUresult (*gpa_fn)(const char *, void **, int, cuuint64_t);
typedef CUresult (*gpa2_fn)(const char *, void **, int, cuuint64_t, int *);

/* The CUDA runtime finds the driver through dlopen + dlsym and cuGetProcAddress. */
static int t_procaddr(int argc, char **argv)
{
    CHECK(argc >= 1, "usage: procaddr <bytes>");
    uint64_t limit = strtoull(argv[0], NULL, 0);
    ctx_on(0);
    void *h = dlopen("libcuda.so.1", RTLD_NOW);
    CHECK(h, "dlopen");
    alloc_fn viadlsym = (alloc_fn)dlsym(h, "cuMemAlloc_v2");
    gpa_fn gpa = (gpa_fn)dlsym(h, "cuGetProcAddress");
    gpa2_fn gpa2 = (gpa2_fn)dlsym(h, "cuGetProcAddress_v2");
    CHECK(viadlsym && gpa && gpa2, "dlsym");
    alloc_fn v1 = NULL, v2 = NULL, v3 = NULL;
    int status = -1;
    CHECK(gpa("cuMemAlloc", (void **)&v1, 12000, 0) == CUDA_SUCCESS && v1, "cuGetProcAddress");
    CHECK(gpa2("cuMemAlloc", (void **)&v2, 12040, 0, &status) == CUDA_SUCCESS && v2 && status == 0, "cuGetProcAddress_v2");
    /* the runtime may also ask the driver for cuGetProcAddress itself */
    gpa2_fn gpa2b = NULL;
    CHECK(gpa2("cuGetProcAddress", (void **)&gpa2b, 12040, 0, &status) == CUDA_SUCCESS && gpa2b, "gpa of gpa");
    CHECK(gpa2b("cuMemAlloc", (void **)&v3, 12040, 0, &status) == CUDA_SUCCESS && v3, "via gpa of gpa");
    alloc_fn fns[] = { viadlsym, v1, v2, v3 };
    for (int i = 0; i < 4; i++) {
        CUdeviceptr a, b;
        CHECK(fns[i](&a, limit) == CUDA_SUCCESS, "path %d: full limit", i);
        CHECK(fns[i](&b, 1) == CUDA_ERROR_OUT_OF_MEMORY, "path %d: limit applies", i);
        CHECK(cuMemFree_v2(a) == CUDA_SUCCESS, "free");
    }
    /* symbols we do not hook come back unchanged and still work */
    CUresult (*sync)(void) = NULL;
    CHECK(gpa("cuCtxSynchronize", (void **)&sync, 12000, 0) == CUDA_SUCCESS && sync && sync() == CUDA_SUCCESS, "unhooked symbol");
    CHECK(dlsym(h, "cuDoesNotExist") == NULL, "missing symbol stays missing");
    return 0;
}

static int t_unlimited(int argc, char **argv)
{
    CHECK(argc >= 1, "usage: unlimited <bytes>");
    uint64_t n = strtoull(argv[0], NULL, 0);
    ctx_on(0);
    CUdeviceptr a;
    size_t f, t;
    CHECK(cuMemAlloc_v2(&a, n) == CUDA_SUCCESS, "pass-through allocation of %llu", (unsigned long long)n);
    CHECK(cuMemGetInfo_v2(&f, &t) == CUDA_SUCCESS && t == 81920ull * MiB, "real total %zu", t);
    CHECK(cuMemFree_v2(a) == CUDA_SUCCESS, "free");
    return 0;
}

/* device <ordinal> <expected total>: the limit follows the GPU's UUID */
static int t_device(int argc, char **argv)
{
    CHECK(argc >= 2, "usage: device <ordinal> <expected-total>");
    int dev = atoi(argv[0]);
    uint64_t want = strtoull(argv[1], NULL, 0);
    ctx_on(dev);
    size_t f, t;
    CHECK(cuMemGetInfo_v2(&f, &t) == CUDA_SUCCESS && t == want, "ordinal %d total %zu want %llu", dev, t, (unsigned long long)want);
    CUdeviceptr a;
    if (want < 81920ull * MiB)
        CHECK(cuMemAlloc_v2(&a, want + 1) == CUDA_ERROR_OUT_OF_MEMORY, "over the limit");
    return 0;
}

/* IPC: the importer does not count the exporter's bytes again */
static int t_ipc(int argc, char **argv)
{
    CHECK(argc >= 1, "usage: ipc <bytes>");
    uint64_t limit = strtoull(argv[0], NULL, 0);
    ctx_on(0);
    CUdeviceptr a;
    CHECK(cuMemAlloc_v2(&a, limit / 2) == CUDA_SUCCESS, "alloc");
    char hex[32];
    snprintf(hex, sizeof hex, "%llx", (unsigned long long)a);
    char half[32];
    snprintf(half, sizeof half, "%llu", (unsigned long long)(limit / 2));
    char *args[] = { "tcuda", "ipc_import", hex, half, NULL };
    CHECK(wait_ok(spawn(args)), "importer");
    CHECK(used_view() == limit / 2, "still the exporter's bytes only");
    CHECK(cuMemFree_v2(a) == CUDA_SUCCESS && used_view() == 0, "free");
    return 0;
}

static int t_ipc_import(int argc, char **argv)
{
    CHECK(argc >= 2, "usage");
    CUdeviceptr src = strtoull(argv[0], NULL, 16), p;
    uint64_t half = strtoull(argv[1], NULL, 0);
    ctx_on(0);
    CUipcMemHandle h;
    CHECK(cuIpcGetMemHandle(&h, src) == CUDA_SUCCESS, "handle");
    CHECK(cuIpcOpenMemHandle_v2(&p, h, 1) == CUDA_SUCCESS, "open");
    CHECK(used_view() == half, "import not counted: %llu", (unsigned long long)used_view());
    CHECK(cuIpcCloseMemHandle(p) == CUDA_SUCCESS, "close");
    CHECK(used_view() == half, "close does not give back the exporter's bytes");
    return 0;
}

/* ---------- many processes and threads ---------- */

struct stress_arg {
    uint64_t limit;
    int iters;
    unsigned seed;
    uint64_t *held; /* shared across processes: bytes the test holds */
    int ooms, oks;
};

static void *stress_thread(void *p)
{
    struct stress_arg *a = p;
    CUcontext c;
    CHECK(cuCtxCreate_v2(&c, 0, 0) == CUDA_SUCCESS, "ctx");
    CUdeviceptr ptr[4] = { 0 };
    uint64_t sz[4] = { 0 };
    for (int i = 0; i < a->iters; i++) {
        int k = (int)(rand_r(&a->seed) % 4);
        if (ptr[k]) {
            __atomic_sub_fetch(a->held, sz[k], __ATOMIC_SEQ_CST);
            CHECK(cuMemFree_v2(ptr[k]) == CUDA_SUCCESS, "free");
            ptr[k] = 0;
        } else {
            sz[k] = (1 + rand_r(&a->seed) % 64) * MiB;
            CUresult rc = (i & 1) ? cuMemAlloc_v2(&ptr[k], sz[k]) : cuMemAllocAsync(&ptr[k], sz[k], NULL);
            if (rc == CUDA_SUCCESS) {
                uint64_t h = __atomic_add_fetch(a->held, sz[k], __ATOMIC_SEQ_CST);
                CHECK(h <= a->limit, "held %llu over the limit", (unsigned long long)h);
                a->oks++;
            } else {
                CHECK(rc == CUDA_ERROR_OUT_OF_MEMORY, "rc %d", rc);
                ptr[k] = 0;
                a->ooms++;
            }
        }
    }
    for (int k = 0; k < 4; k++) {
        if (ptr[k]) {
            __atomic_sub_fetch(a->held, sz[k], __ATOMIC_SEQ_CST);
            CHECK(cuMemFree_v2(ptr[k]) == CUDA_SUCCESS, "free");
        }
    }
    return NULL;
}

static uint64_t *map_counter(const char *path)
{
    int fd = open(path, O_RDWR | O_CREAT, 0600);
    CHECK(fd >= 0 && ftruncate(fd, 4096) == 0, "counter file");
    void *m = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    CHECK(m != MAP_FAILED, "mmap counter");
    return m;
}

static int t_stress_child(int argc, char **argv)
{
    CHECK(argc >= 4, "usage");
    uint64_t limit = strtoull(argv[0], NULL, 0);
    int threads = atoi(argv[1]), iters = atoi(argv[2]);
    uint64_t *held = map_counter(argv[3]);
    cuInit(0);
    pthread_t th[64];
    struct stress_arg a[64];
    int ooms = 0, oks = 0;
    for (int i = 0; i < threads; i++) {
        a[i] = (struct stress_arg){ limit, iters, (unsigned)(getpid() * 131 + i), held, 0, 0 };
        pthread_create(&th[i], NULL, stress_thread, &a[i]);
    }
    for (int i = 0; i < threads; i++) {
        pthread_join(th[i], NULL);
        ooms += a[i].ooms;
        oks += a[i].oks;
    }
    CHECK(fakeUsedBytes(0) == 0, "driver holds nothing at the end");
    printf("child %d: %d allocations, %d refused\n", getpid(), oks, ooms);
    return oks > 0 && ooms > 0 ? 0 : 2;
}

/* The claim's total under its lock (a read lock on TR_LOCK_BYTE, the byte the library's writers lock):
 * one moment's sum. Unlocked, a slot read before its process gave bytes back plus another slot read after a
 * process took them can add up to more than the claim ever held. Releases skip the lock, but they only lower. */
static uint64_t claim_total_locked(int fd, const struct tr_region *r, int g)
{
    struct flock fl = { .l_type = F_RDLCK, .l_whence = SEEK_SET, .l_start = TR_LOCK_BYTE, .l_len = 1 };
    CHECK(fcntl(fd, F_OFD_SETLKW, &fl) == 0, "read lock on the region: %s", strerror(errno));
    uint64_t sum = claim_total(r, g);
    fl.l_type = F_UNLCK;
    fcntl(fd, F_OFD_SETLK, &fl);
    return sum;
}

static int t_stress(int argc, char **argv)
{
    CHECK(argc >= 5, "usage: stress <bytes> <procs> <threads> <iters> <claimdir>");
    uint64_t limit = strtoull(argv[0], NULL, 0);
    int procs = atoi(argv[1]);
    char counter[600];
    snprintf(counter, sizeof counter, "%s/held", argv[4]);
    uint64_t *held = map_counter(counter);
    *held = 0;
    pid_t kids[16];
    for (int i = 0; i < procs; i++) {
        char *args[] = { "tcuda", "stress_child", argv[0], argv[2], argv[3], counter, NULL };
        kids[i] = spawn(args);
    }
    /* watch the shared total while the children run: it must never pass the limit */
    struct tr_region *r = NULL;
    int rfd = -1;
    uint64_t peak = 0;
    int alive = procs, ok = 1;
    while (alive > 0) {
        if (!r && access(argv[4], F_OK) == 0) {
            char rp[600];
            snprintf(rp, sizeof rp, "%s/region", argv[4]);
            struct stat st;
            if (stat(rp, &st) == 0 && st.st_size == (off_t)sizeof(struct tr_region)) {
                r = map_region(argv[4]);
                rfd = open(rp, O_RDONLY);
                CHECK(rfd >= 0, "open %s", rp);
            }
        }
        if (r && r->magic == TR_MAGIC) {
            uint64_t u = claim_total_locked(rfd, r, 0);
            CHECK(u <= limit, "region total %llu over the limit", (unsigned long long)u);
            if (u > peak)
                peak = u;
        }
        for (int i = 0; i < procs; i++) {
            if (kids[i] > 0) {
                int st;
                pid_t w = waitpid(kids[i], &st, WNOHANG);
                if (w == kids[i]) {
                    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
                        ok = 0;
                    kids[i] = 0;
                    alive--;
                }
            }
        }
        usleep(500);
    }
    CHECK(ok, "a child failed");
    CHECK(r, "region seen");
    CHECK(claim_total(r, 0) == 0, "all bytes given back: %llu", (unsigned long long)claim_total(r, 0));
    CHECK(peak > limit / 2, "the limit was approached (peak %llu)", (unsigned long long)peak);
    close(rfd);
    printf("peak %llu of %llu\n", (unsigned long long)peak, (unsigned long long)limit);
    return 0;
}

/* ---------- dead processes ---------- */

static int t_hold(int argc, char **argv)
{
    CHECK(argc >= 1, "usage: hold <bytes>");
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    ctx_on(0);
    CUdeviceptr a;
    uint64_t n = strtoull(argv[0], NULL, 0);
    CHECK(n == 0 || cuMemAlloc_v2(&a, n) == CUDA_SUCCESS, "hold alloc"); /* 0: hold just the context */
    printf("ready\n");
    fflush(stdout);
    pause();
    return 0;
}

static void *churn_thread(void *p)
{
    unsigned seed = (unsigned)(uintptr_t)p;
    CUcontext c;
    cuCtxCreate_v2(&c, 0, 0);
    for (;;) {
        CUdeviceptr a;
        if (cuMemAlloc_v2(&a, (1 + rand_r(&seed) % 32) * MiB) == CUDA_SUCCESS && (rand_r(&seed) & 3))
            cuMemFree_v2(a);
    }
    return NULL;
}

static int t_churn(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    cuInit(0);
    pthread_t th;
    for (int i = 0; i < 8; i++)
        pthread_create(&th, NULL, churn_thread, (void *)(uintptr_t)(getpid() + i));
    pause();
    return 0;
}

static pid_t spawn_ready(char **args)
{
    int fds[2];
    CHECK(pipe(fds) == 0, "pipe");
    pid_t p = fork();
    if (p == 0) {
        dup2(fds[1], 1);
        close(fds[0]);
        execv("/proc/self/exe", args);
        _exit(127);
    }
    close(fds[1]);
    char buf[16] = { 0 };
    CHECK(read(fds[0], buf, sizeof buf - 1) > 0 && !strncmp(buf, "ready", 5), "child ready");
    close(fds[0]);
    return p;
}

static int t_kill(int argc, char **argv)
{
    CHECK(argc >= 1, "usage: kill <bytes>");
    uint64_t limit = strtoull(argv[0], NULL, 0);
    alarm(60);
    /* a holder killed outright */
    char amount[32];
    snprintf(amount, sizeof amount, "%llu", (unsigned long long)(limit / 10 * 7));
    char *hold[] = { "tcuda", "hold", amount, NULL };
    pid_t p = spawn_ready(hold);
    ctx_on(0);
    CHECK(used_view() == limit / 10 * 7, "holder's bytes visible");
    kill(p, SIGKILL);
    waitpid(p, NULL, 0);
    CUdeviceptr a;
    CHECK(cuMemAlloc_v2(&a, limit / 10 * 9) == CUDA_SUCCESS, "dead holder's bytes reclaimed");
    CHECK(cuMemFree_v2(a) == CUDA_SUCCESS, "free");
    /* processes killed in the middle of allocating, many times, at random moments */
    srand((unsigned)getpid());
    for (int round = 0; round < 6; round++) {
        char *churn[] = { "tcuda", "churn", NULL };
        pid_t c = spawn(churn);
        usleep(30000 + (unsigned)(rand() % 50000));
        kill(c, SIGKILL);
        waitpid(c, NULL, 0);
    }
    CHECK(cuMemAlloc_v2(&a, limit) == CUDA_SUCCESS, "after kills the whole limit is free again");
    CHECK(cuMemFree_v2(a) == CUDA_SUCCESS && used_view() == 0, "and the view is clean");
    return 0;
}

/* fork: the child is a process of its own in the claim */
static int t_fork(int argc, char **argv)
{
    CHECK(argc >= 1, "usage: fork <bytes>");
    uint64_t limit = strtoull(argv[0], NULL, 0);
    ctx_on(0);
    CUdeviceptr a;
    CHECK(cuMemAlloc_v2(&a, limit / 4) == CUDA_SUCCESS, "parent alloc");
    pid_t p = fork();
    if (p == 0) {
        ctx_on(0);
        CUdeviceptr b;
        if (cuMemAlloc_v2(&b, limit / 2) != CUDA_SUCCESS)
            _exit(3);
        if (cuMemAlloc_v2(&b, limit / 2) != CUDA_ERROR_OUT_OF_MEMORY)
            _exit(4);
        _exit(0); /* exits holding limit/2 */
    }
    CHECK(wait_ok(p), "child saw the parent's bytes and its own");
    CHECK(used_view() == limit / 4, "dead child's bytes are gone from the view: %llu", (unsigned long long)used_view());
    CHECK(cuMemAlloc_v2(&a, limit / 4 * 3) == CUDA_SUCCESS, "and can be allocated again");
    return 0;
}

/* ---------- context memory (run with FAKE_CTX_BYTES) ---------- */

static uint64_t region_used0(struct tr_region *r)
{
    return claim_total(r, 0);
}

/* ctx <limit> <ctx-bytes> <claimdir>: contexts are charged, against the limit, and credited */
static int t_ctx(int argc, char **argv)
{
    CHECK(argc >= 3, "usage: ctx <limit> <ctx-bytes> <claimdir>");
    uint64_t limit = strtoull(argv[0], NULL, 0), cb = strtoull(argv[1], NULL, 0);
    CHECK(cb > 0 && 4 * cb > limit && 2 * cb < limit, "pick ctx bytes with 2 < limit/ctx < 4");
    alarm(60);
    cuInit(0);
    CUcontext c1, c2, p, more[3];
    /* no context current: measured through NVML */
    CHECK(cuCtxCreate_v2(&c1, 0, 0) == CUDA_SUCCESS, "ctx");
    CHECK(fakeUsedBytes(0) == cb, "the fake took %llu", (unsigned long long)fakeUsedBytes(0));
    struct tr_region *r = map_region(argv[2]);
    CHECK(used_view() == cb && region_used0(r) == cb, "first context charged: view %llu", (unsigned long long)used_view());
    CUdeviceptr a;
    uint64_t drv = fakeUsedBytes(0);
    CHECK(cuMemAlloc_v2(&a, limit - cb + 1) == CUDA_ERROR_OUT_OF_MEMORY, "context bytes count against the limit");
    CHECK(fakeUsedBytes(0) == drv, "refused before the driver");
    CHECK(cuMemAlloc_v2(&a, limit - cb) == CUDA_SUCCESS && cuMemFree_v2(a) == CUDA_SUCCESS, "the rest fits");
    /* a context on this device is current: measured through cuMemGetInfo */
    CHECK(cuCtxCreate_v3(&c2, NULL, 0, 0, 0) == CUDA_SUCCESS && used_view() == 2 * cb, "second context: %llu", (unsigned long long)used_view());
    CHECK(cuCtxDestroy_v2(c2) == CUDA_SUCCESS, "destroy");
    CHECK(cuCtxSetCurrent(c1) == CUDA_SUCCESS && used_view() == cb, "destroy credits: %llu", (unsigned long long)used_view());
    /* the primary context: charged on the first retain, credited on the last release / reset */
    CHECK(cuDevicePrimaryCtxRetain(&p, 0) == CUDA_SUCCESS && used_view() == 2 * cb, "primary retain: %llu", (unsigned long long)used_view());
    CHECK(cuDevicePrimaryCtxRetain(&p, 0) == CUDA_SUCCESS && used_view() == 2 * cb, "second retain costs nothing");
    CHECK(cuDevicePrimaryCtxRelease(0) == CUDA_SUCCESS && used_view() == 2 * cb, "still retained once");
    CHECK(cuDevicePrimaryCtxRelease_v2(0) == CUDA_SUCCESS && used_view() == cb, "last release credits: %llu", (unsigned long long)used_view());
    CHECK(cuDevicePrimaryCtxRetain(&p, 0) == CUDA_SUCCESS && used_view() == 2 * cb, "retain again");
    CHECK(cuDevicePrimaryCtxReset_v2(0) == CUDA_SUCCESS && used_view() == cb, "reset credits");
    /* contexts past the limit are still created; the claim shows it and allocations fail */
    for (int i = 0; i < 3; i++)
        CHECK(cuCtxCreate_v4(&more[i], NULL, 0, 0) == CUDA_SUCCESS, "context %d past the limit is created", i);
    CHECK(region_used0(r) == 4 * cb, "all four charged: %llu", (unsigned long long)region_used0(r));
    size_t f, t;
    CHECK(cuMemGetInfo_v2(&f, &t) == CUDA_SUCCESS && t == limit && f == 0, "view clamped: total %zu free %zu", t, f);
    CHECK(cuMemAlloc_v2(&a, 1) == CUDA_ERROR_OUT_OF_MEMORY, "no room left");
    for (int i = 0; i < 3; i++)
        CHECK(cuCtxDestroy_v2(more[i]) == CUDA_SUCCESS, "destroy");
    CHECK(region_used0(r) == cb, "credited: %llu", (unsigned long long)region_used0(r));
    /* a process that dies holding a context: its bytes are swept */
    char *hold[] = { "tcuda", "hold", "0", NULL };
    pid_t h = spawn_ready(hold);
    CHECK(region_used0(r) == 2 * cb, "the child's context is charged: %llu", (unsigned long long)region_used0(r));
    kill(h, SIGKILL);
    waitpid(h, NULL, 0);
    CHECK(cuCtxSetCurrent(c1) == CUDA_SUCCESS && used_view() == cb, "dead child's context swept: %llu", (unsigned long long)used_view());
    CHECK(cuCtxDestroy_v2(c1) == CUDA_SUCCESS && region_used0(r) == 0, "all credited: %llu", (unsigned long long)region_used0(r));
    CHECK(fakeUsedBytes(0) == 0, "the fake holds nothing");
    return 0;
}

/* ctxdefault <default> <ctx-bytes> <claimdir>: with NVML failing and no context current,
 * the configured default is charged; the next context is measured */
static int t_ctx_default(int argc, char **argv)
{
    CHECK(argc >= 3, "usage: ctxdefault <default> <ctx-bytes> <claimdir>");
    uint64_t def = strtoull(argv[0], NULL, 0), cb = strtoull(argv[1], NULL, 0);
    cuInit(0);
    CUcontext c1, c2;
    CHECK(cuCtxCreate_v2(&c1, 0, 0) == CUDA_SUCCESS, "ctx");
    struct tr_region *r = map_region(argv[2]);
    CHECK(region_used0(r) == def, "default charged: %llu", (unsigned long long)region_used0(r));
    CHECK(cuCtxCreate_v2(&c2, 0, 0) == CUDA_SUCCESS && region_used0(r) == def + cb, "measured: %llu", (unsigned long long)region_used0(r));
    CHECK(cuCtxDestroy_v2(c2) == CUDA_SUCCESS && cuCtxDestroy_v2(c1) == CUDA_SUCCESS && region_used0(r) == 0, "credited");
    return 0;
}

/* ---------- legacy v1 entry points (32-bit sizes) ---------- */

typedef CUresult (*alloc32_fn)(CUdeviceptr_v1 *, unsigned);
typedef CUresult (*info32_fn)(unsigned *, unsigned *);

static int t_legacy(int argc, char **argv)
{
    CHECK(argc >= 1, "usage: legacy <limit>");
    uint64_t limit = strtoull(argv[0], NULL, 0);
    CHECK(limit < 4 * GiB, "limit must fit 32 bits");
    ctx_on(0);
    unsigned f, t, tm;
    CHECK(cuMemGetInfo(&f, &t) == CUDA_SUCCESS && t == limit && f == limit, "v1 view total %u free %u", t, f);
    CHECK(cuDeviceTotalMem(&tm, 0) == CUDA_SUCCESS && tm == limit, "v1 total %u", tm);
    CUdeviceptr_v1 a, b;
    unsigned part = (unsigned)(600 * MiB);
    CHECK(cuMemAlloc(&a, part) == CUDA_SUCCESS && used_view() == part, "v1 alloc counted: %llu", (unsigned long long)used_view());
    uint64_t drv = fakeUsedBytes(0);
    CHECK(cuMemAlloc(&b, (unsigned)(limit - part + 1)) == CUDA_ERROR_OUT_OF_MEMORY && fakeUsedBytes(0) == drv, "v1 over the limit");
    CHECK(cuMemGetInfo(&f, &t) == CUDA_SUCCESS && f == limit - part, "v1 free %u", f);
    unsigned pitch = 0;
    CHECK(cuMemAllocPitch(&b, &pitch, 1000, 1000, 4) == CUDA_SUCCESS && pitch >= 1000, "v1 pitch");
    uint64_t u = part + (uint64_t)pitch * 1000;
    CHECK(used_view() == u, "v1 pitch counted as %u*1000: %llu", pitch, (unsigned long long)used_view());
    CUarray arr, arr3;
    CUDA_ARRAY_DESCRIPTOR_v1 ad = { 1024, 1024, CU_AD_FORMAT_FLOAT, 4 };
    CUDA_ARRAY3D_DESCRIPTOR_v1 a3 = { 256, 256, 16, CU_AD_FORMAT_UNSIGNED_INT8, 1, 0 };
    CHECK(cuArrayCreate(&arr, &ad) == CUDA_SUCCESS && used_view() == u + 16 * MiB, "v1 array");
    CHECK(cuArray3DCreate(&arr3, &a3) == CUDA_SUCCESS && used_view() == u + 17 * MiB, "v1 3d array");
    CHECK(cuArrayCreate(&arr, &(CUDA_ARRAY_DESCRIPTOR_v1){ (unsigned)limit, 1, CU_AD_FORMAT_UNSIGNED_INT8, 1 }) == CUDA_ERROR_OUT_OF_MEMORY, "v1 array over the limit");
    CHECK(cuArrayDestroy(arr) == CUDA_SUCCESS && cuArrayDestroy(arr3) == CUDA_SUCCESS, "destroy");
    CHECK(cuMemFree(a) == CUDA_SUCCESS && cuMemFree(b) == CUDA_SUCCESS && used_view() == 0, "v1 frees credited: %llu", (unsigned long long)used_view());
    /* an old cudaVersion resolves the v1 variants; they must land in the v1 hooks */
    void *h = dlopen("libcuda.so.1", RTLD_NOW);
    gpa_fn gpa = (gpa_fn)dlsym(h, "cuGetProcAddress");
    gpa2_fn gpa2 = (gpa2_fn)dlsym(h, "cuGetProcAddress_v2");
    alloc32_fn v1 = NULL, v1b = NULL, vd = (alloc32_fn)dlsym(h, "cuMemAlloc");
    info32_fn info = NULL;
    int status;
    CHECK(gpa("cuMemAlloc", (void **)&v1, 3000, 0) == CUDA_SUCCESS && v1, "gpa v1");
    CHECK(gpa2("cuMemAlloc", (void **)&v1b, 3010, 0, &status) == CUDA_SUCCESS && v1b, "gpa2 v1");
    CHECK(gpa2("cuMemGetInfo", (void **)&info, 3000, 0, &status) == CUDA_SUCCESS && info, "gpa2 v1 info");
    CHECK(info(&f, &t) == CUDA_SUCCESS && t == limit, "v1 view through cuGetProcAddress: %u", t);
    alloc32_fn fns[] = { v1, v1b, vd };
    for (int i = 0; i < 3; i++) {
        struct { CUdeviceptr_v1 p; uint32_t guard; } s = { 0, 0xdeadbeefu };
        CUdeviceptr_v1 q;
        CHECK(fns[i](&s.p, (unsigned)limit) == CUDA_SUCCESS && s.guard == 0xdeadbeefu, "path %d: 32-bit result", i);
        CHECK(fns[i](&q, 1) == CUDA_ERROR_OUT_OF_MEMORY, "path %d: limit applies", i);
        CHECK(cuMemFree(s.p) == CUDA_SUCCESS, "free");
    }
    CHECK(used_view() == 0, "all given back");
    return 0;
}

/* ---------- a hostile claim directory (issue #9) ---------- */

/* closed <limit>: the claim's region is unusable from the start (garbage, a link, a directory, its lock held
 * for ever): the process fails closed. It sees the limit as its total with nothing free, every allocation
 * under the limit is refused (never reaching the driver), and a GPU the claim does not limit is untouched. */
static int t_closed(int argc, char **argv)
{
    CHECK(argc >= 1, "usage: closed <bytes>");
    uint64_t limit = strtoull(argv[0], NULL, 0);
    ctx_on(0);
    size_t f, t;
    CHECK(cuMemGetInfo_v2(&f, &t) == CUDA_SUCCESS && t == limit && f == 0, "view total %zu free %zu", t, f);
    CUdeviceptr a;
    CHECK(cuMemAlloc_v2(&a, 1) == CUDA_ERROR_OUT_OF_MEMORY, "one byte is refused");
    CHECK(cuMemAlloc_v2(&a, limit / 2) == CUDA_ERROR_OUT_OF_MEMORY, "half the limit is refused");
    CHECK(cuMemAllocManaged(&a, 1 << 20, 1) == CUDA_ERROR_OUT_OF_MEMORY, "managed memory is refused");
    CHECK(fakeUsedBytes(0) == 0, "nothing reached the driver: %llu", (unsigned long long)fakeUsedBytes(0));
    ctx_on(1);
    CHECK(cuMemAlloc_v2(&a, limit * 2) == CUDA_SUCCESS && cuMemFree_v2(a) == CUDA_SUCCESS, "GPU 1 unlimited");
    return 0;
}

/* truncate <limit> <claim-dir>: the region is truncated under a running process, which does not die of SIGBUS
 * and fails closed: it keeps what it holds and frees still count, but nothing new is granted. */
static int t_truncate(int argc, char **argv)
{
    CHECK(argc >= 2, "usage: truncate <limit> <claim-dir>");
    uint64_t limit = strtoull(argv[0], NULL, 0);
    char path[512];
    snprintf(path, sizeof path, "%s/region", argv[1]);
    ctx_on(0);
    CUdeviceptr a, b, c;
    CHECK(cuMemAlloc_v2(&a, limit / 2) == CUDA_SUCCESS, "first half");
    CHECK(cuMemAlloc_v2(&b, limit / 4) == CUDA_SUCCESS, "a quarter");
    CHECK(truncate(path, 0) == 0, "truncate the region");
    for (int i = 0; i < 50; i++)
        CHECK(cuMemAlloc_v2(&c, 1 << 20) == CUDA_ERROR_OUT_OF_MEMORY, "a MiB more is refused (%d)", i);
    size_t f, t;
    CHECK(cuMemGetInfo_v2(&f, &t) == CUDA_SUCCESS && t == limit && f == 0, "nothing free: %zu", f);
    CHECK(fakeUsedBytes(0) == limit / 2 + limit / 4, "it keeps what it holds: %llu", (unsigned long long)fakeUsedBytes(0));
    CHECK(cuMemFree_v2(b) == CUDA_SUCCESS && fakeUsedBytes(0) == limit / 2, "a free reaches the driver");
    CHECK(cuMemAlloc_v2(&b, limit / 4) == CUDA_ERROR_OUT_OF_MEMORY, "what was freed is not granted again");
    CHECK(cuMemFree_v2(a) == CUDA_SUCCESS && fakeUsedBytes(0) == 0, "the driver holds nothing of it");
    CHECK(cuMemFree_v2(a) != CUDA_SUCCESS, "a double free is still the driver's error");
    return 0;
}

/* grab <limit> <seconds>: takes 16 MiB pieces whenever it can for <seconds> (a refused one is tried again 2 ms
 * later), says "ready" once one was refused (the claim is full), and at the end prints held=<bytes>: run
 * several at once in one claim whose region is then damaged, their sum is what the claim got. */
static int t_grab(int argc, char **argv)
{
    CHECK(argc >= 2, "usage: grab <limit> <seconds>");
    uint64_t limit = strtoull(argv[0], NULL, 0), held = 0;
    uint64_t end = now_ns() + (uint64_t)(atof(argv[1]) * 1e9);
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    ctx_on(0);
    int said = 0;
    while (now_ns() < end && held < 4 * limit) {
        CUdeviceptr a;
        if (cuMemAlloc_v2(&a, 16 * MiB) == CUDA_SUCCESS) {
            held += 16 * MiB;
            continue;
        }
        if (!said) {
            printf("ready\n");
            fflush(stdout);
            said = 1;
        }
        usleep(2000);
    }
    printf("held=%llu\n", (unsigned long long)held);
    return 0;
}

/* holdlock <region> <seconds>: holds the region's lock byte, as a stuck or hostile process of the claim would. */
static int t_holdlock(int argc, char **argv)
{
    CHECK(argc >= 2, "usage: holdlock <region> <seconds>");
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    int fd = open(argv[0], O_RDWR);
    CHECK(fd >= 0, "open %s", argv[0]);
    struct flock fl;
    memset(&fl, 0, sizeof fl);
    fl.l_type = F_WRLCK;
    fl.l_whence = SEEK_SET;
    fl.l_start = TR_LOCK_BYTE;
    fl.l_len = 1;
    CHECK(fcntl(fd, F_OFD_SETLK, &fl) == 0, "lock");
    printf("ready\n");
    fflush(stdout);
    sleep((unsigned)atoi(argv[1]));
    return 0;
}

/* ---------- what the node daemon reads from a claim's region (metrics, claim status) ---------- */

/* usage <bytes> <launches> <kernel_us>: holds <bytes>, has one allocation refused by the limit, launches
 * <launches> kernels of <kernel_us> (through the SM limiter when the claim has one), then prints "ready" and
 * waits to be killed, so the claim's region shows a live process, its bytes and its counters. */
static int t_usage(int argc, char **argv)
{
    CHECK(argc >= 3, "usage: usage <bytes> <launches> <kernel_us>");
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    uint64_t n = strtoull(argv[0], NULL, 0);
    int launches = atoi(argv[1]);
    CUfunction k = fakeKernel(strtoull(argv[2], NULL, 10) * 1000ull);
    ctx_on(0);
    CUdeviceptr a, b;
    CHECK(n == 0 || cuMemAlloc_v2(&a, n) == CUDA_SUCCESS, "hold alloc");
    CHECK(cuMemAlloc_v2(&b, 1ull << 45) == CUDA_ERROR_OUT_OF_MEMORY, "32 TiB is over any limit");
    for (int i = 0; i < launches; i++) {
        CHECK(cuLaunchKernel(k, 1, 1, 1, 1, 1, 1, 0, NULL, NULL, NULL) == CUDA_SUCCESS, "launch %d", i);
        if (i % 4 == 3)
            CHECK(cuCtxSynchronize() == CUDA_SUCCESS, "sync");
    }
    CHECK(cuCtxSynchronize() == CUDA_SUCCESS, "ctx sync");
    printf("ready\n");
    fflush(stdout);
    pause();
    return 0;
}

/* ---------- per-thread event rings are freed at thread exit ---------- */

static void *ring_thread(void *p)
{
    (void)p;
    CUcontext c;
    CHECK(cuCtxCreate_v2(&c, 0, 0) == CUDA_SUCCESS, "ctx");
    CUfunction k = fakeKernel(20000);
    for (int i = 0; i < 6; i++)
        CHECK(cuLaunchKernel(k, 1, 1, 1, 1, 1, 1, 0, NULL, NULL, NULL) == CUDA_SUCCESS, "launch");
    cuCtxSynchronize();
    return NULL;
}

static int t_ringexit(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    cuInit(0);
    for (int round = 0; round < 4; round++) {
        pthread_t th[8];
        for (int i = 0; i < 8; i++)
            pthread_create(&th[i], NULL, ring_thread, NULL);
        for (int i = 0; i < 8; i++)
            pthread_join(th[i], NULL);
    }
    CHECK(fakeLiveEvents() == 0, "%d timing events outlived their threads", fakeLiveEvents());
    return 0;
}

/* ---------- NVML view ---------- */

typedef nvmlReturn_t (*nv_init_fn)(void);
typedef nvmlReturn_t (*nv_handle_fn)(unsigned, nvmlDevice_t *);
typedef nvmlReturn_t (*nv_mem_fn)(nvmlDevice_t, nvmlMemory_t *);
typedef nvmlReturn_t (*nv_mem2_fn)(nvmlDevice_t, nvmlMemory_v2_t *);
typedef nvmlReturn_t (*nv_procs_fn)(nvmlDevice_t, unsigned *, nvmlProcessInfo_t *);
typedef nvmlReturn_t (*nv_procs1_fn)(nvmlDevice_t, unsigned *, nvmlProcessInfo_v1_t *);

static int t_nvml(int argc, char **argv)
{
    CHECK(argc >= 2, "usage: nvml <limit> <physical-index>");
    uint64_t limit = strtoull(argv[0], NULL, 0);
    unsigned idx = (unsigned)atoi(argv[1]);
    char amount[32];
    snprintf(amount, sizeof amount, "%llu", (unsigned long long)(300 * MiB));
    char *hold[] = { "tcuda", "hold", amount, NULL };
    pid_t p = spawn_ready(hold);
    /* like nvidia-smi: dlopen + dlsym, no CUDA */
    void *h = dlopen("libnvidia-ml.so.1", RTLD_NOW);
    CHECK(h, "dlopen nvml");
    nv_init_fn init = (nv_init_fn)dlsym(h, "nvmlInit_v2");
    nv_handle_fn byidx = (nv_handle_fn)dlsym(h, "nvmlDeviceGetHandleByIndex_v2");
    nv_mem_fn mem = (nv_mem_fn)dlsym(h, "nvmlDeviceGetMemoryInfo");
    nv_mem2_fn mem2 = (nv_mem2_fn)dlsym(h, "nvmlDeviceGetMemoryInfo_v2");
    nv_procs_fn procs3 = (nv_procs_fn)dlsym(h, "nvmlDeviceGetComputeRunningProcesses_v3");
    nv_procs1_fn procs1 = (nv_procs1_fn)dlsym(h, "nvmlDeviceGetComputeRunningProcesses");
    CHECK(init && byidx && mem && mem2 && procs3 && procs1, "symbols");
    CHECK(init() == NVML_SUCCESS, "init");
    nvmlDevice_t d, other;
    CHECK(byidx(idx, &d) == NVML_SUCCESS && byidx(idx ^ 1, &other) == NVML_SUCCESS, "handles");
    nvmlMemory_t m;
    CHECK(mem(d, &m) == NVML_SUCCESS, "meminfo");
    CHECK(m.total == limit && m.used == 300 * MiB && m.free == limit - 300 * MiB, "view total %llu used %llu free %llu", m.total, m.used, m.free);
    nvmlMemory_v2_t m2 = { .version = 2 };
    CHECK(mem2(d, &m2) == NVML_SUCCESS && m2.total == limit && m2.used == 300 * MiB && m2.reserved == 0, "v2 view");
    CHECK(mem(other, &m) == NVML_SUCCESS && m.total == 81920ull * MiB, "other GPU keeps the host view");
    unsigned n = 0;
    CHECK(procs3(d, &n, NULL) == NVML_ERROR_INSUFFICIENT_SIZE && n == 1, "count query n=%u", n);
    nvmlProcessInfo_t info[4];
    n = 4;
    CHECK(procs3(d, &n, info) == NVML_SUCCESS && n == 1, "list");
    CHECK(info[0].pid == (unsigned)p && info[0].usedGpuMemory == 300 * MiB, "the claim's process: pid %u bytes %llu", info[0].pid, info[0].usedGpuMemory);
    nvmlProcessInfo_v1_t i1[4];
    n = 4;
    CHECK(procs1(d, &n, i1) == NVML_SUCCESS && n == 1 && i1[0].pid == (unsigned)p, "v1 list");
    kill(p, SIGKILL);
    waitpid(p, NULL, 0);
    n = 4;
    CHECK(procs3(d, &n, info) == NVML_SUCCESS && n == 0, "dead process gone from the list");
    CHECK(mem(d, &m) == NVML_SUCCESS && m.used == 0, "and from memory used");
    return 0;
}

int main(int argc, char **argv)
{
    static const struct test_cmd cmds[] = {
        { "limit", t_limit }, { "paths", t_paths }, { "procaddr", t_procaddr }, { "unlimited", t_unlimited },
        { "device", t_device }, { "ipc", t_ipc }, { "ipc_import", t_ipc_import }, { "stress", t_stress },
        { "stress_child", t_stress_child }, { "hold", t_hold }, { "churn", t_churn }, { "kill", t_kill },
        { "fork", t_fork }, { "nvml", t_nvml }, { "ctx", t_ctx }, { "ctxdefault", t_ctx_default },
        { "legacy", t_legacy }, { "ringexit", t_ringexit }, { "truncate", t_truncate }, { "holdlock", t_holdlock },
        { "closed", t_closed }, { "grab", t_grab },
        { "usage", t_usage },
    };
    return run_test("tcuda", cmds, sizeof cmds / sizeof cmds[0], argc, argv);
}
