/* Clocks, sleeping, identity, limits and recorded signal state: the same output on
   the host and in onering. */
#define _GNU_SOURCE
#include "check.h"
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/sysinfo.h>
#include <sys/time.h>
#include <sys/utsname.h>
#include <time.h>
#include <unistd.h>

static int64_t ns(clockid_t c) {
    struct timespec t;
    clock_gettime(c, &t);
    return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

int main(void) {
    int64_t a = ns(CLOCK_MONOTONIC), b = ns(CLOCK_MONOTONIC);
    CHECK(b >= a, "CLOCK_MONOTONIC does not go back");
    CHECK(ns(CLOCK_REALTIME) > 1600000000ll * 1000000000, "CLOCK_REALTIME is today");
    struct timespec t;
    CHECK_ERR(clock_gettime((clockid_t)1234, &t), EINVAL, "bad clock: EINVAL");
    CHECK(clock_getres(CLOCK_MONOTONIC, &t) == 0 && t.tv_sec == 0 && t.tv_nsec > 0, "clock_getres");
    struct timeval tv;
    CHECK(gettimeofday(&tv, NULL) == 0 && tv.tv_sec > 1600000000, "gettimeofday");
    time_t now = time(NULL);
    CHECK(now > 1600000000 && llabs((long long)(now - tv.tv_sec)) <= 2, "time agrees with gettimeofday");
    int64_t s0 = ns(CLOCK_MONOTONIC);
    struct timespec req = {0, 20 * 1000 * 1000};
    CHECK(nanosleep(&req, NULL) == 0 && ns(CLOCK_MONOTONIC) - s0 >= 20 * 1000 * 1000, "nanosleep 20 ms");
    s0 = ns(CLOCK_MONOTONIC);
    struct timespec abs = {0, 0};
    abs.tv_sec = (s0 + 10 * 1000 * 1000) / 1000000000;
    abs.tv_nsec = (s0 + 10 * 1000 * 1000) % 1000000000;
    CHECK(clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &abs, NULL) == 0 && ns(CLOCK_MONOTONIC) >= s0 + 10 * 1000 * 1000,
          "clock_nanosleep absolute");
    struct timespec bad = {0, 2000000000};
    CHECK_ERR(nanosleep(&bad, NULL), EINVAL, "nanosleep bad timespec: EINVAL");
    CHECK_ERR(nanosleep((struct timespec *)8, NULL), EFAULT, "nanosleep bad pointer: EFAULT");

    struct utsname u;
    CHECK(uname(&u) == 0 && !strcmp(u.sysname, "Linux") && !strcmp(u.machine, "x86_64"), "uname");
    CHECK(getpid() > 0 && syscall(SYS_gettid) > 0 && getppid() >= 0, "pids");
    CHECK(getuid() == geteuid() && getgid() == getegid(), "ids");
    cpu_set_t set;
    CHECK(sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) >= 1, "sched_getaffinity");
    CHECK(sched_yield() == 0, "sched_yield");
    struct rlimit rl;
    CHECK(getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur > 0, "getrlimit");
    struct rlimit lower = {64, rl.rlim_max};
    CHECK(setrlimit(RLIMIT_NOFILE, &lower) == 0 && getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur == 64, "prlimit64 set");
    CHECK_ERR(getrlimit(9999, &rl), EINVAL, "getrlimit bad resource: EINVAL");
    struct sysinfo si;
    CHECK(sysinfo(&si) == 0 && si.totalram > 0 && si.mem_unit > 0, "sysinfo");
    CHECK(umask(022) >= 0, "umask");

    struct sigaction sa = {0}, old = {0};
    sa.sa_handler = SIG_IGN;
    CHECK(sigaction(SIGUSR1, &sa, NULL) == 0 && sigaction(SIGUSR1, NULL, &old) == 0 && old.sa_handler == SIG_IGN,
          "rt_sigaction round trip");
    CHECK_ERR(sigaction(SIGKILL, &sa, NULL), EINVAL, "rt_sigaction SIGKILL: EINVAL");
    sigset_t m, o;
    sigemptyset(&m);
    sigaddset(&m, SIGUSR2);
    CHECK(sigprocmask(SIG_BLOCK, &m, NULL) == 0 && sigprocmask(SIG_SETMASK, NULL, &o) == 0 && sigismember(&o, SIGUSR2),
          "rt_sigprocmask");
    CHECK_ERR(syscall(SYS_rt_sigprocmask, 99, &m, NULL, 8), EINVAL, "rt_sigprocmask bad how: EINVAL");
    static char altstack[65536];
    stack_t ss = {.ss_sp = altstack, .ss_size = sizeof altstack, .ss_flags = 0}, os;
    CHECK(sigaltstack(&ss, NULL) == 0 && sigaltstack(NULL, &os) == 0 && os.ss_sp == altstack, "sigaltstack");
    stack_t tiny = {.ss_sp = altstack, .ss_size = 100, .ss_flags = 0};
    CHECK_ERR(sigaltstack(&tiny, NULL), ENOMEM, "sigaltstack too small: ENOMEM");
    return failures;
}
