/* What the standard streams look like to the program: for fds 0, 1 and 2, the
   type fstat gives (and the size for a regular file), isatty, lseek's answer,
   the terminal's window size. With "seek", stdin (a file) is read, rewound and
   read again. The report goes to stderr (or to stdout with "report-out", for a
   stderr that is a file). Compared with the same program on the host under the
   same redirections. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <termios.h>
#include <unistd.h>

static const char *type(mode_t m) {
    switch (m & S_IFMT) {
    case S_IFIFO: return "fifo";
    case S_IFREG: return "file";
    case S_IFCHR: return "chardev";
    case S_IFSOCK: return "socket";
    case S_IFDIR: return "dir";
    default: return "other";
    }
}

int main(int argc, char **argv) {
    FILE *out = stderr;
    if (argc > 2 && !strcmp(argv[2], "report-out")) out = stdout;
    if (argc > 1 && !strcmp(argv[1], "write")) {
        /* Some output first, so a file's size and offset say it arrived. */
        const char *msg = "0123456789\n";
        for (int i = 0; i < 10; i++) write(1, msg, strlen(msg));
    }
    for (int fd = 0; fd < 3; fd++) {
        struct stat st;
        if (fstat(fd, &st) != 0) {
            fprintf(out, "fd %d: fstat: %s\n", fd, strerror(errno));
            continue;
        }
        errno = 0;
        off_t pos = lseek(fd, 0, SEEK_CUR);
        int e = errno;
        struct winsize ws;
        int w = ioctl(fd, TIOCGWINSZ, &ws);
        int we = errno;
        struct termios t;
        int tc = tcgetattr(fd, &t);
        fprintf(out, "fd %d: %s", fd, type(st.st_mode));
        if (S_ISREG(st.st_mode)) fprintf(out, " size %lld", (long long)st.st_size);
        if (S_ISCHR(st.st_mode) && !isatty(fd))
            fprintf(out, " rdev %u:%u", major(st.st_rdev), minor(st.st_rdev));
        fprintf(out, ", isatty %d, lseek %lld%s%s, winsize %s, tcgetattr %s\n", isatty(fd), (long long)pos,
                pos < 0 ? " " : "", pos < 0 ? strerror(e) : "", w == 0 ? "ok" : strerror(we),
                tc == 0 ? "ok" : "fails");
    }
    if (argc > 1 && !strcmp(argv[1], "seek")) {
        char a[6] = {0}, b[6] = {0};
        read(0, a, 5);
        off_t p = lseek(0, 0, SEEK_CUR);
        lseek(0, 0, SEEK_SET);
        read(0, b, 5);
        fprintf(out, "stdin: read '%s' (at %lld), rewound, read '%s'\n", a, (long long)p, b);
    }
    return 0;
}
