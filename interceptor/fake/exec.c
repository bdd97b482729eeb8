/* Streams, events and kernel launches of the fake driver. Work goes to the
 * shared GPU (gpu.c) in submission order per process and GPU: streams of one
 * process are not run concurrently. On a capturing stream, launches and event
 * records become graph nodes instead (capture.c has the rules). */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "stream.h"

#define STREAM_MAGIC 0x4d41455254534b46ull
#define EVENT_MAGIC 0x544e4556454b4146ull
#define FAKE_KERNEL_MAGIC 0x46414b454b524e4cull

static uint64_t g_gen; /* event record generations, process-wide */
static struct fake_stream g_legacy[FAKE_MAXDEV];
static __thread struct fake_stream t_per_thread[FAKE_MAXDEV];
static int g_live_events;

struct fake_stream *stream_of(CUstream s, int ptsz, int *legacy)
{
    struct fake_ctx *c = fake_current();
    int dev = c ? c->dev : 0;
    *legacy = 0;
    if (s == NULL)
        s = ptsz ? CU_STREAM_PER_THREAD : CU_STREAM_LEGACY;
    struct fake_stream *st;
    if (s == CU_STREAM_LEGACY) {
        *legacy = 1;
        st = &g_legacy[dev];
    } else if (s == CU_STREAM_PER_THREAD) {
        st = &t_per_thread[dev];
    } else {
        st = (struct fake_stream *)s;
        return st->magic == STREAM_MAGIC ? st : NULL;
    }
    st->dev = dev;
    st->magic = STREAM_MAGIC;
    return st;
}

/* Submits a kernel, or adds it to the stream's capture. */
static CUresult launch(uint64_t ns, CUstream s, int ptsz)
{
    if (!fake_current())
        return CUDA_ERROR_INVALID_CONTEXT;
    int legacy;
    struct fake_stream *st = stream_of(s, ptsz, &legacy);
    if (!st)
        return CUDA_ERROR_INVALID_HANDLE;
    pthread_mutex_lock(&g_capture_mu);
    if (st->cap) {
        CUresult rc = capture_add_locked(st->cap, NODE_KERNEL, ns, NULL);
        pthread_mutex_unlock(&g_capture_mu);
        return rc;
    }
    pthread_mutex_unlock(&g_capture_mu);
    CUresult rc = capture_legacy_check(st, legacy);
    if (rc != CUDA_SUCCESS)
        return rc;
    st->last_seq = gpu_submit(st->dev, ns, -1, 0);
    return CUDA_SUCCESS;
}

/* Runs a graph's nodes on st: consecutive kernels as one piece of work, event nodes as records. */
CUresult exec_submit_nodes(const struct node *nodes, int n, struct fake_stream *st)
{
    uint64_t run = 0;
    for (int i = 0; i <= n; i++) {
        if (i < n && nodes[i].kind == NODE_KERNEL) {
            run += nodes[i].ns;
            continue;
        }
        if (run)
            st->last_seq = gpu_submit(st->dev, run, -1, 0);
        run = 0;
        if (i < n && nodes[i].ev && nodes[i].ev->dev == st->dev) {
            event_submit(nodes[i].ev);
            st->last_seq = nodes[i].ev->seq;
        }
    }
    return CUDA_SUCCESS;
}

/* ---- kernels ---- */

struct fake_kernel {
    uint64_t magic;
    uint64_t ns;
};

/* A kernel that runs for ns of GPU time (a real GPU's kernel takes what it takes). */
API CUfunction fakeKernel(uint64_t ns)
{
    struct fake_kernel *k = malloc(sizeof *k);
    if (!k)
        return NULL;
    k->magic = FAKE_KERNEL_MAGIC;
    k->ns = ns;
    return (CUfunction)k;
}

static uint64_t kernel_ns(const void *f)
{
    const struct fake_kernel *k = f;
    return k && k->magic == FAKE_KERNEL_MAGIC ? k->ns : fake_kernel_default_ns();
}

#define LP CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz, unsigned shmem, CUstream s
#define UNUSED_GRID (void)gx, (void)gy, (void)gz, (void)bx, (void)by, (void)bz, (void)shmem
API CUresult cuLaunchKernel(LP, void **p, void **e) { UNUSED_GRID; (void)p; (void)e; return launch(kernel_ns(f), s, 0); }
API CUresult cuLaunchKernel_ptsz(LP, void **p, void **e) { UNUSED_GRID; (void)p; (void)e; return launch(kernel_ns(f), s, 1); }
API CUresult cuLaunchCooperativeKernel(LP, void **p) { UNUSED_GRID; (void)p; return launch(kernel_ns(f), s, 0); }
API CUresult cuLaunchCooperativeKernel_ptsz(LP, void **p) { UNUSED_GRID; (void)p; return launch(kernel_ns(f), s, 1); }
API CUresult cuLaunchKernelEx(const CUlaunchConfig *c, CUfunction f, void **p, void **e)
{
    (void)p, (void)e;
    return launch(kernel_ns(f), c ? c->hStream : NULL, 0);
}
API CUresult cuLaunchKernelEx_ptsz(const CUlaunchConfig *c, CUfunction f, void **p, void **e)
{
    (void)p, (void)e;
    return launch(kernel_ns(f), c ? c->hStream : NULL, 1);
}

/* ---- streams ---- */

API CUresult cuStreamCreate(CUstream *s, unsigned flags)
{
    struct fake_ctx *c = fake_current();
    if (!c)
        return CUDA_ERROR_INVALID_CONTEXT;
    if (!s)
        return CUDA_ERROR_INVALID_VALUE;
    struct fake_stream *st = calloc(1, sizeof *st);
    if (!st)
        return CUDA_ERROR_OUT_OF_MEMORY;
    st->magic = STREAM_MAGIC;
    st->dev = c->dev;
    st->flags = flags;
    *s = (CUstream)st;
    return CUDA_SUCCESS;
}

API CUresult cuStreamDestroy_v2(CUstream s)
{
    struct fake_stream *st = (struct fake_stream *)s;
    if ((uintptr_t)s <= 2 || st->magic != STREAM_MAGIC || (st >= g_legacy && st < g_legacy + FAKE_MAXDEV))
        return CUDA_ERROR_INVALID_HANDLE;
    pthread_mutex_lock(&g_capture_mu);
    int origin = st->cap && st->cap->origin == st;
    pthread_mutex_unlock(&g_capture_mu);
    if (origin)
        return CUDA_ERROR_ILLEGAL_STATE; /* end its capture first */
    capture_forget_stream(st);
    st->magic = 0;
    free(st);
    return CUDA_SUCCESS;
}

/* Checks before synchronizing with or querying stream st. */
static CUresult sync_check(struct fake_stream *st, int legacy)
{
    pthread_mutex_lock(&g_capture_mu);
    struct capture *c = st->cap;
    if (c)
        capture_invalidate_locked(c);
    pthread_mutex_unlock(&g_capture_mu);
    if (c)
        return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    CUresult rc = capture_legacy_check(st, legacy);
    return rc != CUDA_SUCCESS ? rc : capture_check_unsafe();
}

static CUresult stream_sync(CUstream s, int ptsz, int wait)
{
    if (!fake_current())
        return CUDA_ERROR_INVALID_CONTEXT;
    int legacy;
    struct fake_stream *st = stream_of(s, ptsz, &legacy);
    if (!st)
        return CUDA_ERROR_INVALID_HANDLE;
    CUresult rc = sync_check(st, legacy);
    if (rc != CUDA_SUCCESS)
        return rc;
    /* the legacy stream synchronizes with all of the process's work on its GPU */
    uint64_t seq = legacy ? gpu_last_seq(st->dev) : st->last_seq;
    if (wait) {
        gpu_wait(st->dev, seq);
        return CUDA_SUCCESS;
    }
    return gpu_done(st->dev, seq) ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY;
}

API CUresult cuStreamSynchronize(CUstream s) { return stream_sync(s, 0, 1); }
API CUresult cuStreamSynchronize_ptsz(CUstream s) { return stream_sync(s, 1, 1); }
API CUresult cuStreamQuery(CUstream s) { return stream_sync(s, 0, 0); }
API CUresult cuStreamQuery_ptsz(CUstream s) { return stream_sync(s, 1, 0); }

API CUresult cuCtxSynchronize(void)
{
    struct fake_ctx *c = fake_current();
    if (!c)
        return CUDA_ERROR_INVALID_CONTEXT;
    CUresult rc = capture_check_unsafe();
    if (rc != CUDA_SUCCESS)
        return rc;
    gpu_wait(c->dev, gpu_last_seq(c->dev));
    return CUDA_SUCCESS;
}

/* ---- events ---- */

API int fakeLiveEvents(void) { return __atomic_load_n(&g_live_events, __ATOMIC_SEQ_CST); }

API CUresult cuEventCreate(CUevent *e, unsigned flags)
{
    struct fake_ctx *c = fake_current();
    if (!c)
        return CUDA_ERROR_INVALID_CONTEXT;
    if (!e)
        return CUDA_ERROR_INVALID_VALUE;
    struct fake_event *ev = calloc(1, sizeof *ev);
    if (!ev)
        return CUDA_ERROR_OUT_OF_MEMORY;
    ev->dev = c->dev;
    ev->flags = flags;
    ev->slot = gpu_event_slot_new(c->dev);
    if (ev->slot < 0) {
        free(ev);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    ev->magic = EVENT_MAGIC;
    __atomic_add_fetch(&g_live_events, 1, __ATOMIC_SEQ_CST);
    *e = (CUevent)ev;
    return CUDA_SUCCESS;
}

static struct fake_event *event_of(CUevent e)
{
    struct fake_event *ev = (struct fake_event *)e;
    return ev && ev->magic == EVENT_MAGIC ? ev : NULL;
}

API CUresult cuEventDestroy_v2(CUevent e)
{
    struct fake_event *ev = event_of(e);
    if (!ev)
        return CUDA_ERROR_INVALID_HANDLE;
    ev->magic = 0;
    gpu_event_slot_free(ev->dev, ev->slot);
    __atomic_sub_fetch(&g_live_events, 1, __ATOMIC_SEQ_CST);
    free(ev);
    return CUDA_SUCCESS;
}

void event_submit(struct fake_event *ev)
{
    ev->gen = __atomic_add_fetch(&g_gen, 1, __ATOMIC_SEQ_CST);
    ev->captured_id = 0;
    ev->seq = gpu_submit(ev->dev, 0, ev->slot, ev->gen);
}

static CUresult event_record(CUevent e, CUstream s, int ptsz)
{
    struct fake_event *ev = event_of(e);
    if (!ev)
        return CUDA_ERROR_INVALID_HANDLE;
    if (!fake_current())
        return CUDA_ERROR_INVALID_CONTEXT;
    int legacy;
    struct fake_stream *st = stream_of(s, ptsz, &legacy);
    if (!st || st->dev != ev->dev)
        return CUDA_ERROR_INVALID_HANDLE;
    pthread_mutex_lock(&g_capture_mu);
    if (st->cap) {
        CUresult rc = capture_add_locked(st->cap, NODE_EVENT, 0, ev);
        if (rc == CUDA_SUCCESS)
            ev->captured_id = st->cap->id;
        pthread_mutex_unlock(&g_capture_mu);
        return rc;
    }
    pthread_mutex_unlock(&g_capture_mu);
    CUresult rc = capture_legacy_check(st, legacy);
    if (rc != CUDA_SUCCESS)
        return rc;
    event_submit(ev);
    st->last_seq = ev->seq;
    return CUDA_SUCCESS;
}

API CUresult cuEventRecord(CUevent e, CUstream s) { return event_record(e, s, 0); }
API CUresult cuEventRecord_ptsz(CUevent e, CUstream s) { return event_record(e, s, 1); }
API CUresult cuEventRecordWithFlags(CUevent e, CUstream s, unsigned f) { (void)f; return event_record(e, s, 0); }
API CUresult cuEventRecordWithFlags_ptsz(CUevent e, CUstream s, unsigned f) { (void)f; return event_record(e, s, 1); }

/* Before looking at an event's completion: not an event recorded in a capture, and not prohibited. */
static CUresult event_check(struct fake_event *ev)
{
    if (ev->captured_id) {
        pthread_mutex_lock(&g_capture_mu);
        capture_invalidate_locked(capture_by_id_locked(ev->captured_id));
        pthread_mutex_unlock(&g_capture_mu);
        return CUDA_ERROR_CAPTURED_EVENT;
    }
    return capture_check_unsafe();
}

API CUresult cuEventQuery(CUevent e)
{
    struct fake_event *ev = event_of(e);
    if (!ev)
        return CUDA_ERROR_INVALID_HANDLE;
    CUresult rc = event_check(ev);
    if (rc != CUDA_SUCCESS)
        return rc;
    if (!ev->gen)
        return CUDA_SUCCESS; /* never recorded */
    return gpu_event_slot_done(ev->dev, ev->slot, ev->gen, NULL) ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY;
}

API CUresult cuEventSynchronize(CUevent e)
{
    struct fake_event *ev = event_of(e);
    if (!ev)
        return CUDA_ERROR_INVALID_HANDLE;
    CUresult rc = event_check(ev);
    if (rc != CUDA_SUCCESS)
        return rc;
    if (ev->gen)
        gpu_wait(ev->dev, ev->seq);
    return CUDA_SUCCESS;
}

API CUresult cuEventElapsedTime(float *ms, CUevent a, CUevent b)
{
    struct fake_event *x = event_of(a), *y = event_of(b);
    if (!x || !y || !ms)
        return CUDA_ERROR_INVALID_HANDLE;
    CUresult rc = event_check(x);
    if (rc == CUDA_SUCCESS)
        rc = event_check(y);
    if (rc != CUDA_SUCCESS)
        return rc;
    if ((x->flags | y->flags) & CU_EVENT_DISABLE_TIMING || !x->gen || !y->gen)
        return CUDA_ERROR_INVALID_HANDLE;
    uint64_t tx, ty;
    if (!gpu_event_slot_done(x->dev, x->slot, x->gen, &tx) || !gpu_event_slot_done(y->dev, y->slot, y->gen, &ty))
        return CUDA_ERROR_NOT_READY;
    *ms = (float)((double)(int64_t)(ty - tx) / 1e6);
    return CUDA_SUCCESS;
}

static CUresult stream_wait_event(CUstream s, CUevent e, int ptsz)
{
    struct fake_event *ev = event_of(e);
    int legacy;
    struct fake_stream *st = stream_of(s, ptsz, &legacy);
    if (!ev || !st)
        return CUDA_ERROR_INVALID_HANDLE;
    if (ev->captured_id)
        return capture_join(st, ev->captured_id);
    pthread_mutex_lock(&g_capture_mu);
    struct capture *c = st->cap;
    if (c)
        capture_invalidate_locked(c); /* a captured stream may only depend on captured work */
    pthread_mutex_unlock(&g_capture_mu);
    if (c)
        return CUDA_ERROR_STREAM_CAPTURE_ISOLATION;
    CUresult rc = capture_legacy_check(st, legacy);
    if (rc != CUDA_SUCCESS)
        return rc;
    /* one process's work on one GPU runs in order already; across GPUs the host waits */
    if (ev->gen && ev->dev != st->dev)
        gpu_wait(ev->dev, ev->seq);
    return CUDA_SUCCESS;
}

API CUresult cuStreamWaitEvent(CUstream s, CUevent e, unsigned f) { (void)f; return stream_wait_event(s, e, 0); }
API CUresult cuStreamWaitEvent_ptsz(CUstream s, CUevent e, unsigned f) { (void)f; return stream_wait_event(s, e, 1); }
