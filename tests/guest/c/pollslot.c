/* A hostile program against the host-file poller: one thread scribbles on every
   vCPU's poll slot (reached through GS, as the kernel reaches its own: the program
   shares the kernel's ring) with posted calls of random numbers, roots and
   arguments, and flips the slots' states at random, while the main thread uses a
   volume. The program may hurt itself (its kernel reads garbage results); the VMM
   must neither crash nor hang. Prints "done" if it got that far. With "calm" as
   its second argument nothing scribbles and every answer is checked. */
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static volatile int stop;
static uint64_t seed = 0x9e3779b97f4a7c15;

static uint64_t rnd(void) {
    seed ^= seed << 13, seed ^= seed >> 7, seed ^= seed << 17;
    return seed;
}

static uint64_t edge(void) {
    static const uint64_t e[] = {0, 1, 0x1000, 0xfff, ~0ull, 1ull << 63, 0x7ffffffff000, 13, 20, 2};
    return rnd() & 1 ? e[rnd() % 10] : rnd();
}

static void *scribble(void *arg) {
    long ncpus = (long)arg;
    uint64_t gs;
    __asm__ volatile("rdgsbase %0" : "=r"(gs));
    uint64_t cpu = *(volatile uint64_t *)(gs + 8);
    uint64_t page0 = gs - cpu * 0x1000;
    while (!stop) {
        volatile uint64_t *slot = (volatile uint64_t *)(page0 + (rnd() % ncpus) * 0x1000 + 0xc40);
        for (int i = 2; i < 11; i++) slot[i] = edge();
        if (rnd() % 4 == 0) slot[2] = 13; /* Fs */
        if (rnd() % 3 == 0) slot[3] = 0x1000; /* the boot root */
        slot[0] = rnd() % 5 ? 1 : edge(); /* posted, mostly */
    }
    return 0;
}

int main(int argc, char **argv) {
    const char *dir = argc > 1 ? argv[1] : "/v";
    long ncpus = sysconf(_SC_NPROCESSORS_ONLN);
    int calm = argc > 2 && !strcmp(argv[2], "calm");
    pthread_t t;
    if (!calm) pthread_create(&t, 0, scribble, (void *)(ncpus > 0 ? ncpus : 1));
    char p[256], buf[64];
    struct stat st;
    for (int i = 0; i < 2000; i++) {
        snprintf(p, sizeof p, "%s/f%d", dir, i % 7);
        int fd = open(p, O_CREAT | O_RDWR | O_TRUNC, 0644);
        int ok = fd >= 0 && write(fd, "scribbled", 9) == 9 && pread(fd, buf, sizeof buf, 0) == 9 &&
                 !memcmp(buf, "scribbled", 9);
        if (fd >= 0 && close(fd) != 0) ok = 0;
        ok = ok && stat(p, &st) == 0 && st.st_size == 9;
        if (unlink(p) != 0) ok = 0;
        if (calm && !ok) return printf("FAIL at file %d\n", i), 1;
    }
    stop = 1;
    if (!calm) pthread_join(t, 0);
    puts("done");
    return 0;
}
