//! Record ids: the UUID every record has and its short, case-insensitive handle.

use std::fmt;

use rand::Rng;
use uuid::Uuid;

use crate::limits::check_id_text;
use crate::{Error, Hint};

/// The primary id of a record: a UUID v7 (time-ordered), minted by the server.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct RecordId(Uuid);

impl RecordId {
    /// Mints a new time-ordered id.
    pub fn mint() -> Self {
        RecordId(Uuid::now_v7())
    }

    /// Wraps a UUID.
    pub fn from_uuid(u: Uuid) -> Self {
        RecordId(u)
    }

    /// The UUID.
    pub fn as_uuid(&self) -> &Uuid {
        &self.0
    }

    /// Parses the canonical hyphenated form.
    pub fn parse(s: &str) -> Option<Self> {
        Uuid::parse_str(s).ok().map(RecordId)
    }
}

impl fmt::Display for RecordId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.hyphenated().fmt(f)
    }
}

text_form!(RecordId, RecordId::parse, "a UUID", { "type": "string", "format": "uuid" });

/// Crockford's base32 alphabet (no I, L, O, U).
const CROCKFORD: &[u8; 32] = b"0123456789ABCDEFGHJKMNPQRSTVWXYZ";

/// A short handle for a record: 10 characters of Crockford base32 (50 random bits).
///
/// Invariant: exactly 10 characters, each in the canonical upper-case Crockford alphabet.
/// Input is accepted case-insensitively, with `I`/`L` read as `1`, `O` as `0` and hyphens
/// ignored, as Crockford's spec prescribes.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ShortId(String);

impl ShortId {
    /// The number of characters.
    pub const LEN: usize = 10;

    /// Mints a random short id. Uniqueness is checked by the caller against the store.
    pub fn mint() -> Self {
        let mut rng = rand::rng();
        let s = (0..Self::LEN).map(|_| CROCKFORD[rng.random_range(0..32)] as char).collect();
        ShortId(s)
    }

    /// Parses and normalises user input; `None` when it is not a short id.
    pub fn parse(input: &str) -> Option<Self> {
        let mut out = String::with_capacity(Self::LEN);
        for c in input.chars() {
            let c = match c.to_ascii_uppercase() {
                '-' => continue,
                'I' | 'L' => '1',
                'O' => '0',
                c => c,
            };
            if !u8::try_from(c).is_ok_and(|b| CROCKFORD.contains(&b)) {
                return None;
            }
            out.push(c);
        }
        (out.len() == Self::LEN).then_some(ShortId(out))
    }

    /// The canonical spelling.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for ShortId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

text_form!(ShortId, ShortId::parse, "a short_id", {
    "type": "string", "minLength": 10, "maxLength": 10
});

/// A reference to a record as a caller wrote it: a full UUID or a short id.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum IdRef {
    /// A full UUID.
    Id(RecordId),
    /// A short id.
    Short(ShortId),
}

impl IdRef {
    /// Parses an id argument named `field`: blank, over 256 bytes or neither form is an
    /// invalid argument.
    pub fn parse(field: &str, input: &str) -> Result<Self, Error> {
        check_id_text(field, input)?;
        Self::parse_lenient(input).ok_or_else(|| {
            Error::invalid(
                field,
                Hint::MalformedId,
                format!("{field} must be a record UUID or a 10-character short_id"),
            )
        })
    }

    /// Parses either form, `None` when neither matches.
    pub fn parse_lenient(input: &str) -> Option<Self> {
        let t = input.trim();
        if let Some(id) = RecordId::parse(t) {
            return Some(IdRef::Id(id));
        }
        ShortId::parse(t).map(IdRef::Short)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn minted_short_id_is_ten_crockford_chars() {
        for _ in 0..200 {
            let s = ShortId::mint();
            assert_eq!(s.as_str().len(), 10);
            assert_eq!(ShortId::parse(s.as_str()), Some(s));
        }
    }

    #[test]
    fn short_id_is_case_insensitive_and_crockford_normalised() {
        let canonical = ShortId::parse("01ABCDEFGH").unwrap();
        assert_eq!(ShortId::parse("01abcdefgh"), Some(canonical.clone()));
        assert_eq!(ShortId::parse("o1abcdefgh").unwrap().as_str(), "01ABCDEFGH");
        assert_eq!(ShortId::parse("il00000000").unwrap().as_str(), "1100000000");
        assert_eq!(ShortId::parse("01ab-cdef-gh"), Some(canonical));
    }

    #[test]
    fn short_id_rejects_wrong_length_and_letters() {
        assert_eq!(ShortId::parse("01ABCDEFG"), None);
        assert_eq!(ShortId::parse("01ABCDEFGHJ"), None);
        assert_eq!(ShortId::parse("01ABCDEFGU"), None);
        assert_eq!(ShortId::parse("01ABCDEFG!"), None);
        assert_eq!(ShortId::parse("01ABCDEFGé"), None);
    }

    #[test]
    fn id_ref_accepts_uuid_and_short_id() {
        let id = RecordId::mint();
        assert_eq!(IdRef::parse("id", &id.to_string()).unwrap(), IdRef::Id(id));
        assert!(matches!(IdRef::parse("id", "abcdefghjk").unwrap(), IdRef::Short(_)));
    }

    #[test]
    fn id_ref_rejects_blank_long_and_malformed() {
        assert_eq!(IdRef::parse("id", "  ").unwrap_err().hint, Some(Hint::Blank));
        assert_eq!(IdRef::parse("id", &"a".repeat(257)).unwrap_err().hint, Some(Hint::TooLong));
        assert_eq!(IdRef::parse("id", "nope").unwrap_err().hint, Some(Hint::MalformedId));
    }
}
