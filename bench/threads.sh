#!/usr/bin/env bash
# Benchmarks of issue 4, host and onering side by side in one run:
#  (a) the seed's producer/consumer: two threads hand one item at a time through
#      two POSIX semaphores, the producer spinning BURN iterations per item
#      (onering with --smp 2; target: at least 2x faster than the host);
#  (b) cyclictest-style timer latency: N absolute sleeps of 200 us, median, p99 and
#      maximum lateness (target: median and p99 no worse than the host under
#      SCHED_FIFO);
#  (c) idle cost: host CPU time onering uses while its program sleeps 5 s
#      (target: under 2% of one core);
#  (d) what a cross-CPU wake-up costs: a thread blocked on a futex is woken by
#      another after a short gap (its CPU still polls) and after a long one (its
#      CPU has halted: onering kicks it through the VMM, the host sends an IPI);
#  (e) parallel programs (issue 13): bench/parallel.c, a walker handing files to
#      worker threads that read and hash them (the shape of a parallel grep),
#      and Go's math/big tests; 1 thread/vCPU and 2 threads/vCPUs, host beside
#      onering (targets: onering --smp 2 at least as fast as --smp 1, and within
#      1.2x of the host with 2 threads; for math/big, whose tests are mostly
#      sequential, --smp 2 may lose to --smp 1 only as much as the host's
#      GOMAXPROCS=2 loses to 1).
# The producer/consumer binary is built twice: with glibc, the seed's C library
# (its sem_wait sleeps in the kernel at once), which is the target's figure; and
# with musl, whose sem_wait spins ~100 pauses in user space first: that covers a
# burn of a few microseconds, so the host never sleeps and the kernel's hand-off
# hardly matters (reported for completeness).
# usage: bench/threads.sh [items] [burn] [sleeps]
set -euo pipefail
cd "$(dirname "$0")/.."
ITEMS=${1:-50000}
BURN=${2:-5000}
SLEEPS=${3:-100000}
out=target/bench
mkdir -p "$out"
cargo build --release -q
musl-gcc -static -O2 bench/prodcons.c -o "$out/prodcons" -lpthread
gcc -static -O2 bench/prodcons.c -o "$out/prodcons-glibc" -pthread
gcc -static -O2 bench/wake.c -o "$out/wake" -pthread
musl-gcc -static -O2 bench/timerlat.c -o "$out/timerlat"
printf '#include <unistd.h>\nint main(void){sleep(5);return 0;}\n' >"$out/sleep5.c"
musl-gcc -static -O2 "$out/sleep5.c" -o "$out/sleep5"
musl-gcc -static -O2 bench/parallel.c -o "$out/parallel" -lpthread
export PATH="$PATH:/usr/local/go/bin"
(cd "$out" && CGO_ENABLED=0 go test -c -o big.test math/big)
onering=${ONERING:-./target/release/onering} # ONERING=path compares another build
ratio() { awk -v h="$1" -v r="$2" 'BEGIN{printf "%.2fx", h/r}'; }

echo "(a) producer/consumer, $ITEMS items (ns/item; host/onering)"
for libc in glibc musl; do
    bin="$out/prodcons-glibc"
    [ "$libc" = musl ] && bin="$out/prodcons"
    for burn in 0 "$BURN" 20000; do
        h=$("$bin" "$ITEMS" "$burn")
        r=$("$onering" run --smp 2 "$bin" "$ITEMS" "$burn")
        printf '  %-5s burn %-6s host %10s  onering --smp 2 %10s  %s\n' "$libc" "$burn" "$h" "$r" "$(ratio "$h" "$r")"
        if [ "$libc" = glibc ] && [ "$burn" = "$BURN" ]; then
            a_ratio=$(awk -v h="$h" -v r="$r" 'BEGIN{printf "%.2f", h/r}')
        fi
    done
done

echo "(b) timer latency, $SLEEPS sleeps of 200 us (lateness in us: median p99 max)"
host=$("$out/timerlat" "$SLEEPS" 200)
echo "  host (default timer slack)   $host"
if fifo=$(chrt -f 50 "$out/timerlat" "$SLEEPS" 200 2>/dev/null); then
    echo "  host SCHED_FIFO              $fifo"
else
    fifo=""
    echo "  host SCHED_FIFO              (chrt -f not permitted here)"
fi
ring=$("$onering" run "$out/timerlat" "$SLEEPS" 200)
echo "  onering                      $ring"

echo "(c) idle cost: host CPU time while the program sleeps 5 s"
TIMEFORMAT='%R %U %S'
t=$( { time "$onering" run "$out/sleep5" >/dev/null; } 2>&1 | tail -1)
idle=$(awk -v t="$t" 'BEGIN{split(t, a, " "); printf "%.3f", (a[2] + a[3]) / a[1] * 100}')
echo "  onering: wall, user, sys (s): $t -> ${idle}% of one core"

echo "(d) cross-CPU wake-up latency, 2000 wakes (us: median p99)"
for gap in 20 2000; do
    printf '  after %4s us: host %-12s  onering --smp 2 %s\n' "$gap" "$("$out/wake" 2000 "$gap")" \
        "$("$onering" run --smp 2 "$out/wake" 2000 "$gap")"
done

echo "(e) parallel programs (ms; best of 3)"
# Timed inside the program (parallel.c) or around the whole run (math/big: boot
# included, ~30 ms).
best() { sort -n | head -1; }
par() { # par RUNNER THREADS -> elapsed ms of the hashing, best of 3
    for _ in 1 2 3; do "$@" 2>&1 >/dev/null | awk '/elapsed_ms/{print $2}'; done | best
}
wall() { for _ in 1 2 3; do
    s=$(date +%s%N); "$@" >/dev/null 2>&1; echo $((($(date +%s%N) - s) / 1000000)); done | best; }
mkdir -p "$out/tree"
# 300 files of 8 KiB hashed 40 times: the guest's /tmp holds a few MiB.
ph1=$(par "$out/parallel" "$out/tree" 1 300 8 files 40)
ph2=$(par "$out/parallel" "$out/tree" 2 300 8 files 40)
pr1=$(par "$onering" run --smp 1 "$out/parallel" /tmp 1 300 8 files 40)
pr2=$(par "$onering" run --smp 2 "$out/parallel" /tmp 2 300 8 files 40)
printf '  hash files: host 1 thread %6s, 2 threads %6s | onering --smp 1 %6s, --smp 2 (2 threads) %6s  %s of host\n' \
    "$ph1" "$ph2" "$pr1" "$pr2" "$(ratio "$pr2" "$ph2")"
gh1=$(GOMAXPROCS=1 wall "$out/big.test" -test.run Test -test.short)
gh2=$(GOMAXPROCS=2 wall "$out/big.test" -test.run Test -test.short)
gr1=$(wall "$onering" run --smp 1 "$out/big.test" -test.run Test -test.short)
gr2=$(wall "$onering" run --smp 2 "$out/big.test" -test.run Test -test.short)
printf '  go math/big: host GOMAXPROCS=1 %6s, =2 %6s | onering --smp 1 %6s, --smp 2 %6s  %s of host\n' \
    "$gh1" "$gh2" "$gr1" "$gr2" "$(ratio "$gr2" "$gh2")"

echo "targets:"
awk -v r="$a_ratio" -v b="$BURN" 'BEGIN{printf "  (a) at least 2x the host (glibc, burn %s): %s (%.2fx)\n", b, (r >= 2 ? "met" : "NOT met"), r}'
if [ -n "$fifo" ]; then
    awk -v f="$fifo" -v o="$ring" 'BEGIN{split(f, F, " "); split(o, O, " ");
        printf "  (b) median and p99 no worse than host SCHED_FIFO: %s\n", (O[1] <= F[1] && O[2] <= F[2] ? "met" : "NOT met")}'
fi
awk -v i="$idle" 'BEGIN{printf "  (c) under 2%% of a core: %s\n", (i < 2 ? "met" : "NOT met")}'
awk -v r1="$pr1" -v r2="$pr2" -v h2="$ph2" 'BEGIN{printf "  (e) hash files: --smp 2 <= --smp 1 and <= 1.2x host: %s (%.2fx of smp1, %.2fx of host)\n",
    (r2 <= r1 && r2 <= 1.2 * h2 ? "met" : "NOT met"), r2 / r1, r2 / h2}'
# math/big's tests are mostly sequential: on a 2-CPU host GOMAXPROCS=2 is often no
# faster than 1, so its target is the host's own ratio (5% noise allowed).
awk -v r1="$gr1" -v r2="$gr2" -v h1="$gh1" -v h2="$gh2" 'BEGIN{printf "  (e) go math/big: --smp 2 / --smp 1 <= host 2/1 and <= 1.2x host: %s (%.2f vs host %.2f; %.2fx of host)\n",
    (r2 / r1 <= h2 / h1 * 1.05 && r2 <= 1.2 * h2 ? "met" : "NOT met"), r2 / r1, h2 / h1, r2 / h2}'
