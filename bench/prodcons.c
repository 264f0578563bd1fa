/* The seed's producer/consumer benchmark: two threads hand one item at a time
   through two POSIX semaphores; the producer spins BURN iterations of a tight loop
   per item (the seed's "loops 2000 times in tight loop"), so the consumer waits
   (blocks) at every item. Prints ns per item.
   usage: prodcons [items] [burn] */
#include <pthread.h>
#include <semaphore.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static sem_t full, empty;
static long items, burn;
static volatile long slot, sink;

static void *consumer(void *arg) {
    (void)arg;
    long sum = 0;
    for (long i = 0; i < items; i++) {
        sem_wait(&full);
        sum += slot;
        sem_post(&empty);
    }
    sink = sum;
    return NULL;
}

int main(int argc, char **argv) {
    items = argc > 1 ? atol(argv[1]) : 50000;
    burn = argc > 2 ? atol(argv[2]) : 5000;
    sem_init(&full, 0, 0);
    sem_init(&empty, 0, 1);
    pthread_t c;
    pthread_create(&c, NULL, consumer, NULL);
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (long i = 0; i < items; i++) {
        for (long k = 0; k < burn; k++) __asm__ volatile("" ::: "memory");
        sem_wait(&empty);
        slot = i;
        sem_post(&full);
    }
    pthread_join(c, NULL);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double ns = (t1.tv_sec - t0.tv_sec) * 1e9 + (t1.tv_nsec - t0.tv_nsec);
    printf("%.1f\n", ns / items);
    return 0;
}
