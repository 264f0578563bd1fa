/* Exhausting the kernel's memory through files and pipes must give errors (EAGAIN,
   ENOSPC), never a kernel panic; freed files must give their memory back; a removed
   working directory takes no new files. Prints "exhaust ok". */
#include "check.h"
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

int main(void) {
    static char buf[65536];
    int filled = 0, refused = 0;
    for (int i = 0; i < 500; i++) {
        int p[2];
        if (pipe2(p, O_NONBLOCK)) break;
        if (write(p[1], buf, sizeof buf) > 0) filled++;
        else if (errno == EAGAIN) refused++;
    }
    CHECK(filled > 0 && refused > 0, "pipes fill up to a budget, then EAGAIN");
    int failures_seen = 0;
    for (int r = 0; r < 30; r++) {
        int fd = open("/tmp/big", O_CREAT | O_RDWR | O_TRUNC, 0644);
        for (int k = 0; k < 16; k++)
            if (write(fd, buf, sizeof buf) < 0) failures_seen++;
        close(fd);
        unlink("/tmp/big");
    }
    CHECK(failures_seen == 0, "removed files give their memory back");
    CHECK(mkdir("/tmp/d", 0755) == 0 && chdir("/tmp/d") == 0 && rmdir("/tmp/d") == 0, "remove the working directory");
    char cwd[64];
    CHECK(getcwd(cwd, sizeof cwd) == NULL && errno == ENOENT, "getcwd of a removed directory: ENOENT");
    CHECK_ERR(open("x", O_CREAT | O_WRONLY, 0644), ENOENT, "no files in a removed directory");
    CHECK(chdir("/tmp") == 0, "back to /tmp");
    int n = 0, why = 0;
    char name[64];
    for (;; n++) {
        snprintf(name, sizeof name, "f%06d", n);
        int fd = open(name, O_CREAT | O_WRONLY, 0644);
        if (fd < 0) {
            why = errno;
            break;
        }
        close(fd);
    }
    CHECK(why == ENOSPC && n > 100, "many files, then ENOSPC");
    printf(failures ? "exhaust failed\n" : "exhaust ok\n");
    return failures;
}
