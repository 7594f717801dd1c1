/*
 * pvh_note.S - the Xen PVH ELF note (XEN_ELFNOTE_PHYS32_ENTRY).
 *
 * Owns: telling the loader (rust-vmm linux-loader, QEMU -kernel) the 32-bit
 * physical entry point. name "Xen\0", type 18, desc = 4-byte entry address.
 */
    .section .note.Xen, "a", @note
    .balign 4
    .long 4                 /* namesz: "Xen\0" */
    .long 4                 /* descsz: one .long */
    .long 18                /* XEN_ELFNOTE_PHYS32_ENTRY */
    .asciz "Xen"
    .balign 4
    .long pvh_start32
    .balign 4
