//! The operations of Spine, one function per tool, independent of any transport.
//!
//! Every operation takes the [`Caller`] and a typed request (see [`request`]; each tool's
//! entry point converts its wire arguments, see [`args`], and calls it) and reads the time
//! from the injected [`Clock`]; it returns a typed result (see [`views`]) or a
//! [`spine_core::Error`] naming the offending field. The MCP tools are thin adapters over
//! [`Service`]. The operator commands are not: they act for the operator across every owner,
//! as `spine-ops` use cases over the same store contract.
//!
//! Key design decision: validation runs completely before anything is embedded or written,
//! so a rejected call changes nothing (SPEC Errors), and the owner predicate is always the
//! store's (an [`Access`]), never a filter applied afterwards.
#![deny(missing_docs)]

pub mod args;
pub mod audit;
pub mod budget;
pub mod digest;
#[cfg(test)]
mod fuzz;
mod knowledge;
mod lifecycle;
mod memory;
pub mod rank;
mod recall;
mod related;
pub mod repo;
pub mod request;
pub mod rerank;
pub mod similar;
mod telemetry;
pub mod views;

use std::sync::Arc;

use spine_core::{Clock, Error, Limits, ShortId};
use spine_embed::Embedder;
use spine_store::{Store, StoreError};

use crate::rerank::Reranker;

pub use lifecycle::{Archival, flip_archived};
pub use spine_core::Caller;
pub use spine_store::Access;

/// Most scopes a cross-spine call enumerates before reporting `scopes_truncated`.
pub const SCOPE_CEILING: usize = 1000;

/// The service: store, embedder, clock and limits, shared by every transport.
#[derive(Clone)]
pub struct Service {
    store: Arc<dyn Store>,
    embedder: Arc<dyn Embedder>,
    clock: Arc<dyn Clock>,
    limits: Limits,
    /// SPEC search rule 5: reorders search_memory and search_discovery hits when set.
    reranker: Option<Arc<dyn Reranker>>,
    /// Weight of the BM25 adjustment in the default order (SPEC search rule 1).
    lexical_weight: f32,
    /// Weight of search's neighbour step (`rank::NEIGHBOUR_WEIGHT`; 0 turns it off).
    neighbour_weight: f32,
    /// Records' lexical terms, shared by searches (`rank::TermCache`).
    terms: Arc<rank::TermCache>,
    /// Cosine at or above which writes report near-duplicates; `None`: not checked.
    similar_threshold: Option<f32>,
    /// What a write holding a credential gets (`--secrets`).
    secrets: spine_core::secrets::SecretsPolicy,
    /// Whether recall calls are audited too (`--audit-reads`).
    audit_reads: bool,
}

impl Service {
    /// Assembles a service.
    pub fn new(
        store: Arc<dyn Store>,
        embedder: Arc<dyn Embedder>,
        clock: Arc<dyn Clock>,
        limits: Limits,
    ) -> Self {
        Service {
            store: telemetry::Traced::wrap(store),
            embedder,
            clock,
            limits,
            reranker: None,
            lexical_weight: rank::LEXICAL_WEIGHT,
            neighbour_weight: rank::NEIGHBOUR_WEIGHT,
            terms: Arc::default(),
            similar_threshold: Some(similar::DEFAULT_SIMILAR_THRESHOLD),
            secrets: spine_core::secrets::SecretsPolicy::Reject,
            audit_reads: false,
        }
    }

    /// The same service handling credentials in written text by `policy` (`--secrets`).
    pub fn with_secrets(self, policy: spine_core::secrets::SecretsPolicy) -> Self {
        Service { secrets: policy, ..self }
    }

    /// What a write's checks read from the configuration: the limits and the secrets
    /// policy.
    pub fn write_rules(&self) -> request::WriteRules {
        request::WriteRules { limits: self.limits, secrets: self.secrets }
    }

    /// The same service, reranking search_memory and search_discovery results with `r`
    /// (`SPINE_SEARCH_RANKER=jev`).
    pub fn with_reranker(self, r: Arc<dyn Reranker>) -> Self {
        Service { reranker: Some(r), ..self }
    }

    /// The same service reporting near-duplicates on write at cosine `threshold` or above
    /// (`SPINE_SIMILAR_THRESHOLD`); `None` turns the check off.
    pub fn with_similar_threshold(self, threshold: Option<f32>) -> Self {
        Service { similar_threshold: threshold, ..self }
    }

    /// The same service with another weight for the lexical adjustment: `0` ranks by cosine
    /// alone (the quality evaluation's dense-only baseline). Negative or non-finite weights
    /// are taken as `0`.
    pub fn with_lexical_weight(self, weight: f32) -> Self {
        let lexical_weight = if weight.is_finite() { weight.max(0.0) } else { 0.0 };
        Service { lexical_weight, ..self }
    }

    /// The same service with another weight for search's neighbour step (`rank`): `0`
    /// turns it off. Negative or non-finite weights are taken as `0`.
    pub fn with_neighbour_weight(self, weight: f32) -> Self {
        let neighbour_weight = if weight.is_finite() { weight.max(0.0) } else { 0.0 };
        Service { neighbour_weight, ..self }
    }

    /// The configured limits.
    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    /// Embeds one text with the configured embedder.
    fn embed_one(&self, text: &str) -> Result<Vec<f32>, Error> {
        let _span = self.embed_span("content", text).entered();
        let mut v = self.embedder.embed(&[text]).map_err(embed_error)?;
        v.pop().ok_or_else(|| Error::internal("the embedder returned no vector"))
    }

    /// The vector of a search query; repeated queries come from the embedder's cache.
    /// Whether the service can answer calls now: its embedder loaded and its store
    /// answering a cheap read. `Err` says which is not, in words (a server's `/readyz`).
    /// Blocks for as long as the store's read takes (PostgreSQL: at most its call timeout).
    pub fn readiness(&self) -> Result<(), String> {
        self.embedder.ready()?;
        self.store.ping().map_err(|e| match e {
            StoreError::Unavailable(m) => format!("the database is unavailable: {m}"),
            e => format!("the store does not answer: {e}"),
        })
    }

    fn embed_query(&self, query: &str) -> Result<Vec<f32>, Error> {
        let _span = self.embed_span("query", query).entered();
        self.embedder.embed_query(query).map_err(embed_error)
    }

    /// The span of one embedding (GenAI semantic conventions, `embeddings`): the model, the
    /// kind of text, how many and how long; never the text. Token counts are not known here:
    /// the model's passes coalesce texts of many calls on its own threads.
    fn embed_span(&self, kind: &'static str, text: &str) -> tracing::Span {
        spine_core::otel_span!(
            "embeddings",
            otel.name = format!("embeddings {}", self.embedder.model_id()),
            otel.kind = "client",
            gen_ai.operation.name = "embeddings",
            gen_ai.request.model = self.embedder.model_id(),
            spine.embed.kind = kind,
            spine.embed.texts = 1,
            spine.embed.chars = text.chars().count(),
        )
    }

    /// Mints a short id no record uses yet (50 random bits; a clash is rare, so retry).
    fn mint_short_id(&self) -> Result<ShortId, Error> {
        for _ in 0..16 {
            let s = ShortId::mint();
            if !self.store.short_id_taken(&s).map_err(store_error)? {
                return Ok(s);
            }
        }
        Err(Error::internal("could not mint a unique short_id"))
    }
}

/// Maps a storage failure to an internal error, logging the detail.
fn store_error(e: StoreError) -> Error {
    tracing::error!(error = %e, "store failure");
    match e {
        StoreError::Unavailable(m) => {
            Error::unavailable(format!("the database is unavailable: {m}"))
        }
        StoreError::NotDurable(m) => {
            Error::unavailable(format!("the store cannot make writes durable: {m}"))
        }
        e => match e.resource_fault() {
            Some(cause) => Error::unavailable(format!(
                "the store cannot write: {cause}; nothing was changed, and the call will \
                 succeed once the operator fixes it ({e})"
            )),
            None => Error::internal(format!("storage failure: {e}")),
        },
    }
}

/// An embedding failure as the service reports it: retry later.
fn embed_error(e: spine_embed::EmbedError) -> Error {
    tracing::error!(error = %e, "embedding failed");
    Error::unavailable(format!("the embedding model failed: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_write_that_cannot_be_made_durable_is_unavailable_naming_the_cause() {
        let e = store_error(StoreError::NotDurable("the log could not be flushed (EIO)".into()));
        assert_eq!(e.code, spine_core::ErrorCode::Unavailable);
        assert!(e.message.contains("cannot make writes durable") && e.message.contains("EIO"));
        let e = store_error(StoreError::Io("something else".into()));
        assert_eq!(e.code, spine_core::ErrorCode::Internal);
    }
}
