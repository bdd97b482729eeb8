/* A fake nvidia-cuda-mps-control for tests: the real tool's command line and command interface, without a
 * GPU (shared/facts/mps.md has what the real one does; interceptor/README.md what this one does).
 *   nvidia-cuda-mps-control -d   start the control daemon in the background (returns once it answers)
 *   nvidia-cuda-mps-control -f   the same in the foreground (the log also goes to stderr)
 *   nvidia-cuda-mps-control      the command interface: commands on stdin, one per line, answers on stdout
 * CUDA_MPS_PIPE_DIRECTORY (/tmp/nvidia-mps) holds the control sockets (control: clients and queries from any
 * user; control_privileged, 0600: every command), control_lock and the pid file;
 * CUDA_MPS_LOG_DIRECTORY (/var/log/nvidia-mps) control.log and server.log; CUDA_VISIBLE_DEVICES given to
 * the daemon selects the GPUs its clients see (FAKE_GPU_COUNT of them exist, as in the fake libcuda). */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "mps.h"
#include "mps_daemon.h"

#define MAX_CONN 256
#define FIRST 2 /* g_pfd[0]: the control socket, [1]: control_privileged; connections from FIRST on */
#define LAST (MAX_CONN + 1)

enum kind { K_FREE, K_NEW, K_UI, K_CLIENT };
static struct pollfd g_pfd[LAST + 1];
static enum kind g_kind[LAST + 1];
static int g_priv[LAST + 1]; /* accepted on control_privileged: every command; else only queries */
static int g_log[2] = { -1, -1 };
static int g_foreground;
static volatile sig_atomic_t g_term;

uint64_t mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

void mps_log(enum log_file f, const char *who, int pid, const char *fmt, ...)
{
    char line[1024];
    struct timespec ts;
    struct tm tm;
    clock_gettime(CLOCK_REALTIME, &ts);
    localtime_r(&ts.tv_sec, &tm);
    int n = snprintf(line, sizeof line, "[%04d-%02d-%02d %02d:%02d:%02d.%03ld %s %5d] ", tm.tm_year + 1900,
                     tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, ts.tv_nsec / 1000000, who, pid);
    va_list ap;
    va_start(ap, fmt);
    n += vsnprintf(line + n, sizeof line - (size_t)n - 1, fmt, ap);
    va_end(ap);
    if (n > (int)sizeof line - 2)
        n = (int)sizeof line - 2;
    line[n++] = '\n';
    if (g_log[f] >= 0 && write(g_log[f], line, (size_t)n) < 0) {
    }
    if (g_foreground && write(2, line, (size_t)n) < 0) {
    }
}

int conn_send(int fd, const char *msg)
{
    return send(fd, msg, strlen(msg), MSG_NOSIGNAL) < 0 ? -1 : 0;
}

void conn_drop(int fd)
{
    for (int i = FIRST; i <= LAST; i++)
        if (g_pfd[i].fd == fd && g_kind[i] != K_FREE) {
            close(fd);
            g_pfd[i].fd = -1;
            g_kind[i] = K_FREE;
        }
}

static void on_term(int sig)
{
    (void)sig;
    g_term = 1;
}

static void path_in(char *out, size_t len, const char *dir, const char *name)
{
    snprintf(out, len, "%s/%s", dir, name);
}

static int mkdirs(const char *dir)
{
    char p[4096];
    snprintf(p, sizeof p, "%s", dir);
    for (char *s = p + 1; *s; s++)
        if (*s == '/') {
            *s = 0;
            if (mkdir(p, 0755) != 0 && errno != EEXIST)
                return -1;
            *s = '/';
        }
    return mkdir(p, 0755) != 0 && errno != EEXIST ? -1 : 0;
}

/* Everything the daemon needs before it answers; on failure returns the message the starter prints. */
static const char *setup(int listen_fd[2], char *why, size_t whylen)
{
    const char *pipe_dir = mps_pipe_dir(), *log_dir = mps_log_dir();
    char path[4200];
    if (mkdirs(pipe_dir) != 0 || mkdirs(log_dir) != 0) {
        snprintf(why, whylen, "Cannot create %s or %s: %s", pipe_dir, log_dir, strerror(errno));
        return why;
    }
    path_in(path, sizeof path, pipe_dir, MPS_LOCK);
    int lock = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0666);
    if (lock < 0) {
        snprintf(why, whylen, "Cannot open %.400s: %s", path, strerror(errno));
        return why;
    }
    if (flock(lock, LOCK_EX | LOCK_NB) != 0)
        return "An instance of this daemon is already running";
    const char *names[2] = { "control.log", "server.log" };
    for (int f = 0; f < 2; f++) {
        path_in(path, sizeof path, log_dir, names[f]);
        g_log[f] = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
    }
    struct sockaddr_un a = { .sun_family = AF_UNIX };
    /* control (0666): clients and queries from anyone; control_privileged (0600, the daemon's user): every
     * command. Sockets a killed daemon left are nobody's: we hold the lock. */
    const char *names_s[2] = { MPS_CONTROL, MPS_CONTROL_PRIVILEGED };
    const mode_t modes[2] = { 0666, 0600 };
    for (int k = 0; k < 2; k++) {
        if (snprintf(a.sun_path, sizeof a.sun_path, "%s/%s", pipe_dir, names_s[k]) >= (int)sizeof a.sun_path) {
            snprintf(why, whylen, "The pipe directory %s is too long for a socket path", pipe_dir);
            return why;
        }
        unlink(a.sun_path);
        int s = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
        if (s < 0 || bind(s, (struct sockaddr *)&a, sizeof a) != 0 || chmod(a.sun_path, modes[k]) != 0 ||
            listen(s, 64) != 0) {
            snprintf(why, whylen, "Cannot listen on %.110s: %s", a.sun_path, strerror(errno));
            return why;
        }
        listen_fd[k] = s;
    }
    path_in(path, sizeof path, pipe_dir, MPS_PID_FILE);
    FILE *pf = fopen(path, "we");
    if (pf) {
        fprintf(pf, "%d\n", (int)getpid());
        fclose(pf);
    }
    return NULL;
}

static void on_message(int i, const char *msg)
{
    int fd = g_pfd[i].fd;
    if (g_kind[i] == K_UI) {
        mps_log(LOG_CONTROL, "Control", getpid(), "Cmd:%s%s", msg, g_priv[i] ? "" : " (unprivileged)");
        state_command(fd, msg, g_priv[i]);
    } else if (g_kind[i] == K_NEW && !strcmp(msg, "ui")) {
        g_kind[i] = K_UI;
        mps_log(LOG_CONTROL, "Control", getpid(), "NEW UI");
    } else if (g_kind[i] == K_NEW && !strncmp(msg, "client\n", 7)) {
        struct ucred cr;
        socklen_t len = sizeof cr;
        if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cr, &len) != 0) {
            mps_log(LOG_CONTROL, "Control", getpid(), "User did not send valid credentials");
            conn_drop(fd);
            return;
        }
        g_kind[i] = K_CLIENT;
        state_client_hello(fd, cr.pid, cr.uid, msg + 7);
    } else {
        mps_log(LOG_CONTROL, "Control", getpid(), "Unknown message on a connection; closing it");
        conn_drop(fd);
    }
}

/* A connection on control_privileged from a user other than root or the daemon's own is refused: the
 * socket's mode keeps them out, this keeps them out of a socket whose mode someone loosened. */
static int may_command(int fd)
{
    struct ucred cr;
    socklen_t len = sizeof cr;
    return getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cr, &len) == 0 && (cr.uid == 0 || cr.uid == geteuid());
}

static void serve(const int listen_fd[2])
{
    for (int k = 0; k < 2; k++)
        g_pfd[k] = (struct pollfd){ .fd = listen_fd[k], .events = POLLIN };
    for (int i = FIRST; i <= LAST; i++)
        g_pfd[i] = (struct pollfd){ .fd = -1, .events = POLLIN };
    for (;;) {
        if (g_term) {
            g_term = 0;
            mps_log(LOG_CONTROL, "Control", getpid(), "Terminated; stopping servers and clients");
            state_force_quit();
        }
        if (state_tick())
            return;
        if (poll(g_pfd, LAST + 1, 100) <= 0)
            continue;
        for (int k = 0; k < 2; k++) {
            if (!(g_pfd[k].revents & POLLIN))
                continue;
            int c = accept4(listen_fd[k], NULL, NULL, SOCK_CLOEXEC);
            int slot = 0;
            for (int i = FIRST; i <= LAST && c >= 0 && !slot; i++)
                if (g_kind[i] == K_FREE)
                    slot = i;
            if (c >= 0 && (!slot || (k == 1 && !may_command(c)))) {
                if (slot)
                    mps_log(LOG_CONTROL, "Control", getpid(), "Refusing a privileged connection from another user");
                close(c);
            } else if (c >= 0) {
                g_pfd[slot].fd = c;
                g_kind[slot] = K_NEW;
                g_priv[slot] = k == 1;
                mps_log(LOG_CONTROL, "Control", getpid(), "Accepting connection...");
            }
        }
        for (int i = FIRST; i <= LAST; i++) {
            if (g_kind[i] == K_FREE || !(g_pfd[i].revents & (POLLIN | POLLHUP | POLLERR)))
                continue;
            char msg[MPS_MSG_MAX + 1];
            ssize_t n = recv(g_pfd[i].fd, msg, MPS_MSG_MAX, 0);
            if (n > 0) {
                msg[n] = 0;
                on_message(i, msg);
                continue;
            }
            int fd = g_pfd[i].fd;
            enum kind k = g_kind[i];
            conn_drop(fd);
            if (k == K_CLIENT)
                state_client_gone(fd);
            else if (k == K_UI)
                mps_log(LOG_CONTROL, "Control", getpid(), "UI closed");
        }
    }
}

static int daemon_main(int foreground)
{
    int ready[2] = { -1, -1 };
    g_foreground = foreground;
    if (!foreground) {
        if (pipe2(ready, O_CLOEXEC) != 0)
            return 1;
        pid_t pid = fork();
        if (pid < 0)
            return 1;
        if (pid > 0) { /* the starter: returns once the daemon answers, or says why it did not start */
            close(ready[1]);
            char why[512];
            ssize_t n = read(ready[0], why, sizeof why - 1);
            if (n == 1 && why[0] == '+')
                return 0;
            why[n > 0 ? n : 0] = 0;
            fprintf(stderr, "%s\n", n > 0 ? why : "The control daemon exited while starting");
            return 1;
        }
        close(ready[0]);
        setsid();
    }
    signal(SIGPIPE, SIG_IGN);
    signal(SIGTERM, on_term);
    signal(SIGINT, on_term);
    int count = getenv("FAKE_GPU_COUNT") ? atoi(getenv("FAKE_GPU_COUNT")) : 2;
    int visible[MPS_MAX_GPUS];
    int nvis = mps_visible(getenv("CUDA_VISIBLE_DEVICES"), count > MPS_MAX_GPUS ? MPS_MAX_GPUS : count, visible,
                           MPS_MAX_GPUS);
    state_init(visible, nvis);
    int listen_fd[2] = { -1, -1 };
    char why[512];
    const char *err = setup(listen_fd, why, sizeof why);
    if (err) {
        if (ready[1] >= 0 && write(ready[1], err, strlen(err)) < 0) {
        }
        if (foreground)
            fprintf(stderr, "%s\n", err);
        return 1;
    }
    const char *pipe_dir = mps_pipe_dir();
    mps_log(LOG_CONTROL, "Control", getpid(), "Starting control daemon using socket %s/%s", pipe_dir, MPS_CONTROL);
    mps_log(LOG_CONTROL, "Control", getpid(), "To connect CUDA applications to this daemon, set env CUDA_MPS_PIPE_DIRECTORY=%s",
            pipe_dir);
    mps_log(LOG_CONTROL, "Control", getpid(), "CUDA MPS Control binary version: 12040");
    if (!nvis)
        mps_log(LOG_CONTROL, "Control", getpid(), "No GPU is visible (CUDA_VISIBLE_DEVICES=%s): servers cannot start",
                getenv("CUDA_VISIBLE_DEVICES") ? getenv("CUDA_VISIBLE_DEVICES") : "");
    if (!foreground) {
        int null = open("/dev/null", O_RDWR);
        dup2(null, 0), dup2(null, 1), dup2(null, 2);
        if (null > 2)
            close(null);
        if (write(ready[1], "+", 1) < 0) {
        }
        close(ready[1]);
    }
    serve(listen_fd);
    char path[4200];
    path_in(path, sizeof path, pipe_dir, MPS_CONTROL);
    unlink(path);
    path_in(path, sizeof path, pipe_dir, MPS_CONTROL_PRIVILEGED);
    unlink(path);
    path_in(path, sizeof path, pipe_dir, MPS_PID_FILE);
    unlink(path);
    mps_log(LOG_CONTROL, "Control", getpid(), "Exit");
    return 0;
}

int mps_ui_main(void);

int main(int argc, char **argv)
{
    if (argc == 1)
        return mps_ui_main();
    if (argc == 2 && (!strcmp(argv[1], "-d") || !strcmp(argv[1], "-f")))
        return daemon_main(argv[1][1] == 'f');
    fprintf(stderr, "Usage: %s [-d | -f]\n", argv[0]);
    return 1;
}
