/* open(O_CREAT) on a volume in one hostcall, closes and unlocks deferred to the
   next one: the same results as on the host (run on the host in a host directory,
   in onering in a volume; crates/onering/tests/files.rs compares the outputs).
   volmeta DIR: new, existing, truncated, excluded, linked (to a file, dangling),
   directory names opened with O_CREAT; then, with the test's host thread: a
   change the host makes between two stats is seen, a file the host made is opened
   with O_CREAT as it is, an unlock and a small write are the host's once the
   program's next file call returned, and a closed file is let go (and its bytes
   on the host) by the time the program idles. */
#include "check.h"
#include <fcntl.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static char path[4096];
static const char *P(const char *dir, const char *name) {
    snprintf(path, sizeof path, "%s/%s", dir, name);
    return path;
}

static long size_of(const char *p) {
    struct stat st;
    return stat(p, &st) == 0 ? (long)st.st_size : -errno;
}

static void nap(long ms) {
    struct timespec t = {ms / 1000, (ms % 1000) * 1000000};
    nanosleep(&t, 0);
}

int main(int argc, char **argv) {
    if (argc < 2) return 100;
    const char *d = argv[1];
    char buf[64] = {0};
    int fd = open(P(d, "a"), O_CREAT | O_WRONLY | O_TRUNC, 0644);
    CHECK(fd >= 0 && write(fd, "x", 1) == 1 && close(fd) == 0, "new file made and written");
    SHOW("size after the first write", size_of(P(d, "a")));
    CHECK_ERR(open(P(d, "a"), O_CREAT | O_EXCL | O_WRONLY, 0644), EEXIST, "O_EXCL on an existing name: EEXIST");
    fd = open(P(d, "a"), O_CREAT | O_RDWR, 0600);
    CHECK(fd >= 0 && read(fd, buf, sizeof buf) == 1 && buf[0] == 'x', "O_CREAT of an existing file opens it as it is");
    struct stat st;
    CHECK(fstat(fd, &st) == 0 && st.st_size == 1 && (st.st_mode & 0777) == 0644, "its mode and size stay");
    close(fd);
    fd = open(P(d, "a"), O_CREAT | O_WRONLY | O_TRUNC, 0644);
    CHECK(fd >= 0 && fstat(fd, &st) == 0 && st.st_size == 0, "O_TRUNC empties an existing file");
    CHECK(write(fd, "yz", 2) == 2 && close(fd) == 0, "and it is written again");
    SHOW("size after the second write", size_of(P(d, "a")));
    CHECK(symlink("a", P(d, "l")) == 0, "a link to it");
    fd = open(P(d, "l"), O_CREAT | O_WRONLY | O_APPEND, 0644);
    CHECK(fd >= 0 && write(fd, "!", 1) == 1 && close(fd) == 0, "O_CREAT through the link opens its target");
    SHOW("the target's size", size_of(P(d, "a")));
    CHECK_ERR(open(P(d, "l"), O_CREAT | O_EXCL | O_WRONLY, 0644), EEXIST, "O_EXCL on a link: EEXIST");
    CHECK_ERR(open(P(d, "l"), O_CREAT | O_NOFOLLOW | O_WRONLY, 0644), ELOOP, "O_NOFOLLOW on a link: ELOOP");
    CHECK(symlink("made-by-link", P(d, "dangling")) == 0, "a dangling link");
    fd = open(P(d, "dangling"), O_CREAT | O_WRONLY, 0644);
    CHECK(fd >= 0 && close(fd) == 0 && size_of(P(d, "made-by-link")) == 0, "O_CREAT through it makes its target");
    CHECK(mkdir(P(d, "sub"), 0755) == 0, "a directory");
    CHECK_ERR(open(P(d, "sub"), O_CREAT | O_WRONLY, 0644), EISDIR, "O_CREAT of a directory for writing: EISDIR");
    /* The loop of the metadata benchmark, checked. */
    int bad = 0;
    for (int i = 0; i < 300; i++) {
        char name[32];
        snprintf(name, sizeof name, "f%d", i);
        fd = open(P(d, name), O_CREAT | O_WRONLY | O_TRUNC, 0644);
        if (fd < 0 || write(fd, "x", 1) != 1 || close(fd) != 0) bad++;
        if (size_of(P(d, name)) != 1 || unlink(P(d, name)) != 0) bad++;
        if (size_of(P(d, name)) != -ENOENT) bad++;
    }
    SHOW("failures in 300 create+write+close+stat+unlink", bad);
    /* An unlock is the host's once the next file call returned. */
    fd = open(P(d, "locked"), O_CREAT | O_RDWR, 0644);
    struct flock fl = {.l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = 0, .l_len = 10};
    CHECK(fd >= 0 && fcntl(fd, F_SETLK, &fl) == 0, "a write lock");
    fl.l_type = F_UNLCK;
    CHECK(fcntl(fd, F_SETLK, &fl) == 0, "unlocked");
    /* A write lock, its unlock, a read lock on the same byte (SQLite's read mark):
       the host sees the read lock held. */
    int rd = open(P(d, "rd"), O_CREAT | O_RDWR, 0644);
    struct flock one = {.l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = 0, .l_len = 1};
    CHECK(rd >= 0 && fcntl(rd, F_SETLK, &one) == 0, "a write lock on rd");
    one.l_type = F_UNLCK;
    CHECK(fcntl(rd, F_SETLK, &one) == 0, "its unlock");
    one.l_type = F_RDLCK;
    CHECK(fcntl(rd, F_SETLK, &one) == 0, "a read lock on the same byte");
    /* A small write, the file kept open: on the host once the next file call
       (making "ready") returned; read back here at once. */
    int pending = open(P(d, "pending"), O_CREAT | O_RDWR | O_TRUNC, 0644);
    memset(buf, 0, sizeof buf);
    CHECK(pending >= 0 && pwrite(pending, "abc", 3, 0) == 3 && pread(pending, buf, 8, 0) == 3 && !strcmp(buf, "abc"),
          "a write read back before it reached the host");
    /* The host thread: sees "ready", checks it can lock "locked" and reads
       "pending", adds to "a" and makes "hostmade", then writes "changed". */
    close(open(P(d, "ready"), O_CREAT | O_WRONLY, 0644));
    for (int i = 0; i < 1000 && access(P(d, "changed"), F_OK) != 0; i++) nap(10);
    SHOW("the size the host gave it, seen by the next stat", size_of(P(d, "a")));
    fd = open(P(d, "hostmade"), O_CREAT | O_RDWR, 0644);
    memset(buf, 0, sizeof buf);
    CHECK(fd >= 0 && read(fd, buf, sizeof buf) == 5 && !strcmp(buf, "host\n"), "O_CREAT opens the host's new file as it is");
    close(fd);
    /* A closed file, then idle: the host sees it closed within the nap. */
    fd = open(P(d, "idle"), O_CREAT | O_WRONLY, 0644);
    CHECK(fd >= 0 && write(fd, "i", 1) == 1 && close(fd) == 0, "a file written and closed before idling");
    nap(1500);
    CHECK(fsync(pending) == 0 && close(pending) == 0, "fsync and close of the kept file");
    close(rd);
    const char *gone[] = {"a", "l", "dangling", "made-by-link", "locked", "ready", "changed", "hostmade", "idle", "pending", "rd"};
    for (unsigned i = 0; i < sizeof gone / sizeof *gone; i++) unlink(P(d, gone[i]));
    rmdir(P(d, "sub"));
    return failures;
}
