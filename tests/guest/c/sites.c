/* Runs the system-call sites of sites.S and prints, for each, which registers a
   system call changed. Native `syscall` changes exactly rax (the result), rcx and
   r11; the rewritten sites must look the same: the output is compared with the
   trap path (--no-rewrite) and with the host. */
#include <stdint.h>
#include <stdio.h>
#include <unistd.h>

void site_mov_imm(uint64_t *in, uint64_t *out);
void site_syscall_first(uint64_t *in, uint64_t *out);
void site_rip_relative(uint64_t *in, uint64_t *out);

static const char *names[16] = {"rax", "rdi", "flags", "rbx", "rdx", "r8", "r9", "r10",
                                "r12", "r13", "r14", "r15", "rbp", "rsi", "xmm0", "redzone"};

/* The arithmetic flags (CF PF AF ZF SF OF) and DF. */
#define FLAGS 0xcd5ull

static void probe(const char *what, void (*site)(uint64_t *, uint64_t *), uint64_t flags, uint64_t check) {
    uint64_t in[16], out[16] = {0};
    for (int i = 0; i < 16; i++) in[i] = 0x1111111111111111ull * (i + 1);
    in[14] = 0x202 | flags;
    site(in, out);
    /* Expected: rax = pid; inputs unchanged; the red-zone word intact. */
    const uint64_t want[16] = {(uint64_t)getpid(), in[13], 0, in[1], in[2], in[3], in[4], in[5],
                               in[6], in[7], in[8], in[9], in[10], in[11], in[12], 0x5ed20e};
    printf("%s:", what);
    int bad = 0;
    for (int i = 0; i < 16; i++) {
        if (i == 2) continue;
        if (out[i] != want[i]) {
            printf(" %s", names[i]);
            bad = 1;
        }
    }
    if ((out[2] & check) != (flags & check)) {
        printf(" flags(%#llx, want %#llx)", (unsigned long long)(out[2] & check), (unsigned long long)(flags & check));
        bad = 1;
    }
    printf(bad ? " changed\n" : " ok\n");
}

int main(void) {
    /* Each site with all flags set, none, and a mix (DF stays clear: the ABI). */
    const uint64_t patterns[3] = {0x8d5, 0x000, 0x891};
    const char *names3[3] = {"all flags", "no flags", "some flags"};
    for (int p = 0; p < 3; p++) {
        char what[64];
        snprintf(what, sizeof what, "mov $nr,%%eax; syscall, %s", names3[p]);
        probe(what, site_mov_imm, patterns[p], FLAGS);
        snprintf(what, sizeof what, "syscall; cmp, %s", names3[p]);
        probe(what, site_syscall_first, patterns[p], 0); /* its cmp sets the flags */
        snprintf(what, sizeof what, "rip-relative load; syscall, %s", names3[p]);
        probe(what, site_rip_relative, patterns[p], FLAGS);
    }
    return 0;
}
