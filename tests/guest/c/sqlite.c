/* SQLite on a file database: `sqlite PATH MODE [N]` creates PATH with journal
 * MODE (delete, wal, ...), inserts N rows (10000 by default) in transactions of
 * 100, queries them back, and checks the database's integrity; prints what it
 * found (the same on the host and in onering). Built statically against Debian's
 * libsqlite3. */
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static sqlite3 *db;

static void must(int rc, const char *what) {
    if (rc != SQLITE_OK && rc != SQLITE_DONE && rc != SQLITE_ROW) {
        printf("%s: %s (%d, extended %d)\n", what, sqlite3_errmsg(db), rc, sqlite3_extended_errcode(db)); printf("errno %d\n", sqlite3_system_errno(db));
        exit(1);
    }
}

static void show(const char *sql) {
    sqlite3_stmt *st;
    must(sqlite3_prepare_v2(db, sql, -1, &st, 0), sql);
    while (sqlite3_step(st) == SQLITE_ROW) {
        printf("%s:", sql);
        for (int i = 0; i < sqlite3_column_count(st); i++) printf(" %s", (const char *)sqlite3_column_text(st, i));
        printf("\n");
    }
    sqlite3_finalize(st);
}

/* `sqlite PATH share N TAG`: N inserts, each its own transaction, into PATH's
 * table (made if missing) while another process does the same: the file locks
 * keep them apart (a busy database is waited for). */
static int share(const char *path, int n, const char *tag) {
    must(sqlite3_open(path, &db), "open");
    sqlite3_busy_timeout(db, 20000);
    must(sqlite3_exec(db, "CREATE TABLE IF NOT EXISTS s(id INTEGER PRIMARY KEY, tag TEXT, i INTEGER)", 0, 0, 0), "create");
    for (int i = 0; i < n; i++) {
        char sql[128];
        snprintf(sql, sizeof sql, "INSERT INTO s(tag, i) VALUES('%s', %d)", tag, i);
        must(sqlite3_exec(db, sql, 0, 0, 0), "insert");
    }
    sqlite3_close(db);
    printf("%s done\n", tag);
    return 0;
}

int main(int argc, char **argv) {
    if (argc < 3) return 2;
    int n = argc > 3 ? atoi(argv[3]) : 10000;
    if (!strcmp(argv[2], "share")) return share(argv[1], n, argc > 4 ? argv[4] : "x");
    remove(argv[1]);
    must(sqlite3_open(argv[1], &db), "open");
    char pragma[64];
    snprintf(pragma, sizeof pragma, "PRAGMA journal_mode=%s", argv[2]);
    show(pragma);
    must(sqlite3_exec(db, "CREATE TABLE t(id INTEGER PRIMARY KEY, name TEXT, v REAL)", 0, 0, 0), "create");
    sqlite3_stmt *ins;
    must(sqlite3_prepare_v2(db, "INSERT INTO t(name, v) VALUES(?, ?)", -1, &ins, 0), "prepare");
    for (int i = 0; i < n; i++) {
        if (i % 100 == 0) must(sqlite3_exec(db, "BEGIN", 0, 0, 0), "begin");
        char name[32];
        snprintf(name, sizeof name, "row-%d", i);
        sqlite3_bind_text(ins, 1, name, -1, SQLITE_TRANSIENT);
        sqlite3_bind_double(ins, 2, i * 0.5);
        must(sqlite3_step(ins), "insert");
        sqlite3_reset(ins);
        if (i % 100 == 99 || i == n - 1) must(sqlite3_exec(db, "COMMIT", 0, 0, 0), "commit");
    }
    sqlite3_finalize(ins);
    show("SELECT count(*), sum(v), max(id) FROM t");
    show("SELECT name FROM t WHERE id = 4242");
    must(sqlite3_exec(db, "CREATE INDEX tv ON t(v)", 0, 0, 0), "index");
    must(sqlite3_exec(db, "DELETE FROM t WHERE id % 2 = 0", 0, 0, 0), "delete");
    show("SELECT count(*) FROM t WHERE v > 100");
    show("PRAGMA integrity_check");
    sqlite3_close(db);
    /* Opened again: what was committed is there. */
    must(sqlite3_open(argv[1], &db), "reopen");
    show("SELECT count(*) FROM t");
    sqlite3_close(db);
    return 0;
}
