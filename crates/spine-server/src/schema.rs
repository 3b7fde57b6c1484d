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
        settings = settings.for_serialize();
    }
    match settings.into_generator().into_root_schema_for::<T>().to_value() {
        Value::Object(object) => Arc::new(object),
        _ => Arc::new(JsonObject::new()),
    }
}

/// The `inputSchema` of a tool taking `T` as its arguments.
pub fn input<T: JsonSchema>() -> Arc<JsonObject> {
    generate::<T>(false)
}

/// The `outputSchema` of a tool whose success result serialises `T` (always an object).
pub fn output<T: JsonSchema>() -> Arc<JsonObject> {
    generate::<T>(true)
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
        assert_eq!(schema["$defs"]["Inner"]["properties"]["n"]["maximum"], u32::MAX);
        assert_eq!(props["maybe"]["maximum"], u16::MAX);
    }
}
