#!/usr/bin/env bash
# Runs the OCI runtime-tools validation suite (github.com/opencontainers/runtime-tools
# v0.9.0, the newest version on the Go module proxy) against onering: fetches the
# module, pins the runtime-spec (v1.0.2) and go-selinux (v1.2.2) it was written for
# (its Godeps), builds the lifecycle, hooks and process validations and the static
# runtimetest program (which runs inside each container, here inside the VM), and
# prints each test's ok / not ok counts and the failing checks. Needs root, Go,
# /dev/kvm and a built target/release/onering. Not part of scripts/test.sh.
# Usage: tools/oci-validation.sh [WORKDIR]
set -euo pipefail
cd "$(dirname "$0")/.."
onering=$(pwd)/target/release/onering
work=${1:-/tmp/onering-oci-validation}
command -v go >/dev/null || export PATH="$PATH:/usr/local/go/bin"
rm -rf "$work"
mkdir -p "$work"
src=$(go mod download -json github.com/opencontainers/runtime-tools@v0.9.0 | sed -n 's/.*"Dir": "\(.*\)",/\1/p')
cp -r "$src" "$work/rt"
chmod -R u+w "$work/rt"
cd "$work/rt"
go mod init github.com/opencontainers/runtime-tools >/dev/null 2>&1
go mod tidy >/dev/null 2>&1
go get github.com/opencontainers/runtime-spec@v1.0.2 github.com/opencontainers/selinux@v1.2.2 >/dev/null 2>&1
CGO_ENABLED=0 go build -o runtimetest ./cmd/runtimetest
tests=(create delete delete_only_create_resources kill kill_no_effect killsig start state pidfile hooks
    hooks_stdin prestart prestart_fail poststart poststart_fail poststop poststop_fail default hostname mounts
    process root_readonly_true misc_props)
for t in "${tests[@]}"; do
    go build -o "$t.t" "./validation/$t/"
done
for t in "${tests[@]}"; do
    RUNTIME=$onering timeout 120 "./$t.t" >"$t.out" 2>&1 || true
    echo "$t: $(grep -c '^ok' "$t.out" || true) ok, $(grep -c '^not ok' "$t.out" || true) not ok"
    grep '^not ok' "$t.out" | sed 's/^/    /' || true
done
