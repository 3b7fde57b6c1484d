//! An LRU cache of query embeddings in front of any [`Embedder`].
//!
//! Agents repeat queries (the same question at every session start, the same search after
//! each edit), and a query embedding costs a forward pass or an HTTP round trip. Only
//! [`Embedder::embed_query`] is cached: stored contents (`embed`, one text per write or
//! batches for imports and `spine reindex`) would only flush the cache with texts nobody
//! searches for.

use std::num::NonZeroUsize;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use lru::LruCache;

use crate::{EmbedError, Embedder};

/// Entries a [`CachedEmbedder`] keeps unless told otherwise (about 1.6 MB of 384-dim vectors).
pub const DEFAULT_CACHE_CAPACITY: usize = 1024;

/// Hit and miss counts of a [`CachedEmbedder`] since it was built.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CacheStats {
    /// Queries answered from the cache.
    pub hits: u64,
    /// Queries that went to the wrapped embedder.
    pub misses: u64,
}

/// Wraps an embedder with an LRU cache of single-text embeddings, keyed by the exact text.
///
/// Invariant: a cached vector is exactly what the wrapped embedder returned for that text,
/// so caching never changes a result. The cache belongs to one embedder, whose identity
/// does not change, so the text alone is the key.
pub struct CachedEmbedder<E: Embedder> {
    inner: E,
    /// `None` when the capacity is 0 (caching off).
    cache: Option<Mutex<LruCache<String, Vec<f32>>>>,
    hits: AtomicU64,
    misses: AtomicU64,
}

impl<E: Embedder> CachedEmbedder<E> {
    /// A cache of [`DEFAULT_CACHE_CAPACITY`] entries in front of `inner`.
    pub fn new(inner: E) -> Self {
        Self::with_capacity(inner, DEFAULT_CACHE_CAPACITY)
    }

    /// A cache of `capacity` entries in front of `inner`; 0 turns caching off.
    pub fn with_capacity(inner: E, capacity: usize) -> Self {
        CachedEmbedder {
            inner,
            cache: NonZeroUsize::new(capacity).map(|c| Mutex::new(LruCache::new(c))),
            hits: AtomicU64::new(0),
            misses: AtomicU64::new(0),
        }
    }

    /// The wrapped embedder.
    pub fn inner(&self) -> &E {
        &self.inner
    }

    /// Hits and misses so far.
    pub fn stats(&self) -> CacheStats {
        CacheStats {
            hits: self.hits.load(Ordering::Relaxed),
            misses: self.misses.load(Ordering::Relaxed),
        }
    }

    fn lock(
        cache: &Mutex<LruCache<String, Vec<f32>>>,
    ) -> std::sync::MutexGuard<'_, LruCache<String, Vec<f32>>> {
        // The cache holds only finished vectors; a panic elsewhere cannot leave it torn.
        cache.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl<E: Embedder> std::fmt::Debug for CachedEmbedder<E> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CachedEmbedder")
            .field("model_id", &self.inner.model_id())
            .field("capacity", &self.cache.as_ref().map(|c| Self::lock(c).cap().get()))
            .field("stats", &self.stats())
            .finish_non_exhaustive()
    }
}

impl<E: Embedder> Embedder for CachedEmbedder<E> {
    fn model_id(&self) -> &str {
        self.inner.model_id()
    }

    fn dims(&self) -> usize {
        self.inner.dims()
    }

    fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, EmbedError> {
        timed("content", texts.len(), || self.inner.embed(texts))
    }

    fn ready(&self) -> Result<(), String> {
        self.inner.ready()
    }

    fn embed_query(&self, query: &str) -> Result<Vec<f32>, EmbedError> {
        let Some(cache) = &self.cache else {
            return timed("query", 1, || self.inner.embed_query(query));
        };
        if let Some(v) = Self::lock(cache).get(query) {
            self.hits.fetch_add(1, Ordering::Relaxed);
            metrics::counter!("spine_query_cache_total", "result" => "hit").increment(1);
            return Ok(v.clone());
        }
        self.misses.fetch_add(1, Ordering::Relaxed);
        metrics::counter!("spine_query_cache_total", "result" => "miss").increment(1);
        // The lock is not held while embedding: two threads missing on the same text both
        // compute it, which is cheaper than serialising every query behind one model call.
        let v = timed("query", 1, || self.inner.embed_query(query))?;
        Self::lock(cache).put(query.to_owned(), v.clone());
        Ok(v)
    }
}

/// Runs one embedding call, recording its duration and the texts it embedded (`kind`:
/// `query` or `content`) for `/metrics`.
fn timed<T>(
    kind: &'static str,
    texts: usize,
    f: impl FnOnce() -> Result<T, EmbedError>,
) -> Result<T, EmbedError> {
    let started = std::time::Instant::now();
    let out = f();
    metrics::histogram!("spine_embed_duration_seconds", "kind" => kind)
        .record(started.elapsed().as_secs_f64());
    if out.is_ok() {
        metrics::counter!("spine_embedded_texts_total", "kind" => kind).increment(texts as u64);
    }
    out
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicUsize;

    use super::*;

    /// Counts calls; the vector is the text's length, so results are checkable.
    #[derive(Default)]
    struct Counting {
        calls: AtomicUsize,
    }

    impl Embedder for Counting {
        fn model_id(&self) -> &str {
            "test:counting"
        }
        fn dims(&self) -> usize {
            1
        }
        fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, EmbedError> {
            self.calls.fetch_add(1, Ordering::SeqCst);
            if texts.contains(&"fail") {
                return Err(EmbedError::Inference("asked to fail".into()));
            }
            Ok(texts.iter().map(|t| vec![t.len() as f32]).collect())
        }
    }

    fn calls(c: &CachedEmbedder<Counting>) -> usize {
        c.inner().calls.load(Ordering::SeqCst)
    }

    #[test]
    fn a_repeated_query_is_a_hit_and_skips_the_embedder() {
        let c = CachedEmbedder::new(Counting::default());
        assert_eq!(c.embed_query("where are the tests?").unwrap(), [20.0]);
        assert_eq!(c.embed_query("where are the tests?").unwrap(), [20.0]);
        assert_eq!(calls(&c), 1);
        assert_eq!(c.stats(), CacheStats { hits: 1, misses: 1 });
        assert_eq!((c.model_id(), c.dims()), ("test:counting", 1));
    }

    #[test]
    fn contents_pass_through_and_never_evict_queries() {
        let c = CachedEmbedder::with_capacity(Counting::default(), 1);
        c.embed_query("q").unwrap();
        assert_eq!(c.embed(&["a", "bb"]).unwrap(), [[1.0], [2.0]]);
        c.embed(&["a", "bb"]).unwrap();
        c.embed(&["stored content"]).unwrap();
        c.embed(&["stored content"]).unwrap();
        assert_eq!(calls(&c), 5, "stored contents are embedded every time");
        c.embed_query("a").unwrap();
        assert_eq!(calls(&c), 6, "a content is not a cached query");
        assert!(c.embed(&[]).unwrap().is_empty());
        assert_eq!(c.stats(), CacheStats { hits: 0, misses: 2 });
        let c = CachedEmbedder::with_capacity(Counting::default(), 1);
        c.embed_query("q").unwrap();
        c.embed(&["one write"]).unwrap();
        c.embed_query("q").unwrap();
        assert_eq!(c.stats(), CacheStats { hits: 1, misses: 1 }, "the write left the query cached");
    }

    #[test]
    fn least_recently_used_entry_is_evicted() {
        let c = CachedEmbedder::with_capacity(Counting::default(), 2);
        c.embed_query("a").unwrap();
        c.embed_query("b").unwrap();
        c.embed_query("a").unwrap(); // hit: "b" is now the least recently used
        c.embed_query("c").unwrap(); // evicts "b"
        assert_eq!(calls(&c), 3);
        c.embed_query("a").unwrap();
        assert_eq!(calls(&c), 3, "a stayed");
        c.embed_query("b").unwrap();
        assert_eq!(calls(&c), 4, "b was evicted");
    }

    #[test]
    fn errors_are_not_cached() {
        let c = CachedEmbedder::new(Counting::default());
        assert!(c.embed_query("fail").is_err());
        assert!(c.embed_query("fail").is_err());
        assert_eq!(calls(&c), 2);
    }

    #[test]
    fn capacity_zero_turns_caching_off() {
        let c = CachedEmbedder::with_capacity(Counting::default(), 0);
        c.embed_query("a").unwrap();
        c.embed_query("a").unwrap();
        assert_eq!(calls(&c), 2);
    }

    #[test]
    fn keys_are_exact_text() {
        let c = CachedEmbedder::new(Counting::default());
        c.embed_query("Query").unwrap();
        c.embed_query("query").unwrap();
        c.embed_query("query ").unwrap();
        assert_eq!(calls(&c), 3);
    }
}
