/* Signals: handlers with siginfo, the alternate stack, masks and pending signals,
   ignored signals, faults caught by handlers (and left with siglongjmp), FP state
   kept across a handler, a sleep interrupted by a signal from another thread, and
   SA_RESTART: a blocked pipe read, wait and futex wait go on after the handler
   (without it: EINTR).
   Same output on the host and in onering; prints "signals ok".
   With an argument: "term" kills itself with SIGTERM, "segv" faults without a handler. */
#define _GNU_SOURCE
#include "check.h"
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static volatile int got, got_code, got_pid;
static volatile uintptr_t handler_sp;
static void on_usr1(int s, siginfo_t *si, void *uc) {
    (void)uc;
    got = s;
    got_code = si->si_code;
    got_pid = si->si_pid;
    int local;
    handler_sp = (uintptr_t)&local;
    /* Clobber FP registers: the interrupted code must not notice. */
    volatile double x = 1.5;
    for (int i = 0; i < 10; i++) x = x * 3.25 + 1.0;
}

static sigjmp_buf jb;
static volatile void *fault_addr;
static void on_segv(int s, siginfo_t *si, void *uc) {
    (void)s;
    (void)uc;
    fault_addr = si->si_addr;
    siglongjmp(jb, 1);
}

static volatile int usr2_count;
static void on_usr2(int s) {
    (void)s;
    usr2_count++;
}

static void on_alrm(int s) { (void)s; }

static pthread_t main_thread;
static void *poker(void *arg) {
    (void)arg;
    struct timespec d = {0, 30 * 1000 * 1000};
    nanosleep(&d, NULL);
    pthread_kill(main_thread, SIGALRM);
    return NULL;
}

/* tgkill(SIGUSR1) by a bare syscall instruction with known values in the registers
   a handler may clobber: all of them must come back. */
static int registers_survive(void) {
    long pid = getpid(); /* before the register variables: a call clobbers r8-r10 */
    register long r8 asm("r8") = 0x0808, r9 asm("r9") = 0x0909, r10 asm("r10") = 0x1010;
    register long r12 asm("r12") = 0x1212, r13 asm("r13") = 0x1313, r14 asm("r14") = 0x1414, r15 asm("r15") = 0x1515;
    long rbx = 0xbbbb, ret;
    asm volatile("xchg %%rbx, %[b]\n\tsyscall\n\txchg %%rbx, %[b]"
                 : "=a"(ret), [b] "+r"(rbx), "+r"(r8), "+r"(r9), "+r"(r10), "+r"(r12), "+r"(r13), "+r"(r14), "+r"(r15)
                 : "a"(234L), "D"(pid), "S"(pid), "d"((long)SIGUSR1)
                 : "rcx", "r11", "memory");
    return ret == 0 && r8 == 0x0808 && r9 == 0x0909 && r10 == 0x1010 && r12 == 0x1212 && r13 == 0x1313 &&
           r14 == 0x1414 && r15 == 0x1515 && rbx == 0xbbbb;
}

/* ---- SA_RESTART ---- */
static volatile int restarts_seen;
static int rpipe[2];
static void on_hup(int s) {
    (void)s;
    restarts_seen++;
}
/* Signals the main thread twice while it is blocked, then writes. */
static void *interrupter(void *arg) {
    (void)arg;
    for (int i = 0; i < 2; i++) {
        usleep(20000);
        pthread_kill(main_thread, SIGHUP);
    }
    usleep(20000);
    write(rpipe[1], "z", 1);
    return NULL;
}
static int blocked_read_with(int flags) {
    struct sigaction sa = {0};
    sa.sa_handler = on_hup;
    sa.sa_flags = flags;
    sigaction(SIGHUP, &sa, NULL);
    pipe(rpipe);
    restarts_seen = 0;
    pthread_t t;
    pthread_create(&t, NULL, interrupter, NULL);
    char c = 0;
    int r = (int)read(rpipe[0], &c, 1);
    int e = errno;
    pthread_join(t, NULL);
    close(rpipe[0]);
    close(rpipe[1]);
    errno = e;
    return r == 1 && c == 'z' ? 1 : r == -1 ? -e : 0;
}
/* A handler on the alternate stack jumps out of a blocked read (SA_RESTART): the
   mark its frame left must not make a later handler's return re-run anything. */
static sigjmp_buf jump_out;
static void leave(int s) {
    (void)s;
    siglongjmp(jump_out, 1);
}
static void on_usr2_alt(int s) {
    (void)s;
}
static void *poke_hup(void *arg) {
    (void)arg;
    usleep(20000);
    pthread_kill(main_thread, SIGHUP);
    return NULL;
}
static int stale_mark_case(void) {
    stack_t ss = {.ss_sp = malloc(1 << 16), .ss_size = 1 << 16, .ss_flags = 0};
    sigaltstack(&ss, NULL);
    struct sigaction sa = {0};
    sa.sa_handler = leave;
    sa.sa_flags = SA_RESTART | SA_ONSTACK;
    sigaction(SIGHUP, &sa, NULL);
    sa.sa_handler = on_usr2_alt;
    sa.sa_flags = SA_ONSTACK;
    sigaction(SIGUSR2, &sa, NULL);
    int p[2];
    pipe(p);
    pthread_t t;
    pthread_create(&t, NULL, poke_hup, NULL);
    if (sigsetjmp(jump_out, 1) == 0) {
        char c;
        read(p[0], &c, 1); /* left by siglongjmp */
    }
    pthread_join(t, NULL);
    long r = syscall(SYS_tgkill, getpid(), syscall(SYS_gettid), SIGUSR2);
    close(p[0]);
    close(p[1]);
    ss.ss_flags = SS_DISABLE;
    sigaltstack(&ss, NULL);
    return r == 0;
}

static volatile int futex_word;
static void *futex_waker(void *arg) {
    (void)arg;
    usleep(20000);
    pthread_kill(main_thread, SIGHUP);
    usleep(20000);
    futex_word = 1;
    syscall(SYS_futex, &futex_word, 1 /* FUTEX_WAKE */, 1, NULL, NULL, 0);
    return NULL;
}

int main(int argc, char **argv) {
    if (argc > 1 && argv[1][0] == 't') {
        kill(getpid(), SIGTERM);
        return 0;
    }
    if (argc > 1 && argv[1][0] == 's') {
        *(volatile int *)(uintptr_t)(argc * 8) = 1;
        return 0;
    }
    struct sigaction sa = {0};
    sa.sa_sigaction = on_usr1;
    sa.sa_flags = SA_SIGINFO;
    CHECK(sigaction(SIGUSR1, &sa, NULL) == 0, "sigaction SIGUSR1");
    volatile double acc = 0.1;
    for (int i = 0; i < 5; i++) acc = acc * 1.5 + 0.25;
    double before = acc;
    raise(SIGUSR1);
    CHECK(got == SIGUSR1 && got_code == SI_TKILL, "raise runs the handler with siginfo (SI_TKILL)");
    CHECK(acc == before && acc * 2 == before * 2, "FP state survives the handler");
    got = 0;
    kill(getpid(), SIGUSR1);
    CHECK(got == SIGUSR1 && got_code == SI_USER && got_pid == getpid(), "kill: SI_USER from our pid");
    got = 0;
    CHECK(registers_survive() && got == SIGUSR1, "every register survives a handler");

    /* The alternate stack. */
    static char alt[65536];
    stack_t ss = {.ss_sp = alt, .ss_size = sizeof alt, .ss_flags = 0};
    CHECK(sigaltstack(&ss, NULL) == 0, "sigaltstack");
    sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
    sigaction(SIGUSR1, &sa, NULL);
    raise(SIGUSR1);
    CHECK(handler_sp > (uintptr_t)alt && handler_sp < (uintptr_t)alt + sizeof alt, "SA_ONSTACK runs on the alternate stack");
    sa.sa_flags = SA_SIGINFO;
    sigaction(SIGUSR1, &sa, NULL);
    raise(SIGUSR1);
    CHECK(!(handler_sp > (uintptr_t)alt && handler_sp < (uintptr_t)alt + sizeof alt), "without SA_ONSTACK: the normal stack");

    /* Masks and pending signals. */
    struct sigaction s2 = {0};
    s2.sa_handler = on_usr2;
    sigaction(SIGUSR2, &s2, NULL);
    sigset_t set, pend;
    sigemptyset(&set);
    sigaddset(&set, SIGUSR2);
    sigprocmask(SIG_BLOCK, &set, NULL);
    raise(SIGUSR2);
    sigpending(&pend);
    CHECK(usr2_count == 0 && sigismember(&pend, SIGUSR2), "a blocked signal stays pending");
    sigprocmask(SIG_UNBLOCK, &set, NULL);
    CHECK(usr2_count == 1, "unblocking delivers it");
    signal(SIGUSR2, SIG_IGN);
    raise(SIGUSR2);
    CHECK(usr2_count == 1, "an ignored signal does nothing");
    signal(SIGCHLD, SIG_DFL);
    raise(SIGCHLD);
    CHECK(1, "SIGCHLD's default is to ignore");

    /* Faults caught by a handler. */
    struct sigaction sv = {0};
    sv.sa_sigaction = on_segv;
    sv.sa_flags = SA_SIGINFO;
    sigaction(SIGSEGV, &sv, NULL);
    int caught = 0;
    for (int i = 0; i < 3; i++) {
        if (sigsetjmp(jb, 1) == 0)
            *(volatile int *)(uintptr_t)(64 + i * 8) = 1;
        else
            caught++;
    }
    CHECK(caught == 3 && fault_addr == (void *)80, "SIGSEGV handler sees si_addr; siglongjmp out, three times");

    /* A sleep interrupted by a signal from another thread. */
    struct sigaction sal = {0};
    sal.sa_handler = on_alrm;
    sigaction(SIGALRM, &sal, NULL);
    main_thread = pthread_self();
    pthread_t p;
    pthread_create(&p, NULL, poker, NULL);
    struct timespec d = {5, 0}, rem = {0, 0};
    int r = nanosleep(&d, &rem), e = errno;
    CHECK(r == -1 && e == EINTR, "nanosleep interrupted: EINTR");
    CHECK(rem.tv_sec >= 3 && rem.tv_sec <= 5, "and the time remaining");
    pthread_join(p, NULL);

    main_thread = pthread_self();
    CHECK(blocked_read_with(SA_RESTART) == 1 && restarts_seen == 2,
          "SA_RESTART: a blocked pipe read goes on after two handlers");
    CHECK(blocked_read_with(0) == -EINTR, "without SA_RESTART: EINTR");
    struct sigaction sr = {0};
    sr.sa_handler = on_hup;
    sr.sa_flags = SA_RESTART;
    sigaction(SIGHUP, &sr, NULL);
    restarts_seen = 0;
    pthread_t fw;
    pthread_create(&fw, NULL, futex_waker, NULL);
    long fr;
    do {
        fr = syscall(SYS_futex, &futex_word, 0 /* FUTEX_WAIT */, 0, NULL, NULL, 0);
    } while (fr == 0 && futex_word == 0);
    pthread_join(fw, NULL);
    CHECK(fr == 0 && futex_word == 1 && restarts_seen == 1, "SA_RESTART: a futex wait goes on after the handler");

    CHECK(stale_mark_case(), "SA_RESTART: jumping out of the handler leaves no stale restart");

    printf(failures ? "signals failed\n" : "signals ok\n");
    return failures;
}
