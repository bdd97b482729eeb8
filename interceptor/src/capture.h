/* capture.c: which stream captures this process has in progress (counted by
 * hooking every cuStreamBeginCapture* and cuStreamEndCapture* entry point),
 * so that the limiter never does on a capturing stream, or while a capture
 * could be disturbed, anything the driver forbids there. capture_after_fork
 * forgets the parent's captures. */
#ifndef TESSERA_CAPTURE_H
#define TESSERA_CAPTURE_H

#include "tessera_cuda.h"

#pragma GCC visibility push(hidden)

/* Some capture is in progress in this process (any thread, any mode). While one is, the limiter makes no
 * call that the capture modes may prohibit (event queries and synchronization). */
int capture_active(void);
/* Whether a launch on s would be captured, or might be: the legacy stream while any capture is in progress
 * (using it could synchronize with the capture), or a stream the driver says is capturing. Only meaningful
 * while capture_active(). */
int capture_stream_capturing(CUstream s, int ptsz);

void capture_after_fork(void);

#pragma GCC visibility pop

#endif
