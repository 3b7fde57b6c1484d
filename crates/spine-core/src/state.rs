//! State derivation (SPEC "States and transitions").

use schemars::JsonSchema;
use serde::Serialize;

use crate::{EpochSeconds, Memory, Timestamp};

/// A derived state word. The declaration order is the canonical emission order
/// (descending finality): archived, superseded, expired, scheduled.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum State {
    /// `archived_at` present.
    Archived,
    /// `superseded_by` present.
    Superseded,
    /// now is at or past `not_after`.
    Expired,
    /// now is before `not_before` (suppressed by `expired`).
    Scheduled,
}

impl State {
    /// The wire spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            State::Archived => "archived",
            State::Superseded => "superseded",
            State::Expired => "expired",
            State::Scheduled => "scheduled",
        }
    }
}

/// The states of `m` at `now`, in canonical order; empty means active.
///
/// SPEC: the validity window is half-open `[not_before, not_after)`, bounds in whole
/// seconds: not_before == now is active, not_after == now is expired; `expired` is
/// evaluated first and suppresses `scheduled`.
pub fn derive_states(m: &Memory, now: Timestamp) -> Vec<State> {
    StateMarkers::of(m).derive(now)
}

/// The state markers of a record, without the rest of it (what the store indexes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StateMarkers {
    /// `archived_at` present.
    pub archived: bool,
    /// `superseded_by` present.
    pub superseded: bool,
    /// Start of the validity window.
    pub not_before: Option<EpochSeconds>,
    /// End (exclusive) of the validity window.
    pub not_after: Option<EpochSeconds>,
}

impl StateMarkers {
    /// The markers of `m`.
    pub fn of(m: &Memory) -> Self {
        StateMarkers {
            archived: m.archived_at.is_some(),
            superseded: m.superseded_by.is_some(),
            not_before: m.not_before,
            not_after: m.not_after,
        }
    }

    /// The states at `now`, in canonical order (see [`derive_states`]).
    pub fn derive(self, now: Timestamp) -> Vec<State> {
        let now_s = now.to_epoch_seconds();
        let mut states = Vec::new();
        if self.archived {
            states.push(State::Archived);
        }
        if self.superseded {
            states.push(State::Superseded);
        }
        if self.not_after.is_some_and(|na| now_s >= na) {
            states.push(State::Expired);
        } else if self.not_before.is_some_and(|nb| now_s < nb) {
            states.push(State::Scheduled);
        }
        states
    }
}

/// The recall gate: only active records pass.
pub fn is_recall_visible(m: &Memory, now: Timestamp) -> bool {
    derive_states(m, now).is_empty()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Caller, Category, EpochSeconds, RecordId, Scope, ShortId, Source};

    fn record() -> Memory {
        Memory::new(
            ShortId::mint(),
            "c".into(),
            Scope::parse("scope", "a:b:c").unwrap(),
            Source::UserSaid,
            Category::Decision,
            &Caller::anonymous(),
            Timestamp::from_micros(0),
        )
    }

    const T: i64 = 1_800_000_000;

    fn at(secs: i64, micros: i64) -> Timestamp {
        Timestamp::from_micros(secs * 1_000_000 + micros)
    }

    #[test]
    fn active_when_not_before_equals_now() {
        let mut m = record();
        m.not_before = Some(EpochSeconds::from_secs(T));
        assert_eq!(derive_states(&m, at(T, 0)), vec![]);
        assert_eq!(derive_states(&m, at(T - 1, 999_999)), vec![State::Scheduled]);
    }

    #[test]
    fn expired_when_now_equals_not_after() {
        let mut m = record();
        m.not_after = Some(EpochSeconds::from_secs(T));
        assert_eq!(derive_states(&m, at(T, 0)), vec![State::Expired]);
        assert_eq!(derive_states(&m, at(T - 1, 999_999)), vec![]);
    }

    #[test]
    fn expired_suppresses_scheduled() {
        let mut m = record();
        // An inverted window can only come from old data; expiry still wins.
        m.not_before = Some(EpochSeconds::from_secs(T + 10));
        m.not_after = Some(EpochSeconds::from_secs(T));
        assert_eq!(derive_states(&m, at(T, 0)), vec![State::Expired]);
    }

    #[test]
    fn all_markers_in_canonical_order() {
        let mut m = record();
        m.archived_at = Some(EpochSeconds::from_secs(T));
        m.superseded_by = Some(RecordId::mint());
        m.not_after = Some(EpochSeconds::from_secs(T));
        assert_eq!(
            derive_states(&m, at(T, 0)),
            vec![State::Archived, State::Superseded, State::Expired]
        );
        assert!(!is_recall_visible(&m, at(T, 0)));
        assert!(is_recall_visible(&record(), at(T, 0)));
    }
}
