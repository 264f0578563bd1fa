/* For --trace: a failed execve, then a successful one of itself, whose new image
   exits 5. A successful execve never returns to its caller; its line must still
   show, as strace shows it. */
#include <unistd.h>

int main(int argc, char **argv) {
    if (argc > 1) return 5;
    char *args[] = {argv[0], "again", 0};
    execve("/nonexistent", args, 0);
    execve(argv[0], args, 0);
    return 1;
}
