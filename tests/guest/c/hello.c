/* Prints a greeting, its arguments and one environment variable, then exits with the
   status given in $EXIT_CODE (default 0). */
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv) {
    printf("hello from onering\n");
    for (int i = 0; i < argc; i++)
        printf("argv[%d]=%s\n", i, argv[i]);
    const char *greeting = getenv("GREETING");
    printf("GREETING=%s\n", greeting ? greeting : "(unset)");
    const char *code = getenv("EXIT_CODE");
    return code ? atoi(code) : 0;
}
