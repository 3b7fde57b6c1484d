//! The pure core of Spine: the record model, scopes, ids, time, state derivation, limits and
//! the error type every layer speaks.
//!
//! Nothing in this crate performs I/O. Every SPEC rule that can be decided from values alone lives
//! here, in one function named after the rule, so the service and all transports share it.
//!
//! Key design decision: wire strings are parsed into types at the edge ([`Scope`],
//! [`Category`], [`ShortId`], [`Timestamp`], …). Past the edge an invalid value cannot exist,
//! and the record type serialises to exactly the JSON keys of SPEC "Memory record".
#![deny(missing_docs)]

/// The serde and JSON Schema impls of a value that travels as its text form: written with
/// its `Display`, read back with `$parse` (`&str -> Option<Self>`; `None` is an error naming
/// `$expected` and the text), described by the JSON Schema `$schema`. With
/// `shown by $show` (`Self -> String`), its `Display` too.
macro_rules! text_form {
    ($ty:ident shown by $show:path, $parse:expr, $expected:literal, $schema:tt) => {
        impl std::fmt::Display for $ty {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(&$show(*self))
            }
        }

        text_form!($ty, $parse, $expected, $schema);
    };
    ($ty:ident, $parse:expr, $expected:literal, $schema:tt) => {
        impl serde::Serialize for $ty {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.collect_str(self)
            }
        }

        impl<'de> serde::Deserialize<'de> for $ty {
            fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                let s = <String as serde::Deserialize>::deserialize(d)?;
                let parse: fn(&str) -> Option<$ty> = $parse;
                parse(&s).ok_or_else(|| {
                    serde::de::Error::custom(format!(concat!("not ", $expected, ": {:?}"), s))
                })
            }
        }

        impl schemars::JsonSchema for $ty {
            fn schema_name() -> std::borrow::Cow<'static, str> {
                stringify!($ty).into()
            }
            fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
                schemars::json_schema!($schema)
            }
        }
    };
}

pub mod audit;
mod error;
#[cfg(test)]
mod fuzz;
mod ids;
pub mod lexical;
pub mod limits;
mod record;
mod scope;
pub mod secrets;
mod state;
pub mod telemetry;
mod time;
mod vector;

pub use error::{Error, ErrorCode, Hint};
pub use ids::{IdRef, RecordId, ShortId};
pub use limits::{Limits, MAX_ID_BYTES};
pub use record::{
    Category, Citation, CitationKind, DiscoveryKind, ListState, Memory, SCHEMA_VERSION,
    ScheduledState, Source, SummarySource, Visibility, stamp_schema_version,
};
pub use scope::{Scope, ScopeKind};
pub use state::{State, StateMarkers, derive_states, is_recall_visible};
pub use time::{Clock, EpochSeconds, ManualClock, SystemClock, Timestamp};
pub use vector::cosine;

/// The identity a call is made by (SPEC "Authentication").
///
/// Invariant: when `authenticated` is false, `actor` and `owner` are both empty — every
/// anonymous caller shares one bucket (SPEC Authentication 3).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Caller {
    actor: String,
    owner: String,
    authenticated: bool,
    /// The call's audit attribution, when it may change records ([`audit`]).
    audit: Option<std::sync::Arc<audit::Audit>>,
}

impl Caller {
    /// The anonymous caller used when authentication is disabled.
    pub fn anonymous() -> Self {
        Caller { actor: String::new(), owner: String::new(), authenticated: false, audit: None }
    }

    /// A caller whose token was verified.
    pub fn authenticated(actor: impl Into<String>, owner: impl Into<String>) -> Self {
        Caller { actor: actor.into(), owner: owner.into(), authenticated: true, audit: None }
    }

    /// The verified identity (empty when anonymous).
    pub fn actor(&self) -> &str {
        &self.actor
    }

    /// The authorization key stamped on records this caller creates.
    pub fn owner(&self) -> &str {
        &self.owner
    }

    /// Whether the call carries a verified identity.
    pub fn is_authenticated(&self) -> bool {
        self.authenticated
    }

    /// This caller making a call that `audit` attributes: the store records its changes
    /// with it ([`audit`]).
    pub fn with_audit(mut self, audit: audit::Audit) -> Self {
        self.audit = Some(std::sync::Arc::new(audit));
        self
    }

    /// The call's audit attribution, if it carries one.
    pub fn audit(&self) -> Option<&std::sync::Arc<audit::Audit>> {
        self.audit.as_ref()
    }
}
