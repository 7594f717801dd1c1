#!/usr/bin/env bash
# Runs one fuzz target with cargo-fuzz on the stable toolchain.
#
#   fuzz/scripts/fuzz.sh <target> [seconds] [extra libFuzzer flags...]
#
# RUSTC_BOOTSTRAP=1 lets stable rustc accept the nightly-only `-Zsanitizer=address` and
# `-Cpasses=sancov-module` flags cargo-fuzz passes (verified with rustc 1.95). Set
# FUZZ_SANITIZER=none to build without AddressSanitizer (faster, catches fewer memory bugs).
# New corpus entries go to fuzz/work/corpus/<target>/ (git-ignored); the checked-in seeds in
# fuzz/corpus/<target>/ are only read. Crashes land in fuzz/artifacts/<target>/.
# FUZZ_NO_BUILD=1 runs the already built binary directly (no cargo, so no rebuild when someone
# edits a crate mid-session); it takes the same libFuzzer flags.
set -euo pipefail
cd "$(dirname "$0")/.."
target=${1:?usage: fuzz.sh <target> [seconds] [libFuzzer flags...]}
secs=${2:-30}
shift $(( $# >= 2 ? 2 : 1 ))
case $target in
    blk_request) max_len=16384 ;;
    blk_queue) max_len=24576 ;;
    vsock_queue) max_len=40960 ;;
    net_queue) max_len=40960 ;;
    net_ctrl) max_len=24576 ;;
    virtio_pci) max_len=8192 ;;
    vm_config | api_router) max_len=4096 ;;
    bzimage_header) max_len=65536 ;;
    *) echo "unknown target $target" >&2; exit 2 ;;
esac
command -v cargo-fuzz >/dev/null || { echo "cargo-fuzz missing: cargo install cargo-fuzz --version 0.13.2 --locked (needs a C++ compiler, g++)" >&2; exit 2; }
mkdir -p "work/corpus/$target"
flags=(-max_total_time="$secs" -max_len="$max_len" -timeout=10 -rss_limit_mb=2048
    -print_final_stats=1 "$@")
if [[ ${FUZZ_NO_BUILD:-0} == 1 ]]; then
    mkdir -p "artifacts/$target"
    exec "target/x86_64-unknown-linux-gnu/release/$target" -artifact_prefix="artifacts/$target/" \
        "${flags[@]}" "work/corpus/$target" "corpus/$target"
fi
export RUSTC_BOOTSTRAP=1
exec cargo fuzz run --sanitizer "${FUZZ_SANITIZER:-address}" "$target" \
    "work/corpus/$target" "corpus/$target" -- "${flags[@]}"
