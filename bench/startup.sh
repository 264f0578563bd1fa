#!/usr/bin/env bash
# Benchmark: end-to-end time of `onering run hello` next to the host running the same
# musl static hello directly. Median of N runs each (default 200), in one run, twice:
# back to back (as hyperfine runs), and spaced 5 ms apart, where the machine's second
# CPU has gone idle between runs (waking an idle CPU costs ~1 ms on our machines,
# and setting up a VM blocks on kernel threads a few times).
# Target (issue 2): onering under 2 ms.
set -euo pipefail
cd "$(dirname "$0")/.."
N=${1:-200}
out=target/bench
mkdir -p "$out"
cargo build --release -q
gcc -O2 bench/spawn.c -o "$out/spawn"
musl-gcc -static -O2 tests/guest/c/hello.c -o "$out/hello"
onering=$(pwd)/target/release/onering
"$out/spawn" 20 "$onering" run "$out/hello" >/dev/null # warm the page cache
printf '%-36s %10s %10s %10s\n' "startup ($N runs)" "median" "p10" "p90"
for gap in 0 5000; do
    label=$([ "$gap" = 0 ] && echo "back to back" || echo "spaced 5 ms")
    read -r host hp10 hp90 < <(GAP_US=$gap "$out/spawn" "$N" "$out/hello")
    read -r ring rp10 rp90 < <(GAP_US=$gap "$out/spawn" "$N" "$onering" run "$out/hello")
    printf '%-36s %8s us %8s us %8s us\n' "host: ./hello ($label)" "$host" "$hp10" "$hp90"
    printf '%-36s %8s us %8s us %8s us\n' "onering run ./hello ($label)" "$ring" "$rp10" "$rp90"
    awk -v h="$host" -v r="$ring" -v l="$label" 'BEGIN { printf "  %s: ratio onering/host %.2fx; target onering < 2000 us: %s\n", l, r / h, (r < 2000 ? "met" : "NOT met") }'
done
