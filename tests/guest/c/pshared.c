// Process-shared synchronization in MAP_SHARED memory after fork: a semaphore
// (sem_init with pshared 1) the child waits on and the parent posts, and a
// process-shared mutex and condition variable handing a counter back and forth.
// Both block in the kernel (futexes without FUTEX_PRIVATE_FLAG), so a wake in one
// process must reach a waiter in the other. Same output as the host.
#include <pthread.h>
#include <semaphore.h>
#include <stdio.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

struct shared {
    sem_t sem;
    pthread_mutex_t lock;
    pthread_cond_t cond;
    int turn;
};

static void nap(void) {
    struct timespec t = {0, 20 * 1000 * 1000};
    nanosleep(&t, NULL);
}

int main(void) {
    setvbuf(stdout, NULL, _IONBF, 0);
    struct shared *s = mmap(0, sizeof *s, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    sem_init(&s->sem, 1, 0);
    pthread_mutexattr_t ma;
    pthread_mutexattr_init(&ma);
    pthread_mutexattr_setpshared(&ma, PTHREAD_PROCESS_SHARED);
    pthread_mutex_init(&s->lock, &ma);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setpshared(&ca, PTHREAD_PROCESS_SHARED);
    pthread_cond_init(&s->cond, &ca);
    pid_t p = fork();
    if (p == 0) {
        // Blocks until the parent posts (it naps first, so this waits in the kernel).
        if (sem_wait(&s->sem) != 0) _exit(1);
        for (int i = 0; i < 50; i++) {
            pthread_mutex_lock(&s->lock);
            while (s->turn % 2 == 0) pthread_cond_wait(&s->cond, &s->lock);
            s->turn++;
            pthread_cond_broadcast(&s->cond);
            pthread_mutex_unlock(&s->lock);
        }
        _exit(0);
    }
    nap();
    sem_post(&s->sem);
    printf("semaphore posted\n");
    for (int i = 0; i < 50; i++) {
        pthread_mutex_lock(&s->lock);
        while (s->turn % 2 == 1) pthread_cond_wait(&s->cond, &s->lock);
        s->turn++;
        pthread_cond_broadcast(&s->cond);
        pthread_mutex_unlock(&s->lock);
    }
    int st = 0;
    waitpid(p, &st, 0);
    printf("child %s, turns %d\n", WIFEXITED(st) && WEXITSTATUS(st) == 0 ? "ok" : "failed", s->turn);
    return 0;
}
