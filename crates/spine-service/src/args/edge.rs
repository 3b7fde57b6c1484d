//! Core types parsed from string arguments at the edge, while the arguments deserialise.
//!
//! A field declared `#[serde(deserialize_with = "edge::required")]` (or `edge::optional`,
//! where `""` means absent) holds the core type ([`Scope`], [`Source`], [`Category`],
//! [`Timestamp`], [`EpochSeconds`], [`IdInput`]); the operations never re-parse it.
//!
//! Key design decision: the core parsers build Spine's error envelope (a `field` and a
//! `hint` such as `malformed_scope`), but serde only carries a message. A parser that fails
//! leaves its envelope in a thread-local slot (deserialisation is synchronous), built with
//! [`FIELD`] as the field name; [`take`] hands it to `parse_args`, which puts the argument's
//! path (`scope`, `citations[1].kind`) in its place. The envelopes are exactly what the
//! operations produced when they parsed these strings themselves.

use std::cell::RefCell;

use serde::{Deserialize, Deserializer};
use spine_core::{Category, EpochSeconds, Error, Hint, IdRef, Scope, Source, Timestamp};

/// The field name the parsers are given; [`take`] replaces it with the argument's path.
const FIELD: &str = "\u{1}";

thread_local! {
    /// The envelope of the parser that failed last on this thread.
    static FAILED: RefCell<Option<Error>> = const { RefCell::new(None) };
}

/// A core type parsed from one string argument.
pub trait FromArg: Sized {
    /// Parses `input`, naming `field` in errors.
    fn from_arg(field: &str, input: &str) -> Result<Self, Error>;
}

impl FromArg for Scope {
    fn from_arg(field: &str, input: &str) -> Result<Self, Error> {
        Scope::parse(field, input)
    }
}

impl FromArg for Source {
    fn from_arg(field: &str, input: &str) -> Result<Self, Error> {
        Source::parse(field, input)
    }
}

impl FromArg for Category {
    fn from_arg(field: &str, input: &str) -> Result<Self, Error> {
        Category::parse(field, input)
    }
}

fn malformed_time(field: &str, input: &str) -> Error {
    Error::invalid(
        field,
        Hint::MalformedTimestamp,
        format!("{field} must be an RFC 3339 time such as 2026-05-01T09:00:00Z; got {input:?}"),
    )
}

impl FromArg for Timestamp {
    fn from_arg(field: &str, input: &str) -> Result<Self, Error> {
        Timestamp::parse_rfc3339(input).ok_or_else(|| malformed_time(field, input))
    }
}

impl FromArg for EpochSeconds {
    fn from_arg(field: &str, input: &str) -> Result<Self, Error> {
        EpochSeconds::parse_rfc3339(input).ok_or_else(|| malformed_time(field, input))
    }
}

/// A record id as the caller wrote it: parsed, and the input kept for not-found messages
/// (SPEC Errors 2: echo only the caller's own input).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IdInput {
    /// The parsed reference.
    pub id: IdRef,
    /// What the caller wrote.
    pub input: String,
}

impl FromArg for IdInput {
    fn from_arg(field: &str, input: &str) -> Result<Self, Error> {
        Ok(IdInput { id: IdRef::parse(field, input)?, input: input.to_owned() })
    }
}

fn fail<E: serde::de::Error>(e: Error) -> E {
    let message = e.message.clone();
    FAILED.with(|f| *f.borrow_mut() = Some(e));
    E::custom(message)
}

/// A required string argument parsed into `T`.
pub fn required<'de, D: Deserializer<'de>, T: FromArg>(d: D) -> Result<T, D::Error> {
    let s = String::deserialize(d)?;
    T::from_arg(FIELD, &s).map_err(fail)
}

/// An optional string argument parsed into `T`; `null` and `""` are absent (clients fill
/// optional fields with empty strings).
pub fn optional<'de, D: Deserializer<'de>, T: FromArg>(d: D) -> Result<Option<T>, D::Error> {
    let s = Option::<String>::deserialize(d)?;
    parse_optional(FIELD, s.as_deref()).map_err(fail)
}

/// An optional argument `field` parsed into `T` outside serde (the Connect API): absent
/// and `""` are `None`, as [`optional`] has it.
pub fn parse_optional<T: FromArg>(field: &str, input: Option<&str>) -> Result<Option<T>, Error> {
    match input {
        None | Some("") => Ok(None),
        Some(s) => T::from_arg(field, s).map(Some),
    }
}

/// Refuses a string argument `field` holding U+0000: PostgreSQL text cannot store it, and
/// no memory needs it, so it is refused on every backend alike, on every transport.
pub fn nul_free(field: &str, input: &str) -> Result<(), Error> {
    if input.contains('\0') {
        return Err(Error::invalid(
            field,
            Hint::NulCharacter,
            format!("{field} contains a NUL character (U+0000); remove it"),
        ));
    }
    Ok(())
}

/// Forgets an envelope left by an earlier call.
pub fn clear() {
    FAILED.with(|f| f.borrow_mut().take());
}

/// The envelope of the parser whose failure produced serde's `message`, with `path` as its
/// field; `None` when the failure was serde's own.
pub fn take(message: &str, path: &str) -> Option<Error> {
    let mut e = FAILED.with(|f| f.borrow_mut().take())?;
    if e.message != message {
        return None;
    }
    e.field = e.field.map(|f| f.replace(FIELD, path));
    e.message = e.message.replace(FIELD, path);
    Some(e)
}
