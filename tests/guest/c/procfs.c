/* /proc and /sys as programs read them: properties that hold on the host and in
   onering alike (the values themselves differ: pids, addresses, memory). */
#define _GNU_SOURCE
#include "check.h"
#include <dirent.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

static char buf[1 << 20];

/* The whole of a file (NUL-ended), read in small pieces as a seq_file is; its length. */
static long slurp(const char *path) {
    int fd = open(path, O_RDONLY);
    if (fd < 0)
        return -1;
    long n = 0, r;
    while (n < (long)sizeof buf - 1 && (r = read(fd, buf + n, 100)) > 0)
        n += r;
    close(fd);
    buf[n] = 0;
    return n;
}

static int has_line(const char *prefix) {
    for (char *l = buf; l && *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL)
        if (strncmp(l, prefix, strlen(prefix)) == 0)
            return 1;
    return 0;
}

static int link_is(const char *path, const char *want, int prefix) {
    char t[4096];
    ssize_t n = readlink(path, t, sizeof t - 1);
    if (n < 0)
        return 0;
    t[n] = 0;
    return prefix ? strncmp(t, want, strlen(want)) == 0 : strcmp(t, want) == 0;
}

static int cpus_in_list(const char *s) {
    int a, b, n = 0;
    while (*s && *s != '\n') {
        if (sscanf(s, "%d-%d", &a, &b) == 2)
            n += b - a + 1;
        else if (sscanf(s, "%d", &a) == 1)
            n += 1;
        s = strchr(s, ',');
        if (!s)
            break;
        s++;
    }
    return n;
}

static int writes_fail(const char *path) {
    int fd = open(path, O_WRONLY);
    if (fd < 0)
        return 1;
    int bad = write(fd, "1", 1) < 0;
    close(fd);
    return bad;
}

static int gate[2];
static volatile pid_t waiter_tid;

/* A thread that waits on a pipe until main writes to it. */
static void *waiter(void *arg) {
    char c;
    waiter_tid = gettid();
    (void)read(gate[0], &c, 1);
    return arg;
}

/* Threads: task/ has one directory per thread; a blocked one is S. */
static void threads(void) {
    pthread_t t[2];
    CHECK(pipe(gate) == 0, "gate pipe");
    for (int i = 0; i < 2; i++)
        pthread_create(&t[i], NULL, waiter, NULL);
    usleep(100000);
    DIR *d = opendir("/proc/self/task");
    int n = 0;
    struct dirent *e;
    while (d && (e = readdir(d)))
        n += e->d_name[0] != '.';
    if (d)
        closedir(d);
    CHECK(n == 3, "task/ has a directory per thread");
    CHECK(slurp("/proc/self/status") > 0 && has_line("Threads:\t3\n"), "status: Threads 3");
    char path[64];
    snprintf(path, sizeof path, "/proc/self/task/%d/stat", waiter_tid);
    CHECK(slurp(path) > 0 && atoi(buf) == waiter_tid && strstr(buf, ") S ") != NULL, "a waiting thread is S");
    snprintf(path, sizeof path, "/proc/self/task/%d/stat", gettid());
    CHECK(slurp(path) > 0 && strstr(buf, ") R ") != NULL, "the reading thread is R");
    CHECK(write(gate[1], "xx", 2) == 2, "release");
    for (int i = 0; i < 2; i++)
        pthread_join(t[i], NULL);
    close(gate[0]);
    close(gate[1]);
}

int main(int argc, char **argv) {
    char path[64], want[64];
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);

    CHECK(link_is("/proc/self/exe", argv[0], 0), "/proc/self/exe is the program");
    snprintf(want, sizeof want, "%d", getpid());
    CHECK(link_is("/proc/self", want, 0), "/proc/self is /proc/<pid>");
    struct stat st;
    CHECK(lstat("/proc/self", &st) == 0 && S_ISLNK(st.st_mode), "lstat /proc/self: a link");
    CHECK(stat("/proc/self", &st) == 0 && S_ISDIR(st.st_mode), "stat /proc/self: a directory");
    CHECK(stat("/proc/self/status", &st) == 0 && S_ISREG(st.st_mode) && st.st_size == 0, "status: regular, size 0");

    /* maps: the program's text, executable, named; main inside an r-x mapping. */
    CHECK(slurp("/proc/self/maps") > 0, "read maps");
    int text = 0, main_in = 0, stack = 0;
    for (char *l = buf; *l;) {
        char *nl = strchr(l, '\n');
        *nl = 0;
        unsigned long lo, hi, off;
        char perms[8], dev[16], name[4096] = "";
        unsigned long ino;
        if (sscanf(l, "%lx-%lx %7s %lx %15s %lu %4095s", &lo, &hi, perms, &off, dev, &ino, name) >= 6) {
            if (strcmp(perms, "r-xp") == 0 && strcmp(name, argv[0]) == 0)
                text = 1;
            if (perms[2] == 'x' && (uintptr_t)main >= lo && (uintptr_t)main < hi)
                main_in = 1;
            if (strcmp(name, "[stack]") == 0 && (uintptr_t)&st >= lo && (uintptr_t)&st < hi)
                stack = 1;
        }
        l = nl + 1;
    }
    CHECK(text, "maps: the program's text r-xp with its path");
    CHECK(main_in, "maps: main is in an executable mapping");
    CHECK(stack, "maps: [stack] holds a local");

    /* stat: 52 fields; pid, state, ppid, threads. */
    CHECK(slurp("/proc/self/stat") > 0, "read stat");
    char *close_paren = strrchr(buf, ')');
    int fields = 2;
    for (char *p = close_paren + 1; *p; p++)
        if (*p == ' ' && p[1] && p[1] != '\n')
            fields++;
    CHECK(fields == 52, "stat: 52 fields");
    CHECK(atoi(buf) == getpid(), "stat: field 1 is the pid");
    char state;
    int ppid;
    CHECK(sscanf(close_paren + 2, "%c %d", &state, &ppid) == 2 && state == 'R' && ppid == getppid(),
          "stat: running, ppid");
    char *p = close_paren + 2;
    for (int i = 3; i < 20; i++)
        p = strchr(p, ' ') + 1;
    CHECK(atoi(p) == 1, "stat: field 20, one thread");

    /* status. */
    CHECK(slurp("/proc/self/status") > 0, "read status");
    snprintf(want, sizeof want, "Pid:\t%d\n", getpid());
    CHECK(strstr(buf, want) != NULL, "status: Pid");
    snprintf(want, sizeof want, "PPid:\t%d\n", getppid());
    CHECK(strstr(buf, want) != NULL, "status: PPid");
    snprintf(want, sizeof want, "Uid:\t%d\t%d\t%d\t%d\n", getuid(), getuid(), getuid(), getuid());
    CHECK(strstr(buf, want) != NULL, "status: Uid");
    CHECK(has_line("Threads:\t1\n") && has_line("VmRSS:") && has_line("VmSize:") && has_line("Name:\t"),
          "status: Threads, VmRSS, VmSize, Name");
    CHECK(has_line("Cpus_allowed_list:"), "status: Cpus_allowed_list");
    CHECK(slurp("/proc/self/comm") > 0 && strchr(buf, '\n') != NULL, "comm");
    snprintf(path, sizeof path, "/proc/self/task/%d/stat", getpid());
    CHECK(slurp(path) > 0 && atoi(buf) == getpid(), "task/<tid>/stat");

    /* cmdline: argv, NUL-separated. */
    long n = slurp("/proc/self/cmdline");
    long at = 0;
    int same = 1;
    for (int i = 0; i < argc; i++) {
        same &= at < n && strcmp(buf + at, argv[i]) == 0;
        at += strlen(argv[i]) + 1;
    }
    CHECK(same && at == n, "cmdline is argv");
    CHECK(slurp("/proc/self/environ") >= 0, "environ reads");

    /* fd/: 0 1 2, a file, a pipe, an eventfd, a socket; readlink says what each is. */
    char file[] = "/tmp/procfs-test-XXXXXX";
    int f = mkstemp(file);
    int pp[2];
    CHECK(pipe(pp) == 0, "pipe");
    int ev = eventfd(0, 0), so = socket(AF_UNIX, SOCK_STREAM, 0);
    DIR *d = opendir("/proc/self/fd");
    CHECK(d != NULL, "opendir /proc/self/fd");
    int seen = 0;
    struct dirent *e;
    while (d && (e = readdir(d))) {
        int fd = atoi(e->d_name);
        if (e->d_name[0] == '.')
            continue;
        if (fd == 0 || fd == 1 || fd == 2 || fd == f || fd == pp[0] || fd == ev || fd == so)
            seen |= 1 << (fd < 3 ? fd : fd == f ? 3 : fd == pp[0] ? 4 : fd == ev ? 5 : 6);
        if (e->d_type != DT_LNK)
            seen |= 1 << 10;
    }
    if (d)
        closedir(d);
    CHECK(seen == 0x7f, "fd/ lists 0 1 2 and the new descriptors, as links");
    snprintf(path, sizeof path, "/proc/self/fd/%d", f);
    CHECK(link_is(path, file, 0), "fd/N of a file: its path");
    CHECK(lstat(path, &st) == 0 && S_ISLNK(st.st_mode), "lstat fd/N: a link");
    CHECK(write(f, "hello", 5) == 5 && stat(path, &st) == 0 && S_ISREG(st.st_mode) && st.st_size == 5,
          "stat fd/N: the file");
    int again = open(path, O_RDONLY);
    CHECK(again >= 0 && read(again, want, 5) == 5 && memcmp(want, "hello", 5) == 0, "open fd/N: the file");
    close(again);
    snprintf(path, sizeof path, "/proc/self/fd/%d", pp[0]);
    CHECK(link_is(path, "pipe:[", 1), "fd/N of a pipe: pipe:[ino]");
    int pr = open(path, O_RDONLY);
    CHECK(pr >= 0 && write(pp[1], "p", 1) == 1 && read(pr, want, 1) == 1 && want[0] == 'p',
          "open fd/N of a pipe's read end: the pipe");
    close(pr);
    snprintf(path, sizeof path, "/proc/self/fd/%d", ev);
    CHECK(link_is(path, "anon_inode:[eventfd]", 0), "fd/N of an eventfd");
    snprintf(path, sizeof path, "/proc/self/fd/%d", so);
    CHECK(link_is(path, "socket:[", 1), "fd/N of a socket: socket:[ino]");
    CHECK_ERR(open(path, O_RDONLY), ENXIO, "open fd/N of a socket: ENXIO");
    snprintf(path, sizeof path, "/proc/self/fdinfo/%d", f);
    CHECK(slurp(path) > 0 && has_line("pos:\t5\n") && has_line("flags:\t"), "fdinfo: pos and flags");
    close(f);
    unlink(file);
    snprintf(path, sizeof path, "/proc/self/fd/%d", f);
    CHECK(lstat(path, &st) == -1 && errno == ENOENT, "a closed descriptor leaves fd/");

    /* Relative to a descriptor of /proc/self, as find and ls do. */
    int self = open("/proc/self", O_RDONLY | O_DIRECTORY);
    CHECK(self >= 0 && fstatat(self, "status", &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(st.st_mode),
          "fstatat(/proc/self, status)");
    CHECK(faccessat(self, "maps", R_OK, 0) == 0, "faccessat(/proc/self, maps)");
    int cwdlink = 0;
    char cwd[4096], t[4096];
    ssize_t tn = readlinkat(self, "cwd", t, sizeof t - 1);
    if (tn > 0 && getcwd(cwd, sizeof cwd)) {
        t[tn] = 0;
        cwdlink = strcmp(t, cwd) == 0;
    }
    CHECK(cwdlink, "cwd is the working directory");
    CHECK(link_is("/proc/self/root", "/", 0), "root is /");
    off_t pos = lseek(self, 0, SEEK_SET);
    CHECK(pos == 0, "lseek a /proc directory");
    close(self);

    /* Reading at offsets: pread and lseek on one snapshot. */
    int fd = open("/proc/self/status", O_RDONLY);
    char a[16], b[16];
    CHECK(pread(fd, a, 5, 0) == 5 && memcmp(a, "Name:", 5) == 0, "pread status at 0");
    CHECK(lseek(fd, 1, SEEK_SET) == 1 && read(fd, b, 4) == 4 && memcmp(b, "ame:", 4) == 0, "lseek then read");
    close(fd);

    /* System-wide files. */
    CHECK(slurp("/proc/meminfo") > 0 && has_line("MemTotal:") && has_line("MemFree:") && has_line("MemAvailable:"),
          "meminfo: MemTotal, MemFree, MemAvailable");
    long total = 0;
    sscanf(strstr(buf, "MemTotal:") + 9, "%ld", &total);
    CHECK(total > 0 && strstr(buf, " kB\n") != NULL, "meminfo: MemTotal in kB");
    CHECK(slurp("/proc/cpuinfo") > 0, "read cpuinfo");
    int procs = 0;
    for (char *q = buf; (q = strstr(q, "processor\t: ")); q++)
        procs++;
    CHECK(procs == ncpu, "cpuinfo: a processor per online CPU");
    CHECK(has_line("model name\t: ") && has_line("flags\t\t: "), "cpuinfo: model name, flags");
    CHECK(slurp("/sys/devices/system/cpu/online") > 0 && cpus_in_list(buf) == ncpu, "cpu/online agrees with sysconf");
    CHECK(slurp("/sys/devices/system/cpu/possible") > 0 && cpus_in_list(buf) >= ncpu, "cpu/possible");
    CHECK(slurp("/proc/stat") > 0 && has_line("cpu ") && has_line("cpu0 ") && has_line("btime ") &&
              has_line("processes ") && has_line("procs_running "),
          "stat: cpu lines, btime, processes, procs_running");
    double up, idle;
    CHECK(slurp("/proc/uptime") > 0 && sscanf(buf, "%lf %lf", &up, &idle) == 2 && up >= 0, "uptime");
    double l1, l5, l15;
    CHECK(slurp("/proc/loadavg") > 0 && sscanf(buf, "%lf %lf %lf", &l1, &l5, &l15) == 3, "loadavg");
    CHECK(slurp("/proc/mounts") > 0 && strstr(buf, " /proc proc ") != NULL, "mounts: /proc");
    CHECK(slurp("/proc/self/mountinfo") > 0 && strstr(buf, " - proc ") != NULL, "mountinfo");
    CHECK(slurp("/proc/self/limits") > 0 && has_line("Max open files  "), "limits");
    CHECK(slurp("/proc/self/cgroup") > 0 && has_line("0::/"), "cgroup: the v2 line");
    CHECK(slurp("/proc/filesystems") > 0 && strstr(buf, "\tproc\n") != NULL, "filesystems");
    CHECK(slurp("/proc/version") > 0 && strncmp(buf, "Linux version ", 14) == 0, "version");
    CHECK(slurp("/proc/sys/kernel/ostype") > 0 && strcmp(buf, "Linux\n") == 0, "sys/kernel/ostype");
    CHECK(slurp("/proc/sys/kernel/osrelease") > 0, "sys/kernel/osrelease");
    CHECK(slurp("/proc/sys/kernel/pid_max") > 0 && atoi(buf) > 0, "sys/kernel/pid_max");
    CHECK(slurp("/proc/sys/kernel/random/boot_id") == 37 && buf[8] == '-', "sys/kernel/random/boot_id");
    char boot[40];
    strcpy(boot, buf);
    CHECK(slurp("/proc/sys/kernel/random/boot_id") == 37 && strcmp(buf, boot) == 0, "boot_id stays");
    CHECK(slurp("/proc/sys/vm/overcommit_memory") > 0, "sys/vm/overcommit_memory");

    /* Nothing can be written, made or removed. */
    CHECK(writes_fail("/proc/self/stat") && writes_fail("/proc/meminfo") &&
              writes_fail("/sys/devices/system/cpu/online") && writes_fail("/proc/sys/kernel/ostype"),
          "writes fail");
    CHECK(mkdir("/proc/x", 0755) == -1 && unlink("/proc/self/stat") == -1, "mkdir, unlink fail");
    threads();
    return failures;
}
