#!/usr/bin/env bash
# Sets everything up, builds onering, and runs the demo: a musl static C program
# in its own VM, with arguments, environment and exit status; then a crash; then the
# start-up benchmark against the host.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
cargo build --release
mkdir -p target/demo
musl-gcc -static -O2 tests/guest/c/hello.c -o target/demo/hello
musl-gcc -static -O2 tests/guest/c/segv.c -o target/demo/segv
set -x
./target/release/onering run -e GREETING=hello -e EXIT_CODE=3 target/demo/hello a b || echo "exit status $?"
./target/release/onering run target/demo/segv || echo "exit status $?"
{ set +x; } 2>/dev/null
./bench/startup.sh 30
