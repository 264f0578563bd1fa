// fork + execve + wait, as shells and make use them: 100 children, each execs
// this program again (with "child N") and exits with N; the parent reaps each and
// checks its status. Then posix_spawn (vfork + exec in glibc and musl) of the same,
// a child whose exec fails (127, as a shell reports it), and a pipe from an exec'd
// child to the parent. The output is compared with the host's.
#define _GNU_SOURCE
#include <errno.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/auxv.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;
static char self[4096];

int main(int argc, char **argv) {
    snprintf(self, sizeof self, "%s", (const char *)getauxval(AT_EXECFN));
    if (argc == 3 && !strcmp(argv[1], "child")) return atoi(argv[2]);
    if (argc == 2 && !strcmp(argv[1], "say")) {
        printf("hello through the pipe from pid>1: %d\n", getpid() > 1);
        return 0;
    }
    int bad = 0;
    for (int i = 0; i < 100; i++) {
        pid_t p = fork();
        if (p == 0) {
            char n[16];
            snprintf(n, sizeof n, "%d", i);
            char *a[] = {self, "child", n, NULL};
            execve(self, a, environ);
            _exit(127);
        }
        int st;
        if (waitpid(p, &st, 0) != p || !WIFEXITED(st) || WEXITSTATUS(st) != i) bad++;
    }
    printf("100 fork+exec+wait: %d wrong\n", bad);
    bad = 0;
    pid_t pids[20];
    for (int i = 0; i < 20; i++) {
        char n[16];
        snprintf(n, sizeof n, "%d", 200 + i);
        char *a[] = {self, "child", n, NULL};
        if (posix_spawn(&pids[i], self, NULL, NULL, a, environ) != 0) bad++;
    }
    for (int i = 0; i < 20; i++) {
        int st;
        if (waitpid(pids[i], &st, 0) != pids[i] || WEXITSTATUS(st) != 200 + i) bad++;
    }
    printf("20 posix_spawn at once: %d wrong\n", bad);
    pid_t p = fork();
    if (p == 0) {
        char *a[] = {"/nonexistent", NULL};
        execve(a[0], a, environ);
        _exit(errno == ENOENT ? 127 : 1);
    }
    int st;
    waitpid(p, &st, 0);
    printf("failed exec: status %d\n", WEXITSTATUS(st));
    // waitid: WNOWAIT leaves the zombie, a second waitid reaps it; a killed child.
    p = fork();
    if (p == 0) _exit(42);
    siginfo_t si;
    memset(&si, 0, sizeof si);
    int r = waitid(P_PID, p, &si, WEXITED | WNOWAIT);
    printf("waitid WNOWAIT: %d signo %d code %d status %d pid ok %d\n", r, si.si_signo, si.si_code, si.si_status, si.si_pid == p);
    memset(&si, 0, sizeof si);
    r = waitid(P_ALL, 0, &si, WEXITED);
    printf("waitid reaps: %d status %d pid ok %d\n", r, si.si_status, si.si_pid == p);
    p = fork();
    if (p == 0) {
        pause();
        _exit(0);
    }
    kill(p, SIGKILL);
    memset(&si, 0, sizeof si);
    waitid(P_PID, p, &si, WEXITED);
    printf("waitid killed: code %d signal %d\n", si.si_code, si.si_status);
    errno = 0;
    r = waitid(P_ALL, 0, &si, WEXITED | WNOHANG);
    printf("waitid with no children: %d %s\n", r, strerror(errno));
    int fds[2];
    if (pipe(fds) != 0) return 1;
    p = fork();
    if (p == 0) {
        dup2(fds[1], 1);
        close(fds[0]);
        close(fds[1]);
        char *a[] = {self, "say", NULL};
        execve(self, a, environ);
        _exit(127);
    }
    close(fds[1]);
    char buf[256] = {0};
    ssize_t n = read(fds[0], buf, sizeof buf - 1);
    waitpid(p, &st, 0);
    printf("read %zd bytes: %s", n, buf);
    printf("done\n");
    return 0;
}
