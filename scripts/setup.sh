#!/usr/bin/env bash
# Installs what building and testing onering needs on a fresh Debian machine of our
# kind (Rust is already there, by rustup): musl-gcc for the guest test programs, gcc
# and glibc's static libraries (the onering binary is linked statically), and the
# x86_64-unknown-none target for the guest kernel. Safe to run again.
set -euo pipefail
need=()
command -v musl-gcc >/dev/null || need+=(musl-tools)
command -v cc >/dev/null || need+=(gcc)
[ -e /usr/lib/x86_64-linux-gnu/libc.a ] || need+=(libc6-dev)
if [ ${#need[@]} -gt 0 ]; then
    sudo=""
    [ "$(id -u)" = 0 ] || sudo=sudo
    $sudo apt-get update -qq
    $sudo apt-get install -y -qq "${need[@]}"
fi
if ! command -v cargo >/dev/null; then
    echo "setup: cargo not found; install Rust with rustup first" >&2
    exit 1
fi
rustup target list --installed | grep -qx x86_64-unknown-none || rustup target add x86_64-unknown-none
rustup component list --installed 2>/dev/null | grep -q '^clippy' || rustup component add clippy rustfmt
