// User and group ids, which never change in onering (the host user's): setting
// them to what they are succeeds (GNU make's posix_spawn with RESETIDS does it),
// getresuid/getresgid report them; getrusage's arguments. Output compared with
// the host's (where the tests run as the same user).
#define _GNU_SOURCE
#include "check.h"
#include <sys/resource.h>
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
    printf("done\n");
    return failures;
}
