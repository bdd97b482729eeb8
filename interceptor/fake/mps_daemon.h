/* Inside the fake control daemon: mps_control.c owns the process (arguments, the socket, the event loop, the
 * logs), mps_server.c the MPS state (servers, clients, defaults) and the commands. */
#ifndef TESSERA_FAKE_MPS_DAEMON_H
#define TESSERA_FAKE_MPS_DAEMON_H

#include <stdint.h>
#include <sys/types.h>

enum log_file { LOG_CONTROL, LOG_SERVER };

/* mps_control.c */
void mps_log(enum log_file f, const char *who, int pid, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
/* sends one message on a connection (0 or -1) */
int conn_send(int fd, const char *msg);
/* drops a connection (the daemon's end of a client that is forced out) */
void conn_drop(int fd);
uint64_t mono_ms(void);

/* mps_server.c */
void state_init(const int *visible, int n);
/* a client's hello (payload after "client\n"), from pid/uid */
void state_client_hello(int fd, pid_t pid, uid_t uid, const char *payload);
/* a client's connection ended */
void state_client_gone(int fd);
/* one command of the command interface; answers on fd. Unprivileged (the control socket): get_* only. */
void state_command(int fd, const char *line, int privileged);
/* housekeeping: servers that exited, a quit's timeout; returns 1 when the daemon should exit now */
int state_tick(void);
/* quit at once (SIGTERM): servers and clients go */
void state_force_quit(void);

#endif
