//! Record fixtures: a record as a client would have stored it, for store and operator tests.

use spine_core::{Caller, Category, Memory, Scope, ShortId, Source, Timestamp};

/// A `decision` the user stated, in `scope`, created at `created_secs` (Unix seconds) by
/// `owner` (empty: the anonymous caller), with a fresh id and short id.
pub fn record(scope: &str, content: &str, owner: &str, created_secs: i64) -> Memory {
    let caller =
        if owner.is_empty() { Caller::anonymous() } else { Caller::authenticated(owner, owner) };
    Memory::new(
        ShortId::mint(),
        content.into(),
        Scope::parse("scope", scope).expect("a well-formed test scope"),
        Source::UserSaid,
        Category::Decision,
        &caller,
        Timestamp::from_micros(created_secs * 1_000_000),
    )
}

/// A unit vector of `dims` numbers pointing somewhere of its own: the same `seed` gives the
/// same vector, different seeds point apart (xorshift).
pub fn unit_vector(seed: u64, dims: usize) -> Vec<f32> {
    let mut x = seed.wrapping_mul(0x9E3779B97F4A7C15) | 1;
    let v: Vec<f32> = (0..dims)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x % 2000) as f32 / 1000.0 - 1.0
        })
        .collect();
    let n = v.iter().map(|a| a * a).sum::<f32>().sqrt();
    v.into_iter().map(|a| a / n).collect()
}

/// A record line of an export file with a hand-built payload: a `convention` the user
/// stated in `scope`, whose JSON `edit` changes. Returns the record's id and the line.
pub fn export_line(
    scope: &str,
    content: &str,
    edit: impl FnOnce(&mut serde_json::Map<String, serde_json::Value>),
) -> (String, String) {
    let mut m = record(scope, content, "", 1_750_000_000);
    m.category = Category::Convention;
    let serde_json::Value::Object(mut o) = serde_json::to_value(&m).expect("a record encodes")
    else {
        unreachable!("a record encodes as an object")
    };
    edit(&mut o);
    let body = serde_json::Value::Object(o).to_string();
    (m.id.to_string(), format!(r#"{{"record":{body}}}"#))
}

/// The header line of an export file without vectors, of every scope.
pub fn export_header() -> String {
    r#"{"header":{"format":"spine-export","version":1,"exported_at":"2027-01-01T00:00:00Z","schema_version":1,"scope":null,"vectors":false}}"#.to_owned()
}
