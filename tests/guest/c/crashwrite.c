/* Writes a line to /data/log (a volume) and crashes (SIGSEGV) without closing or
 * syncing it: the line must be on the host file anyway. */
#include <fcntl.h>
#include <unistd.h>

int main(void) {
    int fd = open("/data/log", O_CREAT | O_WRONLY | O_TRUNC, 0644);
    if (fd < 0 || write(fd, "before the crash\n", 17) != 17) return 1;
    *(volatile int *)0 = 1;
    return 0;
}
