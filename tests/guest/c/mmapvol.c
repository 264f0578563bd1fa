/* Run with -v HOSTDIR:/data, HOSTDIR/m holding 8192 bytes of 'a': writes through a
 * shared mapping of the volume's file reach the host file (after msync, and at
 * exit without one); a private mapping's writes do not. */
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

int main(void) {
    int fd = open("/data/m", O_RDWR);
    if (fd < 0) return perror("open"), 1;
    char *s = mmap(0, 8192, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    char *p = mmap(0, 8192, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0);
    if (s == MAP_FAILED || p == MAP_FAILED) return perror("mmap"), 1;
    printf("shared reads the file: %s\n", s[0] == 'a' && s[8191] == 'a' ? "yes" : "no");
    memcpy(s + 100, "vm", 2);
    printf("msync: %d\n", msync(s, 8192, MS_SYNC));
    p[300] = 'p';
    s[200] = 'x'; /* no msync: written back when the program ends */
    close(fd);
    return 0;
}
