/* The fake control daemon's MPS state: the defaults, the one MPS server (a process started for the first
 * client's user: without -multiuser the real daemon runs one server at a time, and a client of another user
 * waits until the running server's clients are gone), its clients, and the commands of the command
 * interface with the real daemon's answers where they are known (shared/facts/mps.md). */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "mps.h"
#include "mps_daemon.h"

#define MAX_CONN 256
#define REPLY_MAX 2048

struct server {
    pid_t pid; /* 0: none */
    uid_t uid;
    int wfd;      /* the server process lives while this pipe is open */
    int draining; /* admits nobody; stops when its last client is gone */
    double atp;
    uint64_t mem[MPS_MAX_GPUS];
};

struct client {
    int fd; /* -1: free */
    pid_t pid;
    uid_t uid;
    int admitted; /* 0: waiting for a server (pending) */
    char payload[512];
};

static int g_visible[MPS_MAX_GPUS], g_nvis;
static double g_default_atp = 100.0;
static uint64_t g_default_mem[MPS_MAX_GPUS];
static struct server g_srv;
static pid_t g_reaping[8]; /* servers told to stop, not yet reaped */
static struct client g_cl[MAX_CONN];
static int g_quitting;
static uint64_t g_quit_deadline; /* ms; 0 none */

void state_init(const int *visible, int n)
{
    g_nvis = n;
    memcpy(g_visible, visible, sizeof(int) * (size_t)n);
    for (int i = 0; i < MAX_CONN; i++)
        g_cl[i].fd = -1;
}

/* ---- the server process ---- */

static void server_start(uid_t uid)
{
    int p[2];
    if (pipe2(p, O_CLOEXEC) != 0)
        return;
    pid_t pid = fork();
    if (pid == 0) {
        signal(SIGTERM, SIG_DFL);
        dup2(p[0], 3);
        for (int fd = 4; fd < 1024; fd++)
            close(fd);
        prctl(PR_SET_NAME, "nvidia-cuda-mps");
        if (getuid() == 0 && uid != 0 && setuid(uid) != 0)
            _exit(1);
        char b;
        while (read(3, &b, 1) != 0 && errno == EINTR) {
        }
        _exit(0);
    }
    close(p[0]);
    if (pid < 0) {
        close(p[1]);
        mps_log(LOG_CONTROL, "Control", getpid(), "Failed to start a server for user %u: %s", (unsigned)uid,
                strerror(errno));
        return;
    }
    g_srv = (struct server){ .pid = pid, .uid = uid, .wfd = p[1], .atp = g_default_atp };
    memcpy(g_srv.mem, g_default_mem, sizeof g_srv.mem);
    mps_log(LOG_CONTROL, "Control", pid, "Starting new server %d for user %u", (int)pid, (unsigned)uid);
    mps_log(LOG_SERVER, "Server", pid, "Server has started");
    mps_log(LOG_SERVER, "Server", pid, "Active Threads Percentage set to %.1f", g_srv.atp);
    for (int d = 0; d < g_nvis; d++)
        if (g_srv.mem[d])
            mps_log(LOG_SERVER, "Server", pid, "Device pinned memory limit for device %d set to 0x%llx bytes", d,
                    (unsigned long long)g_srv.mem[d]);
    mps_log(LOG_CONTROL, "Control", getpid(), "NEW SERVER %d: Ready", (int)pid);
}

static void server_stop(int force)
{
    if (!g_srv.pid)
        return;
    close(g_srv.wfd);
    if (force)
        kill(g_srv.pid, SIGKILL);
    for (int i = 0; i < 8; i++)
        if (!g_reaping[i]) {
            g_reaping[i] = g_srv.pid;
            break;
        }
    mps_log(LOG_CONTROL, "Control", getpid(), "Server %d is shutting down", (int)g_srv.pid);
    memset(&g_srv, 0, sizeof g_srv);
}

static int server_clients(void)
{
    int n = 0;
    for (int i = 0; i < MAX_CONN; i++)
        n += g_cl[i].fd >= 0 && g_cl[i].admitted;
    return n;
}

/* ---- clients ---- */

/* the visible GPU (ordinal) a device argument names: its ordinal or its UUID; -1 none */
static int dev_arg(const char *s)
{
    if (!s)
        return -1;
    char *end;
    long v = strtol(s, &end, 10);
    if (*s && !*end)
        return v >= 0 && v < g_nvis ? (int)v : -1;
    for (int d = 0; d < g_nvis; d++) {
        char u[64];
        mps_gpu_uuid(g_visible[d], u, sizeof u);
        if (!strcmp(u, s))
            return d;
    }
    return -1;
}

/* the client's own limits (CUDA_MPS_PINNED_DEVICE_MEM_LIMIT: "<dev>=<value>[,...]") lowered into lim */
static void client_limits(pid_t pid, const char *spec, uint64_t *lim)
{
    char buf[512];
    snprintf(buf, sizeof buf, "%s", spec);
    char *save = NULL;
    for (char *e = strtok_r(buf, ",", &save); e; e = strtok_r(NULL, ",", &save)) {
        char *eq = strchr(e, '=');
        int d = -1;
        int64_t v = -1;
        if (eq) {
            *eq = 0;
            d = dev_arg(e);
            v = mps_parse_limit(eq + 1, 1);
        }
        if (d < 0 || v <= 0) {
            mps_log(LOG_SERVER, "Server", g_srv.pid, "Client %d: ignoring CUDA_MPS_PINNED_DEVICE_MEM_LIMIT entry '%s'",
                    (int)pid, e);
            continue;
        }
        if (!lim[d] || (uint64_t)v < lim[d])
            lim[d] = (uint64_t)v;
    }
}

static void admit(struct client *c)
{
    char atp_env[64] = "", mem_env[448] = "";
    sscanf(c->payload, "%63[^\n]\n%447[^\n]", atp_env, mem_env);
    if (!atp_env[0])
        sscanf(c->payload, "\n%447[^\n]", mem_env);
    double atp = g_srv.atp;
    if (atp_env[0]) {
        char *end;
        double v = strtod(atp_env, &end);
        if (*end || !(v > 0 && v <= 100))
            mps_log(LOG_SERVER, "Server", g_srv.pid, "Client %d: ignoring CUDA_MPS_ACTIVE_THREAD_PERCENTAGE '%s'",
                    (int)c->pid, atp_env);
        else if (v < atp)
            atp = v; /* a client can only lower what the server allows */
    }
    uint64_t lim[MPS_MAX_GPUS];
    memcpy(lim, g_srv.mem, sizeof lim);
    client_limits(c->pid, mem_env, lim);
    char msg[512];
    int n = snprintf(msg, sizeof msg, "ok %d %d %d", (int)g_srv.pid, (int)(atp * 10 + 0.5), g_nvis);
    for (int d = 0; d < g_nvis && n < (int)sizeof msg - 48; d++)
        n += snprintf(msg + n, sizeof msg - (size_t)n, " %d %llu", g_visible[d], (unsigned long long)lim[d]);
    c->admitted = 1;
    conn_send(c->fd, msg);
    mps_log(LOG_SERVER, "Server", g_srv.pid, "Client {PID: %d, Context ID: 0} connected (active threads %.1f)",
            (int)c->pid, atp);
}

static void refuse(struct client *c, int code, const char *why)
{
    char msg[160];
    snprintf(msg, sizeof msg, "err %d %s", code, why);
    conn_send(c->fd, msg);
    conn_drop(c->fd);
    c->fd = -1;
}

/* admits what can be admitted: starts a server for the first waiting client when none runs */
static void schedule(void)
{
    if (g_quitting)
        return;
    for (int i = 0; i < MAX_CONN; i++) {
        struct client *c = &g_cl[i];
        if (c->fd < 0 || c->admitted)
            continue;
        if (!g_srv.pid && !g_reaping[0])
            server_start(c->uid);
        if (!g_srv.pid || g_srv.draining)
            return;
        if (g_srv.uid != c->uid) {
            g_srv.draining = 1; /* the other user's clients finish first */
            if (!server_clients())
                server_stop(0);
            return;
        }
        if (server_clients() >= MPS_MAX_CLIENTS)
            refuse(c, 808, "the server has as many clients as the GPU supports");
        else
            admit(c);
    }
}

void state_client_hello(int fd, pid_t pid, uid_t uid, const char *payload)
{
    struct client *c = NULL;
    for (int i = 0; i < MAX_CONN && !c; i++)
        if (g_cl[i].fd < 0)
            c = &g_cl[i];
    if (!c) {
        conn_send(fd, "err 805 too many connections");
        conn_drop(fd);
        return;
    }
    *c = (struct client){ .fd = fd, .pid = pid, .uid = uid };
    snprintf(c->payload, sizeof c->payload, "%s", payload);
    if (g_quitting || !g_nvis) {
        refuse(c, 805, g_quitting ? "the control daemon is shutting down" : "no GPU is visible to the daemon");
        return;
    }
    if (!g_srv.pid || g_srv.uid != uid || g_srv.draining)
        mps_log(LOG_CONTROL, "Control", getpid(), "NEW CLIENT %d from user %u: Server is not ready, push client to pending list",
                (int)pid, (unsigned)uid);
    else
        mps_log(LOG_CONTROL, "Control", getpid(), "NEW CLIENT %d from user %u: Server already exists", (int)pid,
                (unsigned)uid);
    schedule();
}

void state_client_gone(int fd)
{
    for (int i = 0; i < MAX_CONN; i++) {
        struct client *c = &g_cl[i];
        if (c->fd != fd)
            continue;
        if (c->admitted)
            mps_log(LOG_SERVER, "Server", g_srv.pid, "Client {PID: %d, Context ID: 0} disconnected", (int)c->pid);
        c->fd = -1;
    }
    if (g_srv.pid && (g_srv.draining || g_quitting) && !server_clients())
        server_stop(0);
    schedule();
}

/* ---- the command interface ---- */

struct reply {
    char text[REPLY_MAX];
    size_t len;
    int refused;
};

__attribute__((format(printf, 2, 3))) static void say(struct reply *r, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(r->text + r->len, sizeof r->text - r->len, fmt, ap);
    va_end(ap);
    if (n > 0)
        r->len = r->len + (size_t)n < sizeof r->text ? r->len + (size_t)n : sizeof r->text - 1;
}

__attribute__((format(printf, 2, 3))) static void refuse_cmd(struct reply *r, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->text, sizeof r->text, fmt, ap);
    va_end(ap);
    r->len = strlen(r->text);
    r->refused = 1;
}

/* the server a PID argument names (only the running one exists), or NULL after refusing */
static struct server *server_arg(struct reply *r, const char *s)
{
    char *end;
    long pid = s ? strtol(s, &end, 10) : 0;
    if (!s || *end || pid <= 0 || pid != g_srv.pid || !g_srv.pid) {
        refuse_cmd(r, "Server %s not found", s ? s : "(none)");
        return NULL;
    }
    return &g_srv;
}

static int percent_arg(struct reply *r, const char *s, double *out)
{
    char *end;
    double v = s ? strtod(s, &end) : 0;
    if (!s || *end || !(v > 0 && v <= 100)) {
        refuse_cmd(r, "Invalid active thread percentage '%s': expected a number above 0 and at most 100",
                   s ? s : "");
        return 0;
    }
    *out = v;
    return 1;
}

static int limit_args(struct reply *r, const char *dev, const char *value, int *d, uint64_t *bytes)
{
    *d = dev_arg(dev);
    int64_t v = mps_parse_limit(value, 0);
    if (*d < 0) {
        refuse_cmd(r, "Invalid device '%s'", dev ? dev : "");
        return 0;
    }
    if (v < 0) {
        refuse_cmd(r, "Invalid memory limit '%s': expected an integer followed by M or G", value ? value : "");
        return 0;
    }
    *bytes = (uint64_t)v;
    return 1;
}

static void show_limit(struct reply *r, uint64_t bytes)
{
    char b[32];
    mps_format_limit(bytes, b, sizeof b);
    say(r, "%s", b);
}

static void list_clients(struct reply *r)
{
    for (int i = 0; i < MAX_CONN; i++)
        if (g_cl[i].fd >= 0 && g_cl[i].admitted)
            say(r, "%d\n", (int)g_cl[i].pid);
}

static void run_command(struct reply *r, int argc, char **a)
{
    const char *cmd = a[0];
    struct server *s;
    double pct;
    int d;
    uint64_t bytes;
    if (!strcmp(cmd, "get_server_list") && argc == 1) {
        if (g_srv.pid)
            say(r, "%d", (int)g_srv.pid);
    } else if (!strcmp(cmd, "get_server_status") && argc == 2) {
        if ((s = server_arg(r, a[1])))
            say(r, "%s", s->draining ? "SHUTTING_DOWN" : "ACTIVE");
    } else if (!strcmp(cmd, "start_server") && argc == 3 && !strcmp(a[1], "-uid")) {
        char *end;
        long uid = strtol(a[2], &end, 10);
        if (*end || uid < 0)
            refuse_cmd(r, "Invalid user id '%s'", a[2]);
        else if (g_srv.pid && g_srv.uid != (uid_t)uid)
            refuse_cmd(r, "Server %d of user %u is running", (int)g_srv.pid, (unsigned)g_srv.uid);
        else if (!g_srv.pid && !g_quitting)
            server_start((uid_t)uid);
    } else if (!strcmp(cmd, "shutdown_server") && (argc == 2 || (argc == 3 && !strcmp(a[2], "-f")))) {
        if ((s = server_arg(r, a[1]))) {
            s->draining = 1;
            if (argc == 3 || !server_clients()) {
                for (int i = 0; i < MAX_CONN; i++)
                    if (g_cl[i].fd >= 0 && g_cl[i].admitted) {
                        conn_drop(g_cl[i].fd);
                        g_cl[i].fd = -1;
                    }
                server_stop(argc == 3);
            }
        }
    } else if (!strcmp(cmd, "get_client_list") && argc == 2) {
        if (server_arg(r, a[1]))
            list_clients(r);
    } else if (!strcmp(cmd, "get_device_client_list") && argc <= 2) {
        if (argc == 2 && !server_arg(r, a[1]))
            return;
        for (d = 0; d < g_nvis; d++) {
            char u[64];
            mps_gpu_uuid(g_visible[d], u, sizeof u);
            say(r, "%s", u);
            for (int i = 0; i < MAX_CONN; i++)
                if (g_cl[i].fd >= 0 && g_cl[i].admitted)
                    say(r, " %d", (int)g_cl[i].pid);
            say(r, "\n");
        }
    } else if (!strcmp(cmd, "set_default_active_thread_percentage") && argc == 2) {
        if (percent_arg(r, a[1], &pct))
            say(r, "%.1f", g_default_atp = pct);
    } else if (!strcmp(cmd, "get_default_active_thread_percentage") && argc == 1) {
        say(r, "%.1f", g_default_atp);
    } else if (!strcmp(cmd, "set_active_thread_percentage") && argc == 3) {
        if ((s = server_arg(r, a[1])) && percent_arg(r, a[2], &pct))
            say(r, "%.1f", s->atp = pct); /* applies to clients that connect from now on */
    } else if (!strcmp(cmd, "get_active_thread_percentage") && argc == 2) {
        if ((s = server_arg(r, a[1])))
            say(r, "%.1f", s->atp);
    } else if (!strcmp(cmd, "set_default_device_pinned_mem_limit") && argc == 3) {
        if (limit_args(r, a[1], a[2], &d, &bytes))
            g_default_mem[d] = bytes;
    } else if (!strcmp(cmd, "get_default_device_pinned_mem_limit") && argc == 2) {
        if ((d = dev_arg(a[1])) < 0)
            refuse_cmd(r, "Invalid device '%s'", a[1]);
        else
            show_limit(r, g_default_mem[d]);
    } else if (!strcmp(cmd, "set_device_pinned_mem_limit") && argc == 4) {
        if ((s = server_arg(r, a[1])) && limit_args(r, a[2], a[3], &d, &bytes))
            s->mem[d] = bytes;
    } else if (!strcmp(cmd, "get_device_pinned_mem_limit") && argc == 3) {
        if ((s = server_arg(r, a[1]))) {
            if ((d = dev_arg(a[2])) < 0)
                refuse_cmd(r, "Invalid device '%s'", a[2]);
            else
                show_limit(r, s->mem[d]);
        }
    } else if (!strcmp(cmd, "quit") && (argc == 1 || (argc == 3 && !strcmp(a[1], "-t")))) {
        char *end;
        long t = argc == 3 ? strtol(a[2], &end, 10) : 0;
        if (argc == 3 && (*end || t < 0)) {
            refuse_cmd(r, "Invalid timeout '%s'", a[2]);
            return;
        }
        g_quitting = 1;
        g_quit_deadline = argc == 3 ? mono_ms() + (uint64_t)t * 1000 : 0;
        for (int i = 0; i < MAX_CONN; i++)
            if (g_cl[i].fd >= 0 && !g_cl[i].admitted)
                refuse(&g_cl[i], 805, "the control daemon is shutting down");
        if (!server_clients())
            server_stop(0);
    } else {
        refuse_cmd(r, "Unrecognized command: %s", cmd);
    }
}

void state_command(int fd, const char *line, int privileged)
{
    char buf[512], *a[8];
    snprintf(buf, sizeof buf, "%s", line);
    int argc = 0;
    char *save = NULL;
    for (char *t = strtok_r(buf, " \t\r\n", &save); t && argc < 8; t = strtok_r(NULL, " \t\r\n", &save))
        a[argc++] = t;
    struct reply r = { .len = 0 };
    if (argc && !privileged && strncmp(a[0], "get_", 4)) {
        /* a client's container reaches `control`: it must not stop or change what serves other claims */
        r.refused = 1;
        say(&r, "%s: permission denied (a privileged command: connect to %s)", a[0], MPS_CONTROL_PRIVILEGED);
    } else if (argc)
        run_command(&r, argc, a);
    char msg[REPLY_MAX + 2];
    snprintf(msg, sizeof msg, "%c%s", r.refused ? '1' : '0', r.text);
    conn_send(fd, msg);
    schedule();
}

/* ---- housekeeping ---- */

int state_tick(void)
{
    for (;;) {
        int st;
        pid_t p = waitpid(-1, &st, WNOHANG);
        if (p <= 0)
            break;
        for (int i = 0; i < 8; i++)
            if (g_reaping[i] == p) {
                memmove(&g_reaping[i], &g_reaping[i + 1], sizeof(pid_t) * (size_t)(7 - i));
                g_reaping[7] = 0;
            }
        if (p == g_srv.pid) { /* died on its own: its clients lose their server */
            mps_log(LOG_CONTROL, "Control", getpid(), "Server %d exited unexpectedly", (int)p);
            close(g_srv.wfd);
            memset(&g_srv, 0, sizeof g_srv);
            for (int i = 0; i < MAX_CONN; i++)
                if (g_cl[i].fd >= 0 && g_cl[i].admitted) {
                    conn_drop(g_cl[i].fd);
                    g_cl[i].fd = -1;
                }
        } else {
            mps_log(LOG_CONTROL, "Control", getpid(), "Server %d exited with status %d", (int)p,
                    WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st));
        }
    }
    schedule();
    if (!g_quitting)
        return 0;
    if (g_quit_deadline && mono_ms() >= g_quit_deadline)
        state_force_quit();
    return !g_srv.pid && !g_reaping[0] && !server_clients();
}

void state_force_quit(void)
{
    g_quitting = 1;
    for (int i = 0; i < MAX_CONN; i++)
        if (g_cl[i].fd >= 0) {
            conn_drop(g_cl[i].fd);
            g_cl[i].fd = -1;
        }
    server_stop(1);
}
