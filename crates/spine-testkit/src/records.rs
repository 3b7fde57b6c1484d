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
