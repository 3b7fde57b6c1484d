//! Scopes: `<run>:<tier>:<repo>` (SPEC "Memory record").
//!
//! Grammar beyond the three-part form is ours (SPEC says "not shown"; documented in
//! docs/records.md): the string splits at its first two colons into three non-empty parts,
//! so a repo may itself contain colons (`run:tier:https://host/x`); at most 512 bytes; no
//! control characters; no leading or trailing whitespace in any part. The runs `discovery`
//! and `rule` are reserved for their record kinds; a rule scope's tier is `repo` or `project`.
//! A discovery scope is `discovery:` followed by any non-empty text (SPEC store_discovery:
//! "Must start with `discovery:`"), typically `discovery:repo:<repo>`.

use std::fmt;

use schemars::JsonSchema;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::{Error, Hint};

/// Maximum bytes of a scope.
pub const MAX_SCOPE_BYTES: usize = 512;

/// Which record kind a scope belongs to, decided by its run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ScopeKind {
    /// An ordinary memory scope.
    Memory,
    /// `discovery:…` — discovery records only.
    Discovery,
    /// `rule:repo:…` / `rule:project:…` — rule records only.
    Rule,
}

/// A validated scope. Invariant: matches the grammar in the module doc.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Scope(String);

impl Scope {
    /// Parses any scope (all kinds) for the argument `field`.
    pub fn parse(field: &str, input: &str) -> Result<Self, Error> {
        let malformed = |why: &str| {
            Error::invalid(
                field,
                Hint::MalformedScope,
                format!(
                    "{field} must look like <run>:<tier>:<repo> with three non-empty parts; {why}"
                ),
            )
        };
        if input.is_empty() {
            return Err(Error::invalid(field, Hint::Required, format!("{field} is required")));
        }
        if input.len() > MAX_SCOPE_BYTES {
            return Err(Error::invalid(
                field,
                Hint::TooLong,
                format!("{field} is {} bytes; the maximum is {MAX_SCOPE_BYTES}", input.len()),
            ));
        }
        if input.chars().any(char::is_control) {
            return Err(malformed("control characters are not allowed"));
        }
        if let Some(rest) = input.strip_prefix("discovery:") {
            // SPEC store_discovery: any scope starting with `discovery:`.
            if rest.trim().is_empty() || rest.trim() != rest {
                return Err(Error::invalid(
                    field,
                    Hint::MalformedScope,
                    format!(
                        "{field}: a discovery scope is discovery:<name> (typically \
                         discovery:repo:<repo>) with no surrounding whitespace; got {input:?}"
                    ),
                ));
            }
            return Ok(Scope(input.to_owned()));
        }
        let mut parts = input.splitn(3, ':');
        let (Some(run), Some(tier), Some(repo)) = (parts.next(), parts.next(), parts.next()) else {
            return Err(malformed(&format!("got {input:?}")));
        };
        for part in [run, tier, repo] {
            if part.trim().is_empty() {
                return Err(malformed(&format!("got {input:?}")));
            }
            if part.trim() != part {
                return Err(malformed("parts must not start or end with whitespace"));
            }
        }
        if run == "rule" && tier != "repo" && tier != "project" {
            return Err(malformed("a rule scope is rule:repo:<repo> or rule:project:<project>"));
        }
        Ok(Scope(input.to_owned()))
    }

    /// Parses a scope for an ordinary memory: discovery and rule scopes are reserved.
    pub fn parse_memory(field: &str, input: &str) -> Result<Self, Error> {
        Self::parse(field, input)?.require_memory(field)
    }

    /// This scope when it holds ordinary memories: discovery and rule scopes are reserved
    /// (`reserved_scope`, naming `field`).
    pub fn require_memory(self, field: &str) -> Result<Self, Error> {
        match self.kind() {
            ScopeKind::Memory => Ok(self),
            ScopeKind::Discovery => Err(Error::invalid(
                field,
                Hint::ReservedScope,
                "discovery: scopes hold discovery records; use store_discovery",
            )),
            ScopeKind::Rule => Err(Error::invalid(
                field,
                Hint::ReservedScope,
                "rule: scopes hold rule records; use store_rule",
            )),
        }
    }

    /// The record kind this scope holds.
    pub fn kind(&self) -> ScopeKind {
        match self.run() {
            "discovery" => ScopeKind::Discovery,
            "rule" => ScopeKind::Rule,
            _ => ScopeKind::Memory,
        }
    }

    /// The first part.
    pub fn run(&self) -> &str {
        self.0.split(':').next().unwrap_or_default()
    }

    /// The last part: the repository (or project) the scope is about; everything after
    /// the second `:` (`discovery:<name>` has no second part and gives `""`).
    pub fn repo(&self) -> &str {
        self.0.splitn(3, ':').nth(2).unwrap_or_default()
    }

    /// The whole scope string.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for Scope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl Serialize for Scope {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.0)
    }
}

impl<'de> Deserialize<'de> for Scope {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        // Stored records are trusted: keep whatever was stored, valid or not.
        Ok(Scope(String::deserialize(d)?))
    }
}

impl JsonSchema for Scope {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "Scope".into()
    }
    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({ "type": "string", "description": "<run>:<tier>:<repo>" })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn three_non_empty_parts() {
        assert!(Scope::parse("scope", "run1:project:spine").is_ok());
        for bad in ["run", "run:tier", "run::repo", ":tier:repo", "run:tier:", "a: :b", "a:b: "] {
            let e = Scope::parse("scope", bad).unwrap_err();
            assert_eq!(e.hint, Some(Hint::MalformedScope), "{bad}");
        }
    }

    #[test]
    fn a_discovery_scope_is_any_text_after_the_prefix() {
        for ok in ["discovery:spine", "discovery:repo:spine", "discovery:a:b:c", "discovery:x"] {
            let s = Scope::parse("scope", ok).unwrap();
            assert_eq!(s.kind(), ScopeKind::Discovery, "{ok}");
        }
        for bad in ["discovery:", "discovery: ", "discovery: x", "discovery:x "] {
            let e = Scope::parse("scope", bad).unwrap_err();
            assert_eq!(e.hint, Some(Hint::MalformedScope), "{bad}");
        }
        assert_eq!(
            Scope::parse_memory("scope", "discovery:spine").unwrap_err().hint,
            Some(Hint::ReservedScope)
        );
    }

    #[test]
    fn repo_may_contain_colons() {
        let s = Scope::parse("scope", "r:t:https://example.org/x").unwrap();
        assert_eq!(s.kind(), ScopeKind::Memory);
    }

    #[test]
    fn length_bound_is_512_bytes() {
        let ok = format!("r:t:{}", "x".repeat(MAX_SCOPE_BYTES - 4));
        assert!(Scope::parse("scope", &ok).is_ok());
        let long = format!("r:t:{}", "x".repeat(MAX_SCOPE_BYTES - 3));
        assert_eq!(Scope::parse("scope", &long).unwrap_err().hint, Some(Hint::TooLong));
    }

    #[test]
    fn control_characters_rejected() {
        assert!(Scope::parse("scope", "r:t:a\nb").is_err());
    }

    #[test]
    fn discovery_and_rule_scopes_are_reserved_for_memories() {
        let e = Scope::parse_memory("scope", "discovery:repo:x").unwrap_err();
        assert_eq!(e.hint, Some(Hint::ReservedScope));
        let e = Scope::parse_memory("scope", "rule:repo:x").unwrap_err();
        assert_eq!(e.hint, Some(Hint::ReservedScope));
        assert_eq!(Scope::parse("s", "rule:project:p").unwrap().kind(), ScopeKind::Rule);
        assert!(Scope::parse("s", "rule:team:p").is_err());
    }
}
