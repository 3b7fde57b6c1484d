//! Stopping a long use case between two records: the caller decides when (a signal, a
//! deadline); the use case asks between records and reports what it did not reach.

/// Why a use case stopped before it finished.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stopped {
    /// Its deadline (`--timeout`) passed.
    Timeout,
    /// It received this signal (2 = SIGINT, 15 = SIGTERM).
    Signal(i32),
}

impl Stopped {
    /// The conventional exit status: 124 for a timeout (as `timeout(1)`), 128 + the signal.
    pub fn exit_code(self) -> i32 {
        match self {
            Stopped::Timeout => 124,
            Stopped::Signal(n) => 128 + n,
        }
    }

    /// `timeout` or `interrupted`, for reports.
    pub fn as_str(self) -> &'static str {
        match self {
            Stopped::Timeout => "timeout",
            Stopped::Signal(_) => "interrupted",
        }
    }
}

/// Asked between two records whether to stop. Cheap to call.
pub trait Interrupt: Sync {
    /// Why to stop now, if so.
    fn check(&self) -> Option<Stopped>;
}

/// Never stops.
#[derive(Debug, Default, Clone, Copy)]
pub struct Never;

impl Interrupt for Never {
    fn check(&self) -> Option<Stopped> {
        None
    }
}

/// Stops at once with a fixed reason (tests, and a caller that knows before starting).
impl Interrupt for Stopped {
    fn check(&self) -> Option<Stopped> {
        Some(*self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exit_codes_follow_the_shell_conventions() {
        assert_eq!(Stopped::Timeout.exit_code(), 124);
        assert_eq!(Stopped::Signal(2).exit_code(), 130);
        assert_eq!(Stopped::Signal(15).as_str(), "interrupted");
        assert_eq!(Never.check(), None);
    }
}
