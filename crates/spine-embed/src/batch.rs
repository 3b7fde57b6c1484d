//! Concurrent embedding requests coalesced into shared forward passes.
//!
//! Many sessions store and search at once; each call embeds one or two texts. Run one by
//! one, those calls queue for the CPU anyway, and each small forward pass uses it poorly
//! (a ten-token query is a matrix product with ten rows). [`BatchingEmbedder`] runs one
//! pass at a time (by default; the model's matrix products already use every core); a
//! caller that finds the model free becomes the pass's *leader*: it
//! takes every request waiting at that moment, embeds all their texts in one call of the
//! wrapped embedder, and hands each caller its own vectors. Callers that arrive while the
//! model is busy wait and are served together by the next leader. A lone caller is never
//! delayed: there is no timer, only the queue that forms while the model is busy (the
//! "group commit" of databases).
//!
//! Invariant: each caller gets exactly the vectors the wrapped embedder returns for its
//! texts (the built-in model's vectors do not depend on what they are batched with, see
//! its `batching_and_padding_do_not_change_vectors` test), in order, or an error.

use std::collections::HashMap;
use std::sync::{Condvar, Mutex, MutexGuard};

use crate::{EmbedError, Embedder};

/// Most texts one shared pass takes; requests beyond it wait for the next pass. Also the
/// largest request that is batched at all: bigger ones (imports, reindexing) are already
/// batches and go straight to the wrapped embedder.
pub const MAX_BATCH_TEXTS: usize = 64;

type Outcome = Result<Vec<Vec<f32>>, EmbedError>;

struct Job {
    id: u64,
    texts: Vec<String>,
}

#[derive(Default)]
struct State {
    next_id: u64,
    /// Requests waiting for a pass, oldest first.
    queue: Vec<Job>,
    /// Finished requests not yet collected by their caller.
    done: HashMap<u64, Outcome>,
    /// Passes running now.
    running: usize,
}

/// Wraps an embedder so that concurrent calls share forward passes (module docs).
pub struct BatchingEmbedder<E: Embedder> {
    inner: E,
    /// Most passes run at once.
    passes: usize,
    state: Mutex<State>,
    /// Signalled whenever a pass ends (results are ready and the model is free).
    finished: Condvar,
}

impl<E: Embedder> BatchingEmbedder<E> {
    /// `inner` behind the batcher, one pass at a time: on the 2-core machine of the
    /// README, eight threads storing 460-character notes got 62 documents/s sharing passes
    /// (one at a time or one per core alike) and 41/s each embedding on its own
    /// (`cargo run --release -p spine-embed --example throughput`).
    pub fn new(inner: E) -> Self {
        Self::with_passes(inner, 1)
    }

    /// `inner` behind the batcher, running at most `passes` (at least 1) passes at once.
    pub fn with_passes(inner: E, passes: usize) -> Self {
        BatchingEmbedder {
            inner,
            passes: passes.max(1),
            state: Mutex::default(),
            finished: Condvar::new(),
        }
    }

    /// The wrapped embedder.
    pub fn inner(&self) -> &E {
        &self.inner
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // The state is only changed by short sections that cannot panic halfway (the
        // embedding itself runs unlocked), so a poisoned lock holds consistent data.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Runs one pass over `jobs` (unlocked) and files each job's outcome; `leader` is the id
    /// of the caller running it.
    fn run(&self, leader: u64, jobs: Vec<Job>) {
        /// Files the outcomes, frees the model and wakes the waiters, in one locked section,
        /// also when the wrapped embedder panics: then every other caller of the pass gets
        /// an error instead of waiting forever (the leader itself unwinds).
        struct Release<'a, E: Embedder> {
            batcher: &'a BatchingEmbedder<E>,
            leader: u64,
            ids: Vec<u64>,
            outcomes: Option<Vec<Outcome>>,
        }
        impl<E: Embedder> Drop for Release<'_, E> {
            fn drop(&mut self) {
                let mut state = self.batcher.lock();
                match self.outcomes.take() {
                    Some(outcomes) => state.done.extend(self.ids.iter().copied().zip(outcomes)),
                    None => {
                        for &id in self.ids.iter().filter(|&&id| id != self.leader) {
                            let e = EmbedError::Inference("the embedding pass panicked".into());
                            state.done.insert(id, Err(e));
                        }
                    }
                }
                state.running -= 1;
                drop(state);
                self.batcher.finished.notify_all();
            }
        }
        let ids = jobs.iter().map(|j| j.id).collect();
        let mut release = Release { batcher: self, leader, ids, outcomes: None };

        let texts: Vec<&str> =
            jobs.iter().flat_map(|j| j.texts.iter().map(String::as_str)).collect();
        let outcome = self.inner.embed(&texts);
        if jobs.len() > 1 {
            tracing::trace!(requests = jobs.len(), texts = texts.len(), "shared embedding pass");
        }
        release.outcomes = Some(match outcome {
            Ok(vectors) if vectors.len() == texts.len() => {
                let mut vectors = vectors.into_iter();
                jobs.iter().map(|j| Ok(vectors.by_ref().take(j.texts.len()).collect())).collect()
            }
            Ok(vectors) => {
                let msg = format!("{} vectors for {} texts", vectors.len(), texts.len());
                jobs.iter().map(|_| Err(EmbedError::Inference(msg.clone()))).collect()
            }
            Err(e) => {
                let mut all: Vec<Outcome> = jobs[1..].iter().map(|_| Err(duplicate(&e))).collect();
                all.insert(0, Err(e));
                all
            }
        });
    }
}

/// The same error for every caller of a failed pass.
fn duplicate(e: &EmbedError) -> EmbedError {
    match e {
        EmbedError::ModelMissing { dir, missing } => {
            EmbedError::ModelMissing { dir: dir.clone(), missing: missing.clone() }
        }
        EmbedError::Load(m) => EmbedError::Load(m.clone()),
        EmbedError::Inference(m) => EmbedError::Inference(m.clone()),
        EmbedError::Provider(m) => EmbedError::Provider(m.clone()),
    }
}

impl<E: Embedder> std::fmt::Debug for BatchingEmbedder<E> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BatchingEmbedder").field("model_id", &self.inner.model_id()).finish()
    }
}

impl<E: Embedder> Embedder for BatchingEmbedder<E> {
    fn model_id(&self) -> &str {
        self.inner.model_id()
    }

    fn dims(&self) -> usize {
        self.inner.dims()
    }

    fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, EmbedError> {
        if texts.is_empty() {
            return Ok(Vec::new());
        }
        if texts.len() > MAX_BATCH_TEXTS {
            return self.inner.embed(texts);
        }
        let mut state = self.lock();
        let id = state.next_id;
        state.next_id += 1;
        state.queue.push(Job { id, texts: texts.iter().map(|t| t.to_string()).collect() });
        loop {
            if let Some(outcome) = state.done.remove(&id) {
                return outcome;
            }
            // Wait while every pass is taken, or while ours runs in another leader's pass.
            if state.running >= self.passes || state.queue.is_empty() {
                state = self.finished.wait(state).unwrap_or_else(|p| p.into_inner());
                continue;
            }
            // Lead the next pass: the oldest requests, up to MAX_BATCH_TEXTS texts (ours is
            // among them unless older ones fill the pass; then we lead again after it).
            let mut taken = 0;
            let n = state
                .queue
                .iter()
                .take_while(|j| {
                    taken += j.texts.len();
                    taken <= MAX_BATCH_TEXTS
                })
                .count()
                .max(1);
            let jobs: Vec<Job> = state.queue.drain(..n).collect();
            state.running += 1;
            drop(state);
            self.run(id, jobs);
            state = self.lock();
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::{Arc, Barrier};

    use super::*;

    /// A deterministic embedder: each text's vector is `[len, first byte]`; counts calls and
    /// can be told to fail or panic on a text, and to wait at a barrier inside a pass.
    #[derive(Default)]
    struct Fake {
        calls: AtomicUsize,
        largest: AtomicUsize,
        gate: Option<Arc<Barrier>>,
    }

    impl Embedder for Fake {
        fn model_id(&self) -> &str {
            "fake"
        }
        fn dims(&self) -> usize {
            2
        }
        fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, EmbedError> {
            self.calls.fetch_add(1, Ordering::SeqCst);
            self.largest.fetch_max(texts.len(), Ordering::SeqCst);
            if let Some(gate) = &self.gate
                && texts.contains(&"first")
            {
                gate.wait(); // the pass is running
                gate.wait(); // ... and the others have queued
            }
            if texts.contains(&"fail") {
                return Err(EmbedError::Inference("told to fail".into()));
            }
            if texts.contains(&"panic") {
                panic!("told to panic");
            }
            Ok(texts
                .iter()
                .map(|t| vec![t.len() as f32, *t.as_bytes().first().unwrap_or(&0) as f32])
                .collect())
        }
    }

    fn want(t: &str) -> Vec<f32> {
        vec![t.len() as f32, *t.as_bytes().first().unwrap_or(&0) as f32]
    }

    #[test]
    fn a_lone_caller_gets_its_vectors_in_order() {
        let b = BatchingEmbedder::new(Fake::default());
        let texts = ["a", "bb", "ccc"];
        assert_eq!(b.embed(&texts).unwrap(), texts.map(want).to_vec());
        assert!(b.embed(&[]).unwrap().is_empty());
        assert_eq!(b.embed_query("dddd").unwrap(), want("dddd"));
        assert_eq!(b.inner().calls.load(Ordering::SeqCst), 2);
    }

    /// Requests that arrive while a pass runs share the next pass, and each caller gets
    /// exactly its own vectors.
    #[test]
    fn callers_waiting_on_a_pass_share_the_next_one() {
        let gate = Arc::new(Barrier::new(2));
        let fake = Fake { gate: Some(gate.clone()), ..Fake::default() };
        let b = Arc::new(BatchingEmbedder::with_passes(fake, 1));
        let first = {
            let b = b.clone();
            std::thread::spawn(move || b.embed(&["first"]).unwrap())
        };
        gate.wait(); // the first pass is running
        let waiters: Vec<_> = (0..6)
            .map(|i| {
                let b = b.clone();
                std::thread::spawn(move || {
                    let texts = [format!("t{i}"), format!("text number {i}")];
                    let refs = [texts[0].as_str(), texts[1].as_str()];
                    (b.embed(&refs).unwrap(), refs.map(want).to_vec())
                })
            })
            .collect();
        // Let the waiters queue before the first pass ends.
        while b.lock().queue.len() < 6 {
            std::thread::yield_now();
        }
        gate.wait();
        assert_eq!(first.join().unwrap(), vec![want("first")]);
        for w in waiters {
            let (got, expected) = w.join().unwrap();
            assert_eq!(got, expected);
        }
        // One pass for "first", one shared pass for the six waiters.
        assert_eq!(b.inner().calls.load(Ordering::SeqCst), 2);
        assert_eq!(b.inner().largest.load(Ordering::SeqCst), 12);
    }

    #[test]
    fn large_requests_bypass_the_queue() {
        let b = BatchingEmbedder::new(Fake::default());
        let texts: Vec<String> = (0..MAX_BATCH_TEXTS + 1).map(|i| i.to_string()).collect();
        let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
        assert_eq!(b.embed(&refs).unwrap().len(), MAX_BATCH_TEXTS + 1);
        let refs = &refs[..MAX_BATCH_TEXTS];
        assert_eq!(b.embed(refs).unwrap().len(), MAX_BATCH_TEXTS);
    }

    #[test]
    fn a_failed_or_panicking_pass_fails_its_callers_and_frees_the_model() {
        let b = BatchingEmbedder::new(Fake::default());
        match b.embed(&["fail"]) {
            Err(EmbedError::Inference(m)) => assert_eq!(m, "told to fail"),
            other => panic!("{other:?}"),
        }
        let panicked =
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| b.embed(&["panic"])));
        // The leader itself unwinds; nothing is left running or queued.
        assert!(panicked.is_err());
        let state = b.lock();
        assert!(state.running == 0 && state.queue.is_empty());
        drop(state);
        assert_eq!(b.embed(&["ok"]).unwrap(), vec![want("ok")]);
    }

    #[test]
    fn many_concurrent_callers_each_get_their_own_vectors() {
        for passes in [1, 2, 3] {
            many_callers(passes);
        }
    }

    fn many_callers(passes: usize) {
        let b = Arc::new(BatchingEmbedder::with_passes(Fake::default(), passes));
        let threads: Vec<_> = (0..16)
            .map(|t| {
                let b = b.clone();
                std::thread::spawn(move || {
                    for i in 0..200 {
                        let text = format!("{t}-{i}-{}", "x".repeat(i % 13));
                        assert_eq!(b.embed(&[&text]).unwrap(), vec![want(&text)]);
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        let state = b.lock();
        assert!(state.done.is_empty() && state.queue.is_empty() && state.running == 0);
    }
}
