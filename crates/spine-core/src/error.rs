//! The error every layer speaks: a code, the offending field, a hint code and a message.

use std::fmt;

/// Broad class of a failure (SPEC Errors; DESIGN "errors").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorCode {
    /// Missing or malformed argument, or an exceeded bound.
    InvalidArgument,
    /// Missing, unreadable/unowned, or ambiguous record — indistinguishable by design.
    NotFound,
    /// The call is well-formed but the record's state forbids it.
    FailedPrecondition,
    /// A conflicting earlier call (e.g. an idempotency key reused with other arguments).
    Conflict,
    /// No valid identity where one is required.
    Unauthenticated,
    /// A dependency (model, database) is not available right now.
    Unavailable,
    /// A bug or an unexpected storage failure.
    Internal,
}

impl ErrorCode {
    /// The wire spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorCode::InvalidArgument => "invalid_argument",
            ErrorCode::NotFound => "not_found",
            ErrorCode::FailedPrecondition => "failed_precondition",
            ErrorCode::Conflict => "conflict",
            ErrorCode::Unauthenticated => "unauthenticated",
            ErrorCode::Unavailable => "unavailable",
            ErrorCode::Internal => "internal",
        }
    }
}

/// Machine-readable hint codes (the vocabulary is documented in docs/errors.md).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Hint {
    /// A required argument is absent.
    Required,
    /// A number is above its maximum (SPEC: `k`/`limit` above 1000).
    OutOfRange,
    /// A string or list exceeds its byte/count bound.
    TooLong,
    /// A list has too many entries.
    TooMany,
    /// A value is not in the closed vocabulary.
    InvalidValue,
    /// A value has the wrong JSON type or shape.
    InvalidType,
    /// An argument the tool does not know.
    UnknownField,
    /// An id that is neither a UUID nor a short_id.
    MalformedId,
    /// A scope that does not match `<run>:<tier>:<repo>`.
    MalformedScope,
    /// A scope prefix reserved for another record kind.
    ReservedScope,
    /// A timestamp that is not RFC 3339.
    MalformedTimestamp,
    /// A validity window whose not_before is not strictly before not_after.
    EmptyWindow,
    /// Two arguments that cannot be combined.
    MutuallyExclusive,
    /// content changed on a client-summarised record without addressing the summary.
    SummaryNotAddressed,
    /// A cursor that this server did not issue.
    MalformedCursor,
    /// A string that must be one line contains a line break.
    MultiLine,
    /// A string that must not be blank is blank.
    Blank,
    /// An operation rules do not allow (visibility change, supersession).
    RuleImmutable,
    /// The record is not in the state this operation needs.
    WrongState,
    /// A supersession target already has a successor: supersede the chain's live head.
    AlreadySuperseded,
    /// An idempotency key reused with different content or targets.
    IdempotencyMismatch,
    /// A string holds a NUL character (U+0000), which no text field may carry.
    NulCharacter,
    /// Written text holds what looks like a credential (`--secrets reject`).
    SecretDetected,
}

impl Hint {
    /// The wire spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Hint::Required => "required",
            Hint::OutOfRange => "out_of_range",
            Hint::TooLong => "too_long",
            Hint::TooMany => "too_many",
            Hint::InvalidValue => "invalid_value",
            Hint::InvalidType => "invalid_type",
            Hint::UnknownField => "unknown_field",
            Hint::MalformedId => "malformed_id",
            Hint::MalformedScope => "malformed_scope",
            Hint::ReservedScope => "reserved_scope",
            Hint::MalformedTimestamp => "malformed_timestamp",
            Hint::EmptyWindow => "empty_window",
            Hint::MutuallyExclusive => "mutually_exclusive",
            Hint::SummaryNotAddressed => "summary_not_addressed",
            Hint::MalformedCursor => "malformed_cursor",
            Hint::MultiLine => "multi_line",
            Hint::Blank => "blank",
            Hint::RuleImmutable => "rule_immutable",
            Hint::WrongState => "wrong_state",
            Hint::AlreadySuperseded => "already_superseded",
            Hint::IdempotencyMismatch => "idempotency_mismatch",
            Hint::NulCharacter => "nul_character",
            Hint::SecretDetected => "secret_detected",
        }
    }
}

/// A failed operation: what went wrong, on which argument, and a hint the caller can act on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Error {
    /// Broad class.
    pub code: ErrorCode,
    /// The offending argument, when one is to blame.
    pub field: Option<String>,
    /// Machine-readable hint code.
    pub hint: Option<Hint>,
    /// Human-readable explanation.
    pub message: String,
}

impl Error {
    /// An invalid argument naming `field` and `hint`.
    pub fn invalid(field: impl Into<String>, hint: Hint, message: impl Into<String>) -> Self {
        Error {
            code: ErrorCode::InvalidArgument,
            field: Some(field.into()),
            hint: Some(hint),
            message: message.into(),
        }
    }

    /// The single not-found response (SPEC Errors 2). `field` names the caller's argument;
    /// the message never names any identifier but the caller's own input.
    pub fn not_found(field: impl Into<String>, message: impl Into<String>) -> Self {
        Error {
            code: ErrorCode::NotFound,
            field: Some(field.into()),
            hint: None,
            message: message.into(),
        }
    }

    /// A precondition on the record's state failed.
    pub fn failed_precondition(
        field: impl Into<String>,
        hint: Hint,
        message: impl Into<String>,
    ) -> Self {
        Error {
            code: ErrorCode::FailedPrecondition,
            field: Some(field.into()),
            hint: Some(hint),
            message: message.into(),
        }
    }

    /// A conflicting earlier call.
    pub fn conflict(field: impl Into<String>, hint: Hint, message: impl Into<String>) -> Self {
        Error {
            code: ErrorCode::Conflict,
            field: Some(field.into()),
            hint: Some(hint),
            message: message.into(),
        }
    }

    /// An internal failure; the message is logged and returned without details of other records.
    pub fn internal(message: impl Into<String>) -> Self {
        Error { code: ErrorCode::Internal, field: None, hint: None, message: message.into() }
    }

    /// No valid identity where one is required.
    pub fn unauthenticated(message: impl Into<String>) -> Self {
        Error { code: ErrorCode::Unauthenticated, field: None, hint: None, message: message.into() }
    }

    /// A dependency is unavailable.
    pub fn unavailable(message: impl Into<String>) -> Self {
        Error { code: ErrorCode::Unavailable, field: None, hint: None, message: message.into() }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.code.as_str())?;
        if let Some(field) = &self.field {
            write!(f, " (field {field}")?;
            if let Some(hint) = self.hint {
                write!(f, ", hint {}", hint.as_str())?;
            }
            write!(f, ")")?;
        }
        write!(f, ": {}", self.message)
    }
}

impl std::error::Error for Error {}
