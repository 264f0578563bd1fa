#!/usr/bin/env bash
# File mappings (issue 16): mmap of a large file on a volume, its first touch, and
# a sweep reading every page, on the host and in onering (microseconds; the file
# is written once and read from the host's page cache).
#   bench/mmapfile.sh [MB]
set -euo pipefail
cd "$(dirname "$0")/.."
MB=${1:-512}
out=target/bench
mkdir -p "$out/mmapfile-vol"
cargo build --release -q
onering=${ONERING:-$(pwd)/target/release/onering}
musl-gcc -static -O2 bench/mmapfile.c -o "$out/mmapfile"
f="$out/mmapfile-vol/f"
[ "$(stat -c %s "$f" 2>/dev/null || echo 0)" = $((MB * 1048576)) ] || head -c $((MB * 1048576)) /dev/urandom >"$f"
read -r hm hf hs <<<"$("$out/mmapfile" "$f")"
read -r rm rf rs <<<"$("$onering" run --mem 2G -v "$(pwd)/$out/mmapfile-vol:/data" "$out/mmapfile" /data/f)"
awk -v hm="$hm" -v hf="$hf" -v hs="$hs" -v rm="$rm" -v rf="$rf" -v rs="$rs" -v mb="$MB" 'BEGIN {
    printf "mmap of %d MiB (us)         host %9.0f  onering %9.0f\n", mb, hm, rm
    printf "first touch (us)             host %9.0f  onering %9.0f\n", hf, rf
    printf "read every page (us)         host %9.0f  onering %9.0f\n", hs, rs }'
