/* Writes 10 MB to stdout through stdio: line i (0-based) of 100 bytes is the number i
   padded with a repeating pattern, so the output can be checked byte for byte. */
#include <stdio.h>

int main(void) {
    char line[101];
    for (int i = 0; i < 100000; i++) {
        int n = snprintf(line, sizeof line, "%08d ", i);
        for (; n < 99; n++)
            line[n] = 'a' + (i + n) % 26;
        line[99] = '\n';
        fwrite(line, 1, 100, stdout);
    }
    return 0;
}
