// A process never sees what an earlier one mapped, though onering hands a released
// address space's page tables out again whole (PageTables::new_space_for: the
// entries a new space does not map again are cleared before it runs, or before
// execve's build touches them). Writers map memory at fixed addresses, fill it
// and end; readers made after them (forked, and exec'd copies of this program)
// must find nothing mapped there, then fresh zeros once they map it. Small
// writers (8 MiB) alternate with big ones (160 MiB: more than the 64 blocks
// whose tables are kept whole). Prints one line, the same on the host.
#define _GNU_SOURCE
#include <setjmp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#define BASE ((char *)0x200000000ul)
#define BLOCK (2ul << 20)
#define BIG (160ul << 20)
#define SMALL (8ul << 20)

static sigjmp_buf jump;

static void on_segv(int sig) {
    (void)sig;
    siglongjmp(jump, 1);
}

// Whether reading `p` faults.
static int faults(volatile char *p) {
    if (sigsetjmp(jump, 1)) return 1;
    (void)*p;
    return 0;
}

static int write_all(size_t len, int pattern) {
    char *m = mmap(BASE, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
    if (m != BASE) return 1;
    for (size_t off = 0; off < len; off += BLOCK) memset(m + off, pattern, 64);
    return 0;
}

// 0 if nothing is mapped over the biggest span and fresh memory reads zero.
static int probe(void) {
    signal(SIGSEGV, on_segv);
    for (size_t off = 0; off < BIG; off += BLOCK)
        if (!faults(BASE + off)) return 2;
    char *m = mmap(BASE, BIG, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
    if (m != BASE) return 3;
    for (size_t off = 0; off < BIG; off += BLOCK)
        for (int i = 0; i < 64; i++)
            if (m[off + i]) return 4;
    return 0;
}

static int status_of(pid_t pid) {
    int st;
    if (waitpid(pid, &st, 0) != pid) return 100;
    return WIFEXITED(st) ? WEXITSTATUS(st) : 200 + WTERMSIG(st);
}

int main(int argc, char **argv) {
    if (argc > 1 && strcmp(argv[1], "probe") == 0) return probe();
    int bad = 0;
    const int rounds = 24;
    for (int r = 0; r < rounds; r++) {
        size_t len = r % 3 == 2 ? BIG : SMALL;
        pid_t w = fork();
        if (w == 0) _exit(write_all(len, 0x5a + r));
        bad += status_of(w) != 0;
        pid_t f = fork();
        if (f == 0) _exit(probe());
        bad += status_of(f) != 0;
        pid_t e = fork();
        if (e == 0) {
            execl(argv[0], argv[0], "probe", (char *)0);
            _exit(99);
        }
        bad += status_of(e) != 0;
    }
    printf("%d rounds, %d bad, done\n", rounds, bad);
    return bad != 0;
}
