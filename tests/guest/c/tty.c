// Job control on a terminal (run on a pseudo-terminal, as its session leader:
// `script -qec PROGRAM`, onering with -i; with "none", without any terminal): /dev/tty, tcgetpgrp/tcsetpgrp, TIOCGSID, TIOCSCTTY,
// TIOCNOTTY, and a background group's terminal reads and mode changes (SIGTTIN,
// SIGTTOU ignored, blocked, handled, or at their default: a stop), a background
// write with and without TOSTOP, compared with
// the host. Output goes
// to the terminal, so lines end in \r\n there; only relations are printed (pids
// differ).
#define _GNU_SOURCE
#include "check.h"
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/ioctl.h>
#include <sys/wait.h>
#include <termios.h>
#include <unistd.h>

static int ready[2], go[2];

static void wait_for(int fd) {
    char b;
    read(fd, &b, 1);
}

static volatile sig_atomic_t got;
static void on_sig(int s) { got = s; }

/* Runs `fn` in a child and reaps it; its output is part of the run's. */
static void in_child(void (*fn)(void)) {
    pid_t c = fork();
    if (c == 0) {
        failures = 0;
        fn();
        _exit(failures);
    }
    int st;
    waitpid(c, &st, 0);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) printf("FAIL child status %x\n", st), failures++;
}

static void new_session(void) {
    CHECK(setsid() == getpid(), "a new session");
    CHECK_ERR(open("/dev/tty", O_RDWR), ENXIO, "/dev/tty without a controlling terminal is ENXIO");
    CHECK_ERR(tcgetpgrp(1), ENOTTY, "tcgetpgrp of a terminal that is not ours is ENOTTY");
    pid_t sid;
    CHECK_ERR(ioctl(1, TIOCGSID, &sid), ENOTTY, "TIOCGSID too");
    CHECK_ERR(ioctl(1, TIOCNOTTY), ENOTTY, "TIOCNOTTY too");
    CHECK_ERR(ioctl(1, TIOCSCTTY, 0), EPERM, "TIOCSCTTY of another session's terminal is EPERM");
}

static void background(void) {
    pid_t fg = tcgetpgrp(1);
    CHECK(setpgid(0, 0) == 0, "a background group");
    CHECK(fg == getppid() && tcgetpgrp(1) == fg, "the parent's group is still the foreground");
    CHECK(write(1, "", 0) == 0, "a background write (no TOSTOP) is allowed");
    struct termios t;
    CHECK(tcgetattr(1, &t) == 0, "tcgetattr from the background is allowed");
    signal(SIGTTOU, SIG_IGN);
    CHECK(tcsetattr(1, TCSANOW, &t) == 0, "tcsetattr with SIGTTOU ignored");
    signal(SIGTTOU, SIG_DFL);
    sigset_t s, old;
    sigemptyset(&s);
    sigaddset(&s, SIGTTOU);
    sigprocmask(SIG_BLOCK, &s, &old);
    CHECK(tcsetpgrp(1, getpgrp()) == 0 && tcgetpgrp(1) == getpgrp(), "tcsetpgrp with SIGTTOU blocked");
    CHECK(tcsetpgrp(1, fg) == 0, "and back");
    sigprocmask(SIG_SETMASK, &old, NULL);
    struct sigaction sa = {0};
    sa.sa_handler = on_sig; /* (no SA_RESTART: the call would be made again, and again) */
    sigaction(SIGTTOU, &sa, NULL);
    CHECK_ERR(tcsetpgrp(1, getpgrp()), EINTR, "tcsetpgrp with SIGTTOU handled: EINTR");
    printf("the handler saw signal %d\n", (int)got);
    got = 0;
    sigaction(SIGTTIN, &sa, NULL);
    int tty = open("/dev/tty", O_RDONLY);
    char b;
    CHECK_ERR(read(tty, &b, 1), EINTR, "a background read with SIGTTIN handled: EINTR");
    printf("the handler saw signal %d\n", (int)got);
    signal(SIGTTIN, SIG_IGN);
    CHECK_ERR(read(tty, &b, 1), EIO, "a background read with SIGTTIN ignored: EIO");
    close(tty);
}

static void no_tty(void) {
    CHECK(getsid(0) != getpid(), "not a session leader");
    CHECK(ioctl(1, TIOCNOTTY) == 0, "TIOCNOTTY of a member");
    CHECK_ERR(open("/dev/tty", O_RDWR), ENXIO, "then /dev/tty is ENXIO");
    CHECK_ERR(tcgetpgrp(1), ENOTTY, "and tcgetpgrp ENOTTY");
    CHECK_ERR(ioctl(1, TIOCSCTTY, 0), EPERM, "TIOCSCTTY of a member is EPERM");
}

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IONBF, 0);
    if (argc == 2 && !strcmp(argv[1], "none")) {
        // No terminal at all (run under `setsid` on the host, stdout a pipe).
        CHECK_ERR(open("/dev/tty", O_RDWR), ENXIO, "/dev/tty without a terminal is ENXIO");
        CHECK_ERR(tcgetpgrp(1), ENOTTY, "tcgetpgrp of a pipe is ENOTTY");
        CHECK_ERR(ioctl(1, TIOCSCTTY, 0), ENOTTY, "TIOCSCTTY of a pipe is ENOTTY");
        return failures;
    }
    pipe(ready), pipe(go);
    CHECK(isatty(1), "stdout is a terminal");
    CHECK(getsid(0) == getpid() && getpgrp() == getpid(), "a session and group leader");
    int tty = open("/dev/tty", O_RDWR | O_NOCTTY);
    CHECK(tty >= 0 && isatty(tty), "/dev/tty opens");
    CHECK(write(tty, "written to /dev/tty\n", 20) == 20, "a write to /dev/tty");
    CHECK(tcgetpgrp(1) == getpgrp(), "tcgetpgrp(1) is our group");
    CHECK(tcgetpgrp(tty) == getpgrp(), "tcgetpgrp(/dev/tty) is our group");
    pid_t sid = 0;
    CHECK(ioctl(1, TIOCGSID, &sid) == 0 && sid == getsid(0), "TIOCGSID is our session");
    CHECK(tcgetsid(tty) == getsid(0), "tcgetsid");
    CHECK_ERR(ioctl(1, TIOCGPGRP, (pid_t *)8), EFAULT, "TIOCGPGRP to a bad pointer is EFAULT");
    CHECK(ioctl(1, TIOCSCTTY, 0) == 0, "TIOCSCTTY of our own terminal");
    CHECK_ERR(tcsetpgrp(1, -1), EINVAL, "tcsetpgrp(-1) is EINVAL");
    pid_t gone = fork();
    if (gone == 0) _exit(0);
    waitpid(gone, NULL, 0);
    CHECK_ERR(tcsetpgrp(1, gone), ESRCH, "tcsetpgrp of a reaped pid is ESRCH");
    CHECK(tcgetpgrp(0) == getpgrp(), "tcgetpgrp(0) too (onering: with -i)");
    int null = open("/dev/null", O_RDWR);
    CHECK_ERR(tcgetpgrp(null), ENOTTY, "tcgetpgrp of /dev/null is ENOTTY");

    // A child in another session: the terminal is not its.
    pid_t other = fork();
    if (other == 0) {
        failures = 0;
        new_session();
        write(ready[1], "r", 1);
        wait_for(go[0]);
        _exit(failures);
    }
    wait_for(ready[0]);
    CHECK_ERR(tcsetpgrp(1, other), EPERM, "tcsetpgrp to another session's group is EPERM");
    write(go[1], "g", 1);
    int st;
    waitpid(other, &st, 0);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "the new-session child passed");

    in_child(background);
    CHECK(tcgetpgrp(1) == getpgrp(), "we are the foreground again");

    // At SIGTTIN's default a background read stops its group (and again once
    // continued: the read starts over); at SIGTTOU's, tcsetpgrp does.
    pid_t r = fork();
    if (r == 0) {
        setpgid(0, 0);
        char b;
        read(open("/dev/tty", O_RDWR | O_NOCTTY), &b, 1);
        _exit(0);
    }
    setpgid(r, r);
    CHECK(waitpid(r, &st, WUNTRACED) == r && WIFSTOPPED(st) && WSTOPSIG(st) == SIGTTIN,
          "a background read at SIGTTIN's default stops");
    kill(r, SIGCONT);
    CHECK(waitpid(r, &st, WUNTRACED) == r && WIFSTOPPED(st) && WSTOPSIG(st) == SIGTTIN,
          "continued, its read stops it again");
    kill(r, SIGKILL);
    CHECK(waitpid(r, &st, 0) == r && WIFSIGNALED(st), "and SIGKILL ends it");
    r = fork();
    if (r == 0) {
        setpgid(0, 0);
        tcsetpgrp(1, getpgrp());
        _exit(0);
    }
    setpgid(r, r);
    CHECK(waitpid(r, &st, WUNTRACED) == r && WIFSTOPPED(st) && WSTOPSIG(st) == SIGTTOU,
          "a background tcsetpgrp at SIGTTOU's default stops");
    kill(r, SIGKILL);
    waitpid(r, &st, 0);
    CHECK(tcgetpgrp(1) == getpgrp(), "the foreground is still ours");

    // A background write: allowed without TOSTOP; with it, at SIGTTOU's default
    // it stops the writer's group, and with SIGTTOU ignored it goes through.
    struct termios modes;
    tcgetattr(1, &modes);
    for (int tostop = 0; tostop < 3; tostop++) {
        struct termios m = modes;
        if (tostop) m.c_lflag |= TOSTOP;
        tcsetattr(1, TCSANOW, &m);
        r = fork();
        if (r == 0) {
            setpgid(0, 0);
            if (tostop == 2) signal(SIGTTOU, SIG_IGN);
            _exit(write(1, ".", 1) == 1 && write(open("/dev/tty", O_WRONLY | O_NOCTTY), ".", 1) == 1 ? 0 : 1);
        }
        setpgid(r, r);
        if (tostop == 1) {
            CHECK(waitpid(r, &st, WUNTRACED) == r && WIFSTOPPED(st) && WSTOPSIG(st) == SIGTTOU,
                  "a background write with TOSTOP stops at SIGTTOU's default");
            kill(r, SIGKILL);
            waitpid(r, &st, 0);
        } else {
            CHECK(waitpid(r, &st, WUNTRACED) == r && WIFEXITED(st) && WEXITSTATUS(st) == 0,
                  tostop ? "with TOSTOP and SIGTTOU ignored it goes through" : "a background write without TOSTOP goes through");
        }
    }
    tcsetattr(1, TCSANOW, &modes);

    // The foreground moves to a child's group and back.
    pid_t c = fork();
    if (c == 0) {
        setpgid(0, 0);
        write(ready[1], "r", 1);
        wait_for(go[0]);
        _exit(0);
    }
    wait_for(ready[0]);
    CHECK(tcsetpgrp(1, c) == 0 && tcgetpgrp(1) == c, "tcsetpgrp to a child's group");
    signal(SIGTTOU, SIG_IGN);
    CHECK(tcsetpgrp(1, getpgrp()) == 0, "and back (from the background, SIGTTOU ignored)");
    signal(SIGTTOU, SIG_DFL);
    write(go[1], "g", 1);
    waitpid(c, NULL, 0);

    in_child(no_tty);
    CHECK(tcgetpgrp(1) == getpgrp(), "the terminal is still ours");
    printf("done\n");
    return failures;
}
