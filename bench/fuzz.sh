#!/usr/bin/env bash
# The long fuzz run (issue 13): tests/guest/c/fuzz.c making random system calls in
# VM after VM (seeds in turn, --smp 1 and 2, one and four threads, 500,000 calls
# each, two VMs at a time) until TOTAL calls (default 100,000,000), then mutated
# real programs (MUTANTS, default 1000) and VMs scribbling on their hostcall block
# (SCRIBBLES, default 400). Prints what ran and what went wrong: kernel panics,
# VMM crashes (onering killed by a signal), hangs (a VM not done within 2 min; one takes ~5 s),
# and other failures (the fuzzer not ending with 0, e.g. out of memory). Findings
# are kept in target/bench/fuzz-findings/ with the command that reproduces them.
#   bench/fuzz.sh [TOTAL] [MUTANTS] [SCRIBBLES]
set -euo pipefail
cd "$(dirname "$0")/.."
TOTAL=${1:-100000000}
MUTANTS=${2:-1000}
SCRIBBLES=${3:-400}
out=target/bench
mkdir -p "$out/fuzz-findings"
cargo build --release -q
# (A copy: a rebuild during the long run must not change what it runs.)
cp target/release/onering "$out/onering-fuzz"
musl-gcc -static -O2 tests/guest/c/fuzz.c -o "$out/fuzz" -lpthread
musl-gcc -static -O2 tests/guest/c/hello.c -o "$out/hello"
musl-gcc -static -O2 tests/guest/c/threads.c -o "$out/threads" -lpthread
python3 - "$TOTAL" "$MUTANTS" "$SCRIBBLES" "$(pwd)/$out/onering-fuzz" "$out" <<'PY'
import os, random, subprocess, sys, time
from concurrent.futures import ThreadPoolExecutor
total, mutants, scribbles, onering, out = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5]
PER_VM = 500_000
counts = dict(calls=0, vms=0, panics=0, crashes=0, hangs=0, failures=0)
def finding(kind, args, err):
    n = sum(counts[k] for k in ("panics", "crashes", "hangs", "failures"))
    with open(f"{out}/fuzz-findings/{kind}-{n}.txt", "w") as f:
        f.write(" ".join(args) + "\n" + err)
def run(args, limit):
    try:
        p = subprocess.run(args, capture_output=True, timeout=limit)
        return p.returncode, p.stdout.decode(errors="replace"), p.stderr.decode(errors="replace")
    except subprocess.TimeoutExpired as e:
        return None, "", (e.stderr or b"").decode(errors="replace")
def calls_vm(i):
    smp, threads = 1 + i % 2, (1, 4)[(i // 2) % 2]
    args = [onering, "run", "--quiet", "--mem", "1G", "--smp", str(smp), f"{out}/fuzz", str(1000 + i), str(PER_VM), str(threads)]
    return args, run(args, 120)
start = time.time()
i = 0
with ThreadPoolExecutor(2) as pool:
    while counts["calls"] < total:
        batch = list(pool.map(calls_vm, range(i, i + 2)))
        i += 2
        for args, (rc, so, se) in batch:
            counts["vms"] += 1
            line = [l for l in so.splitlines() if l.startswith("fuzz: ")]
            if line:
                counts["calls"] += int(line[-1].split()[1])
            if rc is None:
                counts["hangs"] += 1; finding("hang", args, se)
            elif "kernel panic" in se:
                counts["panics"] += 1; finding("panic", args, se)
            elif rc < 0:
                counts["crashes"] += 1; finding("crash", args, se)
            elif rc != 0:
                counts["failures"] += 1; finding("failure", args, se)
        if counts["vms"] % 20 == 0:
            print(f"  ... {counts['calls']:,} calls in {counts['vms']} VMs, {time.time() - start:.0f} s", flush=True)
elapsed = time.time() - start
print(f"system calls: {counts['calls']:,} in {counts['vms']} VMs ({elapsed:.0f} s, {counts['calls'] / elapsed:,.0f} calls/s)")
print(f"  kernel panics {counts['panics']}, VMM crashes {counts['crashes']}, hangs {counts['hangs']}, other failures {counts['failures']}")
rng = random.Random(1)
m = dict(runs=0, refused=0, spins=0, panics=0, crashes=0)
for k in range(mutants):
    data = bytearray(open(f"{out}/{('hello', 'threads')[k % 2]}", "rb").read())
    for _ in range(rng.randint(1, 8)):
        at = rng.randrange(0, 64 + 56 * 8) if rng.random() < 0.6 else rng.randrange(len(data))
        data[at] = rng.randrange(256)
    path = f"{out}/mutant"
    open(path, "wb").write(data); os.chmod(path, 0o755)
    args = [onering, "run", "--quiet", "--mem", "128M", path]
    rc, so, se = run(args, 10)
    m["runs"] += 1
    if rc is None: m["spins"] += 1
    elif "kernel panic" in se: m["panics"] += 1; os.rename(path, f"{out}/fuzz-findings/mutant-{k}"); finding("mutant-panic", args, se)
    elif rc < 0: m["crashes"] += 1; finding("mutant-crash", args, se)
    elif rc == 126: m["refused"] += 1
print(f"mutated programs: {m['runs']} run, {m['refused']} refused (126), {m['spins']} still running after 10 s (spinning mutants)")
print(f"  kernel panics {m['panics']}, VMM crashes {m['crashes']}")
s = dict(vms=0, stopped=0, hangs=0, crashes=0)
for k in range(scribbles):
    args = [onering, "run", "--quiet", "--smp", str(1 + k % 2), f"{out}/fuzz", str(k), "100000", "1", "scribble"]
    rc, so, se = run(args, 60)
    s["vms"] += 1
    if rc is None: s["hangs"] += 1; finding("scribble-hang", args, se)
    elif rc < 0: s["crashes"] += 1; finding("scribble-crash", args, se)
    elif rc == 125: s["stopped"] += 1
print(f"hostcall scribbles: {s['vms']} VMs, {s['stopped']} stopped by the VMM with a message; VMM crashes {s['crashes']}, hangs {s['hangs']}")
print("target (issue 13): 0 panics and 0 hangs over >= 100 million fuzzed calls")
PY
