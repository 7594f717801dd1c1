#!/usr/bin/env bash
# Builds Firecracker's `firecracker` binary (release profile, the host's gnu target) from a given
# source, for the side-by-side scripts (OSPREY_FIRECRACKER). Not run by CI: about 7 minutes on an
# idle 2-core host, longer when it is busy.
#
#   scripts/build-firecracker.sh [options] [SOURCE]
#
# SOURCE: a git URL or a git repository (working tree or bare) to clone Firecracker from; may be
#         left out when --src already holds a clone.
# Options:
#   --ref REF          tag or commit to build (default v1.16.1)
#   --src DIR          where the checkout lives and the build runs (default ./firecracker); an
#                      existing clone is reused (its build/ too)
#   --out DIR          where the binary is copied (default ./firecracker-bin)
#   --micro-http SRC   a git URL or repository of firecracker-microvm/micro-http: Firecracker pins
#                      it as a git dependency, which cargo cannot fetch where only crates.io is
#                      reachable; cloned to DIR-micro-http at the pinned commit and patched in.
#                      Without it cargo fetches the dependency itself (needs github.com).
# Needs libclang and libseccomp (Debian: libclang-dev libseccomp-dev). Built for the gnu target,
# Firecracker has no seccomp filter of its own (its build falls back to
# resources/seccomp/unimplemented.json): its figures are for the VMM's work, not its sandbox.
# Environment: CARGO_BUILD_JOBS (default 2) and NICE (default 10).
set -euo pipefail

ref=v1.16.1
src=./firecracker
out=./firecracker-bin
# shellcheck source=lib/anchor-build.sh
. "$(dirname "$0")/lib/anchor-build.sh"
parse_args 2,22 "$@"
# Test data the build does not read (a fetched mirror may lack these blobs).
checkout_ref Firecracker "$src" "$source" "$ref" \
    '/src/vmm/src/test_utils/mock_resources/*.bin' '/tests/'
micro_http_patch "$src" "$micro_http"

export CARGO_BUILD_JOBS="${CARGO_BUILD_JOBS:-2}"
start=$(date +%s)
(cd "$src" && nice -n "${NICE:-10}" cargo build --release -p firecracker "${patch_args[@]}")
echo "built in $(($(date +%s) - start)) s with CARGO_BUILD_JOBS=$CARGO_BUILD_JOBS"

mkdir -p "$out"
cp "$src/build/cargo_target/release/firecracker" "$out/"
out=$(cd "$out" && pwd)
"$out/firecracker" --version | head -1
echo "binary in $out: set OSPREY_FIRECRACKER=$out/firecracker for the side-by-side scripts"
