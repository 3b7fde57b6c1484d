//! Instants and the injectable clock.
//!
//! Two representations, as SPEC "Memory record" asks: [`Timestamp`] (microseconds, for
//! created_at and other server stamps) and [`EpochSeconds`] (whole seconds, the internal form
//! of not_before / not_after / archived_at). Both are RFC 3339 UTC on the wire.

use std::sync::atomic::{AtomicI64, Ordering};

use chrono::{DateTime, SecondsFormat, TimeZone, Utc};

/// An instant in microseconds since the Unix epoch, UTC.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Timestamp(i64);

impl Timestamp {
    /// From microseconds since the epoch.
    pub fn from_micros(micros: i64) -> Self {
        Timestamp(micros)
    }

    /// Microseconds since the epoch.
    pub fn as_micros(self) -> i64 {
        self.0
    }

    /// The whole second containing this instant (floor, also before 1970).
    pub fn to_epoch_seconds(self) -> EpochSeconds {
        EpochSeconds(self.0.div_euclid(1_000_000))
    }

    /// Parses RFC 3339 (any offset), normalising to UTC; sub-microsecond digits are dropped.
    pub fn parse_rfc3339(s: &str) -> Option<Self> {
        let dt = DateTime::parse_from_rfc3339(s.trim()).ok()?;
        Some(Timestamp(dt.with_timezone(&Utc).timestamp_micros()))
    }

    /// RFC 3339 in UTC with `Z`, as many fractional digits as needed.
    pub fn to_rfc3339(self) -> String {
        match Utc.timestamp_micros(self.0).single() {
            Some(dt) => dt.to_rfc3339_opts(SecondsFormat::AutoSi, true),
            None => String::new(),
        }
    }
}

text_form!(Timestamp shown by Timestamp::to_rfc3339, Timestamp::parse_rfc3339, "an RFC 3339 timestamp", {
    "type": "string", "format": "date-time"
});

/// An instant in whole seconds since the Unix epoch, UTC (the stored form of the validity
/// window and of archived_at).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct EpochSeconds(i64);

impl EpochSeconds {
    /// From seconds since the epoch.
    pub fn from_secs(secs: i64) -> Self {
        EpochSeconds(secs)
    }

    /// Seconds since the epoch.
    pub fn as_secs(self) -> i64 {
        self.0
    }

    /// Parses RFC 3339; a fractional second is floored (`…:00.9Z` is second `…:00`), so the
    /// stored bound never lies later than what the client wrote.
    pub fn parse_rfc3339(s: &str) -> Option<Self> {
        Timestamp::parse_rfc3339(s).map(Timestamp::to_epoch_seconds)
    }

    /// RFC 3339 in UTC with `Z` and no fraction.
    pub fn to_rfc3339(self) -> String {
        match Utc.timestamp_opt(self.0, 0).single() {
            Some(dt) => dt.to_rfc3339_opts(SecondsFormat::Secs, true),
            None => String::new(),
        }
    }
}

text_form!(EpochSeconds shown by EpochSeconds::to_rfc3339, EpochSeconds::parse_rfc3339, "an RFC 3339 timestamp", {
    "type": "string", "format": "date-time"
});

/// Where "now" comes from. Injected everywhere so tests can stand exactly on a boundary.
pub trait Clock: Send + Sync {
    /// The current instant.
    fn now(&self) -> Timestamp;
}

/// The system's wall clock.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> Timestamp {
        Timestamp(Utc::now().timestamp_micros())
    }
}

/// A clock that only moves when told to (tests).
#[derive(Debug, Default)]
pub struct ManualClock(AtomicI64);

impl ManualClock {
    /// A clock standing at `at`.
    pub fn new(at: Timestamp) -> Self {
        ManualClock(AtomicI64::new(at.as_micros()))
    }

    /// Moves the clock to `at`.
    pub fn set(&self, at: Timestamp) {
        self.0.store(at.as_micros(), Ordering::SeqCst);
    }

    /// Moves the clock forward by `micros`.
    pub fn advance_micros(&self, micros: i64) {
        self.0.fetch_add(micros, Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn now(&self) -> Timestamp {
        Timestamp(self.0.load(Ordering::SeqCst))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc3339_round_trips_in_utc() {
        let t = Timestamp::parse_rfc3339("2026-01-02T03:04:05.123456+02:00").unwrap();
        assert_eq!(t.to_rfc3339(), "2026-01-02T01:04:05.123456Z");
        assert_eq!(Timestamp::parse_rfc3339(&t.to_rfc3339()), Some(t));
    }

    #[test]
    fn fractional_window_bound_is_floored() {
        let s = EpochSeconds::parse_rfc3339("2026-01-01T00:00:00.999Z").unwrap();
        assert_eq!(s.to_rfc3339(), "2026-01-01T00:00:00Z");
        let before_epoch = EpochSeconds::parse_rfc3339("1969-12-31T23:59:59.5Z").unwrap();
        assert_eq!(before_epoch.as_secs(), -1);
    }

    #[test]
    fn garbage_is_not_a_timestamp() {
        assert_eq!(Timestamp::parse_rfc3339("yesterday"), None);
        assert_eq!(Timestamp::parse_rfc3339("2026-01-01"), None);
    }

    #[test]
    fn manual_clock_moves_only_when_told() {
        let c = ManualClock::new(Timestamp::from_micros(10));
        assert_eq!(c.now().as_micros(), 10);
        c.advance_micros(5);
        assert_eq!(c.now().as_micros(), 15);
    }
}
