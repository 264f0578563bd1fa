/* Executes an invalid instruction: SIGILL, status 132. A handler first checks that
   the signal names the `ud2` itself (si_addr and the saved rip), as Linux does: the
   kernel's own supervisor calls are `ud2`s too, told apart by their address. It
   then puts the default action back and returns, so the `ud2` runs again and the
   program dies of SIGILL; a wrong address exits with status 3 instead. */
#define _GNU_SOURCE
#include <signal.h>
#include <stdint.h>
#include <ucontext.h>
#include <unistd.h>

extern char ud2_site[];

static void on_ill(int sig, siginfo_t *si, void *ctx) {
    ucontext_t *uc = ctx;
    if (sig != SIGILL || si->si_addr != (void *)ud2_site || uc->uc_mcontext.gregs[REG_RIP] != (greg_t)(uintptr_t)ud2_site)
        _exit(3);
    signal(SIGILL, SIG_DFL);
}

int main(void) {
    struct sigaction sa = {0};
    sa.sa_sigaction = on_ill;
    sa.sa_flags = SA_SIGINFO;
    sigaction(SIGILL, &sa, 0);
    __asm__ volatile(".globl ud2_site\nud2_site: ud2");
    return 0;
}
