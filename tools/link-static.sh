#!/bin/sh
# Linker wrapper (see .cargo/config.toml): links the onering executable as a static
# PIE, everything else exactly as rustc asked.
#
# Why: a dynamically linked Rust binary takes ~0.25 ms longer to start on our
# machines (every page fault and loader step costs more under the software
# hypervisor), and onering's whole run should take under 2 ms. `-C
# target-feature=+crt-static` would do this, but with no `--target` it also applies
# to proc-macro crates (clap, thiserror), which cannot be built that way; and with
# `--target` the binary would no longer be target/release/onering.
#
# The rewrite is the difference between rustc's dynamic and crt-static link lines:
# libgcc_s becomes libgcc_eh + libgcc, shared libraries become static archives, and
# -pie becomes -static-pie.
static=no
prev=
for a in "$@"; do
    if [ "$prev" = "-o" ]; then
        case "$a" in */deps/onering-*) static=yes ;; esac
    fi
    prev=$a
done
for a in "$@"; do [ "$a" = "-shared" ] && static=no; done
if [ "$static" = no ]; then
    exec cc "$@"
fi
for a in "$@"; do
    shift
    case "$a" in
        -lgcc_s) set -- "$@" -lgcc_eh -lgcc ;;
        -Wl,-Bdynamic) set -- "$@" -Wl,-Bstatic ;;
        -pie) set -- "$@" -static -no-pie ;;
        *) set -- "$@" "$a" ;;
    esac
done
exec cc "$@" -lc
