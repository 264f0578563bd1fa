// execve and execveat as a program sees them: what survives (descriptors without
// close-on-exec, ignored signals, the pid, the working directory, the
// environment given), what does not (close-on-exec descriptors, handlers, the old
// memory), argv and AT_EXECFN, /proc/self/exe and cmdline after it, `#!`
// scripts with and without an argument, execveat with AT_EMPTY_PATH, and the
// errors of a bad exec (which must leave the caller running). The program runs
// itself in stages; its output is compared with the host's.
//
//   exec            stage 1: set up, fail a few execs, exec stage 2
//   exec two ...    stage 2: check what survived, exec a script that runs stage 3
//   exec three ...  stage 3: print argv, exec stage 4 via execveat
//   exec four       the end
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/auxv.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

extern char **environ;

static void handler(int s) { (void)s; }

static char self[4096];

static void try_exec(const char *path, const char *what) {
    char *argv[] = {(char *)path, NULL};
    int r = execve(path, argv, environ);
    printf("exec %s: %d %s\n", what, r, strerror(errno));
}

static void stage1(void) {
    printf("stage 1 pid %d\n", getpid() == getpid());
    // Errors leave us running.
    try_exec("/nonexistent/program", "missing");
    try_exec("/", "directory");
    char plain[4200];
    snprintf(plain, sizeof plain, "%s.plain", self);
    int fd = open(plain, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (write(fd, "hello\n", 6) != 6) printf("write failed\n");
    close(fd);
    try_exec(plain, "not executable");
    chmod(plain, 0755);
    try_exec(plain, "not a program");
    char *noargs[] = {NULL};
    errno = 0;
    int r = syscall(SYS_execve, self, (char **)1, noargs);
    printf("exec bad argv: %d %s\n", r, strerror(errno));
    unlink(plain);
    // What crosses over.
    int keep = dup(1);
    int gone = fcntl(1, F_DUPFD_CLOEXEC, 20);
    signal(SIGUSR1, handler);
    signal(SIGUSR2, SIG_IGN);
    char k[16], g[16];
    snprintf(k, sizeof k, "%d", keep);
    snprintf(g, sizeof g, "%d", gone);
    char *argv[] = {"exec-two", "two", k, g, NULL};
    char *envp[] = {"ONLY=this", NULL};
    fflush(stdout);
    execve(self, argv, envp);
    printf("exec stage 2 failed: %s\n", strerror(errno));
}

static void stage2(char **argv) {
    int keep = atoi(argv[2]), gone = atoi(argv[3]);
    printf("stage 2 argv0 %s\n", argv[0]);
    printf("kept descriptor open: %d\n", fcntl(keep, F_GETFD) >= 0);
    printf("close-on-exec descriptor closed: %d\n", fcntl(gone, F_GETFD) < 0 && errno == EBADF);
    struct sigaction sa;
    sigaction(SIGUSR1, NULL, &sa);
    printf("handler reset: %d\n", sa.sa_handler == SIG_DFL);
    sigaction(SIGUSR2, NULL, &sa);
    printf("ignored stays ignored: %d\n", sa.sa_handler == SIG_IGN);
    printf("environment: %s, HOME %s\n", getenv("ONLY") ? getenv("ONLY") : "(none)", getenv("HOME") ? "set" : "unset");
    printf("AT_EXECFN is the path: %d\n", strcmp((char *)getauxval(AT_EXECFN), self) == 0);
    char exe[4096] = {0};
    readlink("/proc/self/exe", exe, sizeof exe - 1);
    printf("/proc/self/exe is the program: %d\n", strcmp(exe, self) == 0);
    char cmd[256] = {0};
    int fd = open("/proc/self/cmdline", O_RDONLY);
    int n = read(fd, cmd, sizeof cmd - 1);
    close(fd);
    printf("cmdline: %d bytes, starts %s\n", n, cmd);
    // A script whose interpreter is this program, with an argument.
    char script[4200];
    snprintf(script, sizeof script, "%s.script", self);
    fd = open(script, O_WRONLY | O_CREAT | O_TRUNC, 0755);
    dprintf(fd, "#!%s three  the argument \necho never\n", self);
    close(fd);
    char *sargv[] = {"name-of-script", "a", "b", NULL};
    char *envp[] = {NULL};
    fflush(stdout);
    execve(script, sargv, envp);
    printf("exec script failed: %s\n", strerror(errno));
}

static void stage3(int argc, char **argv) {
    printf("stage 3, %d arguments:", argc);
    for (int i = 1; i < argc; i++) {
        // The script's own path is printed by its name only.
        const char *a = argv[i];
        if (strstr(a, ".script")) a = "(the script)";
        printf(" [%s]", a);
    }
    printf("\n");
    // AT_EXECFN is the script; argv[0] the interpreter as the #! line names it.
    printf("AT_EXECFN is the script: %d\n", strstr(self, ".script") != NULL);
    unlink(argv[2]);
    int fd = open(argv[0], O_RDONLY | O_CLOEXEC);
    char *nargv[] = {"x", "four", NULL};
    char *envp[] = {NULL};
    fflush(stdout);
    syscall(SYS_execveat, fd, "", nargv, envp, AT_EMPTY_PATH);
    printf("execveat failed: %s\n", strerror(errno));
}

int main(int argc, char **argv) {
    const char *e = (const char *)getauxval(AT_EXECFN);
    snprintf(self, sizeof self, "%s", e ? e : argv[0]);
    if (argc >= 2 && !strcmp(argv[1], "two")) {
        stage2(argv);
    } else if (argc >= 3 && !strncmp(argv[1], "three", 5)) {
        stage3(argc, argv);
    } else if (argc >= 2 && !strcmp(argv[1], "four")) {
        printf("stage 4: done\n");
        return 0;
    } else {
        stage1();
    }
    return 1;
}
