/* Run with --rootfs pointing at a directory holding greeting.txt, link -> greeting.txt
   and sub/, and -w /sub: reads through the tree; with --read-only (no argument) finds
   the rootfs read-only, with the argument "rw" changes it (the changes stay in the VM:
   the test then checks the host's directory is as it was). */
#include "check.h"
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

static int slurp(const char *path, char *buf, int len) {
    int fd = open(path, O_RDONLY);
    if (fd < 0) return -1;
    int n = read(fd, buf, len);
    close(fd);
    return n;
}

int main(int argc, char **argv) {
    int rw = argc > 1 && !strcmp(argv[1], "rw");
    char buf[64] = {0};
    CHECK(getcwd(buf, sizeof buf) && !strcmp(buf, "/sub"), "working directory from -w");
    int fd = open("../link", O_RDONLY);
    CHECK(fd >= 0 && read(fd, buf, sizeof buf) == 6 && !memcmp(buf, "hello\n", 6), "read through a symlink");
    CHECK(readlink("/link", buf, sizeof buf) == 12 && !memcmp(buf, "greeting.txt", 12), "readlink");
    if (!rw) {
        CHECK_ERR(open("/greeting.txt", O_WRONLY), EROFS, "the rootfs is read-only: EROFS");
        CHECK_ERR(open("/new", O_CREAT | O_WRONLY, 0644), EROFS, "no new files outside /tmp: EROFS");
        CHECK_ERR(unlink("/greeting.txt"), EROFS, "no unlink: EROFS");
        CHECK_ERR(mkdir("/sub/d", 0755), EROFS, "no mkdir: EROFS");
    } else {
        fd = open("/greeting.txt", O_WRONLY | O_APPEND);
        CHECK(fd >= 0 && write(fd, "more\n", 5) == 5, "a rootfs file takes a write (its copy in the VM)");
        close(fd);
        memset(buf, 0, sizeof buf);
        CHECK(slurp("/link", buf, sizeof buf) == 11 && !strcmp(buf, "hello\nmore\n"), "and reads it back");
        fd = open("/new", O_CREAT | O_WRONLY, 0644);
        CHECK(fd >= 0 && write(fd, "n", 1) == 1, "a new file in the rootfs");
        CHECK(unlink("/link") == 0 && access("/link", F_OK) != 0, "unlink in the rootfs");
        CHECK(mkdir("/sub/d", 0755) == 0, "mkdir in the rootfs");
        CHECK(rename("/greeting.txt", "/sub/d/g") == 0 && slurp("/sub/d/g", buf, sizeof buf) == 11,
              "rename of a rootfs file");
        CHECK(chmod("/sub", 0700) == 0, "chmod in the rootfs");
        struct stat st;
        CHECK(stat("/sub", &st) == 0 && (st.st_mode & 0777) == 0700, "and its mode");
    }
    fd = open("/tmp/scratch", O_CREAT | O_RDWR, 0600);
    CHECK(fd >= 0 && write(fd, "x", 1) == 1, "/tmp stays writable");
    CHECK(access("/dev/null", W_OK) == 0, "/dev is there");
    return failures;
}
