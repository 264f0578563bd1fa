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
   survive it). */
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
    if (!strcmp(mode, "scribble")) {
        scribble(seed, count);
        printf("fuzz: %lu hostcalls scribbled\n", (unsigned long)calls);
        return 0;
    }
    make_pool();
    pthread_t t[64];
    struct job jobs[64];
    for (int i = 0; i < threads; i++) {
        jobs[i].index = i;
        jobs[i].seed = seed * 0x9e3779b97f4a7c15ull + (uint64_t)i;
        jobs[i].count = count / (unsigned long)threads;
        if (i > 0) pthread_create(&t[i], 0, worker, &jobs[i]);
    }
    worker(&jobs[0]);
    for (int i = 1; i < threads; i++) pthread_join(t[i], 0);
    drop_pool();
    /* stdio may have been made non-blocking or closed-on-exec by the calls: the
       result goes out with write(2) directly. */
    char line[128];
    int n = snprintf(line, sizeof line, "fuzz: %lu calls, %lu faults caught\n", (unsigned long)calls,
                     (unsigned long)faults);
    write(1, line, (size_t)n);
    return 0;
}
