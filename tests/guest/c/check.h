/* Tiny checking helpers for the guest test programs: each CHECK prints one line,
   "ok <what>" or "FAIL <what> (errno N)", so the host's and onering's outputs can be
   compared line by line; the exit status is the number of failures. */
#include <errno.h>
#include <stdio.h>
#include <string.h>

static int failures __attribute__((unused));
#define CHECK(cond, what)                                                    \
    do {                                                                     \
        errno = 0;                                                           \
        int ok_ = (cond);                                                    \
        int e_ = errno;                                                      \
        if (ok_)                                                             \
            printf("ok %s\n", what);                                         \
        else {                                                               \
            printf("FAIL %s (errno %d)\n", what, e_);                        \
            failures++;                                                      \
        }                                                                    \
    } while (0)
/* A condition of which only a failure is printed, "FAIL line N: " and a
   printf-style message (for tests whose output is "all ok" or their failures). */
#define CHECKF(cond, ...)                                                    \
    do {                                                                     \
        if (!(cond)) {                                                       \
            printf("FAIL line %d: ", __LINE__);                              \
            printf(__VA_ARGS__);                                             \
            printf("\n");                                                    \
            failures++;                                                      \
        }                                                                    \
    } while (0)
/* Expect a call to fail with a given errno. */
#define CHECK_ERR(call, err, what) CHECK((call) == -1 && errno == (err), what)
/* Print what a call returned, and its error: "what: -1 Bad file descriptor". */
#define SHOW(what, expr)                                                     \
    do {                                                                     \
        errno = 0;                                                           \
        long r_ = (long)(expr);                                              \
        printf("%s: %ld %s\n", what, r_, r_ < 0 ? strerror(errno) : "");     \
    } while (0)
