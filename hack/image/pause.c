/* The sandbox ("pause") process of every pod on the node of hack/node.sh.
 * It holds the pod's namespaces open, reaps orphans (it is PID 1 of a pod
 * that shares its process namespace) and exits at once on SIGINT or SIGTERM
 * so that stopping a sandbox never waits for a grace period. */
#include <signal.h>
#include <stddef.h>
#include <sys/wait.h>
#include <unistd.h>

static void quit(int sig) {
  (void)sig;
  _exit(0);
}

static void reap(int sig) {
  (void)sig;
  while (waitpid(-1, NULL, WNOHANG) > 0) {
  }
}

int main(void) {
  struct sigaction q = {.sa_handler = quit};
  struct sigaction r = {.sa_handler = reap, .sa_flags = SA_NOCLDSTOP | SA_RESTART};
  sigaction(SIGINT, &q, NULL);
  sigaction(SIGTERM, &q, NULL);
  sigaction(SIGCHLD, &r, NULL);
  for (;;) pause();
}
