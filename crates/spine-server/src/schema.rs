//! The JSON Schemas advertised for each tool: `inputSchema` (what the arguments accept) and
//! `outputSchema` (what a successful result serialises to), both JSON Schema 2020-12 as MCP
//! asks.
//!
//! schemars marks integer widths with `format` values such as `uint64` and `uint32`. They are
//! not JSON Schema formats: strict validators (Ajv in the TypeScript MCP SDK) print a warning
//! for each on every connect, or refuse to compile in strict mode. [`standard_formats`]
//! rewrites them as the `minimum` / `maximum` they mean.

use std::sync::Arc;

use rmcp::model::JsonObject;
use schemars::generate::SchemaSettings;
use schemars::transform::transform_subschemas;
use schemars::{JsonSchema, Schema};
use serde_json::{Value, json};

/// The `format` values JSON Schema 2020-12 defines (validation vocabulary, section 7.3).
pub const STANDARD_FORMATS: &[&str] = &[
    "date-time",
    "date",
    "time",
    "duration",
    "email",
    "idn-email",
    "hostname",
    "idn-hostname",
    "ipv4",
    "ipv6",
    "uri",
    "uri-reference",
    "iri",
    "iri-reference",
    "uuid",
    "uri-template",
    "json-pointer",
    "relative-json-pointer",
    "regex",
];

/// The numeric bounds a schemars integer `format` stands for; `None` for formats that carry
/// no bound beyond the JSON type (`float`, `double`) or that are standard.
fn format_bounds(format: &str) -> Option<(Option<Value>, Option<Value>)> {
    let b = |min: Value, max: Value| Some((Some(min), Some(max)));
    match format {
        "uint8" => b(json!(0), json!(u8::MAX)),
        "uint16" => b(json!(0), json!(u16::MAX)),
        "uint32" => b(json!(0), json!(u32::MAX)),
        "uint64" | "uint" | "uint128" => Some((Some(json!(0)), None)),
        "int8" => b(json!(i8::MIN), json!(i8::MAX)),
        "int16" => b(json!(i16::MIN), json!(i16::MAX)),
        "int32" => b(json!(i32::MIN), json!(i32::MAX)),
        "int64" | "int" | "int128" | "float" | "double" => Some((None, None)),
        _ => None,
    }
}

/// Replaces every non-standard `format` in `schema` and its subschemas with the bounds it
/// stands for (keeping any tighter bound schemars already wrote).
pub fn standard_formats(schema: &mut Schema) {
    if let Some(obj) = schema.as_object_mut() {
        let bounds = obj.get("format").and_then(Value::as_str).and_then(format_bounds);
        if let Some((min, max)) = bounds {
            obj.remove("format");
            if let Some(min) = min {
                obj.entry("minimum").or_insert(min);
            }
            if let Some(max) = max {
                obj.entry("maximum").or_insert(max);
            }
        }
    }
    transform_subschemas(&mut standard_formats, schema);
}

/// `T`'s schema (the serialize contract when `serialize`), with standard formats only.
/// Generated once per process: the tool router that calls this is built once.
fn generate<T: JsonSchema>(serialize: bool) -> Arc<JsonObject> {
    let mut settings = SchemaSettings::draft2020_12().with_transform(standard_formats);
    if serialize {
        // Output schemas are validated against every result by clients (the official
        // Python SDK with `jsonschema`): following `$ref`s was a third of that work, and
        // the whole validation more than the server's own time for a cached search.
        settings = settings.for_serialize();
        settings.inline_subschemas = true;
    }
    match settings.into_generator().into_root_schema_for::<T>().to_value() {
        Value::Object(object) => Arc::new(object),
        _ => Arc::new(JsonObject::new()),
    }
}

/// Which schema a compaction is for.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Side {
    /// An `inputSchema`: the model reads it to write arguments; descriptions stay.
    Input,
    /// An `outputSchema`: clients validate results with it; the model needs no prose.
    Output,
}

/// Shrinks a generated schema without changing what it accepts where it matters (every
/// tool list is read into the model's context, so every character costs tokens):
/// - both: no `title`, no `$schema` (2020-12 is MCP's default dialect), descriptions on one
///   line;
/// - input: no root `description` (the tool's description says it), no `default` (the
///   descriptions say them), and an optional argument is typed by what it holds (`string`,
///   not `["string", "null"]`; the server still accepts `null` for it);
/// - output: no descriptions (the field names and types are the contract).
fn compact(value: &mut Value, side: Side, root: bool) {
    let Value::Object(obj) = value else {
        if let Value::Array(items) = value {
            items.iter_mut().for_each(|v| compact(v, side, false));
        }
        return;
    };
    obj.remove("title");
    obj.remove("$schema");
    if side == Side::Output || root {
        obj.remove("description");
    }
    if side == Side::Input {
        obj.remove("default");
        if let Some(Value::Array(types)) = obj.get("type") {
            let kept: Vec<Value> = types.iter().filter(|t| *t != "null").cloned().collect();
            if kept.len() == 1 {
                obj.insert("type".into(), kept[0].clone());
            }
        }
        // `Option<Enum>`: anyOf [X, {type: null}] → X.
        if let Some(Value::Array(any)) = obj.get("anyOf")
            && any.len() == 2
            && let Some(other) = any.iter().find(|s| s.get("type") != Some(&json!("null")))
            && any.iter().any(|s| s.get("type") == Some(&json!("null")))
            && let Value::Object(other) = other.clone()
        {
            obj.remove("anyOf");
            for (k, v) in other {
                obj.entry(k).or_insert(v);
            }
        }
    }
    if let Some(Value::String(d)) = obj.get_mut("description") {
        *d = d.split_whitespace().collect::<Vec<_>>().join(" ");
    }
    for (key, child) in obj.iter_mut() {
        match (key.as_str(), child) {
            // Property names are not schema keywords: recurse into each property's schema.
            ("properties" | "$defs", Value::Object(map)) => {
                map.values_mut().for_each(|v| compact(v, side, false));
            }
            ("description", _) | ("enum", _) | ("const", _) | ("required", _) => {}
            (_, v) => compact(v, side, false),
        }
    }
}

fn compacted(mut schema: Arc<JsonObject>, side: Side) -> Arc<JsonObject> {
    let mut value = Value::Object(std::mem::take(Arc::make_mut(&mut schema)));
    compact(&mut value, side, true);
    match value {
        Value::Object(o) => Arc::new(o),
        _ => Arc::new(JsonObject::new()),
    }
}

/// The `inputSchema` of a tool taking `T` as its arguments.
pub fn input<T: JsonSchema>() -> Arc<JsonObject> {
    compacted(generate::<T>(false), Side::Input)
}

/// The `outputSchema` of a tool whose success result serialises `T` (always an object).
pub fn output<T: JsonSchema>() -> Arc<JsonObject> {
    compacted(generate::<T>(true), Side::Output)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Serialize;

    #[derive(Serialize, JsonSchema)]
    struct Counts {
        total: u64,
        small: u32,
        signed: i64,
        byte: u8,
        nested: Vec<Inner>,
        maybe: Option<u16>,
    }

    #[derive(Serialize, JsonSchema)]
    struct Inner {
        n: u32,
        at: String,
    }

    fn formats(v: &Value, out: &mut Vec<String>) {
        match v {
            Value::Object(m) => {
                for (k, v) in m {
                    if k == "format"
                        && let Some(f) = v.as_str()
                    {
                        out.push(f.to_owned());
                    }
                    formats(v, out);
                }
            }
            Value::Array(a) => a.iter().for_each(|v| formats(v, out)),
            _ => {}
        }
    }

    #[test]
    fn integer_formats_become_bounds() {
        let schema = Value::Object((*output::<Counts>()).clone());
        let mut found = Vec::new();
        formats(&schema, &mut found);
        assert!(found.iter().all(|f| STANDARD_FORMATS.contains(&f.as_str())), "{found:?}");
        let props = &schema["properties"];
        assert_eq!(props["total"]["minimum"], 0);
        assert!(props["total"].get("maximum").is_none());
        assert_eq!(props["small"]["maximum"], u32::MAX);
        assert_eq!(props["byte"]["maximum"], 255);
        assert!(props["signed"].get("minimum").is_none());
        assert_eq!(props["nested"]["items"]["properties"]["n"]["maximum"], u32::MAX);
        assert_eq!(props["maybe"]["maximum"], u16::MAX);
    }

    /// Output schemas hold no `$ref`: clients validating every result against them spend a
    /// third of that time following references (the Python SDK's `jsonschema`).
    #[test]
    fn output_schemas_are_inlined() {
        let schema = Value::Object((*output::<Counts>()).clone());
        let text = schema.to_string();
        assert!(!text.contains("$ref") && !text.contains("$defs"), "{text}");
        let input = Value::Object((*input::<Counts>()).clone()).to_string();
        assert!(input.contains("$ref"), "input schemas keep their definitions: {input}");
    }

    /// A struct with an optional argument, an optional enum and a field named like a
    /// keyword.
    #[derive(serde::Deserialize, Serialize, JsonSchema)]
    /// Root prose the tool description already says.
    struct Args {
        /// Text
        ///   on two lines.
        text: Option<String>,
        /// A closed set.
        kind: Option<Kind>,
        /// Named like a keyword.
        description: String,
        #[serde(default)]
        flag: bool,
    }

    #[derive(serde::Deserialize, Serialize, JsonSchema)]
    enum Kind {
        A,
        B,
    }

    #[test]
    fn input_schemas_are_compact_and_output_schemas_carry_no_prose() {
        let i = Value::Object((*input::<Args>()).clone());
        for gone in ["title", "$schema", "description"] {
            assert!(i.get(gone).is_none(), "{gone} in {i}");
        }
        let props = &i["properties"];
        assert_eq!(props["text"]["type"], "string");
        assert_eq!(props["text"]["description"], "Text on two lines.");
        assert!(props["text"].get("default").is_none() && props["flag"].get("default").is_none());
        assert!(props["kind"].get("anyOf").is_none(), "{}", props["kind"]);
        assert!(
            props["kind"]["$ref"].is_string() || props["kind"]["enum"].is_array(),
            "{}",
            props["kind"]
        );
        assert_eq!(props["description"]["type"], "string", "a property named description stays");
        let o = Value::Object((*output::<Args>()).clone());
        assert!(o["properties"]["description"].is_object());
        assert!(o["properties"]["text"].get("description").is_none());
        assert_eq!(o["properties"]["text"]["type"], json!(["string", "null"]), "outputs keep null");
    }
}
