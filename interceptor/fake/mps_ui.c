/* The fake nvidia-cuda-mps-control's command interface (no arguments): reads commands from stdin until EOF,
 * one per line, sends each to the control daemon and prints its answer on stdout. Like the real one it exits
 * 0 when it could talk to the daemon (a refused command prints its error and goes on), and non-zero when no
 * daemon answers on the pipe directory or the connection breaks. */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "mps.h"

int mps_ui_main(void);

int mps_ui_main(void)
{
    /* root (or the daemon's user) gets every command through control_privileged; anyone else only queries */
    const char *names[2] = { MPS_CONTROL_PRIVILEGED, MPS_CONTROL };
    int s = -1;
    for (int k = 0; k < 2 && s < 0; k++) {
        struct sockaddr_un a = { .sun_family = AF_UNIX };
        snprintf(a.sun_path, sizeof a.sun_path, "%s/%s", mps_pipe_dir(), names[k]);
        s = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
        if (s >= 0 && (connect(s, (struct sockaddr *)&a, sizeof a) != 0 || send(s, "ui", 2, MSG_NOSIGNAL) != 2)) {
            close(s);
            s = -1;
        }
    }
    if (s < 0) {
        fprintf(stderr, "Cannot find MPS control daemon process\n");
        return 1;
    }
    char *line = NULL;
    size_t cap = 0;
    ssize_t n;
    while ((n = getline(&line, &cap, stdin)) >= 0) {
        while (n > 0 && (line[n - 1] == '\n' || line[n - 1] == '\r'))
            line[--n] = 0;
        if (!n || strspn(line, " \t") == (size_t)n)
            continue;
        if (n >= MPS_MSG_MAX)
            line[MPS_MSG_MAX - 1] = 0;
        char reply[MPS_MSG_MAX + 1];
        ssize_t r = send(s, line, strlen(line), MSG_NOSIGNAL) < 0 ? -1 : recv(s, reply, MPS_MSG_MAX, 0);
        if (r <= 0) {
            fprintf(stderr, "The connection to the MPS control daemon was lost\n");
            free(line);
            return 1;
        }
        reply[r] = 0;
        if (r > 1)
            printf("%s%s", reply + 1, reply[r - 1] == '\n' ? "" : "\n");
        fflush(stdout);
        if (!strncmp(line, "quit", 4) && (line[4] == 0 || line[4] == ' ') && reply[0] == '0')
            break;
    }
    free(line);
    close(s);
    return 0;
}
