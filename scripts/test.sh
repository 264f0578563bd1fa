#!/usr/bin/env bash
# Installs what the tests need and runs all of them: formatting and lints, host unit
# tests (ELF, rewriter, exits, the kernel's libraries and handlers, fuzzing),
# and the guest programs run through `onering run` on 1, 2 and 4 vCPUs. Needs
# /dev/kvm: without it the guest tests fail loudly.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
command -v go >/dev/null || export PATH="$PATH:/usr/local/go/bin"
if [ ! -e /dev/kvm ]; then
    echo "test: /dev/kvm is missing: the guest tests cannot run on this machine" >&2
fi
cargo fmt --all -- --check
cargo clippy --workspace --all-targets --release -- -D warnings
# The guest-only half of the kernel (arch, boot, syscall handlers) builds only for
# x86_64-unknown-none: lint it there too.
CARGO_ENCODED_RUSTFLAGS=$(printf -- '-Crelocation-model=static\x1f-Ccode-model=kernel') \
    cargo clippy -p onering-kernel -p onering-arch --features onering-kernel/guest --target x86_64-unknown-none --release \
    --target-dir target/guest-clippy -- -D warnings
cargo test --workspace --release
# The guest programs again on 2 and 4 vCPUs (tests that choose their own keep it).
for smp in 2 4; do
    echo "test: guest programs with --smp $smp" >&2
    ONERING_TEST_SMP=$smp cargo test --release -p onering --test run --test go --test stdio --test signals
done
