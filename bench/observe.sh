#!/usr/bin/env bash
# Benchmark: what --stats and --trace cost, and that they cost nothing when off.
# A null system call (getppid, ns/call) and write+read of 40 B on /dev/null
# (ns/iteration), rewritten path, in one run per round, side by side with the host:
#  - host;
#  - BASE (ONERING_BASE=path: a build from before the observed entry existed), if given;
#  - this build, no option (the plain entry: must match BASE);
#  - --stats (the observed entry: two rdtsc and three atomic adds per call);
#  - --trace=openat (observed entry, the call not in the set: only the set test);
#  - --trace --trace-out /dev/null (every call decoded and formatted; N/100 calls).
# ROUNDS rounds (default 3), interleaved, so a noisy neighbour hits every column.
set -euo pipefail
cd "$(dirname "$0")/.."
N=${1:-2000000}
ROUNDS=${ROUNDS:-3}
out=target/bench
mkdir -p "$out"
cargo build --release -q
musl-gcc -static -O2 bench/syscall.c -o "$out/syscall"
onering=${ONERING:-./target/release/onering}
base=${ONERING_BASE:-}
printf '%-6s %-8s %10s %10s %10s %10s %14s %16s\n' round test host base off --stats --trace=openat "--trace (all)"
for r in $(seq "$ROUNDS"); do
    for t in getppid rw; do
        host=$("$out/syscall" "$t" "$N")
        b=-
        [ -n "$base" ] && b=$("$base" run "$out/syscall" "$t" "$N")
        off=$("$onering" run "$out/syscall" "$t" "$N")
        stats=$("$onering" run --stats "$out/syscall" "$t" "$N" 2>/dev/null)
        filt=$("$onering" run --trace=openat "$out/syscall" "$t" "$N" 2>/dev/null)
        all=$("$onering" run --trace --trace-out /dev/null "$out/syscall" "$t" "$((N / 100))")
        printf '%-6s %-8s %10s %10s %10s %10s %14s %16s\n' "$r" "$t" "$host" "$b" "$off" "$stats" "$filt" "$all"
    done
done
