/* Calls a function pointer into the upper half, where only the kernel lives: the
   program must die of SIGSEGV (139), not be taken for a kernel crash. */
int main(void) {
    void (*f)(void) = (void (*)(void))0xffff900000000000ul;
    f();
    return 0;
}
