/* Stream capture on the fake driver.
 *   tcapture rules        without the library: the fake follows the driver's
 *                         documented capture rules (an illegal call fails and
 *                         invalidates the capture, as on a real GPU);
 *   tcapture limited <s> [share]
 *                         with libtessera and an SM limit: captures that mix
 *                         throttled launches on other threads and streams
 *                         survive, in every capture mode, and the graph's
 *                         replays, run for s seconds, stay within the share. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <string.h>

#include "testutil.h"

#define KNS 200000ull

static CUfunction g_k;

static void launch_on(CUstream s, CUresult want)
{
    CUresult rc = cuLaunchKernel(g_k, 1, 1, 1, 1, 1, 1, 0, s, NULL, NULL);
    CHECK(rc == want, "launch returned %d, want %d", rc, want);
}

static CUstreamCaptureStatus status_of(CUstream s)
{
    CUstreamCaptureStatus st;
    CHECK(cuStreamIsCapturing(s, &st) == CUDA_SUCCESS, "is capturing");
    return st;
}

/* ends the capture on s expecting an invalidated capture */
static void end_invalidated(CUstream s, const char *why)
{
    CUgraph g = (CUgraph)1;
    CHECK(status_of(s) == CU_STREAM_CAPTURE_STATUS_INVALIDATED, "%s: capture invalidated", why);
    CHECK(cuStreamEndCapture(s, &g) == CUDA_ERROR_STREAM_CAPTURE_INVALIDATED && g == NULL, "%s: end fails", why);
    CHECK(status_of(s) == CU_STREAM_CAPTURE_STATUS_NONE, "%s: out of capture mode", why);
}

static CUgraph end_ok(CUstream s, const char *why)
{
    CUgraph g = NULL;
    CUresult rc = cuStreamEndCapture(s, &g);
    CHECK(rc == CUDA_SUCCESS && g, "%s: end capture returned %d", why, rc);
    return g;
}

struct other {
    CUcontext ctx;
    CUstreamCaptureMode mode; /* this thread's interaction mode */
    int unsafe;               /* 1: make an unsafe call (event query), 0: throttled launches */
    CUresult rc;
};

static void *other_thread(void *p)
{
    struct other *o = p;
    cuCtxSetCurrent(o->ctx);
    CUstreamCaptureMode m = o->mode;
    CHECK(cuThreadExchangeStreamCaptureMode(&m) == CUDA_SUCCESS, "exchange mode");
    CUstream s;
    CHECK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING) == CUDA_SUCCESS, "stream");
    if (o->unsafe) {
        CUevent e;
        CHECK(cuEventCreate(&e, 0) == CUDA_SUCCESS, "event");
        o->rc = cuEventQuery(e);
        cuEventDestroy_v2(e);
    } else {
        o->rc = CUDA_SUCCESS;
        for (int i = 0; i < 40 && o->rc == CUDA_SUCCESS; i++)
            o->rc = cuLaunchKernel(g_k, 1, 1, 1, 1, 1, 1, 0, s, NULL, NULL);
    }
    return NULL;
}

static CUresult run_other(CUcontext ctx, CUstreamCaptureMode mode, int unsafe)
{
    struct other o = { ctx, mode, unsafe, -1 };
    pthread_t t;
    pthread_create(&t, NULL, other_thread, &o);
    pthread_join(t, NULL);
    return o.rc;
}

typedef CUresult (*begin_v1_fn)(CUstream);

static void check_proc_address(void)
{
    void *self = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_NOLOAD);
    CHECK(self, "libcuda loaded");
    static const struct {
        const char *base;
        int ver;
        int flags;
        const char *want;
    } cases[] = {
        { "cuStreamBeginCapture", 12000, 0, "cuStreamBeginCapture_v2" },
        { "cuStreamBeginCapture", 10000, 0, "cuStreamBeginCapture" },
        { "cuStreamBeginCapture", 12000, 2, "cuStreamBeginCapture_v2_ptsz" },
        { "cuStreamGetCaptureInfo", 12030, 0, "cuStreamGetCaptureInfo_v3" },
        { "cuStreamGetCaptureInfo", 12000, 0, "cuStreamGetCaptureInfo_v2" },
        { "cuStreamGetCaptureInfo", 11000, 0, "cuStreamGetCaptureInfo" },
        { "cuGraphInstantiate", 12000, 0, "cuGraphInstantiateWithFlags" },
        { "cuStreamEndCapture", 12000, 2, "cuStreamEndCapture_ptsz" },
        { "cuGraphLaunch", 12000, 2, "cuGraphLaunch_ptsz" },
        { "cuStreamIsCapturing", 12000, 0, "cuStreamIsCapturing" },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        void *f = NULL;
        CHECK(cuGetProcAddress(cases[i].base, &f, cases[i].ver, (cuuint64_t)cases[i].flags) == CUDA_SUCCESS && f,
              "proc address of %s @%d", cases[i].base, cases[i].ver);
        CHECK(f == dlsym(self, cases[i].want), "%s @%d flags %d is %s", cases[i].base, cases[i].ver, cases[i].flags,
              cases[i].want);
    }
    void *f = NULL;
    CHECK(cuGetProcAddress("cuStreamBeginCaptureToGraph", &f, 12000, 0) == CUDA_ERROR_NOT_FOUND,
          "too new for the caller's version");
}

static int t_rules(int argc, char **argv)
{
    (void)argc, (void)argv;
    ctx_on(0);
    CUcontext ctx;
    CHECK(cuCtxGetCurrent(&ctx) == CUDA_SUCCESS, "ctx");
    g_k = fakeKernel(KNS);
    CUstream s, nb;
    CHECK(cuStreamCreate(&s, 0) == CUDA_SUCCESS && cuStreamCreate(&nb, CU_STREAM_NON_BLOCKING) == CUDA_SUCCESS, "streams");
    CUevent e, plain;
    CHECK(cuEventCreate(&e, 0) == CUDA_SUCCESS && cuEventCreate(&plain, 0) == CUDA_SUCCESS, "events");
    CHECK(cuEventRecord(plain, nb) == CUDA_SUCCESS, "record outside a capture");

    /* a legal capture: launches and event records become nodes, nothing runs */
    uint64_t busy0 = fakeBusyNs(0);
    CHECK(cuStreamBeginCapture_v2(s, CU_STREAM_CAPTURE_MODE_GLOBAL) == CUDA_SUCCESS, "begin");
    CHECK(status_of(s) == CU_STREAM_CAPTURE_STATUS_ACTIVE, "active");
    CHECK(cuStreamBeginCapture_v2(s, CU_STREAM_CAPTURE_MODE_GLOBAL) == CUDA_ERROR_ILLEGAL_STATE, "begin twice");
    for (int i = 0; i < 5; i++)
        launch_on(s, CUDA_SUCCESS);
    CHECK(cuEventRecord(e, s) == CUDA_SUCCESS, "record in capture");
    CUgraph g = end_ok(s, "legal capture");
    CHECK(fakeGraphNs(g) == 5 * KNS, "graph holds the 5 kernels: %llu", (unsigned long long)fakeGraphNs(g));
    CHECK(cuStreamSynchronize(s) == CUDA_SUCCESS && fakeBusyNs(0) == busy0, "captured kernels did not run");
    CHECK(cuEventQuery(e) == CUDA_ERROR_CAPTURED_EVENT, "an event last recorded in a capture cannot be queried");

    /* replay: the graph's kernels run each launch */
    CUgraphExec x;
    CHECK(cuGraphInstantiateWithFlags(&x, g, 0) == CUDA_SUCCESS, "instantiate");
    for (int i = 0; i < 4; i++)
        CHECK(cuGraphLaunch(x, s) == CUDA_SUCCESS, "replay");
    CHECK(cuStreamSynchronize(s) == CUDA_SUCCESS, "sync");
    CHECK(fakeBusyNs(0) - busy0 == 20 * KNS, "4 replays ran 20 kernels: %llu", (unsigned long long)(fakeBusyNs(0) - busy0));
    CHECK(cuEventQuery(e) == CUDA_SUCCESS, "a replay re-records the event outside a capture");

    /* synchronizing or querying a capturing stream */
    CHECK(cuStreamBeginCapture_v2(s, CU_STREAM_CAPTURE_MODE_GLOBAL) == CUDA_SUCCESS, "begin");
    launch_on(s, CUDA_SUCCESS);
    CHECK(cuStreamSynchronize(s) == CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, "sync a capturing stream");
    launch_on(s, CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
    end_invalidated(s, "stream sync");
    CHECK(cuStreamBeginCapture_v2(s, CU_STREAM_CAPTURE_MODE_GLOBAL) == CUDA_SUCCESS, "begin");
    CHECK(cuStreamQuery(s) == CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, "query a capturing stream");
    end_invalidated(s, "stream query");

    /* an event recorded inside the capture */
    CHECK(cuStreamBeginCapture_v2(s, CU_STREAM_CAPTURE_MODE_RELAXED) == CUDA_SUCCESS, "begin");
    CHECK(cuEventRecord(e, s) == CUDA_SUCCESS, "record");
    float ms;
    CHECK(cuEventElapsedTime(&ms, plain, e) == CUDA_ERROR_CAPTURED_EVENT, "time a captured event");
    end_invalidated(s, "captured event");

    /* potentially unsafe calls in the capturing thread: prohibited unless relaxed */
    CHECK(cuStreamBeginCapture_v2(s, CU_STREAM_CAPTURE_MODE_GLOBAL) == CUDA_SUCCESS, "begin");
    CHECK(cuEventQuery(plain) == CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, "event query during a global capture");
    end_invalidated(s, "event query");
    CHECK(cuStreamBeginCapture_v2(s, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL) == CUDA_SUCCESS, "begin");
    CUdeviceptr p;
    CHECK(cuMemAlloc_v2(&p, 1 << 20) == CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, "cuMemAlloc during a capture");
    end_invalidated(s, "cuMemAlloc");
    CHECK(cuStreamBeginCapture_v2(s, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL) == CUDA_SUCCESS, "begin");
    CHECK(cuMemAllocAsync(&p, 1 << 20, s) == CUDA_SUCCESS, "stream-ordered allocation is capturable");
    CHECK(cuCtxSynchronize() == CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, "context sync during a capture");
    end_invalidated(s, "context sync");
    CHECK(cuStreamBeginCapture_v2(s, CU_STREAM_CAPTURE_MODE_RELAXED) == CUDA_SUCCESS, "begin relaxed");
    CHECK(cuEventQuery(plain) == CUDA_SUCCESS && cuEventSynchronize(plain) == CUDA_SUCCESS, "relaxed allows queries");
    CHECK(cuStreamSynchronize(nb) == CUDA_SUCCESS, "relaxed allows syncing another stream");
    end_ok(s, "relaxed");

    /* the legacy stream: synchronizes with blocking streams, so it cannot be used while one captures */
    CHECK(cuStreamBeginCapture_v2(s, CU_STREAM_CAPTURE_MODE_RELAXED) == CUDA_SUCCESS, "begin");
    launch_on(NULL, CUDA_ERROR_STREAM_CAPTURE_IMPLICIT);
    end_invalidated(s, "legacy stream");
    CHECK(cuStreamBeginCapture_v2(nb, CU_STREAM_CAPTURE_MODE_RELAXED) == CUDA_SUCCESS, "begin on a non-blocking stream");
    launch_on(NULL, CUDA_SUCCESS);
    end_ok(nb, "non-blocking capture leaves the legacy stream usable");
    CHECK(cuStreamBeginCapture_v2(NULL, CU_STREAM_CAPTURE_MODE_GLOBAL) == CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED,
          "the legacy stream cannot be captured");

    /* other threads: a global capture prohibits their unsafe calls in global mode only */
    CHECK(cuStreamBeginCapture_v2(s, CU_STREAM_CAPTURE_MODE_GLOBAL) == CUDA_SUCCESS, "begin");
    CHECK(run_other(ctx, CU_STREAM_CAPTURE_MODE_RELAXED, 1) == CUDA_SUCCESS, "a relaxed thread may query");
    CHECK(run_other(ctx, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL, 1) == CUDA_SUCCESS, "a thread-local thread may query");
    CHECK(status_of(s) == CU_STREAM_CAPTURE_STATUS_ACTIVE, "still active");
    CHECK(run_other(ctx, CU_STREAM_CAPTURE_MODE_GLOBAL, 0) == CUDA_SUCCESS, "launches elsewhere are fine");
    CHECK(status_of(s) == CU_STREAM_CAPTURE_STATUS_ACTIVE, "still active after launches elsewhere");
    CHECK(run_other(ctx, CU_STREAM_CAPTURE_MODE_GLOBAL, 1) == CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED,
          "a global-mode thread may not query");
    end_invalidated(s, "another thread's query");
    CHECK(cuStreamBeginCapture_v2(s, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL) == CUDA_SUCCESS, "begin thread-local");
    CHECK(run_other(ctx, CU_STREAM_CAPTURE_MODE_GLOBAL, 1) == CUDA_SUCCESS, "thread-local captures ignore others");
    end_ok(s, "thread-local");

    /* fork/join across streams, isolation */
    CUstream s2;
    CUevent fork, join;
    CHECK(cuStreamCreate(&s2, 0) == CUDA_SUCCESS && cuEventCreate(&fork, 0) == CUDA_SUCCESS &&
              cuEventCreate(&join, 0) == CUDA_SUCCESS, "fork setup");
    CHECK(cuStreamBeginCapture_v2(s, CU_STREAM_CAPTURE_MODE_GLOBAL) == CUDA_SUCCESS, "begin");
    CHECK(cuEventRecord(fork, s) == CUDA_SUCCESS && cuStreamWaitEvent(s2, fork, 0) == CUDA_SUCCESS, "fork");
    CHECK(status_of(s2) == CU_STREAM_CAPTURE_STATUS_ACTIVE, "the waiting stream joined the capture");
    launch_on(s2, CUDA_SUCCESS);
    launch_on(s, CUDA_SUCCESS);
    CHECK(cuEventRecord(join, s2) == CUDA_SUCCESS && cuStreamWaitEvent(s, join, 0) == CUDA_SUCCESS, "join");
    g = end_ok(s, "fork/join");
    CHECK(fakeGraphNs(g) == 2 * KNS, "both streams' kernels are in the graph");
    CHECK(status_of(s2) == CU_STREAM_CAPTURE_STATUS_NONE, "the joined stream left the capture");
    CHECK(cuStreamBeginCapture_v2(s, CU_STREAM_CAPTURE_MODE_GLOBAL) == CUDA_SUCCESS, "begin");
    CHECK(cuStreamWaitEvent(s, plain, 0) == CUDA_ERROR_STREAM_CAPTURE_ISOLATION, "waiting on uncaptured work");
    end_invalidated(s, "isolation");

    /* the capture must end where and how it began */
    CHECK(cuStreamBeginCapture_v2(s, CU_STREAM_CAPTURE_MODE_GLOBAL) == CUDA_SUCCESS, "begin");
    CHECK(cuEventRecord(fork, s) == CUDA_SUCCESS && cuStreamWaitEvent(s2, fork, 0) == CUDA_SUCCESS, "fork");
    CUgraph g2;
    CHECK(cuStreamEndCapture(s2, &g2) == CUDA_ERROR_STREAM_CAPTURE_UNMATCHED, "end on a joined stream");
    end_invalidated(s, "unmatched end");
    CHECK(cuStreamEndCapture(s, &g2) == CUDA_ERROR_ILLEGAL_STATE, "end without a capture");

    check_proc_address();
    printf("capture rules: ok\n");
    return 0;
}

/* ---- through the library, under an SM limit ---- */

static void capture_in_mode(CUcontext ctx, CUstream s, CUstreamCaptureMode mode)
{
    for (int i = 0; i < 6; i++) /* a throttled warm-up leaves the limiter's timing events in flight */
        launch_on(s, CUDA_SUCCESS);
    CHECK(cuStreamBeginCapture_v2(s, mode) == CUDA_SUCCESS, "begin");
    for (int i = 0; i < 10; i++)
        launch_on(s, CUDA_SUCCESS);
    /* a thread in global mode keeps launching throttled kernels while the capture is open */
    CHECK(run_other(ctx, CU_STREAM_CAPTURE_MODE_GLOBAL, 0) == CUDA_SUCCESS, "launches elsewhere");
    for (int i = 0; i < 10; i++)
        launch_on(s, CUDA_SUCCESS);
    CHECK(status_of(s) == CU_STREAM_CAPTURE_STATUS_ACTIVE, "mode %d: nothing the library did invalidated it", mode);
    CUgraph g = end_ok(s, "capture under the limiter");
    CHECK(fakeGraphNs(g) == 20 * KNS, "the graph holds exactly the captured kernels");
    cuGraphDestroy(g);
}

static int t_limited(int argc, char **argv)
{
    double secs = argc >= 1 ? atof(argv[0]) : 1.0, expect = argc >= 2 ? atof(argv[1]) : -1;
    ctx_on(0);
    CUcontext ctx;
    CHECK(cuCtxGetCurrent(&ctx) == CUDA_SUCCESS, "ctx");
    g_k = fakeKernel(KNS);
    CUstream s;
    CHECK(cuStreamCreate(&s, 0) == CUDA_SUCCESS, "stream");
    capture_in_mode(ctx, s, CU_STREAM_CAPTURE_MODE_GLOBAL);
    capture_in_mode(ctx, s, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL);
    capture_in_mode(ctx, s, CU_STREAM_CAPTURE_MODE_RELAXED);
    /* the runtime finds the entry points through cuGetProcAddress: capture that way too */
    CUresult (*begin)(CUstream, CUstreamCaptureMode) = NULL;
    CUresult (*endc)(CUstream, CUgraph *) = NULL;
    CHECK(cuGetProcAddress("cuStreamBeginCapture", (void **)&begin, 12000, 0) == CUDA_SUCCESS && begin, "begin addr");
    CHECK(cuGetProcAddress("cuStreamEndCapture", (void **)&endc, 12000, 0) == CUDA_SUCCESS && endc, "end addr");
    CHECK(begin(s, CU_STREAM_CAPTURE_MODE_GLOBAL) == CUDA_SUCCESS, "begin through proc address");
    for (int i = 0; i < 5; i++)
        launch_on(s, CUDA_SUCCESS);
    CUgraph g = NULL;
    CHECK(endc(s, &g) == CUDA_SUCCESS && g && fakeGraphNs(g) == 5 * KNS, "capture through proc address");
    /* replays are throttled like launches */
    CUgraphExec x;
    CHECK(cuGraphInstantiateWithFlags(&x, g, 0) == CUDA_SUCCESS, "instantiate");
    uint64_t own0 = fakeBusyNs(0), t0 = now_ns(), end = t0 + (uint64_t)(secs * 1e9);
    while (now_ns() < end)
        CHECK(cuGraphLaunch(x, s) == CUDA_SUCCESS, "replay");
    CHECK(cuStreamSynchronize(s) == CUDA_SUCCESS, "sync");
    double share = 100.0 * (double)(fakeBusyNs(0) - own0) / (double)(now_ns() - t0);
    printf("share=%.1f graph replays\n", share);
    /* like tshare sm's ceiling check: never over the share, clearly throttled */
    if (expect > 0)
        CHECK(share <= expect + 5 && share >= expect / 2, "replays got %.1f %% of a %.0f %% share", share, expect);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: tcapture <rules|limited> [args]\n");
        return 2;
    }
    g_test = argv[1];
    if (!strcmp(argv[1], "rules"))
        return t_rules(argc - 2, argv + 2);
    if (!strcmp(argv[1], "limited"))
        return t_limited(argc - 2, argv + 2);
    fprintf(stderr, "unknown test %s\n", argv[1]);
    return 2;
}
