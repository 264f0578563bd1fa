#!/usr/bin/env bash
# Networking beside the host (issue 14), in one run: (a) TCP 1-byte ping-pong
# between two threads over loopback, (b) a 64 KiB-write TCP stream, (c) Go's
# net/http with 50 goroutines of keep-alive clients against an httptest server,
# (d) AF_UNIX ping-pong. Each prints the host's figure, onering's and the ratio
# (above 1: onering is faster), and onering's exits for the run (--stats): protocol
# work runs in the calling thread, so no exit per packet. Then (e)-(g), the network
# device: a UDP echo with the server on the host, behind -p, and on a TAP device.
#   bench/net.sh [ROUNDS] [MB] [REQUESTS]      (UDPN=datagrams for (e)-(g))
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

# ---- the network device (issue 15): the seed's Benchmark-2 ---------------------------
# A UDP echo of 200-byte datagrams, one in flight, the client (bench/udpping.c) on the
# host: the server (a) on the host, (b) in onering behind `-p` (passt), (c) in onering
# on a TAP device in a network namespace made here (root). Exits per packet: the
# halts, doorbells and kicks --stats counts, over the packets each way.
UDPN=${UDPN:-20000}
if command -v passt >/dev/null; then
    gcc -O2 bench/udpping.c -o "$out/udpping"
    musl-gcc -static -O2 tests/guest/c/udpecho.c -o "$out/udpecho"
    free_port() { python3 -c 'import socket; s=socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
    udp_row() { # label result-line
        awk -v l="$1" '{ printf "%-44s %8s pps %7s Mbit/s p50 %7s us p99 %7s us\n", l, $1, $3, $6, $9 }' <<<"$2"
    }
    exits() { # stats-file packets
        awk -v n="$2" '/stats: net:/ { for (i = 1; i <= NF; i++) { if ($(i+1) == "doorbells,") d = $i; if ($(i+1) == "kicks,") k = $i } }
            /halts,/ { for (i = 1; i <= NF; i++) if ($(i+1) == "halts,") h = $i }
            END { printf "    exits per packet: %.2f (halts %d, doorbells %d; kicks %d, not exits)\n", (h + d) / (2 * n), h, d, k }' "$1"
    }
    p=$(free_port)
    "$out/udpecho" "$p" 0 >/dev/null & srv=$!
    sleep 0.3
    a=$("$out/udpping" 127.0.0.1 "$p" "$UDPN" 200); kill $srv
    udp_row "(e) UDP echo 200 B, server on the host" "$a"
    # (e2) The same through a relay process on the host (bench/udprelay.c): the one
    # user-mode hop passt adds to (f), without any VM.
    gcc -O2 bench/udprelay.c -o "$out/udprelay"
    p=$(free_port); q=$(free_port)
    "$out/udpecho" "$p" 0 >/dev/null & srv=$!
    "$out/udprelay" "$q" "$p" >/dev/null & rel=$!
    sleep 0.3
    a2=$("$out/udpping" 127.0.0.1 "$q" "$UDPN" 200); kill $srv $rel
    udp_row "(e2) the same through a relay process" "$a2"
    # (e3) Through two relays: the two user-mode hops passt without vhost-user
    # needs (passt, then the VMM's I/O thread), still without any VM.
    p=$(free_port); q=$(free_port); q2=$(free_port)
    "$out/udpecho" "$p" 0 >/dev/null & srv=$!
    "$out/udprelay" "$q" "$p" >/dev/null & rel=$!
    "$out/udprelay" "$q2" "$q" >/dev/null & rel2=$!
    sleep 0.3
    a3=$("$out/udpping" 127.0.0.1 "$q2" "$UDPN" 200); kill $srv $rel $rel2
    udp_row "(e3) the same through two relay processes" "$a3"
    p=$(free_port)
    "$onering" run --stats -p "127.0.0.1:$p:7/udp" "$out/udpecho" 7 0 >/dev/null 2>"$out/udp-p.stats" & srv=$!
    sleep 1
    b=$("$out/udpping" 127.0.0.1 "$p" "$UDPN" 200); kill -INT $srv; wait $srv 2>/dev/null || true
    udp_row "(f) UDP echo 200 B, onering behind -p (passt)" "$b"
    exits "$out/udp-p.stats" "$UDPN"
    if [ "$(id -u)" = 0 ]; then
        ns=onering-bench$$
        ip netns add $ns
        ip netns exec $ns ip link set lo up
        ip netns exec $ns ip tuntap add orb0 mode tap
        ip netns exec $ns ip addr add 10.9.1.1/24 dev orb0
        ip netns exec $ns ip link set orb0 up
        ip netns exec $ns "$onering" run --stats --net tap:orb0 --ip 10.9.1.2/24 --gateway 10.9.1.1 \
            "$out/udpecho" 7 0 >/dev/null 2>"$out/udp-tap.stats" & srv=$!
        sleep 1
        c=$(ip netns exec $ns "$out/udpping" 10.9.1.2 7 "$UDPN" 200); kill -INT $srv; wait $srv 2>/dev/null || true
        ip netns del $ns
        udp_row "(g) UDP echo 200 B, onering on a TAP device" "$c"
        exits "$out/udp-tap.stats" "$UDPN"
    else
        echo "(g) needs root (a network namespace and a TAP device): skipped"
    fi
    # (h) a TCP stream from the host into the VM behind -p, 64 KiB writes; (i) Go
    # net/http in the VM driven from the host (bench/gohttp's 50 keep-alive clients).
    gcc -O2 bench/tcpsend.c -o "$out/tcpsend"
    musl-gcc -static -O2 bench/tcpsink.c -o "$out/tcpsink"
    (cd tests/guest/go && CGO_ENABLED=0 go build -o "../../../$out/goguest" .)
    p=$(free_port)
    "$out/tcpsink" "$p" >/dev/null & srv=$!
    sleep 0.3
    h=$("$out/tcpsend" 127.0.0.1 "$p" "$MB" || echo failed); wait $srv || true
    p=$(free_port)
    "$onering" run --mem 512M -p "127.0.0.1:$p:5001" "$out/tcpsink" 5001 >/dev/null 2>&1 & srv=$!
    sleep 1
    r=$(timeout 60 "$out/tcpsend" 127.0.0.1 "$p" "$MB" || echo failed); kill -INT $srv 2>/dev/null; wait $srv 2>/dev/null || true
    echo "(h) TCP stream host -> VM behind -p, MB/s        host $h   onering $r"
    p=$(free_port)
    "$out/goguest" serve "$p" "$REQS" >/dev/null & srv=$!
    sleep 0.5
    h=$("$out/gohttp" "$REQS" "http://127.0.0.1:$p/" || echo failed); wait $srv || true
    p=$(free_port)
    "$onering" run --smp $smp --mem 512M -p "127.0.0.1:$p:8080" "$out/goguest" serve 8080 "$REQS" >/dev/null 2>&1 & srv=$!
    sleep 1.5
    r=$(timeout 120 "$out/gohttp" "$REQS" "http://127.0.0.1:$p/" || echo failed); wait $srv 2>/dev/null || true
    row "(i) Go net/http in the VM, from the host, req/s" req/s 1 "$h" "$r" 2>/dev/null || echo "(i) host $h onering $r"
    awk -v a="$a" -v b="$b" -v c="${c:-0}" -v r="$a2" 'BEGIN { split(a, x); split(b, y); split(c, z); split(r, w);
        printf "ratios: behind -p %.2fx of the host (target 0.5x), TAP %.2fx (target 0.7x); the relay alone %.2fx\n", y[1] / x[1], z[1] / x[1], w[1] / x[1] }'
else
    echo "(e-g) need passt (scripts/setup.sh installs it): skipped"
fi
