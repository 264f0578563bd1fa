// User and group ids, which never change in onering (the host user's): setting
// them to what they are succeeds (GNU make's posix_spawn with RESETIDS does it),
// getresuid/getresgid report them; getrusage's arguments. Output compared with
// the host's (where the tests run as the same user). Capabilities: how libcap
// finds the version, reading the sets, setting the ones held.
#define _GNU_SOURCE
#include "check.h"
#include <stdint.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>

// linux/capability.h's (musl has no kernel headers).
struct __user_cap_header_struct { uint32_t version; int pid; };
struct __user_cap_data_struct { uint32_t effective, permitted, inheritable; };
#define _LINUX_CAPABILITY_VERSION_3 0x20080522
#define CAP_SYS_ADMIN 21
#include <unistd.h>

int main(void) {
    uid_t u = getuid(), r = 1, e = 1, s = 1;
    gid_t g = getgid(), rg = 1, eg = 1, sg = 1;
    CHECK(setuid(u) == 0 && setgid(g) == 0, "setuid/setgid to the current ids");
    CHECK_ERR(setuid(-1), EINVAL, "setuid(-1) is EINVAL");
    CHECK_ERR(setgid(-1), EINVAL, "setgid(-1) is EINVAL");
    CHECK(setreuid(-1, u) == 0 && setregid(g, -1) == 0, "setreuid/setregid keeping them");
    CHECK(setresuid(-1, u, -1) == 0 && setresgid(-1, g, -1) == 0, "setresuid/setresgid keeping them");
    CHECK(getresuid(&r, &e, &s) == 0 && r == u && e == u && s == u, "getresuid");
    CHECK(getresgid(&rg, &eg, &sg) == 0 && rg == g && eg == g && sg == g, "getresgid");
    CHECK_ERR(getresuid((uid_t *)8, &e, &s), EFAULT, "getresuid to a bad pointer is EFAULT");
    struct rusage ru;
    CHECK(getrusage(RUSAGE_SELF, &ru) == 0 && getrusage(RUSAGE_CHILDREN, &ru) == 0 && getrusage(RUSAGE_THREAD, &ru) == 0,
          "getrusage of self, children, thread");
    CHECK_ERR(getrusage(5, &ru), EINVAL, "getrusage of 5 is EINVAL");
    CHECK_ERR(getrusage(RUSAGE_SELF, (struct rusage *)8), EFAULT, "getrusage to a bad pointer is EFAULT");
    struct __user_cap_header_struct h = {0, 0};
    struct __user_cap_data_struct d[2];
    CHECK(syscall(SYS_capget, &h, NULL) == 0 && h.version == _LINUX_CAPABILITY_VERSION_3,
          "capget of an unknown version with no data: 0, version 3 written back");
    h.version = 1;
    CHECK_ERR(syscall(SYS_capget, &h, d), EINVAL, "capget of an unknown version is EINVAL");
    CHECK(h.version == _LINUX_CAPABILITY_VERSION_3, "and version 3 written back");
    CHECK(syscall(SYS_capget, &h, d) == 0 && d[0].inheritable == 0, "capget of version 3");
    CHECK((d[0].effective & d[0].permitted) == d[0].effective, "effective within permitted");
    CHECK(u != 0 || (d[0].effective >> CAP_SYS_ADMIN & 1), "root has CAP_SYS_ADMIN");
    CHECK(syscall(SYS_capset, &h, d) == 0, "capset to the sets held");
    h.pid = getpid();
    CHECK(syscall(SYS_capget, &h, d) == 0, "capget of our own pid");
    h.pid = 999999;
    CHECK_ERR(syscall(SYS_capget, &h, d), ESRCH, "capget of no such pid is ESRCH");
    h.pid = 0;
    CHECK_ERR(syscall(SYS_capget, &h, (void *)8), EFAULT, "capget to a bad pointer is EFAULT");
    CHECK_ERR(syscall(SYS_capget, (void *)8, d), EFAULT, "capget of a bad header is EFAULT");
    CHECK(prctl(PR_CAPBSET_READ, CAP_SYS_ADMIN) == 1, "CAP_SYS_ADMIN in the bounding set");
    CHECK_ERR(prctl(PR_CAPBSET_READ, 99), EINVAL, "PR_CAPBSET_READ of no such capability is EINVAL");
    CHECK(prctl(PR_GET_NO_NEW_PRIVS, 0, 0, 0, 0) == 0, "no_new_privs starts unset");
    CHECK(prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) == 0 && prctl(PR_GET_NO_NEW_PRIVS, 0, 0, 0, 0) == 1,
          "and stays set once set");
    printf("done\n");
    return failures;
}
