/* Interval timers against the host: alarm's return values, a one-shot
   ITIMER_REAL interrupting pause and a blocking read (EINTR without SA_RESTART),
   a periodic timer's signals, getitimer's view, ITIMER_PROF on a busy loop, and
   the errors. */
#include <stdlib.h>
#define CHECK(c) do { if (!(c)) { printf("FAIL line %d: %s\n", __LINE__, #c); exit(1); } } while (0)
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/time.h>
#include <unistd.h>

static volatile int alarms, profs;
static void on_alarm(int s) { (void)s; alarms++; }
static void on_prof(int s) { (void)s; profs++; }

int main(void) {
    struct sigaction sa = {0};
    sa.sa_handler = on_alarm;
    sigaction(SIGALRM, &sa, 0);
    sa.sa_handler = on_prof;
    sigaction(SIGPROF, &sa, 0);

    printf("alarm(0) = %u\n", alarm(0));
    printf("alarm(5) = %u\n", alarm(5));
    printf("alarm(2) = %u\n", alarm(2));
    printf("alarm(0) = %u\n", alarm(0));

    struct itimerval t = {{0, 0}, {0, 50000}}, got;
    CHECK(setitimer(ITIMER_REAL, &t, 0) == 0);
    CHECK(getitimer(ITIMER_REAL, &got) == 0);
    printf("armed: %d, interval %ld.%06ld\n", got.it_value.tv_sec == 0 && got.it_value.tv_usec > 0 &&
           got.it_value.tv_usec <= 50000, (long)got.it_interval.tv_sec, (long)got.it_interval.tv_usec);
    int r = pause();
    printf("pause: %d %s, alarms %d\n", r, strerror(errno), alarms);
    CHECK(getitimer(ITIMER_REAL, &got) == 0);
    printf("after: %ld.%06ld\n", (long)got.it_value.tv_sec, (long)got.it_value.tv_usec);

    int p[2];
    CHECK(pipe(p) == 0);
    t.it_value.tv_usec = 20000;
    CHECK(setitimer(ITIMER_REAL, &t, 0) == 0);
    char c;
    errno = 0;
    r = (int)read(p[0], &c, 1);
    printf("read: %d %s, alarms %d\n", r, strerror(errno), alarms);

    struct itimerval every = {{0, 5000}, {0, 5000}}, old;
    CHECK(setitimer(ITIMER_REAL, &every, 0) == 0);
    while (alarms < 7) pause();
    CHECK(setitimer(ITIMER_REAL, &(struct itimerval){0}, &old) == 0);
    printf("periodic: %d alarms, old interval %ld.%06ld\n", alarms, (long)old.it_interval.tv_sec,
           (long)old.it_interval.tv_usec);

    struct itimerval prof = {{0, 0}, {0, 20000}};
    CHECK(setitimer(ITIMER_PROF, &prof, 0) == 0);
    for (volatile unsigned long i = 0; profs == 0; i++) {
    }
    printf("prof: %d\n", profs);

    struct itimerval bad = {{0, 0}, {0, 1000000}};
    errno = 0;
    r = setitimer(3, &t, 0);
    printf("which 3: %d %s\n", r, strerror(errno));
    errno = 0;
    r = setitimer(ITIMER_REAL, &bad, 0);
    printf("usec 1e6: %d %s\n", r, strerror(errno));
    bad.it_value.tv_usec = 0;
    bad.it_value.tv_sec = -1;
    errno = 0;
    r = setitimer(ITIMER_REAL, &bad, 0);
    printf("sec -1: %d %s\n", r, strerror(errno));
    errno = 0;
    r = setitimer(ITIMER_REAL, (void *)16, 0);
    printf("bad pointer: %d %s\n", r, strerror(errno));
    errno = 0;
    r = getitimer(3, &got);
    printf("getitimer 3: %d %s\n", r, strerror(errno));
    errno = 0;
    r = getitimer(ITIMER_REAL, (void *)16);
    printf("getitimer bad: %d %s\n", r, strerror(errno));
    printf("itimer ok\n");
    return 0;
}
