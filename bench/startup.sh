#!/usr/bin/env bash
# Benchmark (issues 2 and 18): end-to-end time of `onering run PROGRAM` next to the
# host running the same program directly, median/p10/p90 of N runs each (default
# 100), in one run, for: a musl static hello, a glibc static hello, a Go hello, a
# glibc dynamic hello and /bin/true (their loader and libc from the host's tree),
# and Python's start-up (`python3 -c pass`). Runs are spaced 5 ms apart (the
# machine's second CPU goes idle between them; waking it costs ~1 ms here), and a
# first row for the musl hello back to back, as hyperfine runs. Then the phases of
# one run of each (ONERING_TRACE). Targets (issue 18): musl <= 1 ms, glibc static
# <= 2 ms, Go <= 3 ms, each printed as met / NOT met.
set -euo pipefail
cd "$(dirname "$0")/.."
N=${1:-100}
out=target/bench
mkdir -p "$out"
cargo build --release -q
gcc -O2 bench/spawn.c -o "$out/spawn"
musl-gcc -static -O2 tests/guest/c/hello.c -o "$out/hello"
gcc -static -O2 tests/guest/c/hello.c -o "$out/hello-glibc"
gcc -O2 tests/guest/c/hello.c -o "$out/hello-dynamic"
mkdir -p "$out/gohello"
cat > "$out/gohello/main.go" <<'GO'
package main

import "fmt"

func main() { fmt.Println("hello from Go") }
GO
[ -f "$out/gohello/go.mod" ] || (cd "$out/gohello" && go mod init gohello >/dev/null 2>&1)
(cd "$out/gohello" && CGO_ENABLED=0 go build -o ../gohello.bin .)
onering=${ONERING:-$(pwd)/target/release/onering} # ONERING=path runs another build
"$out/spawn" 20 "$onering" run "$out/hello" >/dev/null # warm the page cache
"$out/spawn" 3 "$onering" run /usr/bin/python3 -c pass >/dev/null # and the plan cache
printf '%-44s %10s %10s %10s %8s\n' "startup ($N runs)" "median" "p10" "p90" "ratio"
row() { # label target_us command...
    local label=$1 target=$2
    shift 2
    read -r host hp10 hp90 < <("$out/spawn" "$N" "$@")
    read -r ring rp10 rp90 < <("$out/spawn" "$N" "$onering" run "$@")
    printf '%-44s %8s us %8s us %8s us\n' "host: $label" "$host" "$hp10" "$hp90"
    local verdict=""
    if [ "$target" != - ]; then
        verdict=$(awk -v r="$ring" -v t="$target" 'BEGIN { print (r <= t ? "target <= " t " us: met" : "target <= " t " us: NOT met") }')
    fi
    printf '%-44s %8s us %8s us %8s us %7sx  %s\n' "onering run: $label" "$ring" "$rp10" "$rp90" \
        "$(awk -v h="$host" -v r="$ring" 'BEGIN { printf "%.1f", r / h }')" "$verdict"
}
GAP_US=0 row "musl static hello (back to back)" 1000 "$out/hello"
row "musl static hello" 1000 "$out/hello"
row "glibc static hello" 2000 "$out/hello-glibc"
row "Go hello" 3000 "$out/gohello.bin"
row "glibc dynamic hello" - "$out/hello-dynamic"
row "/bin/true (dynamic)" - /bin/true
row "python3 -c pass" - /usr/bin/python3 -c pass
echo
echo "phases of one run each (ONERING_TRACE=1):"
for p in "$out/hello" "$out/hello-glibc" "$out/gohello.bin" "$out/hello-dynamic"; do
    echo "  $(basename "$p"):"
    ONERING_TRACE=1 "$onering" run "$p" 2>&1 >/dev/null | sed -n 's/^onering: trace/   /p'
done
