#!/usr/bin/env bash
# Benchmark: system-call cost on the host and in onering, in one run.
#  - the seed's Benchmark-1: N iterations of write + read of 40 bytes on /dev/null
#    (target, issue 3: onering at least 10x faster than the host; aim 20x);
#  - a null system call (getppid): host, onering's trap path (--no-rewrite), and
#    onering's rewritten path.
set -euo pipefail
cd "$(dirname "$0")/.."
N=${1:-2000000}
TRAP_N=$((N / 100))
out=target/bench
mkdir -p "$out"
cargo build --release -q
musl-gcc -static -O2 bench/syscall.c -o "$out/syscall"
onering=${ONERING:-./target/release/onering} # ONERING=path compares another build
host_rw=$("$out/syscall" rw "$N")
ring_rw=$("$onering" run "$out/syscall" rw "$N")
trap_rw=$("$onering" run --no-rewrite "$out/syscall" rw "$TRAP_N")
host_null=$("$out/syscall" getppid "$N")
ring_null=$("$onering" run "$out/syscall" getppid "$N")
trap_null=$("$onering" run --no-rewrite "$out/syscall" getppid "$TRAP_N")
printf '%-44s %12s %12s\n' "write+read 40 B on /dev/null (ns/iteration)" "time" "host/this"
printf '%-44s %12s %12s\n' "host" "$host_rw" "1.00x"
printf '%-44s %12s %12s\n' "onering, trap path (--no-rewrite)" "$trap_rw" "$(awk -v h="$host_rw" -v r="$trap_rw" 'BEGIN{printf "%.2fx", h/r}')"
printf '%-44s %12s %12s\n' "onering, rewritten" "$ring_rw" "$(awk -v h="$host_rw" -v r="$ring_rw" 'BEGIN{printf "%.2fx", h/r}')"
printf '%-44s %12s %12s\n' "null system call, getppid (ns/call)" "" ""
printf '%-44s %12s %12s\n' "host" "$host_null" "1.00x"
printf '%-44s %12s %12s\n' "onering, trap path (--no-rewrite)" "$trap_null" "$(awk -v h="$host_null" -v r="$trap_null" 'BEGIN{printf "%.2fx", h/r}')"
printf '%-44s %12s %12s\n' "onering, rewritten" "$ring_null" "$(awk -v h="$host_null" -v r="$ring_null" 'BEGIN{printf "%.2fx", h/r}')"
awk -v h="$host_rw" -v r="$ring_rw" 'BEGIN { s = h / r; printf "target: write+read at least 10x faster than the host: %s (%.1fx)\n", (s >= 10 ? "met" : "NOT met"), s }'
