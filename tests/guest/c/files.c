/* File system calls on a private directory under /tmp: the same output on the host
   and in onering. */
#define _GNU_SOURCE
#include "check.h"
#include <dirent.h>
#include <fcntl.h>
#include <stdlib.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

static int count_entries(const char *dir) {
    char buf[4096];
    int fd = open(dir, O_RDONLY | O_DIRECTORY);
    if (fd < 0) return -1;
    int n = 0;
    long got;
    while ((got = syscall(SYS_getdents64, fd, buf, sizeof buf)) > 0)
        for (long off = 0; off < got; n++) off += ((struct dirent *)(buf + off))->d_reclen;
    close(fd);
    return n;
}

int main(void) {
    char dir[64];
    snprintf(dir, sizeof dir, "/tmp/onering-files-%d", getpid());
    CHECK(mkdir(dir, 0755) == 0, "mkdir");
    CHECK_ERR(mkdir(dir, 0755), EEXIST, "mkdir existing: EEXIST");
    CHECK(chdir(dir) == 0, "chdir");
    char cwd[128];
    CHECK(getcwd(cwd, sizeof cwd) && !strcmp(cwd, dir), "getcwd");
    CHECK(getcwd(cwd, 3) == NULL && errno == ERANGE, "getcwd short buffer: ERANGE");

    int fd = open("a.txt", O_CREAT | O_RDWR | O_TRUNC, 0644);
    CHECK(fd >= 0, "open O_CREAT");
    CHECK(write(fd, "hello world", 11) == 11, "write");
    CHECK(lseek(fd, 0, SEEK_CUR) == 11, "lseek SEEK_CUR");
    CHECK(lseek(fd, -5, SEEK_END) == 6, "lseek SEEK_END");
    char buf[32] = {0};
    CHECK(read(fd, buf, sizeof buf) == 5 && !memcmp(buf, "world", 5), "read after lseek");
    CHECK(read(fd, buf, sizeof buf) == 0, "read at end");
    CHECK(pwrite(fd, "W", 1, 6) == 1, "pwrite");
    CHECK(pread(fd, buf, 5, 6) == 5 && !memcmp(buf, "World", 5), "pread");
    CHECK(lseek(fd, 0, SEEK_CUR) == 11, "pread/pwrite keep the offset");
    CHECK_ERR(lseek(fd, -100, SEEK_SET), EINVAL, "lseek negative: EINVAL");
    struct stat st;
    CHECK(fstat(fd, &st) == 0 && st.st_size == 11 && S_ISREG(st.st_mode), "fstat");
    CHECK(ftruncate(fd, 3) == 0 && fstat(fd, &st) == 0 && st.st_size == 3, "ftruncate");
    CHECK_ERR(ftruncate(fd, -1), EINVAL, "ftruncate negative: EINVAL");
    CHECK(lseek(fd, 10, SEEK_SET) == 10 && write(fd, "x", 1) == 1 && fstat(fd, &st) == 0 && st.st_size == 11,
          "write past the end extends");
    CHECK(pread(fd, buf, 11, 0) == 11 && buf[5] == 0, "the hole reads as zeros");

    int fd2 = dup(fd);
    CHECK(fd2 > fd, "dup");
    CHECK(lseek(fd2, 0, SEEK_SET) == 0 && lseek(fd, 0, SEEK_CUR) == 0, "dup shares the offset");
    CHECK(dup2(fd, 50) == 50, "dup2");
    CHECK(dup3(fd, 51, O_CLOEXEC) == 51 && fcntl(51, F_GETFD) == FD_CLOEXEC, "dup3 O_CLOEXEC");
    CHECK_ERR(dup3(fd, fd, 0), EINVAL, "dup3 same fd: EINVAL");
    CHECK(fcntl(fd, F_DUPFD, 60) == 60, "F_DUPFD");
    CHECK((fcntl(fd, F_GETFL) & O_ACCMODE) == O_RDWR, "F_GETFL");
    CHECK(fcntl(fd, F_SETFL, O_APPEND) == 0 && (fcntl(fd, F_GETFL) & O_APPEND), "F_SETFL O_APPEND");
    CHECK(write(fd, "!", 1) == 1 && fstat(fd, &st) == 0 && st.st_size == 12, "O_APPEND writes at the end");
    CHECK(close(50) == 0 && close(51) == 0 && close(60) == 0 && close(fd2) == 0, "close");
    CHECK_ERR(close(50), EBADF, "close twice: EBADF");
    CHECK_ERR(write(999, "x", 1), EBADF, "write to a bad fd: EBADF");
    CHECK_ERR(pread(fd, (void *)8, 4, 0), EFAULT, "read into a bad pointer: EFAULT");
    CHECK_ERR(ioctl(fd, TIOCGWINSZ, buf), ENOTTY, "TIOCGWINSZ on a file: ENOTTY");
    int avail = -1;
    CHECK(lseek(fd, 2, SEEK_SET) == 2 && ioctl(fd, FIONREAD, &avail) == 0 && avail == 10, "FIONREAD on a file");
    close(fd);

    CHECK_ERR(open("a.txt", O_CREAT | O_EXCL | O_RDWR, 0644), EEXIST, "O_EXCL: EEXIST");
    CHECK_ERR(open("nope", O_RDONLY), ENOENT, "open missing: ENOENT");
    CHECK_ERR(open("a.txt/x", O_RDONLY), ENOTDIR, "open through a file: ENOTDIR");
    CHECK_ERR(open(".", O_WRONLY), EISDIR, "open a directory for writing: EISDIR");
    CHECK_ERR(open("a.txt", O_RDONLY | O_DIRECTORY), ENOTDIR, "O_DIRECTORY on a file: ENOTDIR");
    CHECK_ERR(open((char *)8, O_RDONLY), EFAULT, "open with a bad path: EFAULT");
    CHECK(stat("a.txt", &st) == 0 && st.st_size == 12, "stat");
    CHECK(lstat(dir, &st) == 0 && S_ISDIR(st.st_mode), "lstat a directory");
    CHECK(fstatat(AT_FDCWD, "a.txt", &st, 0) == 0 && st.st_size == 12, "newfstatat");
    unsigned long long sx[32]; /* struct statx: stx_size at byte 40 */
    CHECK(syscall(SYS_statx, AT_FDCWD, "a.txt", 0, 0x7ff, sx) == 0 && sx[5] == 12, "statx");
    CHECK(access("a.txt", R_OK | W_OK) == 0, "access");
    CHECK_ERR(access("nope", F_OK), ENOENT, "access missing: ENOENT");
    CHECK(faccessat(AT_FDCWD, "a.txt", R_OK, 0) == 0, "faccessat");

    CHECK_ERR(rename("a.txt/", "z"), ENOTDIR, "rename file/: ENOTDIR");
    CHECK_ERR(open("newdir/", O_CREAT | O_WRONLY, 0644), EISDIR, "O_CREAT name/: EISDIR");
    CHECK(rename("a.txt", "b.txt") == 0 && access("a.txt", F_OK) == -1 && access("b.txt", F_OK) == 0, "rename");
    CHECK(mkdir("sub", 0755) == 0 && rename("b.txt", "sub/c.txt") == 0, "rename into a directory");
    CHECK(count_entries("sub") == 3, "getdents64 lists . .. and the file");
    CHECK_ERR(rmdir("sub"), ENOTEMPTY, "rmdir non-empty: ENOTEMPTY");
    CHECK_ERR(unlink("sub"), EISDIR, "unlink a directory: EISDIR");
    CHECK(unlink("sub/c.txt") == 0 && rmdir("sub") == 0, "unlink and rmdir");
    CHECK_ERR(unlink("sub/c.txt"), ENOENT, "unlink missing: ENOENT");
    CHECK(mkdirat(AT_FDCWD, "d2", 0700) == 0 && unlinkat(AT_FDCWD, "d2", AT_REMOVEDIR) == 0, "mkdirat/unlinkat");
    CHECK(readlink("/proc/self/exe", buf, sizeof buf) > 0, "readlink /proc/self/exe");
    CHECK_ERR(readlink(dir, buf, sizeof buf), EINVAL, "readlink of a directory: EINVAL");
    CHECK(symlink("target.txt", "link") == 0, "symlink");
    CHECK(readlink("link", buf, sizeof buf) == 10 && !memcmp(buf, "target.txt", 10), "readlink of a new link");
    fd = open("link", O_CREAT | O_WRONLY, 0644);
    CHECK(fd >= 0 && access("target.txt", F_OK) == 0, "O_CREAT through a dangling link creates its target");
    close(fd);
    CHECK_ERR(open("link", O_CREAT | O_EXCL | O_WRONLY, 0644), EEXIST, "O_EXCL on a link: EEXIST");
    CHECK_ERR(symlink("x", "link"), EEXIST, "symlink over an existing name: EEXIST");
    CHECK(unlink("link") == 0 && unlink("target.txt") == 0, "unlink the link and its target");
    mode_t old = umask(077);
    CHECK(umask(old) == 077, "umask");
    CHECK(chdir("/") == 0 && rmdir(dir) == 0, "clean up");
    return failures;
}
