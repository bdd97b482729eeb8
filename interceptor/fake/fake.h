/* What the pieces of the fake libcuda.so.1 share (fake_cuda.c: devices,
 * contexts, memory, symbol lookup; gpu.c: the simulated GPUs every process
 * shares; exec.c: streams, events, launches, stream capture and graphs). */
#ifndef TESSERA_FAKE_H
#define TESSERA_FAKE_H

#include <stdint.h>

#include "tessera_cuda.h"

#define API __attribute__((visibility("default")))
#define INTERNAL __attribute__((visibility("hidden")))
#define FAKE_MAXDEV 16

struct fake_ctx {
    int dev;
    int live;
};

/* the calling thread's current context (NULL: none) */
INTERNAL struct fake_ctx *fake_current(void);
INTERNAL int fake_gpu_count(void);
INTERNAL uint64_t fake_kernel_default_ns(void);
INTERNAL uint64_t fake_now_ns(void);
INTERNAL void fake_sleep_until(uint64_t t);

/* The physical GPU (index into the shared GPU state, NVML's index) behind a CUDA ordinal of this process. */
INTERNAL int fake_phys(int ordinal);

/* A GPU's memory in bytes (FAKE_GPU_MEM_MB). */
INTERNAL uint64_t fake_gpu_mem(void);

/* ---- uvm.c: device memory shared by processes, managed memory and paging (only with FAKE_GPU_MEM) ---- */

/* Whether FAKE_GPU_MEM names the shared memory file (mapped on first use). */
INTERNAL int uvm_on(void);
/* Plain device memory on physical GPU dev: taken (evicting managed pages if needed) or given back. */
INTERNAL CUresult uvm_take(int dev, uint64_t size, uint64_t cap);
INTERNAL void uvm_give(int dev, uint64_t size);
INTERNAL uint64_t uvm_used(int dev);
/* A managed allocation of this process (none of it on the device yet), its end, and advice given for it. */
INTERNAL int uvm_managed_add(uint64_t p, uint64_t size, int dev);
INTERNAL void uvm_managed_free(uint64_t p);
INTERNAL CUresult uvm_advise(uint64_t p, int advice);

/* ---- mps_client.c: this process as an MPS client ---- */

struct fake_mps {
    int active;
    int server;                   /* the MPS server's pid: its clients share the GPU concurrently */
    int atp10;                    /* active thread percentage x10 (1..1000) */
    int count;                    /* the GPUs the daemon makes visible, in CUDA ordinal order */
    int gpu[FAKE_MAXDEV];         /* physical index per ordinal */
    uint64_t limit[FAKE_MAXDEV];  /* pinned device memory limit per ordinal, bytes; 0 none */
};
/* cuInit's MPS part: connects to the control daemon when there is one (once per process). */
INTERNAL CUresult mps_client_init(void);
/* cuInit's MPS result so far (CUDA_SUCCESS before cuInit). */
INTERNAL CUresult mps_client_status(void);
/* This process's MPS client state, or NULL when it is no MPS client. */
INTERNAL const struct fake_mps *mps_client(void);

/* ---- gpu.c: the shared, time-sliced GPUs ---- */

/* Submits `ns` of kernel work (a marker when ns is 0 and ev >= 0: completes as soon as everything before it
 * did, and stamps event slot ev with generation gen) to this process's channel on dev. Returns the item's
 * sequence number, or 0 when the shared GPU is unusable (then nothing runs). */
INTERNAL uint64_t gpu_submit(int dev, uint64_t ns, int ev, uint64_t gen);
/* Whether item `seq` of this process's channel on dev has completed (after simulating up to now). */
INTERNAL int gpu_done(int dev, uint64_t seq);
/* Sleeps until item `seq` completed. */
INTERNAL void gpu_wait(int dev, uint64_t seq);
/* The last sequence number submitted by this process on dev. */
INTERNAL uint64_t gpu_last_seq(int dev);
/* Event slots live in the shared file (another process may complete them). */
INTERNAL int gpu_event_slot_new(int dev);
INTERNAL void gpu_event_slot_free(int dev, int slot);
/* 1 and the completion time when generation gen of slot completed; 0 when not yet. */
INTERNAL int gpu_event_slot_done(int dev, int slot, uint64_t gen, uint64_t *ts);

/* ---- exec.c: capture rules other pieces must honour ---- */

/* For a "potentially unsafe" call (one that may synchronize: cuMemAlloc, cuMemFree, synchronize and query
 * calls) made during a stream capture: returns CUDA_SUCCESS, or the error the driver returns after
 * invalidating the capture(s) that prohibit the call. */
INTERNAL CUresult capture_check_unsafe(void);

#endif
