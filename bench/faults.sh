#!/usr/bin/env bash
# Benchmark: an exception that reaches the program's handler (bench/faults.c: a
# store to a PROT_NONE page, SIGSEGV, the handler steps over it), on the host and
# in onering, in one run; three runs each, interleaved.
#   bench/faults.sh [N]      ONERING=path compares another build
set -euo pipefail
cd "$(dirname "$0")/.."
N=${1:-2000}
out=target/bench
mkdir -p "$out"
cargo build --release -q
musl-gcc -static -O2 bench/faults.c -o "$out/faults"
onering=${ONERING:-./target/release/onering}
printf '%-40s %10s %10s\n' "page fault to a SIGSEGV handler (µs)" "host" "onering"
for _ in 1 2 3; do
    h=$("$out/faults" "$N")
    r=$("$onering" run "$out/faults" "$N")
    printf '%-40s %10s %10s  (%s)\n' "" "$h" "$r" "$(awk -v h="$h" -v r="$r" 'BEGIN{printf "%.1fx", r/h}')"
done
