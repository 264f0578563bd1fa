#!/usr/bin/env bash
# Installs what building and testing onering needs on a fresh Debian machine of our
# kind (Rust and Go are already there): musl-gcc for the guest test programs, gcc and
# glibc's static libraries (the onering binary is linked statically), busybox-static
# (a glibc static program the rewriter is tested on), passt (the user-mode network
# back end of -p and --net user), gdb (tests/gdb.rs drives it against --gdb), zstd (a .tar.zst --rootfs in the
# tests), podman and containerd (clients of onering as an OCI runtime, tests/oci.rs), and the
# x86_64-unknown-none target for the guest kernel. Safe to run again.
set -euo pipefail
need=()
command -v musl-gcc >/dev/null || need+=(musl-tools)
command -v cc >/dev/null || need+=(gcc)
[ -e /usr/lib/x86_64-linux-gnu/libc.a ] || need+=(libc6-dev)
[ -x /bin/busybox ] || need+=(busybox-static) # a glibc static binary for the rewriter's tests
command -v passt >/dev/null || need+=(passt)  # user-mode networking for -p and --net user
command -v gdb >/dev/null || need+=(gdb)      # the --gdb test
command -v zstd >/dev/null || need+=(zstd)    # a .tar.zst rootfs in the tests
command -v podman >/dev/null || need+=(podman) # tests/oci.rs: podman with onering as its OCI runtime
command -v ctr >/dev/null || need+=(containerd) # tests/oci.rs: containerd's runc shim running onering
if [ ${#need[@]} -gt 0 ]; then
    sudo=""
    [ "$(id -u)" = 0 ] || sudo=sudo
    $sudo apt-get update -qq
    $sudo apt-get install -y -qq "${need[@]}"
fi
if ! command -v go >/dev/null; then
    if [ -x /usr/local/go/bin/go ]; then export PATH="$PATH:/usr/local/go/bin"; else
        echo "setup: go not found; the rewriter's tests build a Go program" >&2
        exit 1
    fi
fi
if ! command -v cargo >/dev/null; then
    echo "setup: cargo not found; install Rust with rustup first" >&2
    exit 1
fi
rustup target list --installed | grep -qx x86_64-unknown-none || rustup target add x86_64-unknown-none
rustup component list --installed 2>/dev/null | grep -q '^clippy' || rustup component add clippy rustfmt
