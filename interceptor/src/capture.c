/* Stream capture bookkeeping. A launch on a capturing stream does not run: it
 * becomes a node of a graph, so the limiter must neither throttle it nor record
 * timing events on that stream (recording is legal, but querying such an event
 * later invalidates the capture: CUDA_ERROR_CAPTURED_EVENT). And while any
 * capture is in progress, a query or synchronization from any thread in the
 * default (global) interaction mode would invalidate it too
 * (CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED), so the limiter defers those. */
#include "capture.h"
#include "hooks.h"
#include "util.h"

static int g_captures; /* begun through our hooks and not yet ended, atomic */

int capture_active(void)
{
    return __atomic_load_n(&g_captures, __ATOMIC_ACQUIRE) > 0;
}

int capture_stream_capturing(CUstream s, int ptsz)
{
    if (s == CU_STREAM_LEGACY || (s == NULL && !ptsz))
        return 1;
    CUstreamCaptureStatus st = CU_STREAM_CAPTURE_STATUS_NONE;
    CUresult rc;
    if (ptsz && r_cuStreamIsCapturing_ptsz)
        rc = r_cuStreamIsCapturing_ptsz(s, &st);
    else if (r_cuStreamIsCapturing)
        rc = r_cuStreamIsCapturing(s, &st);
    else
        return 1; /* cannot tell: leave it alone */
    return rc != CUDA_SUCCESS || st != CU_STREAM_CAPTURE_STATUS_NONE;
}

static CUresult begun(CUresult rc)
{
    if (rc == CUDA_SUCCESS)
        __atomic_add_fetch(&g_captures, 1, __ATOMIC_ACQ_REL);
    return rc;
}

/* cuStreamEndCapture takes the stream out of capture mode when it succeeds and when it reports the
 * capture invalidated; other errors (not capturing, wrong thread, wrong stream) leave things as they were. */
static CUresult ended(CUresult rc)
{
    if (rc == CUDA_SUCCESS || rc == CUDA_ERROR_STREAM_CAPTURE_INVALIDATED) {
        int n = __atomic_load_n(&g_captures, __ATOMIC_ACQUIRE);
        while (n > 0 && !__atomic_compare_exchange_n(&g_captures, &n, n - 1, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
        }
    }
    return rc;
}

HOOK CUresult cuStreamBeginCapture(CUstream s)
{
    if (!cuda_ready() || !r_cuStreamBeginCapture)
        return CUDA_ERROR_NOT_INITIALIZED;
    return begun(r_cuStreamBeginCapture(s));
}

HOOK CUresult cuStreamBeginCapture_ptsz(CUstream s)
{
    if (!cuda_ready() || !r_cuStreamBeginCapture_ptsz)
        return CUDA_ERROR_NOT_INITIALIZED;
    return begun(r_cuStreamBeginCapture_ptsz(s));
}

HOOK CUresult cuStreamBeginCapture_v2(CUstream s, CUstreamCaptureMode mode)
{
    if (!cuda_ready() || !r_cuStreamBeginCapture_v2)
        return CUDA_ERROR_NOT_INITIALIZED;
    return begun(r_cuStreamBeginCapture_v2(s, mode));
}

HOOK CUresult cuStreamBeginCapture_v2_ptsz(CUstream s, CUstreamCaptureMode mode)
{
    if (!cuda_ready() || !r_cuStreamBeginCapture_v2_ptsz)
        return CUDA_ERROR_NOT_INITIALIZED;
    return begun(r_cuStreamBeginCapture_v2_ptsz(s, mode));
}

HOOK CUresult cuStreamBeginCaptureToGraph(CUstream s, CUgraph g, const CUgraphNode *deps,
                                          const CUgraphEdgeData *edata, size_t n, CUstreamCaptureMode mode)
{
    if (!cuda_ready() || !r_cuStreamBeginCaptureToGraph)
        return CUDA_ERROR_NOT_INITIALIZED;
    return begun(r_cuStreamBeginCaptureToGraph(s, g, deps, edata, n, mode));
}

HOOK CUresult cuStreamBeginCaptureToGraph_ptsz(CUstream s, CUgraph g, const CUgraphNode *deps,
                                               const CUgraphEdgeData *edata, size_t n, CUstreamCaptureMode mode)
{
    if (!cuda_ready() || !r_cuStreamBeginCaptureToGraph_ptsz)
        return CUDA_ERROR_NOT_INITIALIZED;
    return begun(r_cuStreamBeginCaptureToGraph_ptsz(s, g, deps, edata, n, mode));
}

HOOK CUresult cuStreamEndCapture(CUstream s, CUgraph *g)
{
    if (!cuda_ready() || !r_cuStreamEndCapture)
        return CUDA_ERROR_NOT_INITIALIZED;
    return ended(r_cuStreamEndCapture(s, g));
}

HOOK CUresult cuStreamEndCapture_ptsz(CUstream s, CUgraph *g)
{
    if (!cuda_ready() || !r_cuStreamEndCapture_ptsz)
        return CUDA_ERROR_NOT_INITIALIZED;
    return ended(r_cuStreamEndCapture_ptsz(s, g));
}

void capture_after_fork(void)
{
    __atomic_store_n(&g_captures, 0, __ATOMIC_RELEASE);
}
