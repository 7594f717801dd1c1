#!/usr/bin/env bash
# Build the Osprey "Linux kit" from Debian 12 packages: a userland that runs
# fio against virtio-blk disks and prints its JSON on the serial console.
# Outputs, in a cache directory:
#   initramfs.cpio      uncompressed newc cpio: busybox (busybox-static),
#                       fio + its shared-library closure + ld.so, the virtio
#                       modules of the kernel, /init (guest-images/linux/init)
#   initramfs-min.cpio  the same without fio (busybox, modules, /init): a small
#                       initramfs for booting rootfs.ext4 with root=/dev/vdX
#   rootfs.ext4         256 MiB ext4 (label osprey-root) with the same userland,
#                       init as /sbin/init and /init, marker /etc/osprey-rootfs
#   busybox             the static busybox, for running init's dry-run hook on
#                       the host: OSPREY_KIT_DRYRUN=1 OSPREY_KIT_CMDLINE=...
#                       <out>/busybox sh guest-images/linux/init
#   kit.version         key=value: package versions, sizes, sha256 sums
# Debian mode (default): the kernel is fetch-kernel.sh's (run first, same
# --out), the modules come from that exact kernel package version.
# Custom mode (--kernel + --kernel-modules, e.g. a Fedora kernel): modules
# come from a lib/modules/<release> directory, the kernel is copied as bzImage.
#
# Idempotent: if the outputs match kit.version, prints "cached: ..." and exits
# (sha256 sums, re-hashed only for files whose stat data changed since the
# last check: .kit.stat).
set -euo pipefail

prog=$(basename "$0")
script_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
cache_root="$(cd "$script_dir/.." && pwd)/cache"
init_src=$script_dir/init
cache_rev=1        # bump when the output format or the build logic changes
rootfs_size=256M
rootfs_label=osprey-root
# Modules init must load; their dependencies (from .modinfo) come along.
# virtio_pci -> virtio, virtio_ring, virtio_pci_modern_dev, virtio_pci_legacy_dev.
default_module_roots="virtio_pci virtio_blk"
# busybox applets init uses unconditionally (checked at build time).
required_applets="sh mount switch_root insmod reboot sync sleep cat mkdir uname nproc awk rm tr"

out_dir=
verify=0
kernel_src=
modules_src=
extra_modules=()

usage() {
    cat <<EOF
Usage: $prog [--out DIR] [--kernel PATH --kernel-modules DIR] [--module NAME]...
          [--verify] [--help]

Build the Osprey Linux kit (initramfs.cpio, initramfs-min.cpio, rootfs.ext4,
busybox, kit.version) from Debian packages: busybox-static, fio (installed on
this host with apt if missing; copied with its shared libraries) and the
virtio modules of the kernel.

  --out DIR              output directory (default: guest-images/cache/linux,
                         or guest-images/cache/linux-custom with --kernel)
  --kernel PATH          use this kernel (bzImage, e.g. Fedora's
                         /lib/modules/<release>/vmlinuz) instead of the Debian
                         one; copied to DIR/bzImage. Needs --kernel-modules.
  --kernel-modules DIR   take the modules from DIR (a lib/modules/<release>
                         directory: kernel/..., modules.builtin) instead of
                         the Debian kernel package. Needs --kernel. Modules
                         the kernel has built in are skipped; .ko.xz/.zst/.gz
                         are decompressed at build time.
  --module NAME          also load module NAME (and its dependencies) in the
                         guest; repeatable (e.g. ext4 if not built in)
  --verify               recompute the sha256 sums of existing outputs even
                         if their stat data (size, inode, mtime, ctime) are
                         unchanged since the last check
  -h, --help             show this help

Without --kernel, runs fetch-kernel.sh --out DIR first and takes the modules
from the exact package version recorded in DIR/version, so bzImage and the
modules always match. A fresh build needs root (apt, mknod /dev/console,
chroot smoke test). If valid outputs already exist, prints "cached: ..." and
exits without apt.
EOF
}

log() { printf '%s: %s\n' "$prog" "$*" >&2; }
die() { printf '%s: error: %s\n' "$prog" "$*" >&2; exit 1; }

while [ $# -gt 0 ]; do
    case "$1" in
        --out) [ $# -ge 2 ] || die "--out needs a directory argument"; out_dir=$2; shift 2 ;;
        --out=*) out_dir=${1#--out=}; shift ;;
        --kernel) [ $# -ge 2 ] || die "--kernel needs a path"; kernel_src=$2; shift 2 ;;
        --kernel=*) kernel_src=${1#--kernel=}; shift ;;
        --kernel-modules) [ $# -ge 2 ] || die "--kernel-modules needs a directory"; modules_src=$2; shift 2 ;;
        --kernel-modules=*) modules_src=${1#--kernel-modules=}; shift ;;
        --module) [ $# -ge 2 ] || die "--module needs a module name"; extra_modules+=("$2"); shift 2 ;;
        --module=*) extra_modules+=("${1#--module=}"); shift ;;
        --verify) verify=1; shift ;;
        -h|--help) usage; exit 0 ;;
        *) usage >&2; die "unknown argument: $1" ;;
    esac
done

export LC_ALL=C

if [ -n "$kernel_src" ] || [ -n "$modules_src" ]; then
    if [ -z "$kernel_src" ] || [ -z "$modules_src" ]; then
        die "--kernel and --kernel-modules go together (the modules must match the kernel that boots)"
    fi
    mode=custom
    [ -f "$kernel_src" ] || die "--kernel $kernel_src: no such file"
    [ -d "$modules_src" ] || die "--kernel-modules $modules_src: no such directory"
    kernel_src=$(cd "$(dirname "$kernel_src")" && pwd)/$(basename "$kernel_src")
    modules_src=$(cd "$modules_src" && pwd)
    [ -d "$modules_src/kernel" ] \
        || die "--kernel-modules $modules_src has no kernel/ subdirectory (expected a lib/modules/<release> directory)"
    : "${out_dir:=$cache_root/linux-custom}"
else
    mode=debian
    : "${out_dir:=$cache_root/linux}"
fi
[ -n "$out_dir" ] || die "--out directory is empty"
[ -f "$init_src" ] || die "init script $init_src is missing"

module_roots=$default_module_roots
for m in "${extra_modules[@]}"; do
    [[ $m =~ ^[A-Za-z0-9_-]+$ ]] || die "--module '$m' is not a module name"
    module_roots+=" ${m//-/_}"
done

# ---------------------------------------------------------------- helpers --

sha256() { sha256sum "$1" | cut -d' ' -f1; }

# Value of the first "key=value" line for key $2 in file $1.
version_field() { awk -v k="$2=" 'index($0, k) == 1 { print substr($0, length(k) + 1); exit }' "$1"; }

# Little-endian unsigned integer of $3 bytes at offset $2 of file $1.
read_le() {
    local f=$1 off=$2 n=$3 v=0 i
    local -a bytes
    read -r -a bytes < <(od -An -v -tu1 -j "$off" -N "$n" "$f" | tr -s ' \n' '  ') || true
    [ "${#bytes[@]}" -eq "$n" ] || return 1
    for ((i = n - 1; i >= 0; i--)); do
        v=$(( (v << 8) | bytes[i] ))
    done
    echo "$v"
}

is_bzimage() {
    [ -f "$1" ] && [ "$(od -An -v -tx1 -j $((0x202)) -N 4 "$1" | tr -d ' \n')" = "48647253" ] # "HdrS"
}

# Release (uname -r) a bzImage reports: its header's kernel_version string
# ("6.1.0-56-cloud-amd64 (debian-kernel@...) #1 SMP ..."), first word.
# (dd reads a fixed size: no early-closing reader for pipefail to trip on.)
bzimage_release() {
    local ptr s
    ptr=$(read_le "$1" $((0x20e)) 2) || return 1
    [ "$ptr" -gt 0 ] || return 1
    s=$(dd if="$1" bs=1 skip=$((ptr + 0x200)) count=256 status=none | tr '\0' '\n') || return 1
    s=${s%%$'\n'*}
    s=${s%% *}
    [ -n "$s" ] || return 1
    echo "$s"
}

# The output files and their kit.version keys.
outputs=(initramfs.cpio:initramfs initramfs-min.cpio:initramfs_min rootfs.ext4:rootfs busybox:busybox)

# Identity of a file's current content as far as the kernel tells: size,
# inode, mtime and ctime in ns. Any write or replacement changes the ctime,
# which cannot be set back from user space.
stat_sig() { stat -c '%s:%i:%y:%z' "$1"; }

# write_stat_file: record the signatures of outputs whose sha256 was checked.
write_stat_file() {
    local o f
    for o in "${outputs[@]}"; do
        f=$out_dir/${o%%:*}
        echo "${o%%:*} $(stat_sig "$f")"
    done > "$out_dir/.kit.stat.$$" && mv -f "$out_dir/.kit.stat.$$" "$out_dir/.kit.stat"
}

kit_valid() {
    local v=$out_dir/kit.version o f k all_stat=1
    [ -f "$v" ] || return 1
    [ "$(version_field "$v" cache_rev)" = "$cache_rev" ] || return 1
    [ "$(version_field "$v" mode)" = "$mode" ] || return 1
    [ "$(version_field "$v" module_roots)" = "$module_roots" ] || return 1
    # An edited init script must end up in the images.
    [ "$(version_field "$v" init_sha256)" = "$(sha256 "$init_src")" ] || return 1
    for o in "${outputs[@]}"; do
        f=$out_dir/${o%%:*} k=${o#*:}
        [ -f "$f" ] || return 1
        [ "$(version_field "$v" "${k}_size")" = "$(stat -c %s "$f")" ] || return 1
        # Hashing ~350 MB takes seconds; skip it for a file whose stat
        # signature is the one recorded when its sum was last checked.
        if [ "$verify" = 0 ] && [ -f "$out_dir/.kit.stat" ] \
            && grep -qxF "${o%%:*} $(stat_sig "$f")" "$out_dir/.kit.stat"; then
            continue
        fi
        all_stat=0
        [ "$(version_field "$v" "${k}_sha256")" = "$(sha256 "$f")" ] || return 1
    done
    # Sums verified the slow way: remember the signatures (best effort, the
    # directory may be read-only for this user).
    [ "$all_stat" = 1 ] || write_stat_file 2>/dev/null || true
    if [ "$mode" = debian ]; then
        # The modules must match the kernel fetch-kernel.sh put beside them.
        [ -f "$out_dir/bzImage" ] && [ -f "$out_dir/version" ] || return 1
        [ "$(head -n1 "$out_dir/version")" = \
          "$(version_field "$v" kernel_pkg) $(version_field "$v" kernel_pkg_version)" ] || return 1
    else
        [ "$(version_field "$v" kernel_src)" = "$kernel_src" ] || return 1
        [ "$(version_field "$v" modules_src)" = "$modules_src" ] || return 1
        [ "$(version_field "$v" kernel_src_sha256)" = "$(sha256 "$kernel_src")" ] || return 1
        [ -f "$out_dir/bzImage" ] || return 1
        [ "$(version_field "$v" bzimage_sha256)" = "$(sha256 "$out_dir/bzImage")" ] || return 1
    fi
}

cached_msg() {
    local v=$out_dir/kit.version
    echo "cached: $out_dir (kernel $(version_field "$v" kernel_release), $(version_field "$v" fio_pkg), $(version_field "$v" busybox_pkg))"
}

apt_updated=0
apt_update() {
    [ "$apt_updated" = 1 ] && return 0
    log "running apt-get update"
    apt-get update -qq >&2 || die "apt-get update failed (check /etc/apt/sources.list* and the network)"
    apt_updated=1
}

apt_install() {
    local pkg=$1
    log "installing $pkg with apt"
    if ! DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$pkg" >&2; then
        apt_update
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$pkg" >&2 \
            || die "apt-get install $pkg failed"
    fi
}

# ensure_cmd CMD PACKAGE: install PACKAGE with apt if CMD is missing.
ensure_cmd() {
    command -v "$1" >/dev/null 2>&1 && return 0
    apt_install "$2"
    command -v "$1" >/dev/null 2>&1 || die "'$1' still missing after installing $2"
}

# apt_download SPEC DIR: download one .deb (SPEC = pkg or pkg=version) into
# DIR (not installed) and print its path. Runs as root without the _apt
# sandbox (DIR is private). Updates the package lists only on failure.
apt_download() {
    local spec=$1 dir=$2 deb
    mkdir -p "$dir"
    log "downloading $spec"
    if ! (cd "$dir" && apt-get download -q -o APT::Sandbox::User=root "$spec" >&2); then
        apt_update
        (cd "$dir" && apt-get download -q -o APT::Sandbox::User=root "$spec" >&2) || return 1
    fi
    deb=$(find "$dir" -maxdepth 1 -name '*.deb' | head -n1)
    [ -n "$deb" ] || die "apt-get download $spec produced no .deb in $dir"
    echo "$deb"
}

# Map a host path to its place in the kit's usr-merged tree (Debian 12
# layout: /bin /sbin /lib /lib64 are symlinks into /usr there).
usr_path() {
    case $1 in
        /usr/*) echo "$1" ;;
        /bin/*|/sbin/*|/lib/*|/lib64/*) echo "/usr$1" ;;
        *) die "unexpected library path $1 (not under /usr, /lib, /lib64, /bin or /sbin)" ;;
    esac
}

# ------------------------------------------------------------------ cache --

if kit_valid; then
    cached_msg
    exit 0
fi

# ------------------------------------------------------------------ setup --

[ "$(id -u)" = 0 ] || die "a fresh build needs root (apt-get install, mknod dev/console, chroot smoke test); run as root"
command -v apt-get >/dev/null 2>&1 || die "apt-get not found (Debian host required)"
command -v dpkg-deb >/dev/null 2>&1 || die "dpkg-deb not found"
command -v flock >/dev/null 2>&1 || die "flock not found (package util-linux)"

mkdir -p "$out_dir" || die "cannot create output directory $out_dir"
out_dir=$(cd "$out_dir" && pwd)

# Serialise concurrent runs on the same output directory. Not fetch-kernel's
# .lock: this script runs fetch-kernel.sh while holding its own lock.
exec 8> "$out_dir/.kit.lock"
flock 8 || die "cannot lock $out_dir/.kit.lock"
if kit_valid; then   # another run may have finished meanwhile
    cached_msg
    exit 0
fi

if [ "$mode" = custom ] && [ -f "$out_dir/version" ]; then
    die "$out_dir holds fetch-kernel.sh's Debian kernel (its version file); use another --out with --kernel"
fi

ensure_cmd cpio cpio
ensure_cmd mkfs.ext4 e2fsprogs
ensure_cmd e2fsck e2fsprogs
ensure_cmd objcopy binutils
ensure_cmd readelf binutils
ensure_cmd chroot coreutils

# Build in the output directory so the final moves are renames.
tmp=$(mktemp -d "$out_dir/.build-kit.XXXXXX")
trap 'rm -rf "$tmp"' EXIT

# ----------------------------------------------------------------- kernel --

if [ "$mode" = debian ]; then
    log "making sure the kernel is there: fetch-kernel.sh --out $out_dir"
    "$script_dir/fetch-kernel.sh" --out "$out_dir" 8>&- >&2 \
        || die "fetch-kernel.sh --out $out_dir failed (run it alone to see why)"
    read -r kernel_pkg kernel_pkg_version < "$out_dir/version" \
        || die "cannot read the kernel package from $out_dir/version"
    [ -n "$kernel_pkg_version" ] || die "$out_dir/version line 1 is not '<package> <version>'"
    # The exact version fetch-kernel.sh used, not whatever apt resolves now.
    kdeb=$(apt_download "$kernel_pkg=$kernel_pkg_version" "$tmp/dl/kernel") \
        || die "apt-get download $kernel_pkg=$kernel_pkg_version failed: the archive may have dropped the kernel recorded in $out_dir/version; delete $out_dir/{bzImage,vmlinux,version} and rerun to fetch the current one"
    log "extracting the modules of $kernel_pkg $kernel_pkg_version"
    dpkg-deb -x "$kdeb" "$tmp/kernel" || die "dpkg-deb -x $kdeb failed"
    mapfile -t mdirs < <(find "$tmp/kernel/lib/modules" "$tmp/kernel/usr/lib/modules" \
        -mindepth 1 -maxdepth 1 -type d 2>/dev/null)
    [ "${#mdirs[@]}" = 1 ] || die "expected one lib/modules/<release> directory in $kernel_pkg, found ${#mdirs[@]}"
    moddir=${mdirs[0]}
    kernel_uname_r=$(version_field "$out_dir/version" uname_r)
else
    is_bzimage "$kernel_src" || die "--kernel $kernel_src is not a bzImage (no HdrS header signature)"
    moddir=$modules_src
    kernel_uname_r=$(bzimage_release "$kernel_src") \
        || die "cannot read the kernel release string from the bzImage header of $kernel_src"
fi

# ---------------------------------------------------------------- modules --

declare -A mod_path=() mod_builtin=() mod_state=()
mod_order=() mod_builtin_used=() kver=

log "indexing modules in $moddir"
while IFS= read -r -d '' f; do
    rel=${f#"$moddir"/}
    name=${rel##*/}
    name=${name%%.ko*}
    name=${name//-/_}
    [ -n "${mod_path[$name]:-}" ] || mod_path[$name]=$rel
done < <(find "$moddir/kernel" -type f \( -name '*.ko' -o -name '*.ko.xz' -o -name '*.ko.zst' -o -name '*.ko.gz' \) -print0 | sort -z)
if [ -f "$moddir/modules.builtin" ]; then
    while IFS= read -r rel; do
        name=${rel##*/}
        name=${name%%.ko*}
        mod_builtin[${name//-/_}]=1
    done < "$moddir/modules.builtin"
else
    log "warning: $moddir/modules.builtin is missing: every module must be found as a file"
fi

# add_module NAME: copy NAME (uncompressed) and, first, its dependencies into
# $tmp/modules/<release>/ and append them to mod_order (dependency order).
add_module() {
    local n=$1 rel dst info deps vm d
    case ${mod_state[$n]:-} in
        "done") return 0 ;;
        visiting) die "module dependency cycle through $n" ;;
    esac
    if [ -n "${mod_builtin[$n]:-}" ]; then
        mod_state[$n]="done"
        mod_builtin_used+=("$n")
        return 0
    fi
    rel=${mod_path[$n]:-}
    [ -n "$rel" ] || die "module $n: no $n.ko* under $moddir/kernel and not in $moddir/modules.builtin"
    mod_state[$n]=visiting
    # Decompress here, not in the guest (no decompression in guest ring 0;
    # and busybox insmod may lack the decompressor).
    dst=$tmp/modules/${rel%.ko*}.ko
    mkdir -p "$(dirname "$dst")"
    case $rel in
        *.ko) cp "$moddir/$rel" "$dst" ;;
        *.ko.xz) ensure_cmd xz xz-utils; xz -dc "$moddir/$rel" > "$dst" ;;
        *.ko.zst) ensure_cmd zstd zstd; zstd -dcq "$moddir/$rel" > "$dst" ;;
        *.ko.gz) gzip -dc "$moddir/$rel" > "$dst" ;;
    esac || die "cannot decompress $moddir/$rel"
    objcopy -O binary --only-section=.modinfo "$dst" "$tmp/modinfo" 2>/dev/null \
        || die "cannot read the .modinfo section of $moddir/$rel"
    info=$(tr '\0' '\n' < "$tmp/modinfo")
    deps=$(sed -n 's/^depends=//p' <<<"$info" | head -n1)
    vm=$(sed -n 's/^vermagic=//p' <<<"$info" | head -n1 | cut -d' ' -f1)
    [ -n "$vm" ] || die "$moddir/$rel has no vermagic in .modinfo"
    if [ -z "$kver" ]; then
        kver=$vm
    elif [ "$vm" != "$kver" ]; then
        die "$moddir/$rel is built for $vm, other modules for $kver"
    fi
    for d in ${deps//,/ }; do
        add_module "${d//-/_}"
    done
    mod_state[$n]="done"
    mod_order+=("$n ${rel%.ko*}.ko")
}
for m in $module_roots; do
    add_module "$m"
done
if [ -z "$kver" ]; then
    kver=$(basename "$moddir")       # everything is built in
fi
log "modules for $kver: ${#mod_order[@]} to load (${mod_order[*]%% *}), built in: ${mod_builtin_used[*]:-none}"
[ "$kver" = "$kernel_uname_r" ] \
    || die "the modules are built for $kver but the kernel is $kernel_uname_r (${kernel_src:-$out_dir/bzImage}); they would not load"

# ---------------------------------------------------------------- busybox --

bdeb=$(apt_download busybox-static "$tmp/dl/busybox") \
    || die "apt-get download busybox-static failed (check the apt sources)"
busybox_pkg="$(dpkg-deb -f "$bdeb" Package) $(dpkg-deb -f "$bdeb" Version)"
dpkg-deb -x "$bdeb" "$tmp/busybox-pkg" || die "dpkg-deb -x $bdeb failed"
bb=$tmp/busybox-pkg/bin/busybox
[ -x "$bb" ] || die "busybox-static has no /bin/busybox"
# (Output captured first: grep -q in a pipeline could SIGPIPE readelf, and
# pipefail would then hide the match.)
bb_phdrs=$(readelf -lW "$bb") || die "readelf -l $bb failed"
[[ $bb_phdrs == *'Requesting program interpreter'* ]] \
    && die "$bb from $busybox_pkg is dynamically linked; the kit needs the static one"
"$bb" --list > "$tmp/applets" || die "$bb --list failed"
for a in $required_applets; do
    grep -qx "$a" "$tmp/applets" || die "$busybox_pkg has no '$a' applet, which init needs"
done

# -------------------------------------------------------------------- fio --

if [ "$(dpkg-query -W -f='${db:Status-Status}' fio 2>/dev/null || true)" != installed ]; then
    apt_install fio
fi
fio_bin=/usr/bin/fio
[ -x "$fio_bin" ] || die "$fio_bin missing although package fio is installed (dpkg -L fio)"
fio_pkg="fio $(dpkg-query -W -f='${Version}' fio)"
fio_version=$("$fio_bin" --version) || die "$fio_bin --version failed on this host"
ldd_out=$(ldd "$fio_bin") || die "ldd $fio_bin failed"
if grep -q 'not found' <<<"$ldd_out"; then
    die "fio's libraries are incomplete on this host: $(grep 'not found' <<<"$ldd_out" | tr -s ' \t\n' ' '); reinstall them (apt-get install --reinstall fio)"
fi
# "libx.so => /path (addr)" and "/lib64/ld-linux-x86-64.so.2 (addr)"; the
# vDSO has no path.
mapfile -t fio_libs < <(awk '$2 == "=>" && $3 ~ /^\// { print $3 } $1 ~ /^\// { print $1 }' <<<"$ldd_out" | sort -u)
interp=$(readelf -lW "$fio_bin" | sed -n 's/.*Requesting program interpreter: \(.*\)]$/\1/p')
[ -n "$interp" ] || die "cannot find the program interpreter of $fio_bin"
have_interp=0
for l in "${fio_libs[@]}"; do
    [ "$l" = "$interp" ] && have_interp=1
done
[ "$have_interp" = 1 ] || fio_libs+=("$interp")

# ------------------------------------------------------------------ trees --

# new_tree DIR: usr-merged skeleton with busybox, applet links, init, modules.
new_tree() {
    local t=$1 a p
    mkdir -p "$t"/{usr/bin,usr/sbin,usr/lib,usr/lib64,proc,sys,dev,tmp,mnt,newroot,etc,root,run}
    ln -s usr/bin "$t/bin"
    ln -s usr/sbin "$t/sbin"
    ln -s usr/lib "$t/lib"
    ln -s usr/lib64 "$t/lib64"
    chmod 1777 "$t/tmp"
    chmod 700 "$t/root"
    # The kernel opens /dev/console for init before anything is mounted;
    # /dev/null keeps early redirections from creating a regular file.
    mknod -m 600 "$t/dev/console" c 5 1
    mknod -m 666 "$t/dev/null" c 1 3
    install -m 755 "$bb" "$t/usr/bin/busybox"
    # Links for every applet (handy with osprey.shell=1), except init and
    # linuxrc: /init and /sbin/init are the kit's init script.
    while IFS= read -r a; do
        case $a in linuxrc|sbin/init|'') continue ;; esac
        p=$(usr_path "/$a")
        [ -e "$t$p" ] || ln -s /usr/bin/busybox "$t$p"
    done < <("$bb" --list-full)
    install -m 755 "$init_src" "$t/init"
    if [ "${#mod_order[@]}" -gt 0 ]; then
        mkdir -p "$t/usr/lib/modules/$kver"
        cp -a "$tmp/modules/." "$t/usr/lib/modules/$kver/"
        printf '%s\n' "${mod_order[@]}" > "$t/usr/lib/modules/$kver/osprey-modules.load"
    fi
    {
        echo "kernel_release=$kver"
        echo "modules=${mod_order[*]%% *}"
        echo "busybox_pkg=$busybox_pkg"
        echo "fio_pkg=$fio_pkg"
    } > "$t/etc/osprey-kit.release"
}

add_fio() {
    local t=$1 l d
    install -D -m 755 "$fio_bin" "$t/usr/bin/fio"
    for l in "${fio_libs[@]}"; do
        d=$t$(usr_path "$l")
        mkdir -p "$(dirname "$d")"
        cp -L "$l" "$d" || die "cannot copy $l"
    done
}

# Fixed timestamps: the same inputs give the same cpio bytes.
normalise_times() { find "$1" -exec touch -h -d "@${SOURCE_DATE_EPOCH:-0}" {} +; }

log "assembling the trees"
new_tree "$tmp/min"
cp -a "$tmp/min" "$tmp/full"
add_fio "$tmp/full"
cp -a "$tmp/full" "$tmp/rootfs"
install -m 755 "$init_src" "$tmp/rootfs/usr/sbin/init"
echo "osprey-kit root disk: /sbin/init (guest-images/linux/init) must not switch_root again" \
    > "$tmp/rootfs/etc/osprey-rootfs"

# Smoke test the userland as it will run: the whole shared-library closure
# must be inside the tree.
chroot "$tmp/full" /usr/bin/fio --version > "$tmp/smoke" 2>&1 \
    || die "chroot $tmp/full /usr/bin/fio --version failed: $(cat "$tmp/smoke")"
[ "$(cat "$tmp/smoke")" = "$fio_version" ] || die "fio in the tree reports '$(cat "$tmp/smoke")', host '$fio_version'"
if ! chroot "$tmp/min" /bin/sh -c 'echo ok' > "$tmp/smoke" 2>&1 || [ "$(cat "$tmp/smoke")" != ok ]; then
    die "chroot $tmp/min /bin/sh -c 'echo ok' failed: $(cat "$tmp/smoke")"
fi

# ---------------------------------------------------------------- archives --

# make_cpio TREE OUT: uncompressed newc (the guest kernel must not spend time
# decompressing), entries sorted (parents first), owned by root.
make_cpio() {
    local t=$1 o=$2
    normalise_times "$t"
    (cd "$t" && find . -mindepth 1 -printf '%P\n' | sort \
        | cpio -o -H newc --owner=0:0 --reproducible --quiet) > "$o" \
        || die "cpio -o of $t into $o failed"
    cpio -it --quiet < "$o" > "$tmp/list" || die "cannot list $o"
    for p in init usr/bin/busybox dev/console; do
        grep -qx "$p" "$tmp/list" || die "$o lacks $p"
    done
}
log "writing initramfs.cpio"
make_cpio "$tmp/full" "$tmp/initramfs.cpio"
grep -qx usr/bin/fio "$tmp/list" || die "initramfs.cpio lacks usr/bin/fio"
log "writing initramfs-min.cpio"
make_cpio "$tmp/min" "$tmp/initramfs-min.cpio"

log "writing rootfs.ext4 ($rootfs_size, label $rootfs_label)"
normalise_times "$tmp/rootfs"
truncate -s "$rootfs_size" "$tmp/rootfs.ext4"
# -d fills the file system from the tree, no mount needed. Inode tables and
# journal are initialised now (lazy_*_init=0) so the guest kernel has no
# ext4lazyinit thread writing in the background of a benchmark.
mkfs.ext4 -q -F -L "$rootfs_label" -m 0 -b 4096 \
    -E lazy_itable_init=0,lazy_journal_init=0,root_owner=0:0 \
    -d "$tmp/rootfs" "$tmp/rootfs.ext4" >&2 \
    || die "mkfs.ext4 -d $tmp/rootfs $tmp/rootfs.ext4 failed"
e2fsck -fn "$tmp/rootfs.ext4" > "$tmp/fsck" 2>&1 \
    || die "e2fsck -fn of the new rootfs.ext4 reports problems: $(cat "$tmp/fsck")"

install -m 755 "$bb" "$tmp/busybox"

if [ "$mode" = custom ]; then
    cp "$kernel_src" "$tmp/bzImage"
fi

# ---------------------------------------------------------------- version --

{
    echo "cache_rev=$cache_rev"
    echo "mode=$mode"
    if [ "$mode" = debian ]; then
        echo "kernel_pkg=$kernel_pkg"
        echo "kernel_pkg_version=$kernel_pkg_version"
    else
        echo "kernel_src=$kernel_src"
        echo "kernel_src_sha256=$(sha256 "$kernel_src")"
        echo "modules_src=$modules_src"
        echo "bzimage_sha256=$(sha256 "$tmp/bzImage")"
    fi
    echo "kernel_release=$kver"
    echo "module_roots=$module_roots"
    echo "modules=${mod_order[*]%% *}"
    echo "modules_builtin=${mod_builtin_used[*]:-}"
    echo "busybox_pkg=$busybox_pkg"
    echo "fio_pkg=$fio_pkg"
    echo "fio_version=$fio_version"
    echo "fio_libs=${#fio_libs[@]}"
    echo "rootfs_label=$rootfs_label"
    echo "init_sha256=$(sha256 "$init_src")"
    for o in "${outputs[@]}"; do
        f=$tmp/${o%%:*} k=${o#*:}
        echo "${k}_size=$(stat -c %s "$f")"
        echo "${k}_sha256=$(sha256 "$f")"
    done
} > "$tmp/kit.version"

# Install: data files first, kit.version (the validity marker) last.
rm -f "$out_dir/kit.version"
for o in "${outputs[@]}"; do
    mv -f "$tmp/${o%%:*}" "$out_dir/${o%%:*}"
done
[ "$mode" = custom ] && mv -f "$tmp/bzImage" "$out_dir/bzImage"
mv -f "$tmp/kit.version" "$out_dir/kit.version"
write_stat_file || die "cannot write $out_dir/.kit.stat"

log "done: kernel $kver, $busybox_pkg, $fio_pkg; initramfs.cpio $(stat -c %s "$out_dir/initramfs.cpio") bytes, initramfs-min.cpio $(stat -c %s "$out_dir/initramfs-min.cpio") bytes, rootfs.ext4 $rootfs_size"
echo "$out_dir"
