# Shared steps of the anchor build scripts (build-firecracker.sh, build-cloud-hypervisor.sh):
# sourced, not run. Both VMMs are checked out from a git clone (fetched offline copies may lack
# their largest blobs) and pin firecracker-microvm/micro-http as a git dependency, which cargo
# cannot fetch where only crates.io is reachable.

# parse_args HELP_LINES ARGS...: the scripts' common options over the defaults the caller set
# (`ref`, `src`, `out`); sets those, `micro_http` and `source`. HELP_LINES is the range of the
# script's header that --help prints (sed's `2,22`).
parse_args() {
    local help=$1
    shift
    micro_http=
    source=
    while [ $# -gt 0 ]; do
        case "$1" in
        --ref) ref=$2; shift 2 ;;
        --src) src=$2; shift 2 ;;
        --out) out=$2; shift 2 ;;
        --micro-http) micro_http=$2; shift 2 ;;
        -h | --help) sed -n "${help}p" "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        -*) echo "unknown option $1 (see --help)" >&2; exit 2 ;;
        *) source=$1; shift ;;
        esac
    done
}

# checkout_ref NAME SRC SOURCE REF [SKIP...]: clones SOURCE into SRC when SRC has no clone (or
# fetches SOURCE's tags into it), then checks out REF. SKIP are sparse-checkout patterns left out
# of the working tree (test data the build does not read, whose blobs a mirror may not hold).
# Sets `src` to SRC's absolute path.
checkout_ref() {
    local name=$1 dir=$2 source=$3 ref=$4
    shift 4
    if [ ! -e "$dir/.git" ]; then
        if [ -z "$source" ]; then
            echo "no clone at $dir and no SOURCE to clone from (see --help)" >&2
            exit 2
        fi
        git clone --quiet --no-checkout "$source" "$dir"
    elif [ -n "$source" ]; then
        git -C "$dir" fetch --quiet --tags "$source"
    fi
    src=$(cd "$dir" && pwd)
    if [ $# -gt 0 ]; then
        git -C "$src" sparse-checkout init --no-cone
        { echo '/*'; for p in "$@"; do echo "!$p"; done; } >"$src/.git/info/sparse-checkout"
    fi
    # The build rewrites Cargo.lock when micro_http is patched in: put it back first so the
    # checkout does not refuse.
    git -C "$src" checkout --quiet -- Cargo.lock 2>/dev/null || true
    git -C "$src" checkout --quiet "$ref"
    echo "$name $(git -C "$src" describe --tags --always) in $src"
}

# micro_http_patch SRC MICRO_HTTP: when MICRO_HTTP (a git URL or repository) is given, clones it
# to SRC-micro-http at the commit SRC's Cargo.lock pins and sets `patch_args` to the cargo
# --config that patches it in (no change to SRC's files but its Cargo.lock). Without it,
# `patch_args` is empty and cargo fetches the dependency itself (needs github.com).
micro_http_patch() {
    local dir=$1 micro_http=$2 lock_line url commit mh_dir
    patch_args=()
    [ -n "$micro_http" ] || return 0
    # The pinned commit, from the lock file as committed: e.g.
    # source = "git+https://github.com/firecracker-microvm/micro-http?branch=main#5c2254d..."
    lock_line=$(git -C "$dir" show HEAD:Cargo.lock | grep -A2 '^name = "micro_http"' |
        grep '^source = "git+' || true)
    if [ -z "$lock_line" ]; then
        echo "Cargo.lock has no git micro_http: drop --micro-http" >&2
        exit 1
    fi
    url=$(echo "$lock_line" | sed -E 's/^source = "git\+([^?#"]*).*/\1/')
    commit=$(echo "$lock_line" | sed -E 's/.*#([0-9a-f]{40})"$/\1/')
    mh_dir="$dir-micro-http"
    [ -e "$mh_dir/.git" ] || git clone --quiet "$micro_http" "$mh_dir"
    if ! git -C "$mh_dir" cat-file -e "$commit^{commit}" 2>/dev/null; then
        git -C "$mh_dir" fetch --quiet "$micro_http"
    fi
    git -C "$mh_dir" checkout --quiet "$commit"
    echo "micro_http $commit in $mh_dir (for $url)"
    patch_args=(--config "patch.\"$url\".micro_http.path=\"$mh_dir\"")
}
