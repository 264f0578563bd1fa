#!/usr/bin/env bash
# The warm pool (seed B-5, issue 16): the first touch of memory a program maps after
# it was idle a moment, on the host and in onering, microseconds per 4 KiB page
# (lower is better), and the same memory touched again after munmap.
#   bench/warm.sh [MB] [SLEEP_MS]
set -euo pipefail
cd "$(dirname "$0")/.."
MB=${1:-32}
MS=${2:-500}
out=target/bench
mkdir -p "$out"
cargo build --release -q
onering=${ONERING:-$(pwd)/target/release/onering}
musl-gcc -static -O2 bench/warm.c -o "$out/warm"
read -r hf ha <<<"$("$out/warm" "$MB" "$MS")"
read -r rf ra <<<"$("$onering" run --mem 1G "$out/warm" "$MB" "$MS")"
awk -v hf="$hf" -v ha="$ha" -v rf="$rf" -v ra="$ra" -v mb="$MB" 'BEGIN {
    printf "first touch of %d MiB after idle, us/page   host %6.2f  onering %6.2f  %.2fx\n", mb, hf, rf, hf / rf
    printf "touched again after munmap, us/page         host %6.2f  onering %6.2f  %.2fx\n", ha, ra, ha / ra }'
