#!/usr/bin/env bash
# Builds Cloud Hypervisor's `cloud-hypervisor` and `vhost_user_block` binaries (release profile)
# from a given source, for tests/vhost_user.rs (OSPREY_CLOUD_HYPERVISOR) and
# tools/osprey-bench/vhost-user-bench.py (`ch-vub`). Not run by CI: about 6 minutes on 2 idle cores
# with CARGO_BUILD_JOBS=2 (the default, 1, leaves a core to other work and takes longer).
#
#   scripts/build-cloud-hypervisor.sh [options] [SOURCE]
#
# SOURCE: a git URL or a git repository (working tree or bare) to clone Cloud Hypervisor from;
#         may be left out when --src already holds a clone.
# Options:
#   --ref REF          tag or commit to build (default v53.0)
#   --src DIR          where the checkout lives and the build runs (default ./cloud-hypervisor);
#                      an existing clone is reused (its target/ too)
#   --out DIR          where the two binaries are copied (default ./cloudhv-bin)
#   --micro-http SRC   a git URL or repository of firecracker-microvm/micro-http: Cloud
#                      Hypervisor pins it as a git dependency, which cargo cannot fetch where only
#                      crates.io is reachable. It is cloned to DIR-micro-http, checked out at the
#                      commit Cloud Hypervisor's Cargo.lock names, and patched in (cargo --config,
#                      no change to Cloud Hypervisor's files but its Cargo.lock).
#                      Without it cargo fetches the dependency itself (needs github.com).
# Environment: CARGO_BUILD_JOBS (default 1) and NICE (default 19): the build is long, and on a
# small shared host it should not starve other work.
set -euo pipefail

ref=v53.0
src=./cloud-hypervisor
out=./cloudhv-bin
# shellcheck source=lib/anchor-build.sh
. "$(dirname "$0")/lib/anchor-build.sh"
parse_args 2,23 "$@"
checkout_ref "Cloud Hypervisor" "$src" "$source" "$ref"
micro_http_patch "$src" "$micro_http"

export CARGO_BUILD_JOBS="${CARGO_BUILD_JOBS:-1}"
start=$(date +%s)
(cd "$src" && nice -n "${NICE:-19}" cargo build --release \
    -p cloud-hypervisor -p vhost_user_block "${patch_args[@]}")
echo "built in $(($(date +%s) - start)) s with CARGO_BUILD_JOBS=$CARGO_BUILD_JOBS"

mkdir -p "$out"
cp "$src/target/release/cloud-hypervisor" "$src/target/release/vhost_user_block" "$out/"
out=$(cd "$out" && pwd)
"$out/cloud-hypervisor" --version
echo "binaries in $out: set OSPREY_CLOUD_HYPERVISOR=$out/cloud-hypervisor for tests/vhost_user.rs"
