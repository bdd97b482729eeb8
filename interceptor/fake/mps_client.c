/* The fake libcuda as an MPS client. At cuInit the process looks for a control daemon on
 * CUDA_MPS_PIPE_DIRECTORY (/tmp/nvidia-mps), as the real driver does:
 *   - no control socket there: not an MPS client; the process runs as it would without MPS;
 *   - a control socket nobody answers on (a daemon that died), or a daemon that refuses the client:
 *     cuInit fails with CUDA_ERROR_MPS_CONNECTION_FAILED (or the daemon's error, e.g. too many clients);
 *   - a live daemon: the process registers as a client, with its CUDA_MPS_ACTIVE_THREAD_PERCENTAGE and
 *     CUDA_MPS_PINNED_DEVICE_MEM_LIMIT, and waits until its server is up (a server of another user must
 *     drain first). It then sees the daemon's GPUs (its CUDA_VISIBLE_DEVICES), runs its kernels
 *     concurrently with the server's other clients at its share of the SMs (gpu.c), and cannot hold more
 *     device memory than its pinned limit (fake_cuda.c). The connection stays open: the daemon sees the
 *     client go when the process exits. */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "fake.h"
#include "mps.h"

static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static int g_done;        /* cuInit looked for a daemon */
static CUresult g_result; /* what cuInit returns from then on */
static int g_fd = -1;
static struct fake_mps g_mps;

static void after_fork_child(void)
{
    /* a forked child is a process of its own: it connects again at its cuInit */
    if (g_fd >= 0)
        close(g_fd);
    g_fd = -1;
    g_done = 0;
    g_result = CUDA_SUCCESS;
    memset(&g_mps, 0, sizeof g_mps);
    pthread_mutex_init(&g_mu, NULL);
}

static CUresult fail(int fd, CUresult rc, const char *why)
{
    fprintf(stderr, "fake libcuda: MPS client: %s (CUDA error %d)\n", why, rc);
    if (fd >= 0)
        close(fd);
    return rc;
}

/* "ok <server> <atp x10> <n> [<gpu> <limit>]*n" */
static int parse_ok(const char *m, struct fake_mps *out)
{
    int server, atp10, n, used;
    if (sscanf(m, "ok %d %d %d%n", &server, &atp10, &n, &used) != 3 || n < 0 || n > FAKE_MAXDEV || atp10 <= 0 ||
        atp10 > 1000)
        return -1;
    m += used;
    for (int i = 0; i < n; i++) {
        unsigned long long lim;
        int gpu;
        if (sscanf(m, " %d %llu%n", &gpu, &lim, &used) != 2 || gpu < 0 || gpu >= FAKE_MAXDEV)
            return -1;
        out->gpu[i] = gpu;
        out->limit[i] = lim;
        m += used;
    }
    out->server = server;
    out->atp10 = atp10;
    out->count = n;
    return 0;
}

static CUresult connect_daemon(void)
{
    struct sockaddr_un a = { .sun_family = AF_UNIX };
    const char *dir = mps_pipe_dir();
    if (snprintf(a.sun_path, sizeof a.sun_path, "%s/%s", dir, MPS_CONTROL) >= (int)sizeof a.sun_path)
        return fail(-1, CUDA_ERROR_MPS_CONNECTION_FAILED, "the pipe directory is too long for a socket path");
    int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return fail(-1, CUDA_ERROR_MPS_CONNECTION_FAILED, strerror(errno));
    if (connect(fd, (struct sockaddr *)&a, sizeof a) != 0) {
        int e = errno;
        close(fd);
        if (e == ENOENT || e == ENOTDIR)
            return CUDA_SUCCESS; /* no daemon was ever there: not an MPS client */
        char why[160];
        snprintf(why, sizeof why, "cannot connect to the control daemon at %.100s: %s", a.sun_path, strerror(e));
        return fail(-1, CUDA_ERROR_MPS_CONNECTION_FAILED, why);
    }
    const char *atp = getenv("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE");
    const char *lim = getenv("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT");
    char hello[MPS_MSG_MAX];
    int n = snprintf(hello, sizeof hello, "client\n%.64s\n%.400s", atp ? atp : "", lim ? lim : "");
    char reply[MPS_MSG_MAX + 1];
    ssize_t r = send(fd, hello, (size_t)n, MSG_NOSIGNAL) == n ? recv(fd, reply, MPS_MSG_MAX, 0) : -1;
    if (r <= 0)
        return fail(fd, CUDA_ERROR_MPS_CONNECTION_FAILED, "the control daemon closed the connection");
    reply[r] = 0;
    int code;
    if (sscanf(reply, "err %d", &code) == 1)
        return fail(fd, code, reply + 4);
    struct fake_mps m = { 0 };
    if (parse_ok(reply, &m) != 0)
        return fail(fd, CUDA_ERROR_MPS_RPC_FAILURE, "the control daemon's answer does not parse");
    m.active = 1;
    g_mps = m;
    g_fd = fd;
    return CUDA_SUCCESS;
}

CUresult mps_client_init(void)
{
    pthread_mutex_lock(&g_mu);
    if (!g_done) {
        g_result = connect_daemon();
        __atomic_store_n(&g_done, 1, __ATOMIC_RELEASE);
    }
    CUresult rc = g_result;
    pthread_mutex_unlock(&g_mu);
    return rc;
}

CUresult mps_client_status(void)
{
    return __atomic_load_n(&g_done, __ATOMIC_ACQUIRE) ? g_result : CUDA_SUCCESS;
}

const struct fake_mps *mps_client(void)
{
    return __atomic_load_n(&g_done, __ATOMIC_ACQUIRE) && g_mps.active ? &g_mps : NULL;
}

__attribute__((constructor)) static void mps_client_setup(void)
{
    pthread_atfork(NULL, NULL, after_fork_child);
}
