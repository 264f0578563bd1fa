/* vfork and posix_spawn (clone with CLONE_VM | CLONE_VFORK onto a new stack): the
   child shares memory but not descriptors, has its own pid, and its exit status
   reaches waitpid. exec of a missing program fails with ENOENT. Same output on the
   host and in onering; prints "spawn ok". */
#define _GNU_SOURCE
#include "check.h"
#include <fcntl.h>
#include <spawn.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

int main(void) {
    pid_t me = getpid();
    volatile int shared = 0;
    volatile pid_t child_pid = 0, child_ppid = 0;
    pid_t pid = vfork();
    if (pid == 0) {
        shared = 42;
        child_pid = getpid();
        child_ppid = getppid();
        close(1); /* the child's descriptors are its own */
        _exit(7);
    }
    CHECK(pid > 0 && pid == child_pid && pid != me, "vfork returns the child's pid");
    CHECK(child_ppid == me, "the child's parent is us");
    CHECK(shared == 42, "the child ran first, in our memory");
    int st = 0;
    CHECK(waitpid(pid, &st, 0) == pid && WIFEXITED(st) && WEXITSTATUS(st) == 7, "waitpid: exit status 7");
    CHECK(waitpid(-1, &st, WNOHANG) == -1 && errno == ECHILD, "no children left: ECHILD");

    /* Pipes across vfork: the child writes, the parent reads after it exited. */
    int p[2];
    CHECK(pipe(p) == 0, "pipe");
    pid = vfork();
    if (pid == 0) {
        close(p[0]);
        write(p[1], "from child", 10);
        _exit(0);
    }
    close(p[1]);
    char buf[32] = {0};
    CHECK(read(p[0], buf, sizeof buf) == 10 && memcmp(buf, "from child", 10) == 0, "the child's write reaches us");
    CHECK(read(p[0], buf, sizeof buf) == 0, "then end of file: every writer closed");
    waitpid(pid, &st, 0);

    /* posix_spawn of a program that does not exist. */
    char *argv[] = {"nothing", NULL};
    int r = posix_spawn(&pid, "/no/such/program", NULL, NULL, argv, environ);
    CHECK(r == ENOENT, "posix_spawn of a missing program: ENOENT");

    printf(failures ? "spawn failed\n" : "spawn ok\n");
    return failures;
}
