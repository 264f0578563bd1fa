/* Run with -v HOSTDIR:/data (the test makes HOSTDIR/in.txt, links out of it, and
 * HOSTDIR/swap that it swaps with a link to a directory outside while this runs):
 * reads and writes through the volume, and every way out of it fails. Prints one
 * line per check; "LEAK" if anything outside the volume was ever read. */
#include "check.h"
#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static int slurp(const char *path, char *buf, int len) {
    int fd = open(path, O_RDONLY);
    if (fd < 0) return -1;
    int n = read(fd, buf, len - 1);
    close(fd);
    buf[n > 0 ? n : 0] = 0;
    return n;
}

int main(void) {
    char buf[256];
    CHECK(slurp("/data/in.txt", buf, sizeof buf) > 0 && !strcmp(buf, "from the host\n"), "a host file reads");
    /* Every way out: the host's absolute and relative links resolve in the VM's own
       tree, `..` stops at the VM's root, and there is no /proc/self/root. */
    const char *outs[] = {"/data/abs/secret", "/data/rel/secret", "/data/../outside/secret",
                          "/data/../../../outside/secret", "/data/sub/../../outside/secret",
                          "/proc/self/root/outside/secret", "/data/abs", "/data/rel"};
    for (unsigned i = 0; i < sizeof outs / sizeof *outs; i++) {
        int n = slurp(outs[i], buf, sizeof buf);
        if (n > 0 && strstr(buf, "SECRET")) printf("LEAK through %s\n", outs[i]);
    }
    CHECK(1, "no way out by links or ..");
    /* Writes go to the host file. */
    int fd = open("/data/out.txt", O_CREAT | O_WRONLY | O_TRUNC, 0640);
    CHECK(fd >= 0 && write(fd, "from the vm\n", 12) == 12 && fsync(fd) == 0, "a new file written and synced");
    close(fd);
    CHECK(mkdir("/data/d", 0755) == 0 && rename("/data/out.txt", "/data/d/moved.txt") == 0, "mkdir and rename");
    CHECK(symlink("moved.txt", "/data/d/l") == 0 && link("/data/d/moved.txt", "/data/d/hard") == 0, "symlink and link");
    CHECK(truncate("/data/d/hard", 4) == 0 && slurp("/data/d/l", buf, sizeof buf) == 4, "truncate, seen through the link");
    CHECK(chmod("/data/d/moved.txt", 0600) == 0, "chmod");
    struct stat st;
    CHECK(stat("/data/d/moved.txt", &st) == 0 && (st.st_mode & 0777) == 0600 && st.st_size == 4, "stat after");
    CHECK(unlink("/data/in.txt") == 0 && access("/data/in.txt", F_OK) != 0, "unlink");
    CHECK_ERR(link("/data/d/moved.txt", "/tmp/x"), EXDEV, "no link across mounts: EXDEV");
    CHECK_ERR(rename("/data/d/moved.txt", "/tmp/x"), EXDEV, "no rename across mounts: EXDEV");
    CHECK_ERR(open("/ro/new", O_CREAT | O_WRONLY, 0644), EROFS, "a :ro volume: EROFS");
    CHECK(slurp("/ro/in.txt", buf, sizeof buf) > 0, "and it reads");
    /* A directory of many entries lists completely. */
    DIR *d = opendir("/data/many");
    int n = 0;
    struct dirent *e;
    while (d && (e = readdir(d))) n++;
    if (d) closedir(d);
    CHECK(n == 100002, "100,000 entries and . and ..");
    /* The swap race: the host swaps /data/swap between a directory and a link to
       the outside while this reads through it; only the volume's file is ever read. */
    struct timespec t0, t;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    int reads = 0;
    do {
        if (slurp("/data/swap/secret", buf, sizeof buf) > 0) {
            reads++;
            if (strstr(buf, "SECRET")) printf("LEAK through the swapped directory\n");
        }
        clock_gettime(CLOCK_MONOTONIC, &t);
    } while ((t.tv_sec - t0.tv_sec) * 1000 + (t.tv_nsec - t0.tv_nsec) / 1000000 < 1000);
    CHECK(1, "the swap race reads only the volume");
    return failures;
}
