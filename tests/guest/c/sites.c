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

static void probe(const char *what, void (*site)(uint64_t *, uint64_t *), int cf) {
    uint64_t in[16], out[16] = {0};
    for (int i = 0; i < 16; i++) in[i] = 0x1111111111111111ull * (i + 1);
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
    if (cf >= 0 && (int)(out[2] & 1) != cf) {
        printf(" CF");
        bad = 1;
    }
    printf(bad ? " changed\n" : " ok\n");
}

int main(void) {
    probe("mov $nr,%eax; syscall", site_mov_imm, 1);
    probe("syscall; cmp", site_syscall_first, -1);
    probe("rip-relative load; syscall", site_rip_relative, -1);
    return 0;
}
