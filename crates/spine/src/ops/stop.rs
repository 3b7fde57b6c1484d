//! When a long command must stop: Ctrl-C (SIGINT), SIGTERM, or its `--timeout`.
//!
//! The first signal asks the command to stop between two records, so nothing is left half
//! done; a second one exits at once (still safe: every record is written in its own
//! transaction, which SQLite either commits whole or not at all).

use std::sync::Arc;
use std::sync::atomic::{AtomicI32, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
pub use spine_ops::stop::Stopped;

/// Whether to stop: a signal arrived or the deadline passed. Cheap to check.
#[derive(Debug, Clone)]
pub struct Stop {
    /// The first signal received, 0 before any.
    signal: Arc<AtomicI32>,
    deadline: Option<Instant>,
}

impl Stop {
    /// Starts watching for SIGINT and SIGTERM, with a deadline `timeout` from now (none when
    /// zero). Must be called inside the tokio runtime; the handlers are in place when it
    /// returns, so a signal can never kill the command half-way through a record.
    pub fn install(timeout: Duration) -> Result<Stop> {
        let signal = Arc::new(AtomicI32::new(0));
        watch(signal.clone())?;
        Ok(Stop { signal, deadline: (!timeout.is_zero()).then(|| Instant::now() + timeout) })
    }

    /// A stop that only a deadline can trigger (tests).
    #[cfg(test)]
    pub fn after(timeout: Duration) -> Stop {
        Stop { signal: Arc::default(), deadline: Some(Instant::now() + timeout) }
    }
}

impl spine_ops::stop::Interrupt for Stop {
    fn check(&self) -> Option<Stopped> {
        match self.signal.load(Ordering::SeqCst) {
            0 => self.deadline.filter(|d| Instant::now() >= *d).map(|_| Stopped::Timeout),
            n => Some(Stopped::Signal(n)),
        }
    }
}

/// Records the first signal in `flag`; exits on the second.
fn on_signal(flag: &AtomicI32, n: i32) {
    if flag.compare_exchange(0, n, Ordering::SeqCst, Ordering::SeqCst).is_ok() {
        eprintln!(
            "stopping after the current record (Ctrl-C again stops at once; every record is \
             written whole or not at all)"
        );
    } else {
        eprintln!("stopped at once");
        std::process::exit(128 + n);
    }
}

#[cfg(unix)]
fn watch(flag: Arc<AtomicI32>) -> Result<()> {
    use tokio::signal::unix::{SignalKind, signal};
    // `signal` installs the handler now, not when first polled.
    let mut int = signal(SignalKind::interrupt()).context("installing the Ctrl-C handler")?;
    let mut term = signal(SignalKind::terminate()).context("installing the SIGTERM handler")?;
    tokio::spawn(async move {
        loop {
            tokio::select! {
                Some(()) = int.recv() => on_signal(&flag, 2),
                Some(()) = term.recv() => on_signal(&flag, 15),
                else => break,
            }
        }
    });
    Ok(())
}

#[cfg(not(unix))]
fn watch(flag: Arc<AtomicI32>) -> Result<()> {
    tokio::spawn(async move {
        while tokio::signal::ctrl_c().await.is_ok() {
            on_signal(&flag, 2);
        }
    });
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use spine_ops::stop::Interrupt as _;

    #[test]
    fn a_passed_deadline_stops_and_a_far_one_does_not() {
        assert_eq!(Stop::after(Duration::ZERO).check(), Some(Stopped::Timeout));
        assert_eq!(Stop::after(Duration::from_secs(3600)).check(), None);
    }
}
