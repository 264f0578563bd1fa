#!/usr/bin/env bash
# The seed's Go benchmarks, host and onering side by side in one run, with --smp 1
# (the host pinned to one CPU with taskset) and --smp 2 (the host's two CPUs):
#  Test-1: N writes of 30 bytes to /dev/null (target: onering at least 10x faster);
#  Test-2: 50 goroutines, R rounds; each round sends one item to every goroutine
#          over its channel, each goroutine writes 30 bytes and sends a result
#          back, the main goroutine writes 30 bytes per goroutine (target: 2x).
# Also time.Now (a rewritten clock_gettime system call in onering, the vDSO on the
# host) for the vDSO decision.
# usage: bench/go.sh [N] [R]
set -euo pipefail
cd "$(dirname "$0")/.."
N=${1:-2000000}
R=${2:-20000}
out=target/bench
mkdir -p "$out"
cargo build --release -q
export PATH="$PATH:/usr/local/go/bin"
(cd bench/go && CGO_ENABLED=0 go build -o "../../$out/gobench" .)
onering=${ONERING:-./target/release/onering} # ONERING=path compares another build
ratio() { awk -v h="$1" -v r="$2" 'BEGIN{printf "%.2fx", h/r}'; }
printf '%-36s %-6s %12s %12s %8s\n' "benchmark" "CPUs" "host" "onering" "ratio"
declare -A best
for what in "write $N" "chan $R" "now $N"; do
    set -- $what
    for smp in 1 2; do
        cpus=$((smp - 1))
        h=$(taskset -c "0-$cpus" "$out/gobench" "$1" "$2")
        r=$("$onering" run --smp "$smp" "$out/gobench" "$1" "$2")
        unit="ms"
        [ "$1" = now ] && unit="ns/call"
        printf '%-36s %-6s %12s %12s %8s\n' "$1 $2 ($unit)" "$smp" "$h" "$r" "$(ratio "$h" "$r")"
        best["$1 $smp"]=$(awk -v h="$h" -v r="$r" 'BEGIN{printf "%.2f", h/r}')
    done
done
echo "targets:"
for smp in 1 2; do
    awk -v r="${best[write $smp]}" -v s="$smp" 'BEGIN{printf "  Test-1 --smp %s at least 10x: %s (%.2fx)\n", s, (r >= 10 ? "met" : "NOT met"), r}'
    awk -v r="${best[chan $smp]}" -v s="$smp" 'BEGIN{printf "  Test-2 --smp %s at least 2x: %s (%.2fx)\n", s, (r >= 2 ? "met" : "NOT met"), r}'
done
