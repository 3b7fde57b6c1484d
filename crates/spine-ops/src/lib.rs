//! Spine's operator use cases: what `spine export`, `import`, `prune-expired`, `migrate`,
//! `reindex`, `summarize-missing` and `spine spine-review …` do, as library functions over
//! the store contract ([`spine_store::OperatorStore`]), and what `spine import-notes` does
//! as a caller of the service ([`notes`]).
//!
//! Key design decision: a use case takes the store as `&dyn OperatorStore`, the time as a
//! value and reports progress through [`Progress`]; it returns a serialisable report and
//! prints nothing. The `spine` binary keeps the command line, progress bars and printing, so
//! every rule here (the prune cut-off, consolidation, purge selection, the summary bounds,
//! the re-embedding loop) is tested in-process against any backend.
#![deny(missing_docs)]

pub mod migrate;
pub mod notes;
pub mod prune;
pub mod reindex;
pub mod review;
pub mod stop;
pub mod summarize;
pub mod transfer;

pub use spine_store::OperatorStore;
use spine_store::StoreError;

/// Why an operator use case stopped.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The operator's input cannot be used (names the flag or value).
    #[error("{0}")]
    Invalid(String),
    /// Reading or writing a file failed.
    #[error("{context}: {source}")]
    Io {
        /// What was being done.
        context: String,
        /// The failure.
        source: std::io::Error,
    },
    /// The embedder failed.
    #[error("embedding failed: {0}")]
    Embed(String),
}

/// Result alias for the use cases.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Progress of a long use case; the binary shows a bar or lines, tests ignore it.
pub trait Progress {
    /// Work named `label` starts, with `total` items expected (it may grow).
    fn start(&mut self, label: &str, total: u64);
    /// `n` more items are done.
    fn advance(&mut self, n: u64);
    /// The work is over.
    fn finish(&mut self);
}

/// Progress nobody watches.
#[derive(Debug, Default, Clone, Copy)]
pub struct Silent;

impl Progress for Silent {
    fn start(&mut self, _: &str, _: u64) {}
    fn advance(&mut self, _: u64) {}
    fn finish(&mut self) {}
}
