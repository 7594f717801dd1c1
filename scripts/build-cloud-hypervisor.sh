#!/usr/bin/env bash
# Builds Cloud Hypervisor's `cloud-hypervisor` and `vhost_user_block` binaries (release profile)
# from a given source, for tests/vhost_user.rs (OSPREY_CLOUD_HYPERVISOR) and
# tools/osprey-bench/vhost-user-bench.py (`ch-vub`). Not run by CI: about an hour on 2 cores.
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
micro_http=
source=
while [ $# -gt 0 ]; do
    case "$1" in
    --ref) ref=$2; shift 2 ;;
    --src) src=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --micro-http) micro_http=$2; shift 2 ;;
    -h | --help) sed -n '2,23p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    -*) echo "unknown option $1 (see --help)" >&2; exit 2 ;;
    *) source=$1; shift ;;
    esac
done

# The checkout: clone when missing, then the asked-for ref. The build rewrites Cargo.lock when
# micro_http is patched in; put it back first so the checkout does not refuse.
if [ ! -e "$src/.git" ]; then
    if [ -z "$source" ]; then
        echo "no clone at $src and no SOURCE to clone from (see --help)" >&2
        exit 2
    fi
    git clone --quiet "$source" "$src"
elif [ -n "$source" ]; then
    git -C "$src" fetch --quiet --tags "$source"
fi
src=$(cd "$src" && pwd)
git -C "$src" checkout --quiet -- Cargo.lock
git -C "$src" checkout --quiet "$ref"
echo "Cloud Hypervisor $(git -C "$src" describe --tags --always) in $src"

patch_args=()
if [ -n "$micro_http" ]; then
    # The pinned commit, from the lock file as committed: e.g.
    # source = "git+https://github.com/firecracker-microvm/micro-http?branch=main#5c2254d..."
    lock_line=$(git -C "$src" show HEAD:Cargo.lock | grep -A2 '^name = "micro_http"' |
        grep '^source = "git+' || true)
    if [ -z "$lock_line" ]; then
        echo "Cargo.lock at $ref has no git micro_http: drop --micro-http" >&2
        exit 1
    fi
    url=$(echo "$lock_line" | sed -E 's/^source = "git\+([^?#"]*).*/\1/')
    commit=$(echo "$lock_line" | sed -E 's/.*#([0-9a-f]{40})"$/\1/')
    mh_dir="$src-micro-http"
    [ -e "$mh_dir/.git" ] || git clone --quiet "$micro_http" "$mh_dir"
    if ! git -C "$mh_dir" cat-file -e "$commit^{commit}" 2>/dev/null; then
        git -C "$mh_dir" fetch --quiet "$micro_http"
    fi
    git -C "$mh_dir" checkout --quiet "$commit"
    echo "micro_http $commit in $mh_dir (for $url)"
    patch_args=(--config "patch.\"$url\".micro_http.path=\"$mh_dir\"")
fi

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
