/* The fake MPS: what the fake nvidia-cuda-mps-control (mps_control.c, mps_server.c, mps_ui.c) and the fake
 * libcuda's client side (mps_client.c) share. Names, paths and defaults are the real MPS's (see
 * shared/facts/mps.md); the messages on the control socket are this fake's own (the real protocol is not
 * public).
 *
 * The control sockets are <pipe dir>/control and control_privileged, AF_UNIX SOCK_SEQPACKET, as the real
 * ones. A connection's first message says who connects:
 *   "ui"                       the command interface: then one command per message; each answer is one
 *                              message, '0' (done) or '1' (refused) followed by the text to print;
 *   "client\n<ATP>\n<LIMITS>"  a CUDA process (cuInit), with its CUDA_MPS_ACTIVE_THREAD_PERCENTAGE and
 *                              CUDA_MPS_PINNED_DEVICE_MEM_LIMIT as set (empty when unset). The answer is
 *                              "ok <server pid> <atp x10> <n> [<gpu index> <limit bytes>]*n" once its server
 *                              is up (it may wait: another user's server must drain first), or
 *                              "err <CUresult> <why>". The connection then stays open for the client's life:
 *                              its end is how the daemon learns that the client exited. */
#ifndef TESSERA_FAKE_MPS_H
#define TESSERA_FAKE_MPS_H

#include <stddef.h>
#include <stdint.h>

#define MPS_DEFAULT_PIPE_DIR "/tmp/nvidia-mps"
#define MPS_DEFAULT_LOG_DIR "/var/log/nvidia-mps"
#define MPS_CONTROL "control"
/* Commands that start, stop or change a server or the daemon are taken only here (0600, the daemon's user);
 * `control` takes clients and the get_* queries from anyone (see interceptor/README.md, The fake MPS). */
#define MPS_CONTROL_PRIVILEGED "control_privileged"
#define MPS_LOCK "control_lock"
#define MPS_PID_FILE "nvidia-cuda-mps-control.pid"
#define MPS_MSG_MAX 4096
/* clients per GPU of one server: 16 for SM 3.5-6.0, 48 from Volta on (nvidia-cuda-mps-control(1)) */
#define MPS_MAX_CLIENTS 48
#define MPS_MAX_GPUS 16

/* $CUDA_MPS_PIPE_DIRECTORY / $CUDA_MPS_LOG_DIRECTORY, or the defaults */
const char *mps_pipe_dir(void);
const char *mps_log_dir(void);

/* The fake GPU `phys`'s UUID as NVML and the fake libcuda print it. */
void mps_gpu_uuid(int phys, char *out, size_t len);

/* The GPUs CUDA_VISIBLE_DEVICES (`spec`, NULL: all) makes visible out of `count`, in its order: indices,
 * UUIDs or UUID prefixes ("GPU-7e55"), comma-separated; like CUDA, enumeration stops at the first entry that
 * names no GPU (or one already listed). Returns how many were written to out. */
int mps_visible(const char *spec, int count, int *out, int max);

/* "<integer>M" or "<integer>G" (a control command's value; CUDA_MPS_PINNED_DEVICE_MEM_LIMIT also takes "MB"
 * and "GB") to bytes; -1 when it is not one. */
int64_t mps_parse_limit(const char *text, int env_form);
/* How the control daemon shows a pinned-memory limit: whole GiB as "<n>G" from 1 GiB on (rounded down, as a
 * real driver was seen to do), else "<n>M". */
void mps_format_limit(uint64_t bytes, char *out, size_t len);

#endif
