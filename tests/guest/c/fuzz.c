/* A system-call fuzzer that runs inside onering (never on the host: as root it would
   set the clock, load modules, reboot...). `fuzz SEED CALLS [THREADS] [MODE]`.

   From a fixed seed it makes CALLS random system calls (split over THREADS threads):
   random numbers biased toward the implemented ones, arguments biased toward edge
   values (0, -1, sizes around powers of two, the top of the user half, kernel and
   non-canonical addresses), real descriptors (files, pipes, sockets, epoll, eventfd,
   timerfd, memfd), real buffers and paths; a tenth of the time a short sequence that
   builds state (open, mmap, write, read, close; socket, bind, listen, connect,
   accept; epoll over the pool...). What would end or blind the fuzzer itself is kept
   out: exit, exec, clone with a random stack, rt_sigreturn, signals it cannot catch,
   closing or redirecting stdio, unmapping or changing its own memory (memory calls
   get a scratch arena or edge addresses), rlimits and altstacks (restored after).
   Blocking calls are cut short by a SIGALRM every 2 ms (no SA_RESTART): EINTR.
   SIGSEGV/SIGBUS/SIGILL/SIGFPE in the fuzzer are caught and counted.

   It prints "fuzz: N calls" at the end and exits 0: a kernel panic (status 125), a
   hang (the test's timeout) or a crash is a finding. MODE "scribble" instead writes
   garbage into its vCPU's hostcall block and rings the doorbell (the VMM must
   survive it). MODE "netscribble" attacks the virtio-net device instead (see
   netscribble() below): its registers, and rings of its own in a 2 MiB chunk the
   device is pointed at, from THREADS threads at once. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <sys/timerfd.h>
#include <sys/un.h>
#include <netinet/in.h>
#include <ucontext.h>
#include <unistd.h>

#define ARENA_SIZE (64ul << 20)
#define BUF_SIZE (1ul << 20)
#define POOL 24

static char *arena;          /* the memory calls' playground */
static char *buf;            /* a real buffer for pointers */
static int pool[POOL];       /* real descriptors */
static const char *paths[] = {
    "/tmp/fz/a", "/tmp/fz/b", "/tmp/fz/dir", "/tmp/fz/dir/c", "/tmp", "/", "", ".", "..",
    "/dev/null", "/dev/zero", "/dev/full", "/dev/urandom", "/proc/self/maps", "/proc/self/status",
    "/tmp/fz/sock", "/etc/passwd", "/nonexistent/x", "/tmp/fz/a/notdir", "/tmp/fz/link",
};
#define NPATHS (sizeof paths / sizeof *paths)
static char *longpath; /* 5000 bytes at the end of buf: calls may write it */

static _Atomic unsigned long calls, faults;
static int trace; /* FUZZ_TRACE set: each random call to stderr before it is made */
static __thread sigjmp_buf *landing;

static uint64_t next(uint64_t *s) { /* xorshift64* */
    *s ^= *s >> 12;
    *s ^= *s << 25;
    *s ^= *s >> 27;
    return *s * 0x2545f4914f6cdd1dull;
}
static uint64_t below(uint64_t *s, uint64_t n) { return n ? next(s) % n : 0; }

static const uint64_t edges[] = {
    0, 1, 2, 3, 4, 7, 8, 15, 16, 63, 64, 255, 256, 4095, 4096, 4097, 8192, 65535, 65536,
    0x7fff, 0x8000, 0x7fffffff, 0x80000000, 0xffffffff, 0x100000000, 0x7fffffffffffffff,
    0x8000000000000000, 0xffffffffffffffff, 0xfffffffffffff000, 0xffffffffffffff00,
    (uint64_t)-2, (uint64_t)-4095, (uint64_t)-4096, 1ul << 20, 1ul << 21, (1ul << 21) - 1,
    1ul << 30, 1ul << 40, 0x7ffffffff000, 0x800000000000, 0xffff800000000000,
    0xffffffff80000000, 0xffffffff80200000, 0xffff808000000000,
};
#define NEDGES (sizeof edges / sizeof *edges)

static uint64_t edge(uint64_t *s) { return edges[below(s, NEDGES)]; }

/* A pointer argument: the real buffer (anywhere in it), an edge address, the
   arena, the fuzzer's own (read-only) code, or a path. */
static uint64_t ptr(uint64_t *s) {
    switch (below(s, 8)) {
    case 0: case 1: case 2: return (uint64_t)(buf + below(s, BUF_SIZE - 64));
    case 3: return (uint64_t)(buf + BUF_SIZE - below(s, 64)); /* straddling the end */
    case 4: return edge(s);
    case 5: return (uint64_t)(arena + below(s, ARENA_SIZE));
    case 6: return (uint64_t)&next; /* read-only text */
    default: return (uint64_t)(below(s, 8) ? paths[below(s, NPATHS)] : longpath);
    }
}

/* A descriptor argument: one of the pool, or an invalid one; never 0-2. */
static uint64_t fd(uint64_t *s) {
    if (below(s, 8)) return (uint64_t)pool[below(s, POOL)];
    static const int64_t bad[] = {-1, -100 /* AT_FDCWD */, 3, 1023, 1024, 65536, 0x7fffffff, -2};
    return (uint64_t)bad[below(s, sizeof bad / sizeof *bad)];
}

static uint64_t len(uint64_t *s) {
    switch (below(s, 4)) {
    case 0: return below(s, 64);
    case 1: return below(s, 4096 * 4);
    case 2: return below(s, BUF_SIZE);
    default: return edge(s);
    }
}

static uint64_t any(uint64_t *s) {
    switch (below(s, 6)) {
    case 0: return edge(s);
    case 1: return ptr(s);
    case 2: return fd(s);
    case 3: return below(s, 16);
    case 4: return 1ul << below(s, 64);
    default: return next(s);
    }
}

/* The timer's SIGALRM reaches one thread: it passes a SIGUSR1 to every other
   worker, so that each one's blocking call is cut short too. */
static _Atomic int tids[64];
static void on_alarm(int sig) {
    if (sig != SIGALRM) return;
    int me = (int)syscall(SYS_gettid);
    for (int i = 0; i < 64; i++) {
        int t = tids[i];
        if (t && t != me) syscall(SYS_tgkill, getpid(), t, SIGUSR1);
    }
}
static void on_fault(int sig, siginfo_t *si, void *uc) {
    faults++;
    if (landing) siglongjmp(*landing, 1);
    char line[160];
    unsigned long rip = ((ucontext_t *)uc)->uc_mcontext.gregs[REG_RIP];
    int n = snprintf(line, sizeof line, "fuzz: signal %d at %#lx (address %p) outside the calls\n", sig, rip,
                     si->si_addr);
    write(2, line, (size_t)n);
    _exit(99);
}

/* Signals, mask, timer and altstack as the fuzzer needs them. */
static void settle(void) {
    struct sigaction sa = {0};
    sa.sa_handler = on_alarm;
    sigaction(SIGALRM, &sa, 0);
    sigaction(SIGUSR1, &sa, 0);
    sigaction(SIGUSR2, &sa, 0);
    sigaction(SIGCHLD, &sa, 0);
    sa.sa_sigaction = on_fault;
    sa.sa_flags = SA_NODEFER | SA_SIGINFO;
    int fatal[] = {SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGTRAP, SIGSYS};
    for (unsigned i = 0; i < sizeof fatal / sizeof *fatal; i++) sigaction(fatal[i], &sa, 0);
    int ignored[] = {SIGPIPE, SIGXFSZ, SIGXCPU, SIGTTIN, SIGTTOU, SIGTSTP, SIGHUP, SIGINT,
                     SIGQUIT, SIGTERM, SIGPROF, SIGVTALRM, SIGIO, SIGURG, SIGWINCH};
    sa.sa_handler = SIG_IGN;
    sa.sa_flags = 0;
    for (unsigned i = 0; i < sizeof ignored / sizeof *ignored; i++) sigaction(ignored[i], &sa, 0);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, 0);
    stack_t off = {.ss_flags = SS_DISABLE};
    sigaltstack(&off, 0);
    struct itimerval t = {{0, 2000}, {0, 2000}};
    setitimer(ITIMER_REAL, &t, 0);
}

static void make_pool(void) {
    mkdir("/tmp/fz", 0777);
    mkdir("/tmp/fz/dir", 0777);
    int i = 0, p[2];
    pool[i++] = open("/tmp/fz/a", O_RDWR | O_CREAT, 0644);
    pool[i++] = open("/tmp/fz/b", O_RDWR | O_CREAT | O_APPEND, 0644);
    pool[i++] = open("/tmp/fz/dir", O_RDONLY | O_DIRECTORY);
    pool[i++] = open("/dev/null", O_RDWR);
    pool[i++] = open("/dev/zero", O_RDONLY);
    pool[i++] = open("/", O_RDONLY | O_DIRECTORY);
    if (pipe2(p, O_NONBLOCK) == 0) pool[i++] = p[0], pool[i++] = p[1];
    if (pipe(p) == 0) pool[i++] = p[0], pool[i++] = p[1];
    if (socketpair(AF_UNIX, SOCK_STREAM, 0, p) == 0) pool[i++] = p[0], pool[i++] = p[1];
    if (socketpair(AF_UNIX, SOCK_DGRAM | SOCK_NONBLOCK, 0, p) == 0) pool[i++] = p[0], pool[i++] = p[1];
    pool[i++] = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
    pool[i++] = socket(AF_INET, SOCK_DGRAM, 0);
    pool[i++] = socket(AF_INET6, SOCK_STREAM, 0);
    pool[i++] = socket(AF_UNIX, SOCK_SEQPACKET, 0);
    pool[i++] = socket(16 /* AF_NETLINK */, SOCK_RAW | SOCK_NONBLOCK, 0 /* NETLINK_ROUTE */);
    pool[i++] = epoll_create1(0);
    pool[i++] = eventfd(3, EFD_NONBLOCK);
    pool[i++] = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK);
    pool[i++] = memfd_create("fz", 0);
    while (i < POOL) pool[i++] = -1;
}

static void drop_pool(void) {
    for (int fd = 3; fd < 1100; fd++) close(fd);
}

/* System calls the fuzzer must not make with random arguments (see the note). */
static int forbidden(long nr) {
    switch (nr) {
    case SYS_exit: case SYS_exit_group: case SYS_execve: case SYS_execveat:
    case SYS_clone: case SYS_clone3: case SYS_fork: case SYS_vfork: case SYS_rt_sigreturn:
    case SYS_kill: case SYS_tkill: case SYS_tgkill: case SYS_rt_sigqueueinfo:
    case SYS_rt_tgsigqueueinfo: case SYS_pidfd_send_signal: case SYS_seccomp:
    case SYS_arch_prctl: case SYS_set_tid_address: case SYS_rseq: case SYS_vhangup:
        return 1;
    }
    return 0;
}

/* Calls after which the fuzzer's own settings are put back. */
static int unsettling(long nr) {
    switch (nr) {
    case SYS_rt_sigaction: case SYS_rt_sigprocmask: case SYS_sigaltstack: case SYS_setitimer:
    case SYS_alarm: case SYS_timer_create: case SYS_timer_settime: case SYS_timer_delete:
    case SYS_signalfd: case SYS_signalfd4: case SYS_prctl: case SYS_personality:
        return 1;
    }
    return 0;
}

static int is_memory_call(long nr) {
    switch (nr) {
    case SYS_mmap: case SYS_mprotect: case SYS_munmap: case SYS_mremap: case SYS_madvise:
    case SYS_brk: case SYS_msync: case SYS_mincore: case SYS_mlock: case SYS_munlock:
    case SYS_mlock2: case SYS_mlockall: case SYS_munlockall: case SYS_pkey_mprotect:
    case SYS_remap_file_pages: case SYS_shmat: case SYS_shmdt: case SYS_process_madvise:
    case SYS_set_mempolicy: case SYS_mbind: case SYS_migrate_pages: case SYS_move_pages:
        return 1;
    }
    return 0;
}

/* Calls that take a signal mask (it must never block SIGALRM, or they would wait
   for ever, on Linux too), its argument position. */
static int sigmask_arg(long nr) {
    switch (nr) {
    case SYS_rt_sigsuspend: return 0;
    case SYS_ppoll: return 3;
    case SYS_pselect6: return 5;
    case SYS_epoll_pwait: case SYS_epoll_pwait2: return 4;
    case SYS_rt_sigtimedwait: return 0;
    }
    return -1;
}

/* An address for a memory call: inside the arena (page aligned or not), or an edge. */
static uint64_t arena_addr(uint64_t *s) {
    if (below(s, 5) == 0) return edge(s) & ~0xfffull;
    uint64_t off = below(s, ARENA_SIZE);
    if (below(s, 4)) off &= ~0xfffull;
    return (uint64_t)arena + off;
}

static long one_random_call(uint64_t *s) {
    long nr;
    do {
        nr = below(s, 8) ? (long)below(s, 336) : (long)below(s, 460);
    } while (forbidden(nr));
    uint64_t a[6];
    for (int i = 0; i < 6; i++) a[i] = any(s);
    if (is_memory_call(nr)) {
        a[0] = arena_addr(s);
        a[1] = below(s, 3) ? below(s, 4 << 20) : edge(s);
        if (nr == SYS_brk) a[0] = below(s, 2) ? 0 : (uint64_t)sbrk(0) + below(s, 1 << 20);
        if (nr == SYS_mmap) {
            a[3] = next(s) & 0xfffff; /* flags */
            a[4] = fd(s);
        }
        if (nr == SYS_mremap) a[3] &= ~(uint64_t)(MREMAP_FIXED | 4 /* DONTUNMAP */);
        if (nr == SYS_madvise) a[2] = below(s, 2) ? below(s, 30) : edge(s);
        /* Calls that unmap, move, zero or re-protect: in the user half only inside
           the arena (or below 64 KiB, where nothing is); kernel-half, non-canonical
           and wrapping ranges go to the kernel as they are, to be refused. */
        int destructive = nr == SYS_munmap || nr == SYS_mprotect || nr == SYS_mremap ||
                          nr == SYS_madvise || nr == SYS_pkey_mprotect || nr == SYS_remap_file_pages ||
                          (nr == SYS_mmap && (a[3] & (MAP_FIXED | MAP_FIXED_NOREPLACE)));
        uint64_t lo = (uint64_t)arena, hi = lo + ARENA_SIZE, end = a[0] + a[1];
        if (destructive && a[0] < 0x800000000000ull && end >= a[0]) {
            if (a[0] < 0x10000) {
                if (end > 0x10000) a[1] = 0x10000 - a[0];
            } else {
                if (a[0] < lo || a[0] >= hi) a[0] = lo + ((a[0] & (ARENA_SIZE - 1)) & ~0xfffull);
                if (a[0] + a[1] > hi) a[1] = hi - a[0];
            }
        }
    } else {
        /* Arguments by what they usually are: a descriptor first, a buffer or path
           second, a length third, for most calls. */
        if (below(s, 2)) a[0] = fd(s);
        if (below(s, 2)) a[1] = ptr(s);
        if (below(s, 2)) a[2] = len(s);
        /* Never the host's stdio as the first descriptor (it would get garbage). */
        if (a[0] < 3) a[0] += 3;
    }
    switch (nr) { /* descriptors that must stay */
    case SYS_dup2: case SYS_dup3:
        a[1] = (uint64_t)pool[below(s, POOL)];
        if ((int64_t)a[1] < 3) a[1] = 500;
        break;
    case SYS_close: case SYS_close_range:
        a[0] = below(s, 4) ? (uint64_t)pool[below(s, POOL)] : edge(s);
        if ((int64_t)a[0] >= 0 && a[0] < 3) a[0] = 3;
        if (nr == SYS_close_range && a[0] < 3) a[0] = 3;
        break;
    case SYS_setrlimit: case SYS_prlimit64: /* read only */
        if (nr == SYS_setrlimit) nr = SYS_getrlimit;
        else a[2] = 0;
        a[0] = nr == SYS_prlimit64 ? 0 : a[0];
        break;
    case SYS_ptrace:
        a[0] = below(s, 2) ? 0x4206 /* SEIZE */ : a[0];
        break;
    case SYS_fcntl: /* F_SETFL on stdio would change the host's streams' flags */
        if ((int64_t)a[0] >= 0 && a[0] < 3) a[0] = 3;
        break;
    case SYS_ioctl:
        if ((int64_t)a[0] >= 0 && a[0] < 3) a[0] = 3;
        break;
    case SYS_prctl: /* not seccomp, a faulting TSC, or its own memory map */
        if (a[0] == 22 || a[0] == 26 || a[0] == 35) a[0] = 15 /* PR_SET_NAME */;
        break;
    }
    int m = sigmask_arg(nr);
    if (m >= 0) {
        static __thread sigset_t safe;
        sigemptyset(&safe);
        sigaddset(&safe, SIGUSR2);
        a[m] = below(s, 2) ? 0 : (uint64_t)&safe;
        if (nr == SYS_rt_sigtimedwait) a[2] = (uint64_t)&(struct timespec){0, 1000};
        if (m == 0 || nr == SYS_rt_sigtimedwait) a[1] = below(s, 2) ? 0 : (uint64_t)buf;
        if (nr != SYS_rt_sigsuspend && nr != SYS_rt_sigtimedwait) a[m + 1] = 8;
        else a[1] = 8;
    }
    if (trace) {
        char line[200];
        int n = snprintf(line, sizeof line, "%ld %lx %lx %lx %lx %lx %lx\n", nr, a[0], a[1], a[2], a[3], a[4], a[5]);
        write(2, line, (size_t)n);
    }
    /* While a call changes the fuzzer's own signal settings, signals wait (else
       the timer's SIGALRM could meet a random handler or altstack before they
       are put back); the settings and the mask are restored right after. */
    int unsettle = unsettling(nr);
    if (unsettle) {
        sigset_t all;
        sigfillset(&all);
        sigprocmask(SIG_BLOCK, &all, 0);
    }
    long r = syscall(nr, a[0], a[1], a[2], a[3], a[4], a[5]);
    if (unsettle) settle();
    return r;
}

/* Short sequences that build state and then use it, with random parts. */
static void one_sequence(uint64_t *s) {
    char *p;
    int f, g, h;
    struct sockaddr_in in = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(0x7f000001)};
    struct epoll_event ev = {.events = EPOLLIN | EPOLLOUT};
    int which = (int)below(s, 6);
    if (trace) {
        char line[32];
        int n = snprintf(line, sizeof line, "sequence %d\n", which);
        write(2, line, (size_t)n);
    }
    switch (which) {
    case 0: /* a file: write, map, read back, truncate, close */
        f = open(paths[below(s, 4)], (int)below(s, 2) ? O_RDWR | O_CREAT : O_RDWR | O_CREAT | O_TRUNC, 0644);
        if (f < 0) break;
        write(f, buf, len(s) % BUF_SIZE);
        p = mmap(0, below(s, 1 << 20) + 1, PROT_READ | (below(s, 2) ? PROT_WRITE : 0), MAP_PRIVATE, f, 0);
        if (p != MAP_FAILED) munmap(p, 1);
        pread(f, buf, below(s, 65536), (off_t)below(s, 1 << 20));
        ftruncate(f, (off_t)below(s, 1 << 22));
        lseek(f, (off_t)edge(s), (int)below(s, 5));
        close(f);
        break;
    case 1: /* TCP over loopback, non-blocking */
        f = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
        g = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
        in.sin_port = htons((uint16_t)(20000 + below(s, 16)));
        setsockopt(f, SOL_SOCKET, SO_REUSEADDR, &(int){1}, sizeof(int));
        if (bind(f, (void *)&in, sizeof in) == 0 && listen(f, (int)below(s, 8)) == 0) {
            connect(g, (void *)&in, sizeof in);
            h = accept4(f, 0, 0, SOCK_NONBLOCK);
            send(g, buf, below(s, 100000), MSG_DONTWAIT);
            if (h >= 0) {
                recv(h, buf, below(s, 100000), MSG_DONTWAIT);
                shutdown(h, (int)below(s, 3));
                close(h);
            }
        }
        close(f);
        close(g);
        break;
    case 2: /* UDP */
        f = socket(AF_INET, SOCK_DGRAM, 0);
        in.sin_port = htons((uint16_t)(21000 + below(s, 16)));
        bind(f, (void *)&in, sizeof in);
        sendto(f, buf, below(s, 70000), MSG_DONTWAIT, (void *)&in, sizeof in);
        recvfrom(f, buf, below(s, 70000), MSG_DONTWAIT, 0, 0);
        close(f);
        break;
    case 3: /* epoll over the pool */
        f = epoll_create1(0);
        for (int i = 0; i < 8; i++) {
            ev.events = (uint32_t)next(s);
            epoll_ctl(f, (int)below(s, 4), pool[below(s, POOL)], below(s, 8) ? &ev : (void *)edge(s));
        }
        epoll_wait(f, (void *)buf, (int)below(s, 64), 0);
        close(f);
        break;
    case 4: /* a unix socket by name */
        f = socket(AF_UNIX, below(s, 2) ? SOCK_STREAM : SOCK_DGRAM, 0);
        {
            struct sockaddr_un un = {.sun_family = AF_UNIX};
            strcpy(un.sun_path, "/tmp/fz/sock");
            unlink(un.sun_path);
            bind(f, (void *)&un, sizeof un);
            listen(f, 1);
            g = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0);
            connect(g, (void *)&un, sizeof un);
            close(g);
        }
        close(f);
        break;
    default: /* anonymous memory in the arena: map, touch, protect, unmap */
        p = mmap(arena + (below(s, ARENA_SIZE / 2) & ~0xfffull), below(s, 8 << 20) + 1,
                 PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
        if (p != MAP_FAILED) {
            p[0] = 1;
            mprotect(p, 4096, (int)below(s, 8));
            madvise(p, below(s, 1 << 21), (int)below(s, 25));
            munmap(p, below(s, 1 << 21));
        }
        break;
    }
}

struct job {
    int index;
    uint64_t seed;
    unsigned long count;
};

static void *worker(void *arg) {
    struct job *j = arg;
    uint64_t s = j->seed | 1;
    tids[j->index] = (int)syscall(SYS_gettid);
    static __thread sigjmp_buf here; /* (thread-local: the landing outlives no call) */
    landing = &here;
    for (unsigned long i = 0; i < j->count; i++) {
        if (sigsetjmp(here, 1)) continue; /* a fault of the fuzzer's own: counted */
        if (below(&s, 10) == 0) one_sequence(&s);
        else one_random_call(&s);
        calls++;
    }
    tids[j->index] = 0;
    return 0;
}

/* Runs `fn` on THREADS threads (this one included), each with its share of COUNT
   and a seed of its own, and waits for them all. */
static void run_jobs(uint64_t seed, unsigned long count, int threads, void *(*fn)(void *)) {
    pthread_t t[64];
    struct job jobs[64];
    for (int i = 0; i < threads; i++) {
        jobs[i].index = i;
        jobs[i].seed = seed * 0x9e3779b97f4a7c15ull + (uint64_t)i;
        jobs[i].count = count / (unsigned long)threads;
        if (i > 0) pthread_create(&t[i], 0, fn, &jobs[i]);
    }
    fn(&jobs[0]);
    for (int i = 1; i < threads; i++) pthread_join(t[i], 0);
}

/* Garbage into this vCPU's hostcall block, then the doorbell: the VMM must refuse
   what it cannot serve and never crash. The block is in the per-CPU header (the
   direct map's PERCPU_PHYS), the doorbell in the MMIO page. */
static void scribble(uint64_t seed, unsigned long count) {
    uint64_t s = seed | 1;
    volatile uint64_t *block = (uint64_t *)(0xffff808000000000ull + 0x105000 + 0x40);
    volatile uint64_t *doorbell = (uint64_t *)(0xffff808000000000ull + 0xfef00000ull);
    for (unsigned long i = 0; i < count; i++) {
        for (int k = 0; k < 6; k++) block[k] = below(&s, 3) ? any(&s) : edge(&s);
        /* The hostcalls that serve (Exit, Killed, Panic, Fatal and unknown
           numbers end the VM, as they should: one in a thousand). Write goes to
           fd 3+ only, or the output would be garbage. */
        static const uint64_t serving[] = {1, 5, 7, 8, 9, 10, 11, 12};
        uint64_t nr = below(&s, 1000) ? serving[below(&s, 8)] : edge(&s);
        if (nr == 1 && block[0] < 3) block[0] = 3 + below(&s, 1000);
        if (nr == 8) block[0] = below(&s, 100000); /* Halt: at most 0.1 ms */
        *doorbell = nr;
        calls++;
    }
}

/* ---- netscribble: a hostile virtio-net driver -------------------------------------

   Everything goes through the kernel's direct map (DIRECT + guest-physical): the
   device's register page (VIRTIO_NET_PHYS, virtio-mmio version 2) and a 2 MiB
   chunk of the fuzzer's own memory, whose guest-physical address is found by
   scanning the direct map for a marker written into it (user memory is backed by
   2 MiB chunks, so the chunk is physically contiguous). The queues are pointed
   into that chunk (or outside RAM, into the MMIO hole, at unaligned or overlapping
   places), and descriptor tables and available rings there are filled with
   garbage: loops, chains longer than the queue, lengths up to 0xffffffff, buffers
   outside RAM, indirect tables that are bad, available indices that jump.
   Registers get random and edge values, resets come mid-flight, doorbells ring.

   What the device may write (used rings, receive buffers) is only ever placed in
   the chunk or wholly outside RAM, so the guest's own memory is rarely handed to
   the device to write: the VMM is what is tested here, not the guest's luck. (Not
   never: rings placed to overlap read one another's bytes as descriptors, so now
   and then a receive buffer lands elsewhere in RAM and the fuzzer dies of its own
   corrupted code; the test allows that.) What the device only reads (descriptor tables, available rings, transmit
   buffers) may be anywhere. Some of the traffic is well formed (an ARP request for
   the gateway, receive buffers for the answer), so both directions move. */

#define DIRECT 0xffff808000000000ull
#define NET_PHYS 0xfef01000ull
#define CHUNK (2ul << 20)
/* Offsets in the chunk handed to the device: what it writes from there (a used
   ring, a frame of at most 64 KiB + 26) stays inside the chunk. */
#define CHUNK_USE (CHUNK - (128ul << 10))
#define DESC_F_NEXT 1
#define DESC_F_WRITE 2
#define DESC_F_INDIRECT 4

static volatile uint8_t *netregs;
static uint8_t *chunk;
static uint64_t chunk_phys, ram_end;
/* Where each queue was last pointed (guest-physical) and its size. */
static _Atomic uint64_t q_desc[2], q_avail[2], q_used[2], q_size[2];
static uint8_t gw_ip[4] = {10, 0, 2, 2}, my_ip[4] = {10, 0, 2, 15};

static void reg_write(uint64_t off, uint64_t v, int size) {
    volatile uint8_t *p = netregs + off;
    switch (size) {
    case 1: *p = (uint8_t)v; break;
    case 2: *(volatile uint16_t *)p = (uint16_t)v; break;
    case 8: *(volatile uint64_t *)p = v; break;
    default: *(volatile uint32_t *)p = (uint32_t)v; break;
    }
    calls++;
}
static void reg(uint64_t off, uint32_t v) { reg_write(off, v, 4); }
static uint32_t reg_read(uint64_t off) { return *(volatile uint32_t *)(netregs + off); }

/* The chunk's virtual address for a guest-physical range, if it lies in the chunk. */
static uint8_t *in_chunk(uint64_t phys, uint64_t len) {
    if (phys < chunk_phys || phys - chunk_phys > CHUNK || len > CHUNK - (phys - chunk_phys)) return 0;
    return chunk + (phys - chunk_phys);
}

/* A guest-physical address that is not guest RAM (or straddles its end): past
   the end, the MMIO hole (the device's own page, the doorbell, the LAPIC), far
   away, wrapping. Its low 32 bits alone are not RAM either (RAM is below 3 GiB
   here): a queue address register takes one half at a time, and another thread
   may set the other. */
static uint64_t not_ram(uint64_t *s) {
    static const uint64_t hole[] = {0xc0000000, 0xfee00000, 0xfef00000, 0xfef01000, 0xfef01ff8, 0xfffff000};
    switch (below(s, 6)) {
    case 0: return ram_end - 1 - below(s, 8); /* straddles the end */
    case 1: return ram_end + below(s, 1 << 20);
    case 2: return hole[below(s, sizeof hole / sizeof *hole)];
    case 3: return (below(s, 1u << 31) + 1) << 32 | ((0xc0000000 + below(s, 0x40000000)) & ~0xfull);
    case 4: return (uint64_t)0 - 1 - below(s, 4096);
    default: return ram_end + (edge(s) & 0x3fffffff);
    }
}

/* An address for something the device writes (a used ring, a receive buffer):
   in the chunk (aligned to `align`, now and then not), or not RAM. */
static uint64_t write_addr(uint64_t *s, uint64_t align) {
    if (below(s, 8) == 0) return not_ram(s);
    uint64_t off = below(s, CHUNK_USE);
    if (below(s, 8)) off &= ~(align - 1);
    return chunk_phys + off;
}

/* An address for something the device only reads: also anywhere in RAM. */
static uint64_t read_addr(uint64_t *s, uint64_t align) {
    if (below(s, 16) == 0) return edge(s);
    if (below(s, 16) == 0) return below(s, ram_end) & ~(align - 1);
    return write_addr(s, align);
}

static uint32_t desc_len(uint64_t *s) {
    static const uint32_t lens[] = {0, 1, 11, 12, 13, 54, 1526, 4096, 65535, 65550, 65562, 65563,
                                    0x7fffffff, 0x80000000, 0xfffffff0, 0xffffffff};
    switch (below(s, 4)) {
    case 0: return lens[below(s, sizeof lens / sizeof *lens)];
    case 1: return (uint32_t)edge(s);
    case 2: return (uint32_t)next(s);
    default: return (uint32_t)below(s, 2048);
    }
}

/* One descriptor at `d`: an address the device may use as its flags allow. */
static void put_desc(uint64_t *s, uint8_t *d, uint16_t qsize) {
    uint16_t flags = below(s, 4) ? (uint16_t)below(s, 8) : (uint16_t)next(s);
    uint32_t len = desc_len(s);
    uint64_t addr = (flags & (DESC_F_WRITE | DESC_F_INDIRECT)) ? write_addr(s, 1) : read_addr(s, 1);
    /* A writable buffer straddling the end of RAM must not fit below it. */
    if ((flags & DESC_F_WRITE) && addr < ram_end && addr >= ram_end - 4096) len |= 16;
    uint16_t nxt = below(s, 4) ? (uint16_t)below(s, qsize ? qsize : 1) : (uint16_t)edge(s);
    memcpy(d, &addr, 8);
    memcpy(d + 8, &len, 4);
    memcpy(d + 12, &flags, 2);
    memcpy(d + 14, &nxt, 2);
}

static void set_desc(uint8_t *d, uint64_t addr, uint32_t len, uint16_t flags, uint16_t nxt) {
    memcpy(d, &addr, 8);
    memcpy(d + 8, &len, 4);
    memcpy(d + 12, &flags, 2);
    memcpy(d + 14, &nxt, 2);
}

static uint16_t pick_queue(uint64_t *s) { return (uint16_t)(below(s, 16) ? below(s, 2) : edge(s)); }

static void notify(uint64_t *s, uint16_t q) { reg(0x050, below(s, 8) ? q : (uint32_t)any(s)); }

/* The driver's set-up (virtio 1.x, 3.1.1), mostly as a driver would do it, with
   random deviations: features, sizes, ring addresses, the order of steps. */
static void net_setup(uint64_t *s) {
    reg(0x070, 0);
    reg(0x070, 1);
    reg(0x070, 3);
    reg(0x014, 0);
    uint32_t lo = reg_read(0x010);
    reg(0x014, 1);
    uint32_t hi = reg_read(0x010);
    reg(0x024, 0);
    reg(0x020, below(s, 4) ? lo : (uint32_t)any(s));
    reg(0x024, 1);
    reg(0x020, below(s, 4) ? hi : (uint32_t)any(s));
    reg(0x070, below(s, 8) ? 11 : (uint32_t)any(s));
    int both = below(s, 4) != 0;
    for (uint16_t q = 0; q < 2; q++) {
        if (!both && below(s, 2)) continue;
        uint16_t sel = below(s, 16) ? q : pick_queue(s);
        reg(0x030, sel);
        uint32_t size = below(s, 4) ? 1u << below(s, 9) : (uint32_t)(below(s, 2) ? edge(s) : below(s, 300));
        reg(0x038, size);
        uint64_t desc = read_addr(s, 16), avail = read_addr(s, 2), used = write_addr(s, 4);
        if (below(s, 16) == 0) avail = used = desc; /* overlapping */
        /* Fresh rings: a zeroed available ring, as a driver starts with. */
        uint16_t n = size > 256 ? 256 : (uint16_t)size;
        uint8_t *a = in_chunk(avail, 6 + 2ul * n);
        if (a && below(s, 4)) memset(a, 0, 6 + 2ul * n);
        reg(0x080, (uint32_t)desc);
        reg(0x084, (uint32_t)(desc >> 32));
        reg(0x090, (uint32_t)avail);
        reg(0x094, (uint32_t)(avail >> 32));
        reg(0x0a0, (uint32_t)used);
        reg(0x0a4, (uint32_t)(used >> 32));
        reg(0x044, below(s, 16) ? 1 : (uint32_t)any(s));
        if (sel < 2) {
            q_desc[sel] = desc;
            q_avail[sel] = avail;
            q_used[sel] = used;
            q_size[sel] = n;
        }
    }
    reg(0x070, below(s, 8) ? 15 : (uint32_t)any(s));
}

/* Posts `head` on queue q's available ring and moves its index by `bump`. */
static void post(uint64_t *s, uint16_t q, uint16_t head, uint16_t bump) {
    uint64_t n = q_size[q] ? q_size[q] : 1;
    uint8_t *a = in_chunk(q_avail[q], 6 + 2 * n);
    if (!a) return;
    volatile uint16_t *idx = (uint16_t *)(a + 2);
    uint16_t at = *idx;
    memcpy(a + 4 + 2 * (at % n), &head, 2);
    *idx = (uint16_t)(at + bump);
    if (below(s, 8) == 0) { /* used_event */
        uint16_t ev = (uint16_t)next(s);
        memcpy(a + 4 + 2 * n, &ev, 2);
    }
}

/* Random descriptors over (part of) queue q's table. */
static void garbage_descs(uint64_t *s, uint16_t q) {
    uint64_t n = q_size[q] ? q_size[q] : 1;
    uint8_t *t = in_chunk(q_desc[q], 16 * n);
    if (!t) return;
    for (uint64_t k = below(s, n) + 1; k > 0; k--) put_desc(s, t + 16 * below(s, n), (uint16_t)n);
}

/* Garbage in queue q's available ring: heads, the index, used_event. */
static void garbage_avail(uint64_t *s, uint16_t q) {
    uint64_t n = q_size[q] ? q_size[q] : 1;
    uint8_t *a = in_chunk(q_avail[q], 6 + 2 * n);
    if (!a) return;
    for (uint64_t k = below(s, n) + 1; k > 0; k--) {
        uint16_t h = below(s, 4) ? (uint16_t)below(s, n) : (uint16_t)edge(s);
        memcpy(a + 4 + 2 * below(s, n + 1), &h, 2);
    }
    static const uint16_t jumps[] = {0, 1, 2, 255, 256, 257, 0x7fff, 0x8000, 0xffff};
    uint16_t idx;
    memcpy(&idx, a + 2, 2);
    idx = (uint16_t)(idx + (below(s, 2) ? below(s, n + 2) : jumps[below(s, sizeof jumps / sizeof *jumps)]));
    if (below(s, 32) == 0) idx = (uint16_t)next(s);
    memcpy(a + 2, &idx, 2);
    if (below(s, 16) == 0) memcpy(a, &(uint16_t){(uint16_t)next(s)}, 2); /* flags */
}

/* Chains built to hurt: loops, chains longer than the queue, bad indirect tables. */
static void hostile_chain(uint64_t *s, uint16_t q) {
    uint64_t n = q_size[q] ? q_size[q] : 1;
    uint8_t *t = in_chunk(q_desc[q], 16 * n);
    if (!t) return;
    uint16_t head = (uint16_t)below(s, n), other = (uint16_t)below(s, n);
    uint16_t w = q == 0 ? DESC_F_WRITE : 0;
    switch (below(s, 5)) {
    case 0: /* a loop of two (or one) */
        set_desc(t + 16 * head, write_addr(s, 1), desc_len(s), w | DESC_F_NEXT, other);
        set_desc(t + 16 * other, write_addr(s, 1), desc_len(s), w | DESC_F_NEXT, head);
        break;
    case 1: /* the whole table, each to the next, the last back to the first or past the end */
        for (uint64_t i = 0; i < n; i++)
            set_desc(t + 16 * i, write_addr(s, 1), (uint32_t)below(s, 4096), w | DESC_F_NEXT,
                     (uint16_t)(i + 1 < n ? i + 1 : below(s, 2) ? 0 : n + below(s, 100)));
        break;
    case 2: { /* an indirect table: bad length, looping, nested, out of RAM */
        uint64_t ind = write_addr(s, 16);
        static const uint32_t lens[] = {0, 8, 16, 17, 160, 4096, 0xffff0, 0x100000, 0xfffffff0, 0xffffffff};
        uint32_t len = below(s, 2) ? 16 * (uint32_t)(below(s, 64) + 1) : lens[below(s, sizeof lens / sizeof *lens)];
        set_desc(t + 16 * head, ind, len, (uint16_t)(DESC_F_INDIRECT | (below(s, 4) ? 0 : DESC_F_NEXT)), other);
        uint64_t entries = len / 16 > 4096 ? 4096 : len / 16;
        uint8_t *it = in_chunk(ind, 16 * entries);
        if (!it) break;
        for (uint64_t i = 0; i < entries; i++) {
            switch (below(s, 4)) {
            case 0: set_desc(it + 16 * i, write_addr(s, 1), desc_len(s), w | DESC_F_NEXT, (uint16_t)i); break;
            case 1: set_desc(it + 16 * i, write_addr(s, 16), 160, DESC_F_INDIRECT, 0); break;
            case 2: put_desc(s, it + 16 * i, (uint16_t)entries); break;
            default:
                set_desc(it + 16 * i, write_addr(s, 1), (uint32_t)below(s, 2048), w | DESC_F_NEXT,
                         (uint16_t)((i + 1) % entries));
            }
        }
        break;
    }
    case 3: /* one huge buffer */
        set_desc(t + 16 * head, below(s, 2) ? write_addr(s, 1) : not_ram(s), below(s, 2) ? 0xffffffff : 0x80000000,
                 w, 0);
        break;
    default: /* a chain of 2^32 bytes and more */
        set_desc(t + 16 * head, write_addr(s, 1), 0xffffffff, w | DESC_F_NEXT, other);
        set_desc(t + 16 * other, write_addr(s, 1), 0xffffffff, w, 0);
    }
    post(s, q, head, (uint16_t)(below(s, 4) ? 1 : below(s, n + 1)));
    notify(s, q);
}

/* Well-formed traffic: receive buffers, and an ARP request for the gateway (which
   the back end answers: a frame comes back into the receive buffers). */
static void good_traffic(uint64_t *s) {
    uint64_t nr = q_size[0], nt = q_size[1];
    uint8_t *rt = in_chunk(q_desc[0], 16 * nr), *tt = in_chunk(q_desc[1], 16 * nt);
    if (rt && nr) {
        for (int k = 0; k < 4; k++) {
            uint16_t i = (uint16_t)below(s, nr);
            set_desc(rt + 16 * i, chunk_phys + CHUNK_USE + 4096 * below(s, 16), 2048, DESC_F_WRITE, 0);
            post(s, 0, i, 1);
        }
        notify(s, 0);
    }
    if (tt && nt) {
        uint64_t at = chunk_phys + CHUNK_USE + 0x10000 + 128 * below(s, 64);
        uint8_t *f = chunk + (at - chunk_phys);
        memset(f, 0, 12); /* virtio_net_hdr_v1 */
        uint8_t *e = f + 12;
        static const uint8_t mac[6] = {0x52, 0x54, 0, 0x12, 0x34, 0x56};
        memset(e, 0xff, 6);
        memcpy(e + 6, mac, 6);
        e[12] = 0x08, e[13] = 0x06;                                 /* ARP */
        e[14] = 0, e[15] = 1, e[16] = 8, e[17] = 0, e[18] = 6, e[19] = 4, e[20] = 0, e[21] = 1;
        memcpy(e + 22, mac, 6);
        memcpy(e + 28, my_ip, 4);
        memset(e + 32, 0, 6);
        memcpy(e + 38, gw_ip, 4);
        uint16_t i = (uint16_t)below(s, nt);
        set_desc(tt + 16 * i, at, 12 + 42, 0, 0);
        post(s, 1, i, 1);
        notify(s, 1);
    }
}

/* One register access: any register (or none), any size, any value. */
static void garbage_register(uint64_t *s) {
    static const uint16_t regs[] = {0x000, 0x010, 0x014, 0x020, 0x024, 0x030, 0x034, 0x038, 0x044, 0x050,
                                    0x060, 0x064, 0x070, 0x080, 0x084, 0x090, 0x094, 0x0a0, 0x0a4, 0x0fc,
                                    0x100, 0x106, 0x10a, 0x10b, 0x0ac, 0x0b0, 0x0b8, 0x0c0};
    uint64_t off = below(s, 4) ? regs[below(s, sizeof regs / sizeof *regs)] : below(s, 4096);
    static const int sizes[] = {4, 4, 4, 1, 2, 8};
    int size = sizes[below(s, 6)];
    if (off + (uint64_t)size > 4096) off = 4096 - (uint64_t)size; /* within the page */
    if (below(s, 4) == 0) {
        (void)*(volatile uint32_t *)(netregs + (off & ~3ull));
        return;
    }
    uint64_t v = below(s, 3) ? any(s) : below(s, 3) ? below(s, 512) : edge(s);
    /* A queue address register gets an address of the kinds above; the used
       ring's (the device writes there) both halves of one. */
    if (off >= 0x080 && off <= 0x0a4 && !(off & 3)) {
        uint64_t a = off >= 0x0a0 ? write_addr(s, 4) : read_addr(s, 2);
        v = off & 4 ? a >> 32 : a;
        if (off >= 0x0a0) {
            reg(0x0a0, (uint32_t)a);
            reg(0x0a4, (uint32_t)(a >> 32));
            return;
        }
    }
    if (off >= 0x0a0 && off < 0x0a8) off = 0x0a8; /* a lone half or byte: elsewhere */
    reg_write(off, v, size);
}

/* The chunk's guest-physical address: its marker, found in the direct map. The
   end of RAM is where the direct map stops (a fault, caught). */
static int find_chunk(void) {
    uint64_t marker[2] = {0x6e657473637269ull ^ (uint64_t)chunk, ~(uint64_t)chunk};
    memcpy(chunk, marker, sizeof marker);
    static sigjmp_buf here;
    landing = &here;
    volatile uint64_t phys = 0, found = 0;
    if (sigsetjmp(here, 1) == 0) {
        for (; phys < 0xc0000000ull; phys += CHUNK) {
            volatile uint64_t *p = (uint64_t *)(DIRECT + phys);
            uint64_t first = p[0]; /* (read always: past the end of RAM it faults) */
            if (!found && first == marker[0] && p[1] == marker[1]) found = phys + 1;
        }
    }
    landing = 0;
    ram_end = phys;
    if (!found || ram_end >= 0xc0000000ull) return -1; /* (RAM above the hole: not handled) */
    chunk_phys = found - 1;
    /* Check: a write through the program's mapping shows in the direct map. */
    chunk[16] = 0x5a;
    return *(volatile uint8_t *)(DIRECT + chunk_phys + 16) == 0x5a ? 0 : -1;
}

static void *net_worker(void *arg) {
    struct job *j = arg;
    uint64_t s = j->seed | 1;
    for (unsigned long i = 0; i < j->count; i++) {
        uint16_t q = (uint16_t)below(&s, 2);
        switch (below(&s, 20)) {
        case 0: case 1: net_setup(&s); break;
        case 2: case 3: case 4: case 5: garbage_register(&s); break;
        case 6: case 7: case 8: case 9: garbage_descs(&s, q); break;
        case 10: case 11: case 12: garbage_avail(&s, q); notify(&s, q); break;
        case 13: case 14: case 15: hostile_chain(&s, q); break;
        case 16: case 17: good_traffic(&s); break;
        case 18: notify(&s, pick_queue(&s)); break;
        default: /* a reset or a status of any value, mid-flight */
            reg(0x070, below(&s, 2) ? 0 : (uint32_t)any(&s));
        }
    }
    return 0;
}

static int netscribble(uint64_t seed, unsigned long count, int threads) {
    char *raw = mmap(0, 2 * CHUNK, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (raw == MAP_FAILED) return 2;
    chunk = (uint8_t *)(((uint64_t)raw + CHUNK - 1) & ~(CHUNK - 1));
    memset(chunk, 0, CHUNK);
    netregs = (uint8_t *)(DIRECT + NET_PHYS);
    if (find_chunk()) {
        dprintf(2, "fuzz: the chunk is not in the direct map (RAM ends at %#lx)\n", (unsigned long)ram_end);
        return 3;
    }
    if (reg_read(0x000) != 0x74726976 || reg_read(0x008) != 1) {
        write(2, "fuzz: no virtio-net device\n", 27);
        return 3;
    }
    run_jobs(seed, count, threads, net_worker);
    /* The result, then 500 ms with the device as the scribbles left it (the
       test watches the VMM's I/O thread then: it must be idle). */
    char line[128];
    int n = snprintf(line, sizeof line, "fuzz: %lu virtio-net accesses scribbled\n", (unsigned long)calls);
    write(1, line, (size_t)n);
    struct timespec pause = {0, 500 * 1000000};
    while (nanosleep(&pause, &pause) && errno == EINTR) {}
    return 0;
}

static void parse_ip(const char *text, uint8_t ip[4]) {
    unsigned a, b, c, d;
    if (text && sscanf(text, "%u.%u.%u.%u", &a, &b, &c, &d) == 4)
        ip[0] = (uint8_t)a, ip[1] = (uint8_t)b, ip[2] = (uint8_t)c, ip[3] = (uint8_t)d;
}

int main(int argc, char **argv) {
    uint64_t seed = argc > 1 ? strtoull(argv[1], 0, 0) : 1;
    unsigned long count = argc > 2 ? strtoul(argv[2], 0, 0) : 10000;
    int threads = argc > 3 ? atoi(argv[3]) : 1;
    const char *mode = argc > 4 ? argv[4] : "calls";
    if (threads < 1 || threads > 64) threads = 1;
    trace = getenv("FUZZ_TRACE") != 0;
    arena = mmap(0, ARENA_SIZE, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    /* The buffer between two guard pages: a pointer that straddles its end meets
       nothing of the fuzzer's (its TLS or heap could be the next mapping). */
    buf = mmap(0, BUF_SIZE + 2 * 4096, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (arena == MAP_FAILED || buf == MAP_FAILED) return 2;
    buf += 4096;
    if (mprotect(buf, BUF_SIZE, PROT_READ | PROT_WRITE)) return 2;
    /* A path longer than PATH_MAX, in the guarded buffer: a call that writes
       through a path pointer (any pointer may be written) meets the guard page,
       never the fuzzer's own variables. */
    longpath = buf + BUF_SIZE - 5000;
    memset(longpath, 'a', 4999);
    settle();
    if (!strcmp(mode, "netscribble")) {
        /* `fuzz SEED COUNT THREADS netscribble [VM-IP GATEWAY]` (for the ARP requests). */
        parse_ip(argc > 5 ? argv[5] : 0, my_ip);
        parse_ip(argc > 6 ? argv[6] : 0, gw_ip);
        struct itimerval off = {{0, 0}, {0, 0}};
        setitimer(ITIMER_REAL, &off, 0); /* no EINTR wanted here */
        return netscribble(seed, count, threads);
    }
    if (!strcmp(mode, "scribble")) {
        scribble(seed, count);
        printf("fuzz: %lu hostcalls scribbled\n", (unsigned long)calls);
        return 0;
    }
    make_pool();
    run_jobs(seed, count, threads, worker);
    drop_pool();
    /* stdio may have been made non-blocking or closed-on-exec by the calls: the
       result goes out with write(2) directly. */
    char line[128];
    int n = snprintf(line, sizeof line, "fuzz: %lu calls, %lu faults caught\n", (unsigned long)calls,
                     (unsigned long)faults);
    write(1, line, (size_t)n);
    return 0;
}
