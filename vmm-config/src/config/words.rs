//! Serde's error texts in the words of the JSON a user wrote: `expected u8` becomes `expected
//! an integer from 0 to 255`, `expected struct RateLimiterConfig` becomes `expected an object`,
//! ``floating point `1e+20` `` becomes `number 1e+20`. The config file and the API's request
//! bodies both pass their parse errors through [`in_json_words`], so no message names a Rust
//! type.

/// What a Rust type name in "expected …" means to someone writing JSON.
fn expected_words(type_word: &str) -> Option<&'static str> {
    Some(match type_word {
        "u8" => "an integer from 0 to 255",
        "u16" => "an integer from 0 to 65535",
        "u32" => "an integer from 0 to 4294967295",
        "u64" | "usize" => "an integer from 0 to 18446744073709551615",
        "i8" => "an integer from -128 to 127",
        "i16" => "an integer from -32768 to 32767",
        "i32" => "an integer from -2147483648 to 2147483647",
        "i64" | "isize" => "an integer from -9223372036854775808 to 9223372036854775807",
        "f32" | "f64" => "a number",
        "bool" => "true or false",
        "char" => "a single character",
        "unit" => "null",
        _ => return None,
    })
}

/// Rewrites one serde / serde_json message; text it does not recognise is kept as it is.
pub fn in_json_words(message: &str) -> String {
    let mut out = message.to_string();
    // What was found: serde's `Unexpected` names.
    for (from, to) in [
        ("floating point `", "number `"),
        ("integer `", "number `"),
        ("boolean `", "boolean `"),
        ("unit value", "null"),
        ("type: map,", "type: object,"),
        ("type: sequence,", "type: array,"),
        ("type: newtype struct,", "type: value,"),
    ] {
        out = out.replace(from, to);
    }
    // Drop the backticks around a found number or boolean: "number `5`" -> "number 5".
    for word in ["number `", "boolean `"] {
        while let Some(start) = out.find(word) {
            let open = start + word.len() - 1;
            let Some(len) = out[open + 1..].find('`') else {
                break;
            };
            let inner = out[open + 1..open + 1 + len].to_string();
            out.replace_range(open..open + len + 2, &inner);
        }
    }
    // What was expected.
    for (from, to) in [
        ("expected string or map", "expected a string"),
        ("expected a sequence", "expected an array"),
        ("expected a map", "expected an object"),
        ("expected path string", "expected a path (a string)"),
        ("expected a borrowed string", "expected a string"),
    ] {
        out = out.replace(from, to);
    }
    rewrite_expected_types(&out)
}

/// `expected u8`, `expected struct X`, `expected enum X`, `expected option`: in JSON words.
fn rewrite_expected_types(text: &str) -> String {
    const KEY: &str = "expected ";
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find(KEY) {
        out.push_str(&rest[..at + KEY.len()]);
        rest = &rest[at + KEY.len()..];
        let word_len = rest
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(rest.len());
        let word = &rest[..word_len];
        if let Some(words) = expected_words(word) {
            out.push_str(words);
            rest = &rest[word_len..];
        } else if word == "struct" || word == "enum" || word == "option" {
            // Skip the type's name that follows (`struct RateLimiterConfig`).
            let after = rest[word_len..].trim_start_matches(' ');
            let name_len = after
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .unwrap_or(after.len());
            let named = word != "option" && name_len > 0;
            out.push_str(match word {
                "struct" => "an object",
                "enum" => "a string",
                _ => "a value or null",
            });
            rest = if named {
                &after[name_len..]
            } else {
                &rest[word_len..]
            };
        }
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_utils::messages::names_a_rust_type;

    #[test]
    fn rust_types_become_json_words() {
        let cases = [
            (
                "invalid type: string \"two\", expected u8 at line 1 column 40",
                "invalid type: string \"two\", expected an integer from 0 to 255 at line 1 column 40",
            ),
            (
                "invalid value: integer `-5`, expected u64",
                "invalid value: number -5, expected an integer from 0 to 18446744073709551615",
            ),
            (
                "invalid type: floating point `1e+20`, expected u64",
                "invalid type: number 1e+20, expected an integer from 0 to 18446744073709551615",
            ),
            (
                "invalid type: string \"x\", expected struct RateLimiterConfig",
                "invalid type: string \"x\", expected an object",
            ),
            (
                "invalid type: integer `3`, expected string or map",
                "invalid type: number 3, expected a string",
            ),
            (
                "invalid type: map, expected a sequence",
                "invalid type: object, expected an array",
            ),
            (
                "invalid type: boolean `true`, expected u32",
                "invalid type: boolean true, expected an integer from 0 to 4294967295",
            ),
            (
                "invalid type: unit value, expected u16",
                "invalid type: null, expected an integer from 0 to 65535",
            ),
        ];
        for (serde, want) in cases {
            let got = in_json_words(serde);
            assert_eq!(got, want);
            assert!(!names_a_rust_type(&got), "{got}");
        }
    }

    #[test]
    fn other_messages_pass_unchanged() {
        for m in [
            "unknown variant `iouring`, expected one of `Sync`, `IoUring`",
            "unknown field `vcpus`, expected one of `vcpu_count`, `mem_size_mib`",
            "missing field `boot-source`",
            "EOF while parsing an object at line 1 column 17",
        ] {
            assert_eq!(in_json_words(m), m);
        }
    }

    #[test]
    fn the_type_check_catches_what_it_should() {
        assert!(names_a_rust_type("expected u8"));
        assert!(names_a_rust_type("Some(RateLimiterConfig { ops: None })"));
        assert!(!names_a_rust_type("must be between 1 and 64, got 0"));
    }
}
