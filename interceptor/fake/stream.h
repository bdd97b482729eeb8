/* Streams, events and captures of the fake driver (exec.c: launches, streams,
 * events; capture.c: stream capture rules and graphs). */
#ifndef TESSERA_FAKE_STREAM_H
#define TESSERA_FAKE_STREAM_H

#include <pthread.h>

#include "fake.h"

#define MAX_JOINED 64

struct capture;

struct fake_stream {
    uint64_t magic;
    int dev;
    unsigned flags;
    uint64_t last_seq;
    struct capture *cap; /* the capture this stream takes part in (under g_capture_mu), NULL none */
};

struct fake_event {
    uint64_t magic;
    int dev;
    int slot;
    unsigned flags;
    uint64_t gen;         /* generation of the last record on the GPU; 0 never */
    uint64_t seq;
    uint64_t captured_id; /* last recorded inside capture #id (0: not); stays set after the capture ended */
};

enum { NODE_KERNEL, NODE_EVENT };

struct node {
    int kind;
    uint64_t ns;
    struct fake_event *ev;
};

struct fake_graph {
    uint64_t magic;
    int n, cap;
    struct node *nodes;
};

struct capture {
    uint64_t id;
    CUstreamCaptureMode mode;
    pthread_t thread;
    CUstreamCaptureStatus status;
    struct fake_stream *origin;
    struct fake_graph *graph;
    int own_graph; /* created by the capture, not cuStreamBeginCaptureToGraph */
    int njoined;
    struct fake_stream *joined[MAX_JOINED];
    struct capture *next;
};

INTERNAL extern pthread_mutex_t g_capture_mu;

/* The stream a handle names for the calling thread (NULL is the legacy stream, or the per-thread stream for
 * _ptsz entry points); *legacy tells which. NULL for a bad handle. */
INTERNAL struct fake_stream *stream_of(CUstream s, int ptsz, int *legacy);

/* capture.c, under g_capture_mu */
INTERNAL void capture_invalidate_locked(struct capture *c);
INTERNAL struct capture *capture_by_id_locked(uint64_t id);
INTERNAL CUresult capture_add_locked(struct capture *c, int kind, uint64_t ns, struct fake_event *ev);
/* capture.c, taking the lock */
INTERNAL CUresult capture_legacy_check(struct fake_stream *st, int legacy);
INTERNAL CUresult capture_join(struct fake_stream *st, uint64_t capture_id);
INTERNAL void capture_forget_stream(struct fake_stream *st);

/* exec.c */
INTERNAL void event_submit(struct fake_event *ev);
INTERNAL CUresult exec_submit_nodes(const struct node *nodes, int n, struct fake_stream *st);

#endif
