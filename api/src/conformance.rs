//! Tests only: checks that answers conform to the OpenAPI document ([`super::routes::document`]),
//! for the unit tests (the fake controller's answers) and the integration tests (a live VMM's,
//! before and after `InstanceStart`). An answer conforms when its operation exists, its status is
//! one the operation documents, and its JSON body validates against that response's schema.
//!
//! The validator covers the JSON Schema keywords the document uses (`$ref`, `type` with `null`
//! among its types, `properties`, `required`, `additionalProperties`, `items`, `oneOf`, `anyOf`,
//! `allOf`, `enum`, `minimum`, `maximum`, integer `format`s); any other keyword is reported, so a
//! document that grows one cannot pass unchecked. A `null` where the schema says `integer` fails.

use serde_json::Value;

/// The keywords [`validate`] checks, and those that only describe.
const CHECKED: &[&str] = &[
    "$ref",
    "type",
    "properties",
    "required",
    "additionalProperties",
    "items",
    "oneOf",
    "anyOf",
    "allOf",
    "enum",
    "minimum",
    "maximum",
    "format",
];
const DESCRIPTIVE: &[&str] = &["description", "title", "example", "examples", "default"];

/// The document as JSON (what `docs/api/openapi.json` holds).
pub fn document_json() -> Value {
    serde_json::to_value(super::routes::document()).unwrap_or_default()
}

/// Every way `path` (e.g. `/drives/disk0`) is described: the document's path templates it
/// matches, exact paths first.
pub fn templates_for(document: &Value, path: &str) -> Vec<String> {
    let Some(paths) = document["paths"].as_object() else {
        return Vec::new();
    };
    let mut found: Vec<String> = paths
        .keys()
        .filter(|t| template_matches(t, path))
        .cloned()
        .collect();
    found.sort_by_key(|t| t.contains('{'));
    found
}

fn template_matches(template: &str, path: &str) -> bool {
    let (t, p): (Vec<&str>, Vec<&str>) = (template.split('/').collect(), path.split('/').collect());
    t.len() == p.len()
        && t.iter()
            .zip(&p)
            .all(|(t, p)| (t.starts_with('{') && t.ends_with('}') && !p.is_empty()) || t == p)
}

/// Checks one answer: `method path` (a concrete path, with no query) answered `status` with
/// `body` (empty for none). Every way it does not conform, as a message; none when it does.
pub fn check_answer(
    document: &Value,
    method: &str,
    path: &str,
    status: u16,
    body: &str,
) -> Vec<String> {
    let at = format!("{method} {path} → {status}");
    let Some(template) = templates_for(document, path).into_iter().next() else {
        return vec![format!("{at}: no path of the document matches")];
    };
    let operation = &document["paths"][&template][method.to_ascii_lowercase()];
    if operation.is_null() {
        return vec![format!("{at}: {template} documents no {method}")];
    }
    let response = &operation["responses"][status.to_string()];
    if response.is_null() {
        return vec![format!(
            "{at}: status {status} is not documented for {method} {template}"
        )];
    }
    let content = &response["content"];
    let Some(schema) = content["application/json"].get("schema") else {
        if body.trim().is_empty() || !content["text/plain"].is_null() {
            return Vec::new();
        }
        return vec![format!("{at}: a body where the document says none: {body}")];
    };
    let value: Value = match serde_json::from_str(body) {
        Ok(v) => v,
        Err(e) => return vec![format!("{at}: the body is not JSON ({e}): {body:?}")],
    };
    let mut errors = Vec::new();
    validate(document, schema, &value, "", &mut errors);
    errors
        .into_iter()
        .map(|e| format!("{at} ({template}): {e}"))
        .collect()
}

/// Validates `value` against `schema` (resolving `$ref`s in `document`), adding each failure,
/// named by its JSON pointer (`where_`), to `errors`.
pub fn validate(
    document: &Value,
    schema: &Value,
    value: &Value,
    where_: &str,
    errors: &mut Vec<String>,
) {
    let here = if where_.is_empty() { "/" } else { where_ };
    let Some(keywords) = schema.as_object() else {
        if schema == &Value::Bool(false) {
            errors.push(format!("{here}: no value is allowed here"));
        }
        return;
    };
    for key in keywords.keys() {
        if !CHECKED.contains(&key.as_str()) && !DESCRIPTIVE.contains(&key.as_str()) {
            errors.push(format!("{here}: schema keyword `{key}` is not checked"));
        }
    }
    if let Some(reference) = keywords.get("$ref").and_then(Value::as_str) {
        match resolve(document, reference) {
            Some(target) => validate(document, target, value, where_, errors),
            None => errors.push(format!("{here}: dangling $ref {reference}")),
        }
    }
    if let Some(types) = keywords.get("type") {
        let allowed: Vec<&str> = match types {
            Value::String(t) => vec![t.as_str()],
            Value::Array(ts) => ts.iter().filter_map(Value::as_str).collect(),
            _ => Vec::new(),
        };
        if !allowed.iter().any(|t| has_type(value, t)) {
            errors.push(format!(
                "{here}: {} where the document says {}",
                short(value),
                allowed.join(" or ")
            ));
            return;
        }
    }
    if let Some(choices) = keywords.get("enum").and_then(Value::as_array) {
        if !choices.contains(value) {
            errors.push(format!(
                "{here}: {} is not one of {choices:?}",
                short(value)
            ));
        }
    }
    check_number(keywords, value, here, errors);
    if let Some(object) = value.as_object() {
        check_object(document, keywords, object, where_, errors);
    }
    if let (Some(items), Some(array)) = (keywords.get("items"), value.as_array()) {
        for (i, item) in array.iter().enumerate() {
            validate(document, items, item, &format!("{where_}/{i}"), errors);
        }
    }
    if let Some(all) = keywords.get("allOf").and_then(Value::as_array) {
        for part in all {
            validate(document, part, value, where_, errors);
        }
    }
    for (keyword, exactly_one) in [("oneOf", true), ("anyOf", false)] {
        let Some(choices) = keywords.get(keyword).and_then(Value::as_array) else {
            continue;
        };
        let mut why = Vec::new();
        let matching = choices
            .iter()
            .filter(|choice| {
                let mut e = Vec::new();
                validate(document, choice, value, where_, &mut e);
                let ok = e.is_empty();
                why.extend(e);
                ok
            })
            .count();
        if matching == 0 {
            errors.push(format!(
                "{here}: matches none of {keyword}'s {} schemas: {}",
                choices.len(),
                why.join("; ")
            ));
        } else if exactly_one && matching > 1 {
            errors.push(format!(
                "{here}: matches {matching} of oneOf's schemas, not exactly one"
            ));
        }
    }
}

fn check_object(
    document: &Value,
    keywords: &serde_json::Map<String, Value>,
    object: &serde_json::Map<String, Value>,
    where_: &str,
    errors: &mut Vec<String>,
) {
    let here = if where_.is_empty() { "/" } else { where_ };
    let properties = keywords.get("properties").and_then(Value::as_object);
    for name in keywords
        .get("required")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
    {
        if !object.contains_key(name) {
            errors.push(format!("{here}: required field `{name}` is missing"));
        }
    }
    for (name, field) in object {
        let at = format!("{where_}/{name}");
        match properties.and_then(|p| p.get(name)) {
            Some(schema) => validate(document, schema, field, &at, errors),
            None => match keywords.get("additionalProperties") {
                Some(Value::Bool(false)) => {
                    errors.push(format!("{at}: a field the document does not declare"));
                }
                Some(schema @ Value::Object(_)) => validate(document, schema, field, &at, errors),
                _ => {}
            },
        }
    }
}

fn check_number(
    keywords: &serde_json::Map<String, Value>,
    value: &Value,
    here: &str,
    errors: &mut Vec<String>,
) {
    let Some(n) = value.as_f64() else {
        return;
    };
    if let Some(min) = keywords.get("minimum").and_then(Value::as_f64) {
        if n < min {
            errors.push(format!("{here}: {value} is below the minimum {min}"));
        }
    }
    if let Some(max) = keywords.get("maximum").and_then(Value::as_f64) {
        if n > max {
            errors.push(format!("{here}: {value} is above the maximum {max}"));
        }
    }
    let range: Option<(i128, i128)> = match keywords.get("format").and_then(Value::as_str) {
        Some("int32") => Some((i32::MIN.into(), i32::MAX.into())),
        Some("uint32") => Some((0, u32::MAX.into())),
        Some("int64") => Some((i64::MIN.into(), i64::MAX.into())),
        Some("uint64") => Some((0, u64::MAX.into())),
        Some("int8") => Some((i8::MIN.into(), i8::MAX.into())),
        Some("uint8") => Some((0, u8::MAX.into())),
        Some("int16") => Some((i16::MIN.into(), i16::MAX.into())),
        Some("uint16") => Some((0, u16::MAX.into())),
        _ => None,
    };
    let exact = value
        .as_i64()
        .map(i128::from)
        .or_else(|| value.as_u64().map(i128::from));
    if let (Some((lo, hi)), Some(v)) = (range, exact) {
        if v < lo || v > hi {
            errors.push(format!("{here}: {value} is out of its format's range"));
        }
    }
}

/// `#/components/schemas/Name` → the schema.
fn resolve<'a>(document: &'a Value, reference: &str) -> Option<&'a Value> {
    let pointer = reference.strip_prefix('#')?;
    document.pointer(pointer)
}

fn has_type(value: &Value, t: &str) -> bool {
    match t {
        "null" => value.is_null(),
        "boolean" => value.is_boolean(),
        "string" => value.is_string(),
        "array" => value.is_array(),
        "object" => value.is_object(),
        "integer" => value.is_i64() || value.is_u64(),
        "number" => value.is_number(),
        _ => false,
    }
}

/// A value for a message, cut short.
fn short(value: &Value) -> String {
    let text = value.to_string();
    match text.char_indices().nth(80) {
        Some((i, _)) => format!("{}…", &text[..i]),
        None => text,
    }
}

/// Every operation whose path names a `{parameter}` the operation (or its path item) does not
/// declare as a required path parameter, as `METHOD path: {name}`.
pub fn undeclared_path_parameters(document: &Value) -> Vec<String> {
    let mut missing = Vec::new();
    let Some(paths) = document["paths"].as_object() else {
        return vec!["the document has no paths".into()];
    };
    for (path, item) in paths {
        let names: Vec<&str> = path
            .split('/')
            .filter_map(|s| s.strip_prefix('{')?.strip_suffix('}'))
            .collect();
        let Some(operations) = item.as_object() else {
            continue;
        };
        for (method, operation) in operations {
            if !["get", "put", "patch", "post", "delete", "head", "options"]
                .contains(&method.as_str())
            {
                continue;
            }
            let declared = |name: &str| {
                [&operation["parameters"], &item["parameters"]]
                    .into_iter()
                    .filter_map(Value::as_array)
                    .flatten()
                    .any(|p| p["in"] == "path" && p["name"] == name && p["required"] == true)
            };
            for name in &names {
                if !declared(name) {
                    missing.push(format!("{} {path}: {{{name}}}", method.to_uppercase()));
                }
            }
        }
    }
    missing
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn errors(schema: Value, value: Value) -> Vec<String> {
        let document = json!({"components": {"schemas": {"N": {"type": "integer"}}}});
        let mut e = Vec::new();
        validate(&document, &schema, &value, "", &mut e);
        e
    }

    #[test]
    fn the_validator_fails_what_it_must() {
        let int = json!({"type": "integer"});
        assert!(errors(int.clone(), json!(3)).is_empty());
        assert_eq!(
            errors(int.clone(), Value::Null),
            ["/: null where the document says integer"]
        );
        assert!(errors(json!({"type": ["integer", "null"]}), Value::Null).is_empty());
        let object = json!({"type": "object", "required": ["a"],
            "properties": {"a": {"$ref": "#/components/schemas/N"}},
            "additionalProperties": false});
        assert!(errors(object.clone(), json!({"a": 1})).is_empty());
        assert_eq!(
            errors(object.clone(), json!({"a": null})),
            ["/a: null where the document says integer"]
        );
        assert_eq!(
            errors(object.clone(), json!({"b": 1})),
            [
                "/: required field `a` is missing",
                "/b: a field the document does not declare"
            ]
        );
        let one = json!({"oneOf": [{"type": "integer"}, {"type": "number"}]});
        assert_eq!(errors(one.clone(), json!(1.5)), Vec::<String>::new());
        assert_eq!(errors(one, json!(1)).len(), 1, "two match");
        assert_eq!(
            errors(json!({"type": "integer", "format": "uint8"}), json!(300)),
            ["/: 300 is out of its format's range"]
        );
        assert_eq!(
            errors(json!({"type": "integer", "pattern": "x"}), json!(1)),
            ["/: schema keyword `pattern` is not checked"]
        );
        let array = json!({"type": "array", "items": {"enum": ["a"]}});
        assert_eq!(errors(array, json!(["a", "b"])).len(), 1);
    }

    #[test]
    fn paths_match_templates() {
        let document = json!({"paths": {"/drives": {}, "/drives/{id}": {}, "/": {}}});
        assert_eq!(templates_for(&document, "/drives/disk0"), ["/drives/{id}"]);
        assert_eq!(templates_for(&document, "/drives"), ["/drives"]);
        assert_eq!(templates_for(&document, "/"), ["/"]);
        assert!(templates_for(&document, "/drives/").is_empty());
    }
}
