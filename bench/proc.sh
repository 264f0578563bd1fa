#!/usr/bin/env bash
# Benchmark: processes with separate address spaces, on the host and in onering,
# in one run (bench/forkbench.c):
#  - fork + _exit + waitpid of a small static program (µs per iteration);
#  - a pipe ping-pong between a parent and its forked child on one vCPU (each
#    round trip: two address-space switches) against the same between two
#    threads (none): the difference is what the switches cost.
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
awk -v p="$ring_pp" -v t="$ring_tp" 'BEGIN { printf "onering: one address-space switch costs about %.1f µs (half the difference)\n", (p - t) / 2 }'
