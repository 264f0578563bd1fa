#!/usr/bin/env bash
# Files beside the host (issue 16), in one run, each row the host's figure,
# onering's and the ratio (above 1: onering is faster):
#   start-up with an empty and a 1 GiB --rootfs (the difference, not a ratio);
#   sequential read of a file cold (the host's page cache dropped first) and warm,
#   on a volume in onering (--mem 4G: the page cache, a quarter of it, holds the
#   file); 4 KiB random reads warm; a sequential write to a volume
#   with fsync; create+stat+unlink of small files on a volume and on /tmp; SQLite
#   inserts in WAL mode on a volume.
#   bench/files.sh [MB] [FILES] [INSERTS]         (root, for drop_caches)
set -euo pipefail
cd "$(dirname "$0")/.."
MB=${1:-512}
FILES=${2:-10000}
INSERTS=${3:-20000}
out=target/bench
mkdir -p "$out"
cargo build --release -q
onering=${ONERING:-$(pwd)/target/release/onering}
gcc -static -O2 -DSQLITE bench/files.c -o "$out/files" -lsqlite3 -lm -lpthread 2>/dev/null
musl-gcc -static -O2 tests/guest/c/hello.c -o "$out/hello"
row() { # label unit higher-is-better host onering
    awk -v l="$1" -v u="$2" -v hib="$3" -v h="$4" -v r="$5" 'BEGIN {
        ratio = hib ? r / h : h / r
        printf "%-46s host %9s %-8s onering %9s %-8s %.2fx\n", l, h, u, r, u, ratio }'
}
drop() { sync; echo 3 > /proc/sys/vm/drop_caches 2>/dev/null || true; }
work=$(mktemp -d /tmp/onering-files.XXXX)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/empty" "$work/big" "$work/vol"
# Start-up: the median of 11 runs each, an empty rootfs and one with a 1 GiB file.
cp "$out/hello" "$work/empty/hello"; cp "$out/hello" "$work/big/hello"
head -c $((1 << 30)) /dev/urandom > "$work/big/blob"
sync # (the host writing the new GiB back while the runs go would time the host's disk)
once_us() { s=$(date +%s%N); "$onering" run --rootfs "$1" /hello >/dev/null; e=$(date +%s%N); echo $(( (e - s) / 1000 )); }
median_ms() { sort -n "$1" | sed -n 6p | awk '{ printf "%.2f", $1 / 1000 }'; }
: > "$work/e.us"; : > "$work/b.us"
for _ in $(seq 11); do # interleaved, so a drift of the machine's load hits both alike
    once_us "$work/empty" >> "$work/e.us"; once_us "$work/big" >> "$work/b.us"
done
e=$(median_ms "$work/e.us"); b=$(median_ms "$work/b.us")
printf "%-46s empty %7s ms  1 GiB %7s ms  difference %s ms (target <= 1)\n" "start-up, --rootfs" "$e" "$b" \
    "$(awk -v a="$e" -v b="$b" 'BEGIN { printf "%.2f", b - a }')"
rm "$work/big/blob"
# Reads: a MB-megabyte file in the volume.
head -c $((MB << 20)) /dev/urandom > "$work/vol/data"
drop; h=$("$out/files" read "$work/vol/data")
drop; r=$("$onering" run --mem 4G -v "$work/vol:/v" "$out/files" read /v/data)
read -r hc hw hr <<<"$h"; read -r rc rw rr <<<"$r"
row "sequential read, $MB MiB, cold (volume)" MB/s 1 "$hc" "$rc"
row "sequential read, $MB MiB, warm (volume)" MB/s 1 "$hw" "$rw"
row "4 KiB random reads, warm (volume)" reads/s 1 "$hr" "$rr"
rm "$work/vol/data"
h=$("$out/files" write "$work/vol/w" "$MB"); r=$("$onering" run -v "$work/vol:/v" "$out/files" write /v/w "$MB")
row "sequential write + fsync, $MB MiB (volume)" MB/s 1 "$h" "$r"
h=$("$out/files" meta "$work/vol" "$FILES"); r=$("$onering" run -v "$work/vol:/v" "$out/files" meta /v "$FILES")
row "create+stat+unlink, $FILES files (volume)" files/s 1 "$h" "$r"
mkdir -p /tmp/onering-meta.$$; h=$("$out/files" meta /tmp/onering-meta.$$ "$FILES"); rmdir /tmp/onering-meta.$$
r=$("$onering" run "$out/files" meta /tmp "$FILES")
row "create+stat+unlink, $FILES files (/tmp)" files/s 1 "$h" "$r"
h=$("$out/files" sqlite "$work/vol/s.db" "$INSERTS"); r=$("$onering" run --mem 512M -v "$work/vol:/v" "$out/files" sqlite /v/s.db "$INSERTS")
row "SQLite WAL inserts, $INSERTS (volume)" inserts/s 1 "$h" "$r"
echo "targets (issue 16): warm reads >= 1.0x; cold reads and volume writes >= 0.5x; metadata >= 0.5x; SQLite >= 0.7x"
