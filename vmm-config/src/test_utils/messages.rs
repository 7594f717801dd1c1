//! The rule the config and API tests hold every message and log line to: the config's words
//! ([`crate::config::words`]), never a Rust type or a Debug dump.

/// Whether a message names a Rust type (`u8`, `struct X`) or prints a Debug dump (`Some(`,
/// `{ `) instead of speaking JSON: the rule the config and API tests hold every message to.
pub fn names_a_rust_type(message: &str) -> bool {
    let types = [
        "u8", "u16", "u32", "u64", "usize", "i8", "i16", "i32", "i64", "isize", "f32", "f64",
    ];
    message.contains("struct ")
        || message.contains("Some(")
        || message.contains("{ ")
        || message
            .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .any(|w| types.contains(&w))
}
