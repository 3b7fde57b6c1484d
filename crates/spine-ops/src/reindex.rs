//! `spine reindex`: re-embeds every record whose vector is missing or stamped with another
//! embedder than the configured one (docs/embeddings.md).
//!
//! Batched and resumable: each batch is written as it completes, so an interrupted run
//! loses at most one batch and the next run continues with what is left. Records written
//! behind the cursor while it runs (by a server on the same directory) are caught by a
//! final pass from the start.

use std::time::Instant;

use serde::Serialize;
use spine_core::RecordId;
use spine_embed::Embedder;
use spine_store::{Embedding, TransferStore};

use crate::{Error, Progress, Result};

/// What a reindex did.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ReindexReport {
    /// The embedder the records were re-embedded with (its stamp).
    pub model: String,
    /// How long it took, in seconds.
    pub seconds: f64,
    /// Records whose vector was (re)computed.
    pub reembedded: u64,
    /// Records deleted between being read and being written.
    pub vanished: u64,
    /// The embedder stamps in the store afterwards, with counts.
    pub models: Vec<(String, u64)>,
}

impl ReindexReport {
    /// Whether every record already had a vector of the embedder (nothing was written and
    /// nothing vanished).
    pub fn nothing_to_do(&self) -> bool {
        self.reembedded == 0 && self.vanished == 0
    }

    /// Records re-embedded per second.
    pub fn per_second(&self) -> f64 {
        self.reembedded as f64 / self.seconds.max(1e-3)
    }
}

/// Re-embeds `store` with `embedder`, `batch` records per embedding call. Blocking.
pub fn reindex(
    store: &dyn TransferStore,
    embedder: &dyn Embedder,
    batch: usize,
    progress: &mut dyn Progress,
) -> Result<ReindexReport> {
    let started = Instant::now();
    let model = embedder.model_id();
    let batch = batch.max(1);
    let before = store.embedder_models()?;
    // Records without any vector are not counted here (they do not occur in practice);
    // the progress total grows if it meets some.
    let total: u64 = before.iter().filter(|(m, _)| m != model).map(|(_, n)| n).sum();
    progress.start("re-embedding", total);
    let (mut reembedded, mut vanished) = (0u64, 0u64);
    let mut after: Option<RecordId> = None;
    loop {
        let page = store.needing_embedding(model, after, batch)?;
        let Some(last) = page.last().map(|(id, _)| *id) else {
            if after.is_none() {
                break;
            }
            after = None;
            continue;
        };
        let texts: Vec<&str> = page.iter().map(|(_, content)| content.as_str()).collect();
        let vectors = embedder.embed(&texts).map_err(|e| {
            Error::Embed(format!(
                "{e}; {reembedded} record{} were re-embedded before it: run `spine reindex` \
                 again to continue where it stopped",
                if reembedded == 1 { "" } else { "s" }
            ))
        })?;
        if vectors.len() != page.len() {
            return Err(Error::Embed(format!(
                "the embedder returned {} vectors for {} texts",
                vectors.len(),
                page.len()
            )));
        }
        // The page in one transaction: one audit event names every record it re-embedded.
        let items: Vec<(RecordId, Embedding<'_>)> = page
            .iter()
            .zip(&vectors)
            .map(|((id, _), vector)| (*id, Embedding { model, vector }))
            .collect();
        for set in store.set_vectors(&items)? {
            if set {
                reembedded += 1;
            } else {
                vanished += 1;
            }
        }
        progress.advance(page.len() as u64);
        after = Some(last);
    }
    progress.finish();
    Ok(ReindexReport {
        model: model.to_owned(),
        seconds: started.elapsed().as_secs_f64(),
        reembedded,
        vanished,
        models: store.embedder_models()?,
    })
}
