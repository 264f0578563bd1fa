/* mmapfile FILE: the cost of mapping a large file and of touching it, in
 * microseconds: mmap(MAP_PRIVATE) of the whole file, the first read of one byte,
 * and a read of one byte in every 4 KiB page (all of it filled). Prints
 * "MMAP_US FIRST_US SWEEP_US". */
#include <fcntl.h>
#include <stdio.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static double now_us(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e6 + t.tv_nsec / 1e3;
}

int main(int argc, char **argv) {
    int fd = open(argc > 1 ? argv[1] : "/data/f", O_RDONLY);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0) return perror("open"), 1;
    double t0 = now_us();
    volatile unsigned char *m = mmap(0, st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
    double t1 = now_us();
    if (m == MAP_FAILED) return perror("mmap"), 1;
    unsigned sum = m[st.st_size / 2];
    double t2 = now_us();
    for (off_t o = 0; o < st.st_size; o += 4096) sum += m[o];
    double t3 = now_us();
    printf("%.0f %.0f %.0f\n", t1 - t0, t2 - t1, t3 - t2);
    return sum == 12345 ? 2 : 0;
}
