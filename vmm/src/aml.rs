//! A small AML (ACPI Machine Language) encoder: just what the DSDT needs to describe a PCI host
//! bridge.
//!
//! Every function is pure and returns the bytes of one AML term or resource descriptor; callers
//! nest them by passing the children's bytes in. Encodings follow the ACPI 6.x specification:
//! §20.2 (AML grammar: names, package lengths, integers, `Scope`, `Device`, `Name`, `Buffer`) and
//! §6.4 (resource data types: the small I/O port and end tag descriptors, the large Word, DWord
//! and QWord address space descriptors). Invalid input (a malformed name, a range that does not
//! fit its descriptor) is a programming error and panics.

/// `ZeroOp`.
const ZERO_OP: u8 = 0x00;
/// `OneOp`.
const ONE_OP: u8 = 0x01;
/// `NameOp`.
const NAME_OP: u8 = 0x08;
/// `BytePrefix`: an 8-bit integer follows.
const BYTE_PREFIX: u8 = 0x0a;
/// `WordPrefix`: a 16-bit integer follows.
const WORD_PREFIX: u8 = 0x0b;
/// `DWordPrefix`: a 32-bit integer follows.
const DWORD_PREFIX: u8 = 0x0c;
/// `QWordPrefix`: a 64-bit integer follows.
const QWORD_PREFIX: u8 = 0x0e;
/// `ScopeOp`.
const SCOPE_OP: u8 = 0x10;
/// `BufferOp`.
const BUFFER_OP: u8 = 0x11;
/// `DualNamePrefix`: two name segments follow.
const DUAL_NAME_PREFIX: u8 = 0x2e;
/// `MultiNamePrefix`: a segment count, then that many name segments.
const MULTI_NAME_PREFIX: u8 = 0x2f;
/// `ExtOpPrefix`.
const EXT_OP_PREFIX: u8 = 0x5b;
/// `DeviceOp` (after `ExtOpPrefix`).
const DEVICE_OP: u8 = 0x82;
/// `RootChar`.
const ROOT_CHAR: u8 = b'\\';
/// `ParentPrefixChar`.
const PARENT_PREFIX_CHAR: u8 = b'^';
/// `NullName`.
const NULL_NAME: u8 = 0x00;

/// Small resource item: I/O port descriptor (item name 0x08, 7 bytes of data).
const IO_PORT_DESCRIPTOR: u8 = 0x08 << 3 | 7;
/// Small resource item: end tag (item name 0x0f, 1 byte of data: the checksum).
const END_TAG: u8 = 0x0f << 3 | 1;
/// Large resource item: DWord address space descriptor.
const DWORD_ADDRESS_SPACE: u8 = 0x87;
/// Large resource item: Word address space descriptor.
const WORD_ADDRESS_SPACE: u8 = 0x88;
/// Large resource item: QWord address space descriptor.
const QWORD_ADDRESS_SPACE: u8 = 0x8a;
/// I/O port descriptor information: the device decodes all 16 address bits.
const IO_DECODE_16: u8 = 1;
/// Address space resource type: memory range.
const RESOURCE_TYPE_MEMORY: u8 = 0;
/// Address space resource type: I/O range.
const RESOURCE_TYPE_IO: u8 = 1;
/// Address space resource type: bus number range.
const RESOURCE_TYPE_BUS_NUMBER: u8 = 2;
/// General flags: the minimum address is fixed (`_MIF`).
const MIN_FIXED: u8 = 1 << 2;
/// General flags: the maximum address is fixed (`_MAF`).
const MAX_FIXED: u8 = 1 << 3;
/// General flags of every range here: produced for the children (bit 0 clear), positive decode
/// (bit 1 clear), fixed minimum and maximum.
const PRODUCER_FIXED_RANGE: u8 = MIN_FIXED | MAX_FIXED;
/// I/O type-specific flags: the range covers both ISA and non-ISA ports (`_RNG` = 3).
const IO_ENTIRE_RANGE: u8 = 3;
/// Memory type-specific flags: read-write (`_RW`), non-cacheable (`_MEM` = 0), plain memory.
const MEMORY_READ_WRITE_NON_CACHEABLE: u8 = 1;

/// The encoding of a `PkgLength` whose value (the package's length counting these bytes
/// themselves) is `total`: one byte up to 63, otherwise a lead byte holding the count of
/// following bytes (bits 6-7) and the low nibble, then the rest 8 bits at a time.
pub fn pkg_length(total: usize) -> Vec<u8> {
    if total < 1 << 6 {
        return vec![total as u8];
    }
    assert!(total < 1 << 28, "AML package of {total} bytes is too long");
    let follow = if total < 1 << 12 {
        1
    } else if total < 1 << 20 {
        2
    } else {
        3
    };
    let mut out = vec![(follow << 6) as u8 | (total & 0xf) as u8];
    out.extend((0..follow).map(|i| (total >> (4 + 8 * i)) as u8));
    out
}

/// `body` preceded by the `PkgLength` covering both, in as few bytes as possible.
fn package(body: &[u8]) -> Vec<u8> {
    let width = (1..=4)
        .find(|&n| pkg_length(body.len() + n).len() == n)
        .expect("a package length encodes in at most 4 bytes");
    let mut out = pkg_length(body.len() + width);
    out.extend_from_slice(body);
    out
}

/// One `NameSeg`: 1-4 characters, a letter or `_` first, then letters, digits or `_`, padded
/// with `_` to four.
pub fn name_seg(seg: &str) -> [u8; 4] {
    let b = seg.as_bytes();
    let valid = (1..=4).contains(&b.len())
        && (b[0].is_ascii_uppercase() || b[0] == b'_')
        && b[1..]
            .iter()
            .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || *c == b'_');
    assert!(valid, "invalid AML name segment {seg:?}");
    let mut out = [b'_'; 4];
    out[..b.len()].copy_from_slice(b);
    out
}

/// A `NameString` from ASL notation: an optional root `\` or parent `^` prefixes, then
/// segments separated by dots (`\_SB.PCI0`, `^FOO`, `_HID`).
pub fn name_string(path: &str) -> Vec<u8> {
    let rest = path.trim_start_matches([char::from(ROOT_CHAR), char::from(PARENT_PREFIX_CHAR)]);
    let prefix = &path.as_bytes()[..path.len() - rest.len()];
    assert!(
        prefix.len() <= 1 || prefix.iter().all(|c| *c == PARENT_PREFIX_CHAR),
        "invalid AML name prefix in {path:?}"
    );
    let mut out = prefix.to_vec();
    let segs: Vec<[u8; 4]> = if rest.is_empty() {
        Vec::new()
    } else {
        rest.split('.').map(name_seg).collect()
    };
    match segs.len() {
        0 => out.push(NULL_NAME),
        1 => {}
        2 => out.push(DUAL_NAME_PREFIX),
        n => {
            let n = u8::try_from(n).expect("at most 255 name segments");
            out.extend([MULTI_NAME_PREFIX, n]);
        }
    }
    out.extend(segs.iter().flatten());
    out
}

/// An integer in its shortest encoding: `Zero`, `One`, or a Byte/Word/DWord/QWord constant.
pub fn integer(v: u64) -> Vec<u8> {
    let mut out = match v {
        0 => return vec![ZERO_OP],
        1 => return vec![ONE_OP],
        2..=0xff => vec![BYTE_PREFIX],
        0x100..=0xffff => vec![WORD_PREFIX],
        0x1_0000..=0xffff_ffff => vec![DWORD_PREFIX],
        _ => vec![QWORD_PREFIX],
    };
    let width = match out[0] {
        BYTE_PREFIX => 1,
        WORD_PREFIX => 2,
        DWORD_PREFIX => 4,
        _ => 8,
    };
    out.extend_from_slice(&v.to_le_bytes()[..width]);
    out
}

/// The 32-bit compressed form of an EISA id like `PNP0A03` (what ASL's `EisaId` yields): three
/// letters in five bits each and four hex digits, stored big-endian.
pub fn eisa_id(id: &str) -> u32 {
    let b = id.as_bytes();
    let valid = b.len() == 7
        && b[..3].iter().all(u8::is_ascii_uppercase)
        && b[3..]
            .iter()
            .all(|c| c.is_ascii_digit() || (b'A'..=b'F').contains(c));
    assert!(valid, "invalid EISA id {id:?}");
    let vendor = b[..3]
        .iter()
        .fold(0u32, |v, c| v << 5 | u32::from(c - b'@'));
    let product = u32::from_str_radix(&id[3..], 16).expect("checked hex digits");
    (vendor << 16 | product).swap_bytes()
}

/// `Name (path, data)`: `data` is an encoded data object (an [`integer`], a [`buffer`]...).
pub fn name(path: &str, data: &[u8]) -> Vec<u8> {
    let mut out = vec![NAME_OP];
    out.extend(name_string(path));
    out.extend_from_slice(data);
    out
}

/// The name, then the terms, as the body of a `Scope` or `Device`.
fn named_body(path: &str, terms: &[Vec<u8>]) -> Vec<u8> {
    let mut body = name_string(path);
    body.extend(terms.iter().flatten());
    body
}

/// `Scope (path) { terms }`.
pub fn scope(path: &str, terms: &[Vec<u8>]) -> Vec<u8> {
    let mut out = vec![SCOPE_OP];
    out.extend(package(&named_body(path, terms)));
    out
}

/// `Device (path) { terms }`.
pub fn device(path: &str, terms: &[Vec<u8>]) -> Vec<u8> {
    let mut out = vec![EXT_OP_PREFIX, DEVICE_OP];
    out.extend(package(&named_body(path, terms)));
    out
}

/// `Buffer () { bytes }`: the size is the bytes'.
pub fn buffer(bytes: &[u8]) -> Vec<u8> {
    let mut body = integer(bytes.len() as u64);
    body.extend_from_slice(bytes);
    let mut out = vec![BUFFER_OP];
    out.extend(package(&body));
    out
}

/// `ResourceTemplate () { descriptors }`: a buffer of the descriptors and an end tag whose
/// checksum is 0 (which means "no checksum").
pub fn resource_template(descriptors: &[Vec<u8>]) -> Vec<u8> {
    let mut bytes: Vec<u8> = descriptors.iter().flatten().copied().collect();
    bytes.extend([END_TAG, 0]);
    buffer(&bytes)
}

/// `IO (Decode16, base, base, 1, len)`: `len` ports at the fixed address `base`, consumed.
pub fn io_port(base: u16, len: u8) -> Vec<u8> {
    let mut out = vec![IO_PORT_DESCRIPTOR, IO_DECODE_16];
    out.extend(base.to_le_bytes());
    out.extend(base.to_le_bytes());
    out.extend([1, len]);
    out
}

/// An address space descriptor with `width`-byte fields: a range `min..=max` produced for the
/// children, with no granularity and no translation.
fn address_space(tag: u8, width: usize, kind: u8, type_flags: u8, min: u64, max: u64) -> Vec<u8> {
    let mask = u64::MAX >> (64 - 8 * width);
    let len = max
        .checked_sub(min)
        .and_then(|d| d.checked_add(1))
        .filter(|l| *l <= mask && max <= mask);
    let Some(len) = len else {
        panic!("range {min:#x}..={max:#x} does not fit a {width}-byte address space descriptor");
    };
    // The length field counts what follows it: three flag bytes and five fields.
    let data_len = 3 + 5 * width as u16;
    let mut out = vec![tag];
    out.extend(data_len.to_le_bytes());
    out.extend([kind, PRODUCER_FIXED_RANGE, type_flags]);
    for field in [0, min, max, 0, len] {
        out.extend_from_slice(&field.to_le_bytes()[..width]);
    }
    out
}

/// `WordBusNumber (ResourceProducer, MinFixed, MaxFixed, PosDecode, 0, min, max, 0, len)`.
pub fn word_bus_number(min: u16, max: u16) -> Vec<u8> {
    let (min, max) = (u64::from(min), u64::from(max));
    address_space(WORD_ADDRESS_SPACE, 2, RESOURCE_TYPE_BUS_NUMBER, 0, min, max)
}

/// `WordIO (ResourceProducer, MinFixed, MaxFixed, PosDecode, EntireRange, 0, min, max, 0, len)`.
pub fn word_io(min: u16, max: u16) -> Vec<u8> {
    let (min, max) = (u64::from(min), u64::from(max));
    address_space(
        WORD_ADDRESS_SPACE,
        2,
        RESOURCE_TYPE_IO,
        IO_ENTIRE_RANGE,
        min,
        max,
    )
}

/// `DWordMemory (ResourceProducer, PosDecode, MinFixed, MaxFixed, NonCacheable, ReadWrite,
/// 0, min, max, 0, len)`.
pub fn dword_memory(min: u32, max: u32) -> Vec<u8> {
    let (min, max) = (u64::from(min), u64::from(max));
    address_space(
        DWORD_ADDRESS_SPACE,
        4,
        RESOURCE_TYPE_MEMORY,
        MEMORY_READ_WRITE_NON_CACHEABLE,
        min,
        max,
    )
}

/// `QWordMemory (ResourceProducer, PosDecode, MinFixed, MaxFixed, NonCacheable, ReadWrite,
/// 0, min, max, 0, len)`.
pub fn qword_memory(min: u64, max: u64) -> Vec<u8> {
    address_space(
        QWORD_ADDRESS_SPACE,
        8,
        RESOURCE_TYPE_MEMORY,
        MEMORY_READ_WRITE_NON_CACHEABLE,
        min,
        max,
    )
}

/// The memory window `start..end` (end exclusive) as a [`dword_memory`] descriptor when it lies
/// below 4 GiB, else as a [`qword_memory`] one.
pub fn memory_window(start: u64, end: u64) -> Vec<u8> {
    assert!(start < end, "empty memory window {start:#x}..{end:#x}");
    match (u32::try_from(start), u32::try_from(end - 1)) {
        (Ok(min), Ok(max)) => dword_memory(min, max),
        _ => qword_memory(start, end - 1),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pkg_length_forms_and_boundaries() {
        assert_eq!(pkg_length(0), [0x00]);
        assert_eq!(pkg_length(63), [0x3f]);
        assert_eq!(pkg_length(64), [0x40, 0x04]);
        assert_eq!(pkg_length(0x1a5), [0x45, 0x1a]);
        assert_eq!(pkg_length(4095), [0x4f, 0xff]);
        assert_eq!(pkg_length(4096), [0x80, 0x00, 0x01]);
        assert_eq!(pkg_length(0xf_ffff), [0x8f, 0xff, 0xff]);
        assert_eq!(pkg_length(0x10_0000), [0xc0, 0x00, 0x00, 0x01]);
        assert_eq!(pkg_length(0xfff_ffff), [0xcf, 0xff, 0xff, 0xff]);
    }

    #[test]
    #[should_panic(expected = "too long")]
    fn pkg_length_rejects_2_pow_28() {
        pkg_length(1 << 28);
    }

    #[test]
    fn package_length_counts_its_own_bytes() {
        // A body of 62 bytes plus one length byte is 63: the one-byte form.
        assert_eq!(package(&[0; 62])[..1], [63]);
        // 63 + 1 would be 64, which needs two bytes: 65 in all.
        assert_eq!(package(&[0; 63])[..2], [0x41, 0x04]);
        // 4093 + 2 = 4095 still fits two bytes; 4094 + 2 = 4096 does not, so 4094 + 3 = 4097.
        assert_eq!(package(&[0; 4093])[..2], [0x4f, 0xff]);
        assert_eq!(package(&[0; 4094])[..3], [0x81, 0x00, 0x01]);
        for body in [0, 1, 62, 63, 64, 4092, 4093, 4094, 4095, 0xf_fffc, 0xf_fffd] {
            let p = package(&vec![0xaa; body]);
            let head = p.len() - body;
            // The length is the whole package, in the fewest bytes that can hold it.
            assert_eq!(pkg_length(p.len()), p[..head], "body of {body}");
            assert!(head == 1 || pkg_length(body + head - 1).len() >= head);
        }
    }

    #[test]
    fn name_strings() {
        assert_eq!(name_string("_HID"), b"_HID");
        assert_eq!(name_string("PCI0"), b"PCI0");
        assert_eq!(name_string("_SB"), b"_SB_");
        assert_eq!(name_string("\\_SB"), b"\\_SB_");
        assert_eq!(name_string("\\_SB.PCI0"), b"\\\x2e_SB_PCI0");
        assert_eq!(name_string("^^A.B.C"), b"^^\x2f\x03A___B___C___");
        assert_eq!(name_string("\\"), [b'\\', 0x00]);
    }

    #[test]
    #[should_panic(expected = "invalid AML name segment")]
    fn name_seg_rejects_lowercase() {
        name_seg("pci0");
    }

    #[test]
    #[should_panic(expected = "invalid AML name segment")]
    fn name_seg_rejects_long_and_leading_digit() {
        name_seg("0ABC");
    }

    #[test]
    fn integers_take_the_shortest_form() {
        assert_eq!(integer(0), [ZERO_OP]);
        assert_eq!(integer(1), [ONE_OP]);
        assert_eq!(integer(2), [0x0a, 0x02]);
        assert_eq!(integer(0xff), [0x0a, 0xff]);
        assert_eq!(integer(0x100), [0x0b, 0x00, 0x01]);
        assert_eq!(integer(0xffff), [0x0b, 0xff, 0xff]);
        assert_eq!(integer(0x1_0000), [0x0c, 0x00, 0x00, 0x01, 0x00]);
        assert_eq!(integer(0xdead_beef), [0x0c, 0xef, 0xbe, 0xad, 0xde]);
        assert_eq!(integer(0x1_0000_0000), [0x0e, 0, 0, 0, 0, 1, 0, 0, 0]);
    }

    #[test]
    fn eisa_ids_compress() {
        assert_eq!(eisa_id("PNP0A03"), 0x030a_d041);
        assert_eq!(eisa_id("PNP0A08"), 0x080a_d041);
        assert_eq!(eisa_id("PNP0501"), 0x0105_d041);
        assert_eq!(
            name("_HID", &integer(eisa_id("PNP0A03").into())),
            [0x08, b'_', b'H', b'I', b'D', 0x0c, 0x41, 0xd0, 0x0a, 0x03]
        );
    }

    #[test]
    #[should_panic(expected = "invalid EISA id")]
    fn eisa_id_rejects_lowercase_hex() {
        eisa_id("PNP0a03");
    }

    #[test]
    fn small_device_and_scope() {
        let dev = device("DEV0", &[name("_UID", &integer(0))]);
        #[rustfmt::skip]
        let expected = [
            0x5b, 0x82, 0x0b, b'D', b'E', b'V', b'0',
            0x08, b'_', b'U', b'I', b'D', 0x00,
        ];
        assert_eq!(dev, expected);
        let sc = scope("\\_SB", &[dev]);
        assert_eq!(sc[..7], [0x10, 0x13, b'\\', b'_', b'S', b'B', b'_']);
        assert_eq!(sc[7..], expected);
    }

    #[test]
    fn buffers_and_resource_templates() {
        assert_eq!(buffer(&[7, 8, 9]), [0x11, 0x06, 0x0a, 0x03, 7, 8, 9]);
        assert_eq!(buffer(&[]), [0x11, 0x02, 0x00]);
        assert_eq!(
            resource_template(&[io_port(0x0cf8, 8)]),
            [0x11, 0x0d, 0x0a, 0x0a, 0x47, 0x01, 0xf8, 0x0c, 0xf8, 0x0c, 0x01, 0x08, 0x79, 0x00]
        );
    }

    #[test]
    fn address_space_descriptors() {
        #[rustfmt::skip]
        assert_eq!(word_bus_number(0, 0), [
            0x88, 0x0d, 0x00, 0x02, 0x0c, 0x00,
            0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01, 0x00,
        ]);
        #[rustfmt::skip]
        assert_eq!(word_io(0x0d00, 0xffff), [
            0x88, 0x0d, 0x00, 0x01, 0x0c, 0x03,
            0x00, 0x00, 0x00, 0x0d, 0xff, 0xff, 0x00, 0x00, 0x00, 0xf3,
        ]);
        #[rustfmt::skip]
        assert_eq!(dword_memory(0xc000_0000, 0xfebf_ffff), [
            0x87, 0x17, 0x00, 0x00, 0x0c, 0x01,
            0x00, 0x00, 0x00, 0x00,
            0x00, 0x00, 0x00, 0xc0,
            0xff, 0xff, 0xbf, 0xfe,
            0x00, 0x00, 0x00, 0x00,
            0x00, 0x00, 0xc0, 0x3e,
        ]);
        let q = qword_memory(0x1_0000_0000, 0x1_ffff_ffff);
        assert_eq!(q.len(), 46);
        assert_eq!(q[..6], [0x8a, 0x2b, 0x00, 0x00, 0x0c, 0x01]);
        assert_eq!(q[6..14], 0u64.to_le_bytes());
        assert_eq!(q[14..22], 0x1_0000_0000u64.to_le_bytes());
        assert_eq!(q[22..30], 0x1_ffff_ffffu64.to_le_bytes());
        assert_eq!(q[30..38], 0u64.to_le_bytes());
        assert_eq!(q[38..46], 0x1_0000_0000u64.to_le_bytes());
        assert_eq!(
            memory_window(0xc000_0000, 0xfec0_0000),
            dword_memory(0xc000_0000, 0xfebf_ffff)
        );
        assert_eq!(
            memory_window(0xc000_0000, 0x1_0000_0000),
            dword_memory(0xc000_0000, 0xffff_ffff)
        );
        assert_eq!(
            memory_window(0x1_0000_0000, 0x2_0000_0000),
            qword_memory(0x1_0000_0000, 0x1_ffff_ffff)
        );
    }

    #[test]
    #[should_panic(expected = "does not fit")]
    fn word_range_whose_length_overflows_panics() {
        // 0..=0xffff is 0x10000 long: more than a Word length field holds.
        word_io(0, 0xffff);
    }

    #[test]
    #[should_panic(expected = "does not fit")]
    fn reversed_range_panics() {
        dword_memory(2, 1);
    }
}
