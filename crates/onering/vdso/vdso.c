/* onering's vDSO: clock_gettime, gettimeofday and time computed in the program from
   the TSC, without entering the kernel. A tiny shared object the VMM maps right
   after the program's image (with AT_SYSINFO_EHDR); the page before it (the "vvar"
   page) holds the clock parameters, written once by the kernel at boot. The kernel
   computes its own clocks with the same formula, so both agree to the nanosecond.
   Other clocks fall back to the system call. Position-independent, no relocations,
   no stack protector: nothing to set up.
   Layout of the vvar page (little-endian u64s): tsc_base, mult (ns per tick, 32.32
   fixed point), realtime_base_ns, version (1). */
#include <stdint.h>

struct vvar {
    uint64_t tsc_base;
    uint64_t mult;
    uint64_t real_base;
    uint64_t version;
};

struct timespec_ {
    long tv_sec;
    long tv_nsec;
};

struct timeval_ {
    long tv_sec;
    long tv_usec;
};

extern const char __ehdr_start[] __attribute__((visibility("hidden")));

static inline const volatile struct vvar *vvar(void) {
    return (const volatile struct vvar *)(__ehdr_start - 4096);
}

static inline uint64_t mono_ns(void) {
    const volatile struct vvar *v = vvar();
    uint32_t lo, hi;
    __asm__ volatile("rdtsc" : "=a"(lo), "=d"(hi));
    uint64_t t = ((uint64_t)hi << 32) | lo;
    uint64_t base = v->tsc_base;
    uint64_t d = t > base ? t - base : 0;
    return (uint64_t)(((unsigned __int128)d * v->mult) >> 32);
}

static long sys(long nr, long a, long b) {
    long r;
    __asm__ volatile("syscall" : "=a"(r) : "a"(nr), "D"(a), "S"(b) : "rcx", "r11", "memory");
    return r;
}

__attribute__((visibility("default"))) int __vdso_clock_gettime(int clock, struct timespec_ *ts) {
    uint64_t ns;
    switch (clock) {
    case 0:  /* CLOCK_REALTIME */
    case 5:  /* CLOCK_REALTIME_COARSE */
    case 11: /* CLOCK_TAI */
        ns = vvar()->real_base + mono_ns();
        break;
    case 1: /* CLOCK_MONOTONIC */
    case 4: /* CLOCK_MONOTONIC_RAW */
    case 6: /* CLOCK_MONOTONIC_COARSE */
    case 7: /* CLOCK_BOOTTIME */
        ns = mono_ns();
        break;
    default:
        return (int)sys(228, clock, (long)ts);
    }
    ts->tv_sec = (long)(ns / 1000000000u);
    ts->tv_nsec = (long)(ns % 1000000000u);
    return 0;
}

__attribute__((visibility("default"))) int __vdso_gettimeofday(struct timeval_ *tv, void *tz) {
    if (tz)
        return (int)sys(96, (long)tv, (long)tz);
    if (tv) {
        uint64_t ns = vvar()->real_base + mono_ns();
        tv->tv_sec = (long)(ns / 1000000000u);
        tv->tv_usec = (long)(ns % 1000000000u / 1000u);
    }
    return 0;
}

__attribute__((visibility("default"))) long __vdso_time(long *t) {
    long s = (long)((vvar()->real_base + mono_ns()) / 1000000000u);
    if (t)
        *t = s;
    return s;
}

int clock_gettime(int, struct timespec_ *) __attribute__((weak, alias("__vdso_clock_gettime"), visibility("default")));
int gettimeofday(struct timeval_ *, void *) __attribute__((weak, alias("__vdso_gettimeofday"), visibility("default")));
long time(long *) __attribute__((weak, alias("__vdso_time"), visibility("default")));
