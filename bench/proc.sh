#!/usr/bin/env bash
# Benchmark: processes with separate address spaces, on the host and in onering,
# in one run (bench/forkbench.c):
#  - fork + _exit + waitpid of a small static program (µs per iteration);
#  - a pipe ping-pong between a parent and its forked child on one vCPU (each
#    round trip: two address-space switches) against the same between two
#    threads (none): the difference is what the switches cost;
#  - fork + execve + waitpid, and posix_spawn + waitpid, of a static program that
#    exits at once (its directory shared at the same path, so it finds itself);
#  - a shell pipeline of 4 commands over 100,000 lines with Debian's dash and
#    coreutils (dynamic, from the host's tree), median of 5 (bench/spawn.c);
#  - `make -B -j2` of a generated 20-file C project (target/bench/make20) with the
#    host's make and gcc (cc1, as, collect2, ld: dynamic, from the host's tree,
#    read-only in the VM), the project a volume at its own path, median of 3; the
#    VM needs PATH (`-e PATH=/usr/bin:/bin`: onering passes no environment).
# Targets (issue 17): fork+exec+wait <= 3x the host, the pipeline and make <= 1.5x.
set -euo pipefail
cd "$(dirname "$0")/.."
N=${1:-2000}
PP=${2:-2000}
out=target/bench
mkdir -p "$out"
cargo build --release -q
musl-gcc -static -O2 bench/forkbench.c -o "$out/forkbench"
onering=${ONERING:-./target/release/onering} # ONERING=path compares another build
ratio() { awk -v h="$1" -v r="$2" 'BEGIN{printf "%.2fx", r/h}'; }
host_fork=$("$out/forkbench" fork "$N")
ring_fork=$("$onering" run --smp 1 "$out/forkbench" fork "$N")
ring_fork2=$("$onering" run --smp 2 "$out/forkbench" fork "$N")
host_pp=$(taskset -c 0 "$out/forkbench" pingpong "$PP")
host_tp=$(taskset -c 0 "$out/forkbench" threadpp "$PP")
ring_pp=$("$onering" run --smp 1 "$out/forkbench" pingpong "$PP")
ring_tp=$("$onering" run --smp 1 "$out/forkbench" threadpp "$PP")
printf '%-52s %10s %10s\n' "fork+exit+wait (µs/iteration)" "time" "this/host"
printf '%-52s %10s %10s\n' "host" "$host_fork" "1.00x"
printf '%-52s %10s %10s\n' "onering --smp 1" "$ring_fork" "$(ratio "$host_fork" "$ring_fork")"
printf '%-52s %10s %10s\n' "onering --smp 2" "$ring_fork2" "$(ratio "$host_fork" "$ring_fork2")"
printf '%-52s %10s %10s\n' "pipe ping-pong, one CPU (µs/round trip)" "" ""
printf '%-52s %10s %10s\n' "host, parent and forked child" "$host_pp" "1.00x"
printf '%-52s %10s %10s\n' "host, two threads" "$host_tp" "$(ratio "$host_pp" "$host_tp")"
printf '%-52s %10s %10s\n' "onering, parent and forked child" "$ring_pp" "$(ratio "$host_pp" "$ring_pp")"
printf '%-52s %10s %10s\n' "onering, two threads" "$ring_tp" "$(ratio "$host_pp" "$ring_tp")"
dir=$(cd "$out" && pwd)
host_exec=$("$dir/forkbench" exec "$((N / 4))")
ring_exec=$("$onering" run --smp 2 -v "$dir:$dir" "$dir/forkbench" exec "$((N / 4))")
host_spawn=$("$dir/forkbench" spawn "$((N / 4))")
ring_spawn=$("$onering" run --smp 2 -v "$dir:$dir" "$dir/forkbench" spawn "$((N / 4))")
printf '%-52s %10s %10s\n' "fork+exec+wait (µs/iteration), --smp 2" "" ""
printf '%-52s %10s %10s\n' "host" "$host_exec" "1.00x"
printf '%-52s %10s %10s  (target <= 3x)\n' "onering" "$ring_exec" "$(ratio "$host_exec" "$ring_exec")"
printf '%-52s %10s %10s\n' "posix_spawn+wait (µs/iteration), --smp 2" "" ""
printf '%-52s %10s %10s\n' "host" "$host_spawn" "1.00x"
printf '%-52s %10s %10s\n' "onering" "$ring_spawn" "$(ratio "$host_spawn" "$ring_spawn")"
gcc -O2 bench/spawn.c -o "$out/spawn"
pipeline='seq 1 100000 | sort -n | uniq -c | wc -l'
read -r host_pl _ _ < <("$out/spawn" 5 /bin/dash -c "$pipeline")
read -r ring_pl _ _ < <("$out/spawn" 5 "$onering" run --smp 2 /bin/dash -c "$pipeline")
printf '%-52s %10s %10s\n' "pipeline of 4 over 100,000 lines (µs, median of 5)" "" ""
printf '%-52s %10s %10s\n' "host" "$host_pl" "1.00x"
printf '%-52s %10s %10s  (target <= 1.5x)\n' "onering --smp 2 (VM start included)" "$ring_pl" "$(ratio "$host_pl" "$ring_pl")"
awk -v p="$ring_pp" -v t="$ring_tp" 'BEGIN { printf "onering: one address-space switch costs about %.1f µs (half the difference)\n", (p - t) / 2 }'
# make -j2 of a 20-file C project (generated; -B rebuilds everything each run).
mk=$dir/make20
rm -rf "$mk"
mkdir -p "$mk"
echo '#define COMMON_K 3' >"$mk/common.h"
for i in $(seq 1 20); do
    cat >"$mk/f$i.c" <<EOF
#include <stdio.h>
#include <string.h>
#include "common.h"
static int table[64];
int f$i(int x) {
    char buf[64];
    for (int k = 0; k < 64; k++) table[k] = (k * $i) ^ x;
    snprintf(buf, sizeof buf, "%d-%d", x, $i);
    return (int)strlen(buf) + table[x & 63] + COMMON_K;
}
EOF
done
{
    echo '#include <stdio.h>'
    for i in $(seq 1 20); do echo "int f$i(int);"; done
    echo 'int main(void) {'
    echo '    int s = 0;'
    for i in $(seq 1 20); do echo "    s += f$i($i);"; done
    echo '    printf("%d\n", s);'
    echo '    return 0;'
    echo '}'
} >"$mk/main.c"
printf 'OBJS = $(patsubst %%.c,%%.o,$(wildcard *.c))\nprog: $(OBJS)\n\t$(CC) -o $@ $(OBJS)\n%%.o: %%.c common.h\n\t$(CC) -O2 -c $< -o $@\n' >"$mk/Makefile"
ring_make=("$onering" run --smp 2 --mem 1G -e PATH=/usr/bin:/bin -v "$mk:$mk" -w "$mk" /usr/bin/make -B CC=gcc -j2)
# First check that onering builds what the host builds.
(cd "$mk" && make -s -B CC=gcc -j2 && ./prog) >"$out/make.host"
rm -f "$mk"/*.o "$mk/prog"
if ! "${ring_make[@]}" >"$out/make.log" 2>&1 || ! (cd "$mk" && ./prog) >"$out/make.ring" || ! cmp -s "$out/make.host" "$out/make.ring"; then
    echo "make -j2 in onering failed:" && tail -5 "$out/make.log" && exit 1
fi
read -r host_mk _ _ < <(cd "$mk" && "$dir/spawn" 3 /usr/bin/make -B CC=gcc -j2)
read -r ring_mk _ _ < <("$out/spawn" 3 "${ring_make[@]}")
printf '%-52s %10s %10s\n' "make -B -j2, 20 C files, host gcc (µs, median of 3)" "" ""
printf '%-52s %10s %10s\n' "host" "$host_mk" "1.00x"
printf '%-52s %10s %10s  (target <= 1.5x)\n' "onering --smp 2 (VM start included)" "$ring_mk" "$(ratio "$host_mk" "$ring_mk")"
