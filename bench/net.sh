#!/usr/bin/env bash
# Networking beside the host (issue 14), in one run: (a) TCP 1-byte ping-pong
# between two threads over loopback, (b) a 64 KiB-write TCP stream, (c) Go's
# net/http with 50 goroutines of keep-alive clients against an httptest server,
# (d) AF_UNIX ping-pong. Each prints the host's figure, onering's and the ratio
# (above 1: onering is faster), and onering's exits for the run (--stats): protocol
# work runs in the calling thread, so no exit per packet.
#   bench/net.sh [ROUNDS] [MB] [REQUESTS]
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${1:-100000}
MB=${2:-512}
REQS=${3:-20000}
out=target/bench
mkdir -p "$out"
cargo build --release -q
onering=${ONERING:-$(pwd)/target/release/onering}
musl-gcc -static -O2 bench/net.c -o "$out/net" -lpthread
command -v go >/dev/null || export PATH="$PATH:/usr/local/go/bin"
(cd bench/gohttp && CGO_ENABLED=0 go build -o "../../$out/gohttp" .)
row() { # label unit higher-is-better host onering
    awk -v l="$1" -v u="$2" -v hib="$3" -v h="$4" -v r="$5" 'BEGIN {
        ratio = hib ? r / h : h / r
        printf "%-44s host %10s %-6s onering %10s %-6s %.2fx\n", l, h, u, r, u, ratio }'
}
stats() { "$onering" run --stats "$@" 2>&1 >/dev/null | grep -Eo '[0-9]+ hostcalls' | head -1 || true; }
smp=2
h=$("$out/net" tcp-pingpong "$ROUNDS"); r=$("$onering" run --smp $smp "$out/net" tcp-pingpong "$ROUNDS")
row "(a) TCP ping-pong, 1 byte, ns/round trip" ns 0 "$h" "$r"
echo "    onering exits for $ROUNDS round trips: $(stats --smp $smp "$out/net" tcp-pingpong "$ROUNDS")"
h=$("$out/net" tcp-stream "$MB"); r=$("$onering" run --smp $smp "$out/net" tcp-stream "$MB")
row "(b) TCP stream, 64 KiB writes, MB/s" MB/s 1 "$h" "$r"
h=$("$out/gohttp" "$REQS"); r=$("$onering" run --smp $smp --mem 512M "$out/gohttp" "$REQS")
row "(c) Go net/http, 50 keep-alive clients, req/s" req/s 1 "$h" "$r"
h=$("$out/net" unix-pingpong "$ROUNDS"); r=$("$onering" run --smp $smp "$out/net" unix-pingpong "$ROUNDS")
row "(d) AF_UNIX ping-pong, 1 byte, ns/round trip" ns 0 "$h" "$r"
echo "targets (issue 14): (a) at least 2x the host, (c) at least 1.5x the host"
