/* The sandbox ("pause") container's process: holds the pod's namespaces until told to stop. As PID 1 of the
 * pod's PID namespace (when shared) it also reaps orphans. Linked statically: its image has nothing else. */
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

static void on_stop(int sig) { _exit(128 + sig); }

static void on_child(int sig)
{
    (void)sig;
    while (waitpid(-1, NULL, WNOHANG) > 0) {
    }
}

int main(void)
{
    struct sigaction stop = { .sa_handler = on_stop }, child = { .sa_handler = on_child };
    sigaction(SIGINT, &stop, NULL);
    sigaction(SIGTERM, &stop, NULL);
    child.sa_flags = SA_NOCLDSTOP;
    sigaction(SIGCHLD, &child, NULL);
    for (;;)
        pause();
}
