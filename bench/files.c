/* bench/files.sh's workloads, the same binary on the host and in onering:
 *   files read PATH        sequential read of PATH twice in 1 MiB reads (the first
 *                          pass cold, the second warm): "cold MB/s warm MB/s", then
 *                          20,000 random 4 KiB preads (warm): "reads/s"
 *   files write PATH MB [PIECE]  MB megabytes in writes of PIECE bytes (1 MiB
 *                          unless given), then fsync: MB/s
 *   files meta DIR N       N times create+write+close, stat, unlink of a small file
 *                          in DIR: files/s
 *   files sqlite PATH N    N inserts (transactions of 100) into a WAL-mode SQLite
 *                          database at PATH: inserts/s (built with -DSQLITE) */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#ifdef SQLITE
#include <sqlite3.h>
#endif

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec / 1e9;
}

static char buf[1 << 20];

static double pass(const char *path) {
    int fd = open(path, O_RDONLY);
    if (fd < 0) return perror(path), exit(1), 0;
    double t = now();
    long total = 0, n;
    while ((n = read(fd, buf, sizeof buf)) > 0) total += n;
    t = now() - t;
    close(fd);
    return total / 1e6 / t;
}

int main(int argc, char **argv) {
    if (argc < 3) return 2;
    if (!strcmp(argv[1], "read")) {
        double cold = pass(argv[2]), warm = pass(argv[2]);
        int fd = open(argv[2], O_RDONLY);
        struct stat st;
        fstat(fd, &st);
        long pages = st.st_size / 4096, n = 20000;
        unsigned x = 12345;
        double t = now();
        for (long i = 0; i < n; i++) {
            x = x * 1103515245 + 12345;
            if (pread(fd, buf, 4096, (long)(x % pages) * 4096) != 4096) return 1;
        }
        t = now() - t;
        printf("%.0f %.0f %.0f\n", cold, warm, n / t);
    } else if (!strcmp(argv[1], "write")) {
        long mb = atol(argv[3]);
        long piece = argc > 4 ? atol(argv[4]) : (long)sizeof buf;
        if (piece <= 0 || piece > (long)sizeof buf || sizeof buf % piece) return 1;
        memset(buf, 7, sizeof buf);
        int fd = open(argv[2], O_CREAT | O_WRONLY | O_TRUNC, 0644);
        double t = now();
        for (long i = 0; i < mb * ((long)sizeof buf / piece); i++)
            if (write(fd, buf, piece) != piece) return 1;
        fsync(fd);
        close(fd);
        t = now() - t;
        unlink(argv[2]);
        printf("%.0f\n", mb / t * 1.048576);
    } else if (!strcmp(argv[1], "meta")) {
        long n = atol(argv[3]);
        char p[4096];
        struct stat st;
        double t = now();
        for (long i = 0; i < n; i++) {
            snprintf(p, sizeof p, "%s/f%ld", argv[2], i);
            int fd = open(p, O_CREAT | O_WRONLY | O_TRUNC, 0644);
            if (fd < 0 || write(fd, "x", 1) != 1) return 1;
            close(fd);
            if (stat(p, &st) != 0 || unlink(p) != 0) return 1;
        }
        t = now() - t;
        printf("%.0f\n", n / t);
#ifdef SQLITE
    } else if (!strcmp(argv[1], "sqlite")) {
        long n = atol(argv[3]);
        sqlite3 *db;
        remove(argv[2]);
        if (sqlite3_open(argv[2], &db) != SQLITE_OK) return 1;
        sqlite3_exec(db, "PRAGMA journal_mode=WAL", 0, 0, 0);
        sqlite3_exec(db, "CREATE TABLE t(id INTEGER PRIMARY KEY, name TEXT, v REAL)", 0, 0, 0);
        sqlite3_stmt *ins;
        sqlite3_prepare_v2(db, "INSERT INTO t(name, v) VALUES(?, ?)", -1, &ins, 0);
        double t = now();
        for (long i = 0; i < n; i++) {
            if (i % 100 == 0) sqlite3_exec(db, "BEGIN", 0, 0, 0);
            sqlite3_bind_text(ins, 1, "some name", -1, SQLITE_STATIC);
            sqlite3_bind_double(ins, 2, i * 0.5);
            if (sqlite3_step(ins) != SQLITE_DONE) return 1;
            sqlite3_reset(ins);
            if (i % 100 == 99) sqlite3_exec(db, "COMMIT", 0, 0, 0);
        }
        t = now() - t;
        sqlite3_close(db);
        printf("%.0f\n", n / t);
#endif
    }
    return 0;
}
