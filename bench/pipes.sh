#!/usr/bin/env bash
# Benchmark: programs whose output goes through a pipe, on the host and in onering,
# in one run (best of N each, default 5):
#  - `busybox seq 1 1000000 | wc -l` (issue 13: onering within 2x of the host;
#    before output was batched, onering made one exit per line: ~100x);
#  - `busybox tar cf - DIR | tar tf -` over a tree of 200 files (~20 MB);
#  - `busybox gzip -c FILE | gzip -dc | wc -c` of a 16 MB file;
#  - start-up alone with that rootfs (`true`): the rootfs is copied into the VM at
#    start today (~20 MB here), which dominates the tar line (the files issue).
# Needs /bin/busybox (busybox-static). ONERING=path runs another build.
set -euo pipefail
cd "$(dirname "$0")/.."
N=${1:-5}
cargo build --release -q
onering=${ONERING:-./target/release/onering}
out=target/bench/pipes
rm -rf "$out" && mkdir -p "$out/root/bin" "$out/root/data"
cp /bin/busybox "$out/root/bin/"
for i in $(seq 1 200); do head -c $((i * 1000)) /dev/urandom >"$out/root/data/f$i"; done
head -c 16000000 /dev/urandom | base64 >"$out/root/big"
best() { # best wall time (s) of N runs of the command line $1
    local b=999
    for _ in $(seq "$N"); do
        local s e
        s=$(date +%s.%N)
        bash -c "$1" >/dev/null
        e=$(date +%s.%N)
        b=$(awk -v b="$b" -v t="$(awk -v s="$s" -v e="$e" 'BEGIN{print e-s}')" 'BEGIN{print (t<b)?t:b}')
    done
    echo "$b"
}
ring="$onering run --rootfs $out/root"
printf '%-44s %10s %10s %8s\n' "workload (best of $N)" "host s" "onering s" "ratio"
while IFS='@' read -r name host guest; do
    h=$(best "$host")
    r=$(best "$guest")
    awk -v n="$name" -v h="$h" -v r="$r" 'BEGIN { printf "%-44s %10.3f %10.3f %7.2fx\n", n, h, r, r / h }'
done <<EOT
seq 1 1000000 | wc -l@/bin/busybox seq 1 1000000 | wc -l@$ring /bin/busybox seq 1 1000000 | wc -l
tar cf - data | tar tf -@cd $out/root && /bin/busybox tar cf - data | tar tf -@$ring -w / /bin/busybox tar cf - data | tar tf -
gzip -c big | gzip -dc | wc -c@/bin/busybox gzip -c $out/root/big | gzip -dc | wc -c@$ring /bin/busybox gzip -c /big | gzip -dc | wc -c
start-up with this rootfs (true)@/bin/busybox true@$ring /bin/busybox true
EOT
