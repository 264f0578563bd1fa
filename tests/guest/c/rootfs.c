/* Run with --rootfs pointing at a directory holding greeting.txt, link -> greeting.txt
   and sub/, and -w /sub: reads through the tree, and finds it read-only. */
#include "check.h"
#include <fcntl.h>
#include <unistd.h>

int main(void) {
    char buf[64] = {0};
    CHECK(getcwd(buf, sizeof buf) && !strcmp(buf, "/sub"), "working directory from -w");
    int fd = open("../link", O_RDONLY);
    CHECK(fd >= 0 && read(fd, buf, sizeof buf) == 6 && !memcmp(buf, "hello\n", 6), "read through a symlink");
    CHECK(readlink("/link", buf, sizeof buf) == 12 && !memcmp(buf, "greeting.txt", 12), "readlink");
    CHECK_ERR(open("/greeting.txt", O_WRONLY), EROFS, "the rootfs is read-only: EROFS");
    CHECK_ERR(open("/new", O_CREAT | O_WRONLY, 0644), EROFS, "no new files outside /tmp: EROFS");
    CHECK_ERR(unlink("/greeting.txt"), EROFS, "no unlink: EROFS");
    fd = open("/tmp/scratch", O_CREAT | O_RDWR, 0600);
    CHECK(fd >= 0 && write(fd, "x", 1) == 1, "/tmp stays writable");
    CHECK(access("/dev/null", W_OK) == 0, "/dev is there");
    return failures;
}
