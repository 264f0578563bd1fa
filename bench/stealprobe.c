/* Issue 20: does this host's KVM keep a steal-time record, and what can the VMM
   itself see of a vCPU thread that the host does not run?
   A bare VM whose one vCPU spins (`jmp .` at 0 in real mode, as long as the host
   lets it), with KVM_FEATURE_STEAL_TIME in its CPUID when KVM_GET_SUPPORTED_CPUID
   offers it and MSR_KVM_STEAL_TIME set by the VMM (KVM_SET_MSRS) before it runs.
   The main thread samples, every 1 ms for SECONDS, the record's steal, version and
   preempted fields, and the vCPU thread's host view: the run and wait (run-queue)
   times of /proc/self/task/TID/schedstat and the state letter of its stat.
   Run it while host threads spin (bench/contention.sh's spinner) to see what moves.
   usage: stealprobe [seconds] */
#include <fcntl.h>
#include <linux/kvm.h>
#include <asm/kvm_para.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static void die(const char *m) { perror(m); exit(1); }
static int vcpu;
static volatile pid_t vcpu_tid;

static void *run(void *arg) {
    (void)arg;
    vcpu_tid = (pid_t)syscall(SYS_gettid);
    for (;;) {
        if (ioctl(vcpu, KVM_RUN, 0) < 0) die("KVM_RUN");
        struct kvm_run *r = arg;
        (void)r;
    }
    return NULL;
}

static uint64_t now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1000000000ull + t.tv_nsec;
}

static void schedstat(pid_t tid, uint64_t *run_ns, uint64_t *wait_ns, char *state) {
    char p[64], b[512];
    snprintf(p, sizeof p, "/proc/self/task/%d/schedstat", tid);
    FILE *f = fopen(p, "r");
    if (!f || fscanf(f, "%lu %lu", run_ns, wait_ns) != 2) *run_ns = *wait_ns = 0;
    if (f) fclose(f);
    snprintf(p, sizeof p, "/proc/self/task/%d/stat", tid);
    int fd = open(p, O_RDONLY);
    ssize_t n = fd >= 0 ? read(fd, b, sizeof b - 1) : -1;
    if (fd >= 0) close(fd);
    *state = '?';
    if (n > 0) {
        b[n] = 0;
        char *c = strrchr(b, ')');
        if (c && c[1] == ' ') *state = c[2];
    }
}

int main(int argc, char **argv) {
    double seconds = argc > 1 ? atof(argv[1]) : 2;
    int kvm = open("/dev/kvm", O_RDWR);
    if (kvm < 0) die("/dev/kvm");
    struct { struct kvm_cpuid2 c; struct kvm_cpuid_entry2 e[256]; } cpuid = {.c.nent = 256};
    if (ioctl(kvm, KVM_GET_SUPPORTED_CPUID, &cpuid) < 0) die("KVM_GET_SUPPORTED_CPUID");
    uint32_t feat = 0, sig = 0;
    for (unsigned i = 0; i < cpuid.c.nent; i++) {
        if (cpuid.e[i].function == KVM_CPUID_FEATURES) feat = cpuid.e[i].eax;
        if (cpuid.e[i].function == KVM_CPUID_SIGNATURE) sig = cpuid.e[i].ebx;
    }
    printf("KVM_GET_SUPPORTED_CPUID: leaf 0x40000000 %s, KVM_CPUID_FEATURES eax %#x: STEAL_TIME %d, PV_UNHALT %d, PV_SCHED_YIELD %d\n",
           sig == 0x4b4d564b ? "KVMKVMKVM" : "absent", feat, !!(feat & (1 << KVM_FEATURE_STEAL_TIME)),
           !!(feat & (1 << KVM_FEATURE_PV_UNHALT)), !!(feat & (1 << KVM_FEATURE_PV_SCHED_YIELD)));

    int vm = ioctl(kvm, KVM_CREATE_VM, 0);
    if (vm < 0) die("KVM_CREATE_VM");
    size_t size = 2 << 20;
    uint8_t *mem = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (mem == MAP_FAILED) die("mmap");
    mem[0] = 0xeb, mem[1] = 0xfe; /* jmp . */
    struct kvm_userspace_memory_region r = {.slot = 0, .guest_phys_addr = 0, .memory_size = size,
                                            .userspace_addr = (uintptr_t)mem};
    if (ioctl(vm, KVM_SET_USER_MEMORY_REGION, &r) < 0) die("KVM_SET_USER_MEMORY_REGION");
    vcpu = ioctl(vm, KVM_CREATE_VCPU, 0);
    if (vcpu < 0) die("KVM_CREATE_VCPU");
    if (ioctl(vcpu, KVM_SET_CPUID2, &cpuid) < 0) die("KVM_SET_CPUID2");
    struct kvm_sregs s;
    if (ioctl(vcpu, KVM_GET_SREGS, &s) < 0) die("KVM_GET_SREGS");
    s.cs.base = 0, s.cs.selector = 0;
    if (ioctl(vcpu, KVM_SET_SREGS, &s) < 0) die("KVM_SET_SREGS");
    struct kvm_regs regs = {.rip = 0, .rflags = 2};
    if (ioctl(vcpu, KVM_SET_REGS, &regs) < 0) die("KVM_SET_REGS");

    const uint64_t gpa = 0x1000;
    struct kvm_steal_time *st = (void *)(mem + gpa);
    struct { struct kvm_msrs m; struct kvm_msr_entry e[1]; } msrs = {.m.nmsrs = 1};
    msrs.e[0].index = MSR_KVM_STEAL_TIME;
    msrs.e[0].data = gpa | KVM_MSR_ENABLED;
    int n = ioctl(vcpu, KVM_SET_MSRS, &msrs);
    printf("KVM_SET_MSRS(MSR_KVM_STEAL_TIME = %#lx | enabled): %d of 1 set\n", (unsigned long)gpa, n);
    msrs.e[0].data = 0;
    n = ioctl(vcpu, KVM_GET_MSRS, &msrs);
    printf("KVM_GET_MSRS(MSR_KVM_STEAL_TIME): %d read, value %#llx\n", n, (unsigned long long)msrs.e[0].data);

    pthread_t t;
    pthread_create(&t, NULL, run, NULL);
    while (!vcpu_tid) usleep(100);
    usleep(10000);
    uint64_t run0, wait0, run1, wait1, steal0 = st->steal;
    char state;
    schedstat(vcpu_tid, &run0, &wait0, &state);
    uint64_t t0 = now_ns(), samples = 0, preempted = 0, not_running = 0, versions = st->version;
    uint64_t changes = 0, last_steal = st->steal;
    while (now_ns() - t0 < seconds * 1e9) {
        usleep(1000);
        samples++;
        if (st->preempted & KVM_VCPU_PREEMPTED) preempted++;
        if (st->steal != last_steal) changes++, last_steal = st->steal;
        uint64_t a, b;
        schedstat(vcpu_tid, &a, &b, &state);
        if (state != 'R') not_running++;
    }
    double wall = (now_ns() - t0) / 1e9;
    schedstat(vcpu_tid, &run1, &wait1, &state);
    printf("over %.2f s, %lu samples: record steal +%.1f ms (%lu changes), version %lu -> %u, preempted seen %lu times\n",
           wall, samples, (st->steal - steal0) / 1e6, changes, versions, st->version, preempted);
    printf("host view of the vCPU thread: ran %.1f ms (%.0f%%), waited on a run queue %.1f ms (%.0f%%); state not R in %lu samples\n",
           (run1 - run0) / 1e6, (run1 - run0) / 1e7 / wall, (wait1 - wait0) / 1e6, (wait1 - wait0) / 1e7 / wall, not_running);
    return 0;
}
