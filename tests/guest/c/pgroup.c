// Process groups and sessions between a parent and its children: setpgid from
// both sides, setsid in a child, getpgid/getsid, kill of a whole group and of the
// caller's own group; only relations are printed, so the host's output (where the
// program is not pid 1) is the same.
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

int main(void) {
    setvbuf(stdout, NULL, _IONBF, 0); // children must not repeat what is buffered
    printf("kill(0, 0): %d\n", kill(0, 0));
    pid_t a = fork();
    if (a == 0) {
        setpgid(0, 0);
        pause();
        _exit(0);
    }
    setpgid(a, a); // both sides, as shells do
    pid_t b = fork();
    if (b == 0) {
        setpgid(0, a); // joins a's group
        pause();
        _exit(0);
    }
    setpgid(b, a);
    usleep(20000);
    printf("a leads its group: %d\n", getpgid(a) == a);
    printf("b in a's group: %d\n", getpgid(b) == a);
    printf("parent's group unchanged: %d\n", getpgrp() == getpgid(0) && getpgrp() != a);
    printf("kill(-a, SIGTERM): %d\n", kill(-a, SIGTERM));
    int st, killed = 0;
    for (int i = 0; i < 2; i++)
        if (wait(&st) > 0 && WIFSIGNALED(st) && WTERMSIG(st) == SIGTERM) killed++;
    printf("both killed by SIGTERM: %d\n", killed == 2);
    int r = kill(-a, 0);
    printf("kill of an empty group: %d %s\n", r, strerror(errno));
    pid_t c = fork();
    if (c == 0) {
        pid_t s = setsid();
        printf("child setsid: %d, leads session and group: %d %d\n", s == getpid(), getsid(0) == getpid(), getpgrp() == getpid());
        int again = setsid();
        printf("setsid again: %d %s\n", again, strerror(errno));
        fflush(stdout);
        _exit(0);
    }
    waitpid(c, &st, 0);
    printf("done\n");
    return 0;
}
