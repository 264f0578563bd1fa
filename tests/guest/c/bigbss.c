/* A program whose image needs 100 MiB (a large zero-initialised array): loading it
   must fail cleanly when --mem is smaller. */
#include <stdio.h>

char big[100 << 20];

int main(int argc, char **argv) {
    (void)argv;
    big[sizeof big - (unsigned)argc] = 1;
    int sum = 0;
    for (unsigned i = 0; i < sizeof big; i += 1 << 20)
        sum += big[i + (1 << 20) - 1];
    printf("%d\n", sum);
    return 0;
}
