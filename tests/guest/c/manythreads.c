/* Makes threads (small stacks, each waiting forever) until the kernel refuses: the
   refusal must be EAGAIN, at any --mem, and asking again must stay EAGAIN (once a
   kernel panic: the heap ran out under the thread objects). Prints "manythreads ok". */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

static void *wait_forever(void *a) {
    for (;;) pause();
    return a;
}

int main(void) {
    pthread_attr_t at;
    pthread_attr_init(&at);
    pthread_attr_setstacksize(&at, 16384);
    int n = 0, e = 0;
    pthread_t t;
    while (n < 100000 && (e = pthread_create(&t, &at, wait_forever, 0)) == 0) n++;
    if (e != EAGAIN) {
        printf("FAIL: after %d threads: %s\n", n, strerror(e));
        return 1;
    }
    for (int i = 0; i < 3; i++)
        if ((e = pthread_create(&t, &at, wait_forever, 0)) != EAGAIN) {
            printf("FAIL: again: %s\n", strerror(e));
            return 1;
        }
    printf("manythreads ok (%d threads)\n", n > 100 ? 100 : n);
    return 0;
}
