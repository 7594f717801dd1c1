#!/usr/bin/env bash
# Fetch the Debian cloud kernel (linux-image-cloud-amd64) and produce, in a
# cache directory:
#   bzImage  - the package's /boot/vmlinuz-* (x86 bzImage)
#   vmlinux  - the uncompressed ELF64 x86-64 kernel extracted from bzImage
#   version  - package name/version, uname -r, compression, PVH note, hashes
#
# Only needs Debian apt repositories. Idempotent: valid outputs are reused.
set -euo pipefail

prog=$(basename "$0")
script_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
out_dir="$(cd "$script_dir/.." && pwd)/cache/linux"
meta_pkg="linux-image-cloud-amd64"
cache_rev=1   # bump when the output format/extraction logic changes

usage() {
    cat <<EOF
Usage: $prog [--out DIR] [--help]

Fetch the Debian cloud kernel (dependency of $meta_pkg) with apt and
write bzImage, vmlinux (extracted ELF) and version into the output directory.

  --out DIR   output directory (default: guest-images/cache/linux)
  -h, --help  show this help

If valid outputs already exist, prints "cached: ..." and exits without apt.
EOF
}

log() { printf '%s: %s\n' "$prog" "$*" >&2; }
die() { printf '%s: error: %s\n' "$prog" "$*" >&2; exit 1; }

while [ $# -gt 0 ]; do
    case "$1" in
        --out) [ $# -ge 2 ] || die "--out needs a directory argument"; out_dir=$2; shift 2 ;;
        --out=*) out_dir=${1#--out=}; shift ;;
        -h|--help) usage; exit 0 ;;
        *) usage >&2; die "unknown argument: $1" ;;
    esac
done
[ -n "$out_dir" ] || die "--out directory is empty"

export LC_ALL=C

# ---------------------------------------------------------------- helpers --

# Little-endian unsigned integer of $3 bytes at offset $2 of file $1.
read_le() {
    local f=$1 off=$2 n=$3 v=0 i b
    local -a bytes
    read -r -a bytes < <(od -An -v -tu1 -j "$off" -N "$n" "$f" | tr -s ' \n' '  ') || true
    [ "${#bytes[@]}" -eq "$n" ] || return 1
    for ((i = n - 1; i >= 0; i--)); do
        b=${bytes[$i]}
        v=$(( (v << 8) | b ))
    done
    echo "$v"
}

# Hex string (no spaces) of $3 bytes at offset $2 of file $1.
read_hex() {
    od -An -v -tx1 -j "$2" -N "$3" "$1" | tr -d ' \n'
}

is_bzimage() {
    [ -f "$1" ] && [ "$(read_hex "$1" 0x202 4)" = "48647253" ] # "HdrS"
}

# ELF64, little endian, ET_EXEC, EM_X86_64.
is_elf64_x86_64_exec() {
    [ -f "$1" ] || return 1
    [ "$(read_hex "$1" 0 6)" = "7f454c460201" ] || return 1
    [ "$(read_le "$1" 16 2)" = "2" ] || return 1
    [ "$(read_le "$1" 18 2)" = "62" ] || return 1
}

sha256() { sha256sum "$1" | cut -d' ' -f1; }

# Value of "key=value" line in the version file.
version_field() { sed -n "s/^$2=//p" "$1" | head -n1; }

outputs_valid() {
    local v=$out_dir/version
    [ -f "$v" ] || return 1
    [ "$(version_field "$v" cache_rev)" = "$cache_rev" ] || return 1
    is_bzimage "$out_dir/bzImage" || return 1
    is_elf64_x86_64_exec "$out_dir/vmlinux" || return 1
    grep -q '^pvh=\(yes\|no\)$' "$v" || return 1
    [ "$(version_field "$v" bzimage_sha256)" = "$(sha256 "$out_dir/bzImage")" ] || return 1
    [ "$(version_field "$v" vmlinux_sha256)" = "$(sha256 "$out_dir/vmlinux")" ] || return 1
}

apt_updated=0
apt_update() {
    [ "$apt_updated" = 1 ] && return 0
    log "running apt-get update"
    apt-get update -qq >&2 || die "apt-get update failed"
    apt_updated=1
}

# ensure_cmd CMD PACKAGE: install PACKAGE with apt if CMD is missing.
ensure_cmd() {
    local cmd=$1 pkg=$2
    command -v "$cmd" >/dev/null 2>&1 && return 0
    [ "$(id -u)" = 0 ] || die "'$cmd' not found; install package '$pkg' (needs root)"
    log "installing $pkg (for $cmd)"
    if ! DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$pkg" >&2; then
        apt_update
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$pkg" >&2 \
            || die "apt-get install $pkg failed"
    fi
    command -v "$cmd" >/dev/null 2>&1 || die "'$cmd' still missing after installing $pkg"
}

# decompress FORMAT: stdin -> stdout. Trailing garbage (the kernel appends the
# decompressed size, 4 bytes) is ignored; exit status is not trusted, the
# result is validated as ELF afterwards.
decompress() {
    case "$1" in
        xz)    xz -dc --single-stream 2>/dev/null || true ;;
        lzma)  xz -dc --format=lzma --single-stream 2>/dev/null || true ;;
        zstd)  zstd -dcq 2>/dev/null || true ;;
        gzip)  gzip -dc 2>/dev/null || true ;;
        bzip2) bzip2 -dc 2>/dev/null || true ;;
        lz4)   lz4 -dc 2>/dev/null || true ;;
        lzo)   lzop -dc 2>/dev/null || true ;;
        *) return 1 ;;
    esac
}

decompressor_pkg() {
    case "$1" in
        xz|lzma) echo "xz xz-utils" ;;
        zstd)    echo "zstd zstd" ;;
        gzip)    echo "gzip gzip" ;;
        bzip2)   echo "bzip2 bzip2" ;;
        lz4)     echo "lz4 lz4" ;;
        lzo)     echo "lzop lzop" ;;
    esac
}

# Format name from the hex magic at the start of a buffer.
format_of_hex() {
    case "$1" in
        fd377a585a00*) echo xz ;;
        28b52ffd*)     echo zstd ;;
        1f8b08*)       echo gzip ;;
        02214c18*)     echo lz4 ;;   # lz4 legacy frame (kernel uses lz4 -l)
        04224d18*)     echo lz4 ;;
        425a68*)       echo bzip2 ;;
        894c5a4f*)     echo lzo ;;
        5d000000*)     echo lzma ;;
        *) return 1 ;;
    esac
}

# try_extract BZIMAGE OFFSET LENGTH(0=to EOF) FORMAT OUT -> 0 if OUT is ELF.
try_extract() {
    local bz=$1 off=$2 len=$3 fmt=$4 out=$5
    # shellcheck disable=SC2046
    ensure_cmd $(decompressor_pkg "$fmt")
    if [ "$len" -gt 0 ]; then
        { tail -c +"$((off + 1))" "$bz" | head -c "$len" | decompress "$fmt" > "$out"; } || true
    else
        { tail -c +"$((off + 1))" "$bz" | decompress "$fmt" > "$out"; } || true
    fi
    is_elf64_x86_64_exec "$out"
}

# extract_vmlinux BZIMAGE OUT: sets $compression.
extract_vmlinux() {
    local bz=$1 out=$2 setup_sects proto pm_start poff plen magic fmt
    is_bzimage "$bz" || die "$bz is not a bzImage (no HdrS signature)"
    setup_sects=$(read_le "$bz" 0x1f1 1)
    [ "$setup_sects" -eq 0 ] && setup_sects=4
    pm_start=$(( (setup_sects + 1) * 512 ))
    proto=$(read_le "$bz" 0x206 2)

    # 1) Boot protocol >= 2.08: payload_offset/payload_length in the header.
    if [ "$proto" -ge $((0x208)) ]; then
        poff=$(read_le "$bz" 0x248 4)
        plen=$(read_le "$bz" 0x24c 4)
        magic=$(read_hex "$bz" "$((pm_start + poff))" 8)
        if fmt=$(format_of_hex "$magic"); then
            log "payload: $fmt at offset $((pm_start + poff)), $plen bytes (from header)"
            if try_extract "$bz" "$((pm_start + poff))" "$plen" "$fmt" "$out"; then
                compression=$fmt
                return 0
            fi
            log "header payload did not decompress to an ELF, scanning for magics"
        else
            log "unknown magic '$magic' at header payload offset, scanning for magics"
        fi
    fi

    # 2) Fallback: scan for known magics, try each hit in file order.
    local pat hit off
    for pat in 'xz:\xfd7zXZ\x00' 'zstd:\x28\xb5\x2f\xfd' 'gzip:\x1f\x8b\x08' \
               'lz4:\x02\x21\x4c\x18' 'bzip2:BZh' 'lzo:\x89LZO' 'lzma:\x5d\x00\x00\x00'; do
        fmt=${pat%%:*}
        while IFS=: read -r hit _; do
            off=$hit
            if try_extract "$bz" "$off" 0 "$fmt" "$out"; then
                log "payload: $fmt at offset $off (found by scanning)"
                compression=$fmt
                return 0
            fi
        done < <(grep -obUaP "${pat#*:}" "$bz" 2>/dev/null | head -n 20 || true)
    done
    die "could not find a compressed payload in $bz that decompresses to an ELF64 x86-64 kernel"
}

# find_pvh_note ELF: walk PT_NOTE segments; sets pvh=yes and pvh_entry.
find_pvh_note() {
    local f=$1 phoff phentsize phnum i ph ptype poff psz
    local -a d
    local pos namesz descsz ntype name j v
    phoff=$(read_le "$f" 32 8)
    phentsize=$(read_le "$f" 54 2)
    phnum=$(read_le "$f" 56 2)
    for ((i = 0; i < phnum; i++)); do
        ph=$((phoff + i * phentsize))
        ptype=$(read_le "$f" "$ph" 4)
        [ "$ptype" = 4 ] || continue            # PT_NOTE
        poff=$(read_le "$f" $((ph + 8)) 8)
        psz=$(read_le "$f" $((ph + 32)) 8)
        [ "$psz" -gt 0 ] && [ "$psz" -le 1048576 ] || continue
        read -r -a d < <(od -An -v -tu1 -j "$poff" -N "$psz" "$f" | tr -s ' \n' '  ') || true
        pos=0
        while [ $((pos + 12)) -le "${#d[@]}" ]; do
            namesz=$(( d[pos] | d[pos+1] << 8 | d[pos+2] << 16 | d[pos+3] << 24 ))
            descsz=$(( d[pos+4] | d[pos+5] << 8 | d[pos+6] << 16 | d[pos+7] << 24 ))
            ntype=$(( d[pos+8] | d[pos+9] << 8 | d[pos+10] << 16 | d[pos+11] << 24 ))
            pos=$((pos + 12))
            name=
            for ((j = 0; j < namesz && d[pos+j] != 0; j++)); do
                name+=$(printf "\\$(printf '%03o' "${d[pos+j]}")")
            done
            pos=$((pos + (namesz + 3) / 4 * 4))
            if [ "$name" = Xen ] && [ "$ntype" = $((0x12)) ] && [ "$descsz" -ge 4 ]; then
                v=0
                for ((j = descsz > 8 ? 7 : descsz - 1; j >= 0; j--)); do
                    v=$(( (v << 8) | d[pos+j] ))
                done
                pvh=yes
                pvh_entry=$(printf '0x%x' "$v")
                return 0
            fi
            pos=$((pos + (descsz + 3) / 4 * 4))
        done
    done
    return 0
}

# ------------------------------------------------------------------ cache --

if outputs_valid; then
    echo "cached: $out_dir ($(head -n1 "$out_dir/version"), $(grep '^pvh=' "$out_dir/version"))"
    exit 0
fi

# ------------------------------------------------------------------ fetch --

command -v apt-get >/dev/null 2>&1 || die "apt-get not found (Debian host required)"
command -v dpkg-deb >/dev/null 2>&1 || die "dpkg-deb not found"
ensure_cmd readelf binutils

mkdir -p "$out_dir" || die "cannot create output directory $out_dir"
out_dir=$(cd "$out_dir" && pwd)

# Serialise concurrent runs on the same output directory.
exec 9> "$out_dir/.lock"
flock 9 || die "cannot lock $out_dir/.lock"
if outputs_valid; then   # another run may have finished meanwhile
    echo "cached: $out_dir ($(head -n1 "$out_dir/version"), $(grep '^pvh=' "$out_dir/version"))"
    exit 0
fi

tmp=$(mktemp -d "${TMPDIR:-/tmp}/fetch-kernel.XXXXXX")
trap 'rm -rf "$tmp"' EXIT

# Make sure the metapackage has a candidate; update lists only if needed.
candidate=$(apt-cache policy "$meta_pkg" 2>/dev/null | sed -n 's/^ *Candidate: *//p')
if [ -z "$candidate" ] || [ "$candidate" = "(none)" ]; then
    apt_update
    candidate=$(apt-cache policy "$meta_pkg" 2>/dev/null | sed -n 's/^ *Candidate: *//p')
    [ -n "$candidate" ] && [ "$candidate" != "(none)" ] \
        || die "no installation candidate for $meta_pkg (check apt sources)"
fi

# Resolve the versioned image package the metapackage depends on.
kpkg=$(apt-cache depends "$meta_pkg" 2>/dev/null \
    | sed -n 's/^ *|\{0,1\}Depends: *\(linux-image-[0-9][^ ]*\)$/\1/p' | head -n1)
[ -n "$kpkg" ] || die "could not resolve the kernel package $meta_pkg $candidate depends on"

log "fetching $kpkg (via $meta_pkg $candidate)"
# Download runs as root without the _apt sandbox (the temp dir is private).
apt_dl() { (cd "$tmp" && apt-get download -q -o APT::Sandbox::User=root "$kpkg" >&2); }
if ! apt_dl; then
    apt_update
    apt_dl || die "apt-get download $kpkg failed"
fi
deb=$(find "$tmp" -maxdepth 1 -name '*.deb' | head -n1)
[ -n "$deb" ] || die "apt-get download produced no .deb for $kpkg"
pkg_name=$(dpkg-deb -f "$deb" Package) || die "cannot read control of $deb"
pkg_ver=$(dpkg-deb -f "$deb" Version)

log "extracting $(basename "$deb")"
dpkg-deb -x "$deb" "$tmp/root" || die "dpkg-deb -x $deb failed"
vmlinuz=$(find "$tmp/root/boot" -maxdepth 1 -name 'vmlinuz-*' -type f 2>/dev/null | head -n1)
[ -n "$vmlinuz" ] || die "no /boot/vmlinuz-* in $pkg_name"
uname_r=${vmlinuz##*/vmlinuz-}

cp "$vmlinuz" "$tmp/bzImage"
is_bzimage "$tmp/bzImage" || die "$vmlinuz is not a bzImage"

log "extracting vmlinux from bzImage"
compression=
extract_vmlinux "$tmp/bzImage" "$tmp/vmlinux"
readelf -h "$tmp/vmlinux" > "$tmp/elfh" 2>/dev/null || die "readelf -h failed on extracted vmlinux"
grep -q 'Class: *ELF64' "$tmp/elfh" && grep -q 'Machine: *Advanced Micro Devices X86-64' "$tmp/elfh" \
    && grep -q 'Type: *EXEC' "$tmp/elfh" || die "extracted vmlinux is not an ELF64 x86-64 executable"
entry=$(sed -n 's/^ *Entry point address: *//p' "$tmp/elfh")

# Xen PVH note: owner "Xen", type 0x12 (XEN_ELFNOTE_PHYS32_ENTRY), descriptor
# = physical 32-bit entry point. Parsed from the PT_NOTE segments directly and
# cross-checked against `readelf -n` (which prints it as an unknown Xen type).
pvh=no pvh_entry=
find_pvh_note "$tmp/vmlinux"
readelf -n "$tmp/vmlinux" > "$tmp/notes" 2>/dev/null || die "readelf -n failed on extracted vmlinux"
if grep -Eq '^[[:space:]]*Xen[[:space:]].*\(0x0*12\)' "$tmp/notes"; then
    readelf_pvh=yes
else
    readelf_pvh=no
fi
[ "$pvh" = "$readelf_pvh" ] || log "warning: PVH note parse ($pvh) disagrees with readelf -n ($readelf_pvh)"

{
    echo "$pkg_name $pkg_ver"
    echo "uname_r=$uname_r"
    echo "pvh=$pvh"
    [ -n "$pvh_entry" ] && echo "pvh_entry=$pvh_entry"
    echo "elf_entry=$entry"
    echo "compression=$compression"
    echo "cache_rev=$cache_rev"
    echo "bzimage_sha256=$(sha256 "$tmp/bzImage")"
    echo "vmlinux_sha256=$(sha256 "$tmp/vmlinux")"
} > "$tmp/version"

# Install atomically-ish: data files first, version (the validity marker) last.
rm -f "$out_dir/version"
mv -f "$tmp/bzImage" "$out_dir/bzImage"
mv -f "$tmp/vmlinux" "$out_dir/vmlinux"
mv -f "$tmp/version" "$out_dir/version"

log "done: $pkg_name $pkg_ver ($uname_r), $compression payload, pvh=$pvh${pvh_entry:+ entry $pvh_entry}"
echo "$out_dir"
