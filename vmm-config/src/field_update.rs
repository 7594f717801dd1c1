//! The one rule every `PATCH` body follows, field by field: a field left out stays as it is; a
//! field set to `null` goes back to its default (the value it has when the config file leaves it
//! out: `poll_max_ns` to 32768, a drive's `rate_limiter` to none); a value sets it. Each update
//! type holds its fields as `Option<Option<T>>` read by [`present`]: `None` absent, `Some(None)`
//! null, `Some(Some(v))` a value.

use serde::{Deserialize, Deserializer};

/// Reads a field that is present (`null` included) as `Some`; with `#[serde(default)]`, an
/// absent field is `None`.
pub fn present<'de, D, T>(d: D) -> Result<Option<Option<T>>, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de>,
{
    Option::<T>::deserialize(d).map(Some)
}

/// Reads a field that may be absent (`None`, with `#[serde(default)]`) but not `null`: one that
/// has no default to go back to (a drive's `path_on_host`: a drive must have a file).
pub fn not_null<'de, D, T>(d: D) -> Result<Option<T>, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de>,
{
    match Option::<T>::deserialize(d)? {
        Some(v) => Ok(Some(v)),
        None => Err(serde::de::Error::custom(
            "null is not accepted: this field has no default to go back to",
        )),
    }
}

/// Applies one field of a PATCH to `target`: absent keeps it, null sets `default`.
pub fn apply<T: Clone>(field: &Option<Option<T>>, target: &mut T, default: T) {
    match field {
        None => {}
        Some(None) => *target = default,
        Some(Some(v)) => *target = v.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, Default, Deserialize)]
    struct Body {
        #[serde(default, deserialize_with = "present")]
        n: Option<Option<u64>>,
    }

    #[test]
    fn absent_keeps_null_resets_a_value_sets() {
        let mut x = 5;
        for (json, want) in [(r#"{}"#, 5), (r#"{"n": null}"#, 7), (r#"{"n": 9}"#, 9)] {
            let b: Body = serde_json::from_str(json).expect(json);
            x = 5;
            apply(&b.n, &mut x, 7);
            assert_eq!(x, want, "{json}");
        }
        assert_eq!(x, 9);
    }
}
