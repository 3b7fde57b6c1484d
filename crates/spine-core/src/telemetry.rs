//! Whether OpenTelemetry export is on in this process (docs/observability.md, "Traces and
//! metrics").
//!
//! The binary turns it on once, at start, when an OTLP endpoint is configured; every layer
//! asks [`on`] before building a span or an attribute, so a process without an endpoint pays
//! one relaxed load per call site and nothing else.

use std::sync::atomic::{AtomicBool, Ordering};

static ON: AtomicBool = AtomicBool::new(false);

/// Whether spans and metrics are exported.
#[inline]
pub fn on() -> bool {
    ON.load(Ordering::Relaxed)
}

/// Turns export on for the rest of the process (the binary, once its exporters are built).
pub fn turn_on() {
    ON.store(true, Ordering::Relaxed);
}

/// The target of every span meant for export: the OpenTelemetry layer takes these and no
/// others, the log lines leave them out.
pub const TARGET: &str = "spine::otel";

/// An `info` span of [`TARGET`] when export is [`on`], else `Span::none()` (nothing built).
/// Takes `tracing::info_span!`'s arguments after the target; the caller's crate depends on
/// `tracing`.
#[macro_export]
macro_rules! otel_span {
    ($($args:tt)*) => {
        if $crate::telemetry::on() {
            ::tracing::info_span!(target: "spine::otel", $($args)*)
        } else {
            ::tracing::Span::none()
        }
    };
}
