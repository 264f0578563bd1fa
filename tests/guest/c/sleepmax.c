/* A thread sleeps "forever" (the largest timespec, as `sleep infinity` asks);
   the main thread must still run and end the program (the sleeper used to spin
   in the kernel, starving everything on its vCPU). */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <time.h>

static void *sleeper(void *arg) {
    (void)arg;
    struct timespec forever = {INT64_MAX, 999999999};
    nanosleep(&forever, 0);
    return 0;
}

int main(void) {
    pthread_t t;
    pthread_create(&t, 0, sleeper, 0);
    struct timespec ms = {0, 1000000};
    for (int i = 0; i < 50; i++) nanosleep(&ms, 0);
    printf("main ran\n");
    return 0;
}
