//! The snapshot state file's parser (`vmm::snapshot::file::decode`) on arbitrary bytes.
//!
//! Input: byte 0 = mode. Even: the rest is the whole file, header included (the header checks:
//! magic, format version, body length, CRC-32). Odd: the rest is a body, wrapped in a correct
//! header first, so the fuzzer reaches the Osprey-version check and postcard's decoding of
//! `SnapshotState` past the checksum.
//! Checks: no panic; a file that decodes encodes back to bytes that decode to the same encoding
//! (the format is stable under a round trip).

use crate::snapshot::file::{decode, encode, FORMAT_VERSION, MAGIC};

/// `body` behind a header that passes every header check.
fn with_good_header(body: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(24 + body.len());
    out.extend_from_slice(&MAGIC);
    out.extend_from_slice(&FORMAT_VERSION.to_le_bytes());
    out.extend_from_slice(&(body.len() as u64).to_le_bytes());
    out.extend_from_slice(&crc32fast::hash(body).to_le_bytes());
    out.extend_from_slice(body);
    out
}

/// One input.
pub fn run(data: &[u8]) {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    let file = if mode % 2 == 1 {
        with_good_header(rest)
    } else {
        rest.to_vec()
    };
    let Ok(state) = decode(&file) else {
        return;
    };
    let again = encode(&state).expect("a decoded state encodes");
    let back = decode(&again).expect("an encoded state decodes");
    assert_eq!(
        encode(&back).expect("encodes again"),
        again,
        "the round trip is stable"
    );
}
