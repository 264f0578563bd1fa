/* The vDSO: present (AT_SYSINFO_EHDR) unless --no-vdso, and its clocks agree with
   the system call's: interleaved reads never go backwards, and real time matches
   gettimeofday and time. Prints "vdso yes" or "vdso no", then "clocks ok". */
#include <stdio.h>
#include <sys/auxv.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

static long long ns(struct timespec t) { return t.tv_sec * 1000000000LL + t.tv_nsec; }

int main(void) {
    printf("vdso %s\n", getauxval(AT_SYSINFO_EHDR) ? "yes" : "no");
    int bad = 0;
    for (int clock = 0; clock <= 1; clock++) {
        struct timespec a, b, c;
        for (int i = 0; i < 100000; i++) {
            syscall(SYS_clock_gettime, clock, &a);
            clock_gettime(clock, &b); /* the vDSO when there is one */
            syscall(SYS_clock_gettime, clock, &c);
            if (ns(b) < ns(a) || ns(c) < ns(b)) {
                printf("clock %d went backwards: %lld %lld %lld\n", clock, ns(a), ns(b), ns(c));
                bad = 1;
                break;
            }
        }
    }
    struct timespec r;
    struct timeval tv;
    clock_gettime(CLOCK_REALTIME, &r);
    gettimeofday(&tv, NULL);
    long long d = tv.tv_sec * 1000000000LL + tv.tv_usec * 1000LL - ns(r);
    if (d < -1000 || d > 1000000000LL) { /* microseconds: truncated */
        printf("gettimeofday disagrees by %lld ns\n", d);
        bad = 1;
    }
    time_t t = time(NULL);
    if (t < r.tv_sec || t > r.tv_sec + 1) {
        printf("time() disagrees\n");
        bad = 1;
    }
    if (!bad) printf("clocks ok\n");
    return bad;
}
