/* For --trace, --stats and --perf (tests/observe.rs): a known set of system
 * calls. argv[1] "trace": an open that fails, one that succeeds with flags, a
 * write, an anonymous mmap and a kill(0, 0); "getppid N": N getppid calls;
 * exits with status 3 either way. */
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

int main(int argc, char **argv) {
    if (argc > 2 && strcmp(argv[1], "getppid") == 0) {
        long n = atol(argv[2]);
        for (long i = 0; i < n; i++)
            syscall(SYS_getppid);
        return 3;
    }
    syscall(SYS_openat, AT_FDCWD, "/nonexistent/file", O_RDONLY | O_CLOEXEC);
    int fd = syscall(SYS_openat, AT_FDCWD, "/tmp/observe.txt", O_WRONLY | O_CREAT | O_TRUNC, 0644);
    syscall(SYS_write, fd, "hello\n", 6);
    syscall(SYS_close, fd);
    syscall(SYS_mmap, 0, 8192, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    syscall(SYS_kill, 0, 0);
    syscall(SYS_close, 99);
    return 3;
}
