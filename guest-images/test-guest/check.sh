#!/bin/sh
# check.sh - forbidden-instruction scan for the test guest ELF.
#
# Owns: failing the build if the disassembly contains anything kvm_pvm's
# ring-0 emulator cannot run: xmm/ymm/zmm/mm/k registers, x87 (any f*
# mnemonic, incl. fwait/fxsave), int3, popcnt, cmpxchg16b, xsave*/xrstor*,
# xgetbv, rdtscp, crc32, ldmxcsr/stmxcsr, and a few BMI/other extensions.
# Exception: `int3` is allowed in the ring-3-only section .user_text (the
# run_in_user exit trampoline); nothing else is allowed there either.
set -eu
elf=${1:?usage: check.sh ELF}
objdump=${OBJDUMP:-objdump}

dis=$("$objdump" -d --no-show-raw-insn -M att "$elf")
[ -n "$dis" ] || { echo "check: empty disassembly" >&2; exit 1; }

bad=$(printf '%s\n' "$dis" | awk '
    /^Disassembly of section / { sec = $4; sub(":$", "", sec); next }
    /^ *[0-9a-f]+:\t/ {
        line = $0
        split(line, parts, "\t")
        insn = parts[2]
        n = split(insn, w, /[ \t]+/)
        m = w[1]
        # skip prefixes to reach the real mnemonic
        i = 1
        while (i < n && (m ~ /^(rep|repz|repnz|repe|repne|lock|data16|addr32|cs|ds|es|ss|fs|gs|notrack|bnd)$/)) { i++; m = w[i] }
        reason = ""
        if (insn ~ /%(x|y|z)mm[0-9]/) reason = "SSE/AVX register"
        else if (insn ~ /%mm[0-7]/) reason = "MMX register"
        else if (insn ~ /%k[0-7]/) reason = "AVX-512 mask register"
        else if (insn ~ /%st/) reason = "x87 register"
        else if (m ~ /^f/) reason = "x87/fxsave"
        else if (m == "wait") reason = "fwait"
        else if (m ~ /^(popcnt|cmpxchg16b|xgetbv|xsetbv|rdtscp|crc32|ldmxcsr|stmxcsr|vldmxcsr|vstmxcsr|emms)/) reason = m
        else if (m ~ /^(xsave|xrstor)/) reason = m
        else if (m ~ /^(mulx|pdep|pext|andn|bextr|rorx|sarx|shlx|shrx|lzcnt|movbe|adcx|adox|aes|sha|pclmul)/) reason = m
        else if (m == "int3" && sec != ".user_text") reason = "int3 outside .user_text"
        if (reason != "") print sec ": " line "   <-- " reason
    }')

if [ -n "$bad" ]; then
    echo "check: FAILED: instructions kvm_pvm ring 0 cannot execute:" >&2
    printf '%s\n' "$bad" >&2
    exit 1
fi

# The PVH note must be present.
if ! "$objdump" -p "$elf" | grep -q 'NOTE'; then
    echo "check: FAILED: no PT_NOTE program header" >&2
    exit 1
fi

count=$(printf '%s\n' "$dis" | grep -c '^ *[0-9a-f]*:	' || true)
echo "check: OK ($count instructions scanned, no forbidden instructions)"
