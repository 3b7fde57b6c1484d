//! `spine export` and `spine import`: every record, with its vector, to a file of JSON lines
//! and back, byte for byte ([`format`](mod@format)).

mod export;
pub mod format;
mod import;

pub use export::{ExportReport, Exported, Target, export};
pub use import::{ImportReport, ShortIdClash, import};

/// `n` with the singular or plural of `noun`, for messages.
fn count(n: u64, noun: &str) -> String {
    format!("{n} {noun}{}", if n == 1 { "" } else { "s" })
}
