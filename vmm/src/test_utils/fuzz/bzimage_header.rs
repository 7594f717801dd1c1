//! `arch::unpack` on arbitrary bytes: the setup-header parser, the payload bounds, the magic
//! sniffing and every decoder, with a 16 MiB output limit so a tiny input cannot make the fuzzer
//! allocate the production limit. Any outcome but a panic (or a hang) is fine.

use arch::unpack::{decompress, detect, parse_setup, payload};

/// One input.
pub fn run(data: &[u8]) {
    if let Ok(setup) = parse_setup(data) {
        if let Ok(p) = payload(data, &setup) {
            if let Ok(format) = detect(p) {
                let _ = decompress(format, p, 16 << 20);
            }
        }
    }
    // The payload sniffing and decoders also see the raw input, header or not.
    if let Ok(format) = detect(data) {
        let _ = decompress(format, data, 16 << 20);
    }
}
