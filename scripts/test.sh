#!/usr/bin/env bash
# Installs what the tests need and runs all of them: formatting and lints, host unit
# tests (ELF, stack, page tables, exits, the kernel's memory manager and console),
# and the guest programs run through `onering run`. Needs /dev/kvm: without it the
# guest tests fail loudly.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
command -v go >/dev/null || export PATH="$PATH:/usr/local/go/bin"
if [ ! -e /dev/kvm ]; then
    echo "test: /dev/kvm is missing: the guest tests cannot run on this machine" >&2
fi
cargo fmt --all -- --check
cargo clippy --workspace --all-targets --release -- -D warnings
cargo test --workspace --release
