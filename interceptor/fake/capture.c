/* Stream capture and graphs of the fake driver, following the driver's
 * documented rules:
 * - on a capturing stream, launches, event records and graph launches become
 *   graph nodes instead of running; synchronizing or querying a capturing
 *   stream fails with CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, and querying,
 *   synchronizing or timing an event last recorded in a capture fails with
 *   CUDA_ERROR_CAPTURED_EVENT; both invalidate the capture;
 * - using the legacy default stream while a blocking stream of the same GPU is
 *   capturing fails with CUDA_ERROR_STREAM_CAPTURE_IMPLICIT and invalidates;
 * - "potentially unsafe" calls (those that may synchronize: cuMemAlloc,
 *   cuMemFree, cuCtxSynchronize, stream and event queries and synchronization)
 *   follow the capture modes: a thread in relaxed interaction mode may make
 *   them; otherwise its own non-relaxed capture prohibits them and, in global
 *   interaction mode (the default), so does another thread's global-mode
 *   capture. A prohibited call returns CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED
 *   and invalidates the captures that prohibit it;
 * - cuStreamEndCapture of an invalidated capture returns
 *   CUDA_ERROR_STREAM_CAPTURE_INVALIDATED and no graph; waiting on an event of
 *   an active capture joins the waiting stream (fork/join); a capturing stream
 *   waiting on uncaptured work is CUDA_ERROR_STREAM_CAPTURE_ISOLATION; two
 *   captures meeting is CUDA_ERROR_STREAM_CAPTURE_MERGE.
 * Simplified: no unjoined-fork check at cuStreamEndCapture; a graph keeps its
 * nodes in capture order and runs them as one chain. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "stream.h"

#define GRAPH_MAGIC 0x485041524745b446ull
#define EXEC_MAGIC 0x4345584548504147ull

pthread_mutex_t g_capture_mu = PTHREAD_MUTEX_INITIALIZER;
static struct capture *g_captures;
static uint64_t g_capture_ids;
static __thread CUstreamCaptureMode t_mode = CU_STREAM_CAPTURE_MODE_GLOBAL;

struct fake_exec {
    uint64_t magic;
    int n;
    struct node *nodes;
};

void capture_invalidate_locked(struct capture *c)
{
    if (c && c->status == CU_STREAM_CAPTURE_STATUS_ACTIVE)
        c->status = CU_STREAM_CAPTURE_STATUS_INVALIDATED;
}

struct capture *capture_by_id_locked(uint64_t id)
{
    for (struct capture *c = g_captures; c; c = c->next)
        if (c->id == id)
            return c;
    return NULL;
}

static CUresult graph_add(struct fake_graph *g, int kind, uint64_t ns, struct fake_event *ev)
{
    if (g->n == g->cap) {
        int cap = g->cap ? g->cap * 2 : 16;
        struct node *n = realloc(g->nodes, (size_t)cap * sizeof *n);
        if (!n)
            return CUDA_ERROR_OUT_OF_MEMORY;
        g->nodes = n;
        g->cap = cap;
    }
    g->nodes[g->n++] = (struct node){ kind, ns, ev };
    return CUDA_SUCCESS;
}

CUresult capture_add_locked(struct capture *c, int kind, uint64_t ns, struct fake_event *ev)
{
    if (c->status != CU_STREAM_CAPTURE_STATUS_ACTIVE)
        return CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
    return graph_add(c->graph, kind, ns, ev);
}

CUresult capture_legacy_check(struct fake_stream *st, int legacy)
{
    if (!legacy)
        return CUDA_SUCCESS;
    int bad = 0;
    pthread_mutex_lock(&g_capture_mu);
    for (struct capture *c = g_captures; c; c = c->next) {
        if (c->origin->dev == st->dev && !(c->origin->flags & CU_STREAM_NON_BLOCKING)) {
            bad = 1;
            capture_invalidate_locked(c);
        }
    }
    pthread_mutex_unlock(&g_capture_mu);
    return bad ? CUDA_ERROR_STREAM_CAPTURE_IMPLICIT : CUDA_SUCCESS;
}

CUresult capture_check_unsafe(void)
{
    if (t_mode == CU_STREAM_CAPTURE_MODE_RELAXED)
        return CUDA_SUCCESS;
    pthread_t self = pthread_self();
    int prohibited = 0;
    pthread_mutex_lock(&g_capture_mu);
    for (struct capture *c = g_captures; c; c = c->next) {
        int mine = pthread_equal(c->thread, self);
        if ((mine && c->mode != CU_STREAM_CAPTURE_MODE_RELAXED) ||
            (!mine && c->mode == CU_STREAM_CAPTURE_MODE_GLOBAL && t_mode == CU_STREAM_CAPTURE_MODE_GLOBAL)) {
            prohibited = 1;
            capture_invalidate_locked(c);
        }
    }
    pthread_mutex_unlock(&g_capture_mu);
    return prohibited ? CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED : CUDA_SUCCESS;
}

CUresult capture_join(struct fake_stream *st, uint64_t capture_id)
{
    CUresult rc = CUDA_SUCCESS;
    pthread_mutex_lock(&g_capture_mu);
    struct capture *c = capture_by_id_locked(capture_id);
    if (!c) {
        rc = CUDA_ERROR_CAPTURED_EVENT; /* recorded in a capture that has ended */
    } else if (st->cap && st->cap != c) {
        capture_invalidate_locked(c);
        capture_invalidate_locked(st->cap);
        rc = CUDA_ERROR_STREAM_CAPTURE_MERGE;
    } else if (!st->cap) {
        if (c->njoined == MAX_JOINED) {
            rc = CUDA_ERROR_OUT_OF_MEMORY;
        } else {
            c->joined[c->njoined++] = st;
            st->cap = c;
        }
    }
    pthread_mutex_unlock(&g_capture_mu);
    return rc;
}

void capture_forget_stream(struct fake_stream *st)
{
    pthread_mutex_lock(&g_capture_mu);
    struct capture *c = st->cap;
    if (c) {
        for (int i = 0; i < c->njoined; i++)
            if (c->joined[i] == st)
                c->joined[i] = c->joined[--c->njoined];
        st->cap = NULL;
    }
    pthread_mutex_unlock(&g_capture_mu);
}

static struct fake_graph *graph_of(CUgraph g)
{
    struct fake_graph *x = (struct fake_graph *)g;
    return x && x->magic == GRAPH_MAGIC ? x : NULL;
}

static CUresult begin_capture(CUstream s, int ptsz, CUstreamCaptureMode mode, struct fake_graph *into)
{
    if (!fake_current())
        return CUDA_ERROR_INVALID_CONTEXT;
    int legacy;
    struct fake_stream *st = stream_of(s, ptsz, &legacy);
    if (!st)
        return CUDA_ERROR_INVALID_HANDLE;
    if (legacy)
        return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED; /* the legacy stream cannot be captured */
    if ((unsigned)mode > CU_STREAM_CAPTURE_MODE_RELAXED)
        return CUDA_ERROR_INVALID_VALUE;
    struct capture *c = calloc(1, sizeof *c);
    struct fake_graph *g = into ? into : calloc(1, sizeof *g);
    if (!c || !g) {
        free(c);
        if (!into)
            free(g);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    g->magic = GRAPH_MAGIC;
    pthread_mutex_lock(&g_capture_mu);
    if (st->cap) {
        pthread_mutex_unlock(&g_capture_mu);
        free(c);
        if (!into)
            free(g);
        return CUDA_ERROR_ILLEGAL_STATE;
    }
    c->id = ++g_capture_ids;
    c->mode = mode;
    c->thread = pthread_self();
    c->status = CU_STREAM_CAPTURE_STATUS_ACTIVE;
    c->origin = st;
    c->graph = g;
    c->own_graph = !into;
    c->next = g_captures;
    g_captures = c;
    st->cap = c;
    pthread_mutex_unlock(&g_capture_mu);
    return CUDA_SUCCESS;
}

/* v1 (CUDA 10.0) had no mode argument: it captures in global mode */
API CUresult cuStreamBeginCapture(CUstream s) { return begin_capture(s, 0, CU_STREAM_CAPTURE_MODE_GLOBAL, NULL); }
API CUresult cuStreamBeginCapture_ptsz(CUstream s) { return begin_capture(s, 1, CU_STREAM_CAPTURE_MODE_GLOBAL, NULL); }
API CUresult cuStreamBeginCapture_v2(CUstream s, CUstreamCaptureMode m) { return begin_capture(s, 0, m, NULL); }
API CUresult cuStreamBeginCapture_v2_ptsz(CUstream s, CUstreamCaptureMode m) { return begin_capture(s, 1, m, NULL); }

#define BCTG_PARAMS CUstream s, CUgraph g, const CUgraphNode *deps, const CUgraphEdgeData *edata, size_t n, \
                    CUstreamCaptureMode m
API CUresult cuStreamBeginCaptureToGraph(BCTG_PARAMS)
{
    (void)deps, (void)edata, (void)n;
    return graph_of(g) ? begin_capture(s, 0, m, graph_of(g)) : CUDA_ERROR_INVALID_VALUE;
}
API CUresult cuStreamBeginCaptureToGraph_ptsz(BCTG_PARAMS)
{
    (void)deps, (void)edata, (void)n;
    return graph_of(g) ? begin_capture(s, 1, m, graph_of(g)) : CUDA_ERROR_INVALID_VALUE;
}

static CUresult end_capture(CUstream s, int ptsz, CUgraph *out)
{
    int legacy;
    struct fake_stream *st = stream_of(s, ptsz, &legacy);
    if (!st || !out)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&g_capture_mu);
    struct capture *c = st->cap;
    CUresult rc = CUDA_SUCCESS;
    if (!c) {
        rc = CUDA_ERROR_ILLEGAL_STATE;
    } else if (c->origin != st) {
        capture_invalidate_locked(c);
        rc = CUDA_ERROR_STREAM_CAPTURE_UNMATCHED;
    } else if (c->mode != CU_STREAM_CAPTURE_MODE_RELAXED && !pthread_equal(c->thread, pthread_self())) {
        rc = CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD;
    }
    if (rc != CUDA_SUCCESS) {
        pthread_mutex_unlock(&g_capture_mu);
        return rc;
    }
    for (struct capture **p = &g_captures; *p; p = &(*p)->next) {
        if (*p == c) {
            *p = c->next;
            break;
        }
    }
    st->cap = NULL;
    for (int i = 0; i < c->njoined; i++)
        c->joined[i]->cap = NULL;
    pthread_mutex_unlock(&g_capture_mu);
    if (c->status != CU_STREAM_CAPTURE_STATUS_ACTIVE) {
        if (c->own_graph) {
            free(c->graph->nodes);
            c->graph->magic = 0;
            free(c->graph);
        }
        *out = NULL;
        rc = CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
    } else {
        *out = (CUgraph)c->graph;
    }
    free(c);
    return rc;
}

API CUresult cuStreamEndCapture(CUstream s, CUgraph *g) { return end_capture(s, 0, g); }
API CUresult cuStreamEndCapture_ptsz(CUstream s, CUgraph *g) { return end_capture(s, 1, g); }

/* Querying capture state is always allowed, except on the legacy stream while it would synchronize with a
 * capture (then CUDA_ERROR_STREAM_CAPTURE_IMPLICIT, without invalidating anything). */
static CUresult capture_info(CUstream s, int ptsz, CUstreamCaptureStatus *status, cuuint64_t *id, CUgraph *graph)
{
    int legacy;
    struct fake_stream *st = stream_of(s, ptsz, &legacy);
    if (!st || !status)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&g_capture_mu);
    CUresult rc = CUDA_SUCCESS;
    if (legacy) {
        for (struct capture *c = g_captures; c; c = c->next)
            if (c->origin->dev == st->dev && !(c->origin->flags & CU_STREAM_NON_BLOCKING))
                rc = CUDA_ERROR_STREAM_CAPTURE_IMPLICIT;
    }
    struct capture *c = st->cap;
    *status = c ? c->status : CU_STREAM_CAPTURE_STATUS_NONE;
    if (id)
        *id = c ? c->id : 0;
    if (graph)
        *graph = c ? (CUgraph)c->graph : NULL;
    pthread_mutex_unlock(&g_capture_mu);
    return rc;
}

API CUresult cuStreamIsCapturing(CUstream s, CUstreamCaptureStatus *st) { return capture_info(s, 0, st, NULL, NULL); }
API CUresult cuStreamIsCapturing_ptsz(CUstream s, CUstreamCaptureStatus *st) { return capture_info(s, 1, st, NULL, NULL); }
API CUresult cuStreamGetCaptureInfo(CUstream s, CUstreamCaptureStatus *st, cuuint64_t *id)
{
    return capture_info(s, 0, st, id, NULL);
}
API CUresult cuStreamGetCaptureInfo_ptsz(CUstream s, CUstreamCaptureStatus *st, cuuint64_t *id)
{
    return capture_info(s, 1, st, id, NULL);
}

#define GCI2_PARAMS CUstream s, CUstreamCaptureStatus *st, cuuint64_t *id, CUgraph *g, const CUgraphNode **deps, \
                    size_t *n
static CUresult capture_info_deps(CUstream s, int ptsz, CUstreamCaptureStatus *st, cuuint64_t *id, CUgraph *g,
                                  const CUgraphNode **deps, const CUgraphEdgeData **edata, size_t *n)
{
    CUresult rc = capture_info(s, ptsz, st, id, g);
    /* nodes form one chain here; no dependency set is exposed */
    if (deps)
        *deps = NULL;
    if (edata)
        *edata = NULL;
    if (n)
        *n = 0;
    return rc;
}
API CUresult cuStreamGetCaptureInfo_v2(GCI2_PARAMS) { return capture_info_deps(s, 0, st, id, g, deps, NULL, n); }
API CUresult cuStreamGetCaptureInfo_v2_ptsz(GCI2_PARAMS) { return capture_info_deps(s, 1, st, id, g, deps, NULL, n); }
#define GCI3_PARAMS CUstream s, CUstreamCaptureStatus *st, cuuint64_t *id, CUgraph *g, const CUgraphNode **deps, \
                    const CUgraphEdgeData **edata, size_t *n
API CUresult cuStreamGetCaptureInfo_v3(GCI3_PARAMS) { return capture_info_deps(s, 0, st, id, g, deps, edata, n); }
API CUresult cuStreamGetCaptureInfo_v3_ptsz(GCI3_PARAMS) { return capture_info_deps(s, 1, st, id, g, deps, edata, n); }

API CUresult cuThreadExchangeStreamCaptureMode(CUstreamCaptureMode *mode)
{
    if (!mode || (unsigned)*mode > CU_STREAM_CAPTURE_MODE_RELAXED)
        return CUDA_ERROR_INVALID_VALUE;
    CUstreamCaptureMode old = t_mode;
    t_mode = *mode;
    *mode = old;
    return CUDA_SUCCESS;
}

/* ---- graphs ---- */

API CUresult cuGraphCreate(CUgraph *g, unsigned flags)
{
    (void)flags;
    struct fake_graph *x = g ? calloc(1, sizeof *x) : NULL;
    if (!x)
        return g ? CUDA_ERROR_OUT_OF_MEMORY : CUDA_ERROR_INVALID_VALUE;
    x->magic = GRAPH_MAGIC;
    *g = (CUgraph)x;
    return CUDA_SUCCESS;
}

API CUresult cuGraphDestroy(CUgraph g)
{
    struct fake_graph *x = graph_of(g);
    if (!x)
        return CUDA_ERROR_INVALID_VALUE;
    x->magic = 0;
    free(x->nodes);
    free(x);
    return CUDA_SUCCESS;
}

/* Nodes the graph holds: the kernel time one launch of it takes (for tests). */
API uint64_t fakeGraphNs(CUgraph g)
{
    struct fake_graph *x = graph_of(g);
    uint64_t ns = 0;
    for (int i = 0; x && i < x->n; i++)
        ns += x->nodes[i].ns;
    return ns;
}

static CUresult instantiate(CUgraphExec *out, CUgraph g)
{
    struct fake_graph *x = graph_of(g);
    if (!out || !x)
        return CUDA_ERROR_INVALID_VALUE;
    struct fake_exec *e = calloc(1, sizeof *e);
    struct node *n = x->n ? malloc((size_t)x->n * sizeof *n) : NULL;
    if (!e || (x->n && !n)) {
        free(e);
        free(n);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    if (x->n)
        memcpy(n, x->nodes, (size_t)x->n * sizeof *n);
    e->magic = EXEC_MAGIC;
    e->n = x->n;
    e->nodes = n;
    *out = (CUgraphExec)e;
    return CUDA_SUCCESS;
}

API CUresult cuGraphInstantiate(CUgraphExec *e, CUgraph g, CUgraphNode *err, char *log, size_t size)
{
    (void)err, (void)log, (void)size;
    return instantiate(e, g);
}
API CUresult cuGraphInstantiate_v2(CUgraphExec *e, CUgraph g, CUgraphNode *err, char *log, size_t size)
{
    (void)err, (void)log, (void)size;
    return instantiate(e, g);
}
API CUresult cuGraphInstantiateWithFlags(CUgraphExec *e, CUgraph g, unsigned long long flags)
{
    (void)flags;
    return instantiate(e, g);
}
API CUresult cuGraphInstantiateWithParams(CUgraphExec *e, CUgraph g, CUDA_GRAPH_INSTANTIATE_PARAMS *p)
{
    CUresult rc = instantiate(e, g);
    if (p)
        p->result_out = rc == CUDA_SUCCESS ? 0 : 1;
    return rc;
}
API CUresult cuGraphInstantiateWithParams_ptsz(CUgraphExec *e, CUgraph g, CUDA_GRAPH_INSTANTIATE_PARAMS *p)
{
    return cuGraphInstantiateWithParams(e, g, p);
}

static struct fake_exec *exec_of(CUgraphExec e)
{
    struct fake_exec *x = (struct fake_exec *)e;
    return x && x->magic == EXEC_MAGIC ? x : NULL;
}

API CUresult cuGraphExecDestroy(CUgraphExec e)
{
    struct fake_exec *x = exec_of(e);
    if (!x)
        return CUDA_ERROR_INVALID_VALUE;
    x->magic = 0;
    free(x->nodes);
    free(x);
    return CUDA_SUCCESS;
}

static CUresult graph_launch(CUgraphExec e, CUstream s, int ptsz)
{
    struct fake_exec *x = exec_of(e);
    if (!x)
        return CUDA_ERROR_INVALID_VALUE;
    if (!fake_current())
        return CUDA_ERROR_INVALID_CONTEXT;
    int legacy;
    struct fake_stream *st = stream_of(s, ptsz, &legacy);
    if (!st)
        return CUDA_ERROR_INVALID_HANDLE;
    pthread_mutex_lock(&g_capture_mu);
    if (st->cap) {
        /* launched into a capture: the graph becomes part of the captured one */
        CUresult rc = CUDA_SUCCESS;
        for (int i = 0; i < x->n && rc == CUDA_SUCCESS; i++)
            rc = capture_add_locked(st->cap, x->nodes[i].kind, x->nodes[i].ns, x->nodes[i].ev);
        pthread_mutex_unlock(&g_capture_mu);
        return rc;
    }
    pthread_mutex_unlock(&g_capture_mu);
    CUresult rc = capture_legacy_check(st, legacy);
    return rc != CUDA_SUCCESS ? rc : exec_submit_nodes(x->nodes, x->n, st);
}

API CUresult cuGraphLaunch(CUgraphExec e, CUstream s) { return graph_launch(e, s, 0); }
API CUresult cuGraphLaunch_ptsz(CUgraphExec e, CUstream s) { return graph_launch(e, s, 1); }
