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
}

impl Caller {
    /// The anonymous caller used when authentication is disabled.
    pub fn anonymous() -> Self {
        Caller { actor: String::new(), owner: String::new(), authenticated: false }
    }

    /// A caller whose token was verified.
    pub fn authenticated(actor: impl Into<String>, owner: impl Into<String>) -> Self {
        Caller { actor: actor.into(), owner: owner.into(), authenticated: true }
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
}
