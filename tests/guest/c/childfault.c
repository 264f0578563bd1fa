/* A child process (clone with CLONE_VM|CLONE_VFORK, as posix_spawn makes one)
   dies of SIGSEGV; the parent sees it in wait4, then takes a fault of its own in
   a handler, twice: exceptions keep working on that CPU afterwards. */
#define _GNU_SOURCE
#include <sched.h>
#include <setjmp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

static char stack[64 * 1024] __attribute__((aligned(16)));
static sigjmp_buf back;

static int child(void *arg) {
    (void)arg;
    *(volatile int *)8 = 1;
    return 0;
}

static void on_segv(int s) {
    (void)s;
    siglongjmp(back, 1);
}

int main(void) {
    for (int round = 0; round < 3; round++) {
        pid_t pid = clone(child, stack + sizeof stack, CLONE_VM | CLONE_VFORK | SIGCHLD, 0);
        int st = 0;
        if (pid < 0 || waitpid(pid, &st, 0) != pid) {
            perror("clone/waitpid");
            return 1;
        }
        printf("child: signaled %d, signal %d\n", WIFSIGNALED(st), WTERMSIG(st));
    }
    signal(SIGSEGV, on_segv);
    for (int i = 0; i < 2; i++) {
        if (!sigsetjmp(back, 1))
            *(volatile int *)16 = 2;
        printf("parent: caught fault %d\n", i);
    }
    return 0;
}
