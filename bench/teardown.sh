#!/usr/bin/env bash
# Benchmark: how long onering's teardown helper outlives it. onering exits as soon
# as the program's status is known; a helper task it cloned releases the VM (its
# memory, KVM's state) afterwards, and must end within milliseconds (issue 13).
# This runs `onering run` N times (default 20) for a hello world and for a program
# that touched 1 GiB, as a child subreaper, and prints how long after onering's
# exit the helper was gone (reaped), beside the program's own run time on the host.
set -euo pipefail
cd "$(dirname "$0")/.."
N=${1:-20}
out=target/bench
mkdir -p "$out"
cargo build --release -q
musl-gcc -static -O2 tests/guest/c/hello.c -o "$out/hello"
cat > "$out/touch.c" <<'C'
#include <stdlib.h>
#include <string.h>
int main(int c, char **v) { size_t n = (size_t)atoi(v[1]) << 20; char *p = malloc(n); memset(p, 1, n); return p[n - 1] - 1; }
C
musl-gcc -static -O2 "$out/touch.c" -o "$out/touch"
python3 - "$N" "$(pwd)/target/release/onering" "$out" <<'PY'
import ctypes, os, subprocess, sys, time
n, onering, out = int(sys.argv[1]), sys.argv[2], sys.argv[3]
ctypes.CDLL(None).prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER: orphans come to us
def measure(args):
    runs, after, left = [], [], 0
    for _ in range(n):
        t0 = time.monotonic()
        subprocess.run(args, stdout=subprocess.DEVNULL, check=True)
        t1 = time.monotonic()
        while True:  # reap what was left behind, waiting for it
            try:
                os.waitpid(-1, 0)
                left += 1
            except ChildProcessError:
                break
        runs.append(t1 - t0)
        after.append(time.monotonic() - t1)
    runs.sort(); after.sort()
    return runs[n // 2] * 1e3, after[n // 2] * 1e3, after[-1] * 1e3, left / n
print(f"{'':44} {'run':>9} {'gone after exit':>16} {'worst':>9} {'left':>5}")
for label, args in [
    ("host: ./hello", [f"{out}/hello"]),
    ("onering run ./hello", [onering, "run", f"{out}/hello"]),
    ("host: ./touch 1024 (1 GiB touched)", [f"{out}/touch", "1024"]),
    ("onering run --mem 2G ./touch 1024", [onering, "run", "--mem", "2G", f"{out}/touch", "1024"]),
]:
    r, med, worst, left = measure(args)
    print(f"{label:44} {r:7.2f} ms {med:13.2f} ms {worst:6.2f} ms {left:5.1f}")
print("target (issue 13): the helper ends within milliseconds of onering (and never lingers)")
PY
