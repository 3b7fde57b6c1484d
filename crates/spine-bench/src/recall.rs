//! What the small-store recall evaluations share (`eval paraphrase`, `devbench`): memories
//! stored through `store_memory` into a fresh embedded store, queries asked through
//! `search_memory` with the default ranking and with dense order alone.

use std::sync::Arc;

use anyhow::{Result, anyhow};
use serde_json::json;
use spine_core::{Caller, Limits, RecordId, SystemClock};
use spine_embed::{CachedEmbedder, Embedder};
use spine_service::Service;
use spine_service::args::parse_args;
use spine_store::SqliteStore;

/// One result: the record and its dense cosine (`score`).
pub type Hit = (RecordId, f32);

/// A fresh store behind two services: the default ranking, and dense order alone (no
/// lexical adjustment, no neighbour step) as the reference.
pub struct Bench {
    /// The default service (SPEC search rule 1).
    pub ranked: Service,
    /// Cosine order.
    pub dense: Service,
    caller: Caller,
    _dir: tempfile::TempDir,
}

impl Bench {
    /// A new, empty store with the built-in model (query vectors cached, so that the two
    /// services embed each query once).
    pub fn new(embedder: Arc<dyn Embedder>) -> Result<Self> {
        let dir = tempfile::tempdir()?;
        let store = Arc::new(SqliteStore::open(dir.path())?);
        let ranked = Service::new(store, embedder, Arc::new(SystemClock), Limits::default());
        let dense = ranked.clone().with_lexical_weight(0.0).with_neighbour_weight(0.0);
        Ok(Bench { ranked, dense, caller: Caller::anonymous(), _dir: dir })
    }

    /// The built-in model with a cache of `capacity` query vectors.
    pub fn model(capacity: usize) -> Result<Arc<dyn Embedder>> {
        Ok(Arc::new(CachedEmbedder::with_capacity(super::model()?, capacity)))
    }

    /// Stores one memory through `store_memory`; its id.
    pub fn store(
        &self,
        scope: &str,
        content: &str,
        tags: &[String],
        category: &str,
    ) -> Result<RecordId> {
        let args = json!({"content": content, "scope": scope, "tags": tags,
                          "source": "agent-inferred", "category": category});
        let a = parse_args(args.as_object().cloned().unwrap_or_default())
            .map_err(|e| anyhow!("storing {content:?}: {e}"))?;
        let stored = self.ranked.store_memory(&self.caller, a).map_err(|e| anyhow!("{e}"))?;
        Ok(stored.id)
    }

    /// `search_memory` of `query` in `scope` with `k` results through `service` (one of
    /// this bench's two): the hits, best first.
    pub fn search(
        &self,
        service: &Service,
        scope: &str,
        query: &str,
        k: usize,
    ) -> Result<Vec<Hit>> {
        let args = json!({"query": query, "scope": scope, "k": k});
        let a = parse_args(args.as_object().cloned().unwrap_or_default())
            .map_err(|e| anyhow!("{query:?}: {e}"))?;
        let r = service.search_memory(&self.caller, a).map_err(|e| anyhow!("{query:?}: {e}"))?;
        Ok(r.memories.iter().map(|m| (m.id, m.score.unwrap_or(0.0))).collect())
    }
}

/// The 1-based rank of `id` among `hits`.
pub fn rank_of(hits: &[Hit], id: RecordId) -> Option<usize> {
    hits.iter().position(|(h, _)| *h == id).map(|p| p + 1)
}
