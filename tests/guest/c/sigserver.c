/* A server's signal handling: handlers for the signals onering forwards print
   what came; SIGTERM shuts down gracefully (exit 0). It says "ready" once set up,
   then waits as MODE says: "pause", "sleep" (nanosleep), "spin" (computing, no
   system calls), "thread" (a second thread computes, main waits in join). With
   "plain" it sets no handlers (the default actions apply); with "stubborn" it
   ignores SIGINT and SIGTERM. */
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static volatile sig_atomic_t stop;

static void say(const char *s) { write(1, s, strlen(s)); }

static void on_sig(int s) {
    switch (s) {
    case SIGUSR1: say("got SIGUSR1\n"); break;
    case SIGUSR2: say("got SIGUSR2\n"); break;
    case SIGHUP: say("got SIGHUP\n"); break;
    case SIGWINCH: say("got SIGWINCH\n"); break;
    case SIGINT: say("got SIGINT\n"); break;
    case SIGTERM: say("got SIGTERM, shutting down\n"); stop = 1; break;
    }
}

static void *spin(void *arg) {
    (void)arg;
    volatile unsigned long x = 0;
    while (!stop) x++;
    return 0;
}

int main(int argc, char **argv) {
    const char *mode = argc > 1 ? argv[1] : "pause";
    if (!strcmp(mode, "stubborn")) {
        signal(SIGINT, SIG_IGN);
        signal(SIGTERM, SIG_IGN);
    } else if (strcmp(mode, "plain")) {
        struct sigaction sa = {0};
        sa.sa_handler = on_sig;
        int sigs[] = {SIGUSR1, SIGUSR2, SIGHUP, SIGWINCH, SIGINT, SIGTERM};
        for (unsigned i = 0; i < sizeof sigs / sizeof *sigs; i++) sigaction(sigs[i], &sa, 0);
    }
    say("ready\n");
    if (!strcmp(mode, "spin")) {
        spin(0);
    } else if (!strcmp(mode, "thread")) {
        pthread_t t;
        pthread_create(&t, 0, spin, 0);
        pthread_join(t, 0);
    } else {
        while (!stop) {
            if (!strcmp(mode, "sleep")) {
                struct timespec ts = {10, 0};
                nanosleep(&ts, 0);
            } else {
                pause();
            }
        }
    }
    say("clean exit\n");
    return 0;
}
