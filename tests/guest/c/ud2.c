/* Executes an invalid instruction: SIGILL, status 132. */
int main(void) {
    __asm__ volatile("ud2");
    return 0;
}
