//! Concurrent embedding requests coalesced into shared forward passes, on a thread of
//! lower priority.
//!
//! Many sessions store and search at once; each call embeds one or two texts. Run one by
//! one, those calls queue for the CPU anyway, and each small forward pass uses it poorly
//! (a ten-token query is a matrix product with ten rows). [`BatchingEmbedder`] owns one
//! worker thread that runs every pass: it takes every request waiting at that moment,
//! embeds all their texts in one call of the wrapped embedder, and hands each caller its own
//! vectors; requests that arrive during a pass are served together by the next one. A lone
//! caller is never delayed: there is no timer, only the queue that forms while the model is
//! busy (the "group commit" of databases).
//!
//! Short requests go first. A search embeds one short query (~6 ms alone) and a store a
//! note (~25–40 ms at 460 characters); in one queue, under 50 sessions, a query waited for
//! passes full of notes and `search_memory` took 1.6 s at p50 inside the server (README
//! "Performance"). So when requests of at most [`SHORT_CHARS`] characters are waiting, the
//! next pass takes only them, and passes of longer requests hold at most [`PASS_CHARS`]
//! characters: a query waits for at most one bounded pass. Long requests are not starved:
//! after a pass of short ones, if long ones wait, the next pass is theirs (oldest first,
//! short ones that fit included).
//!
//! The worker runs at a lower scheduling priority (nice [`WORKER_NICE`] on Linux), and the
//! model's thread pools it starts inherit it: when the CPU is saturated, calls that embed
//! nothing (`get_memory`, `list_memory`…) are scheduled ahead of the forward passes instead
//! of waiting behind them. On an idle machine priority changes nothing.
//!
//! Invariant: each caller gets exactly the vectors the wrapped embedder returns for its
//! texts (the built-in model's vectors do not depend on what they are batched with, see
//! its `batching_and_padding_do_not_change_vectors` test), in order, or an error.

use std::collections::HashMap;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};

use crate::{EmbedError, Embedder};

/// Most texts one shared pass takes; requests beyond it wait for the next pass. Also the
/// largest request that is batched at all: bigger ones (imports, reindexing) are already
/// batches and go straight to the wrapped embedder, on the caller's thread.
pub const MAX_BATCH_TEXTS: usize = 64;

/// The nice value of the worker thread (Linux; elsewhere the worker keeps the default).
pub const WORKER_NICE: i32 = 10;

/// A request whose texts hold at most this many characters in all is short (a search
/// query, a brief note): it is served ahead of longer ones (module docs).
pub const SHORT_CHARS: usize = 256;

/// The characters of requests a pass takes when it serves long ones (at least one request):
/// two notes of 460 characters, ~50–100 ms of embedding on the README's 2-core machine, the
/// longest a short request waits for before its own pass. Under 50 sessions `search_memory`
/// took p50 201–690 ms inside the server with 1,024 (five runs), 345 ms with 2,048 and 686 ms
/// with 4,096, against 1.6 s before (README "Performance"); notes this long gain little from
/// sharing a pass anyway.
pub const PASS_CHARS: usize = 1024;

type Outcome = Result<Vec<Vec<f32>>, EmbedError>;

struct Job {
    id: u64,
    texts: Vec<String>,
    /// Characters of all its texts.
    chars: usize,
}

impl Job {
    fn is_short(&self) -> bool {
        self.chars <= SHORT_CHARS
    }
}

#[derive(Default)]
struct State {
    next_id: u64,
    /// Requests waiting for a pass, oldest first.
    queue: Vec<Job>,
    /// Finished requests not yet collected by their caller.
    done: HashMap<u64, Outcome>,
    /// The batcher is being dropped: the worker ends once the queue is empty.
    stop: bool,
    /// The last pass took only short requests while long ones waited: the next is theirs.
    skipped_long: bool,
}

impl State {
    /// The requests of the next pass, removed from the queue (which must not be empty):
    /// waiting short requests first, unless the last pass was theirs and passed long ones over;
    /// otherwise the oldest requests up to [`PASS_CHARS`] characters. Either way at most
    /// [`MAX_BATCH_TEXTS`] texts, and at least one request.
    fn next_pass(&mut self) -> Vec<Job> {
        let any_short = self.queue.iter().any(Job::is_short);
        let any_long = self.queue.iter().any(|j| !j.is_short());
        let short_only = any_short && !(self.skipped_long && any_long);
        self.skipped_long = short_only && any_long;
        let (mut texts, mut chars) = (0, 0);
        let mut fits = |j: &Job| {
            let first = texts == 0;
            texts += j.texts.len();
            chars += j.chars;
            first || (texts <= MAX_BATCH_TEXTS && (short_only || chars <= PASS_CHARS))
        };
        if short_only {
            let mut full = false;
            self.queue
                .extract_if(.., |j| {
                    let take = !full && j.is_short() && fits(j);
                    full |= j.is_short() && !take;
                    take
                })
                .collect()
        } else {
            let n = self.queue.iter().take_while(|j| fits(j)).count();
            self.queue.drain(..n).collect()
        }
    }
}

struct Shared<E> {
    inner: E,
    state: Mutex<State>,
    /// Signalled when a request is queued (or on stop): wakes the worker.
    queued: Condvar,
    /// Signalled when a pass ends: wakes its callers.
    finished: Condvar,
}

impl<E> Shared<E> {
    fn lock(&self) -> MutexGuard<'_, State> {
        // The state is only changed by short sections that cannot panic halfway (the
        // embedding itself runs unlocked), so a poisoned lock holds consistent data.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Wraps an embedder so that concurrent calls share forward passes (module docs).
pub struct BatchingEmbedder<E: Embedder + 'static> {
    shared: Arc<Shared<E>>,
    worker: Option<std::thread::JoinHandle<()>>,
}

impl<E: Embedder + 'static> BatchingEmbedder<E> {
    /// `inner` behind the batcher, with its worker thread started. On the 2-core machine of
    /// the README, eight threads storing 460-character notes got 62 documents/s sharing
    /// passes and 41/s each embedding on its own (`cargo run --release -p spine-embed
    /// --example throughput`).
    pub fn new(inner: E) -> Self {
        let shared = Arc::new(Shared {
            inner,
            state: Mutex::default(),
            queued: Condvar::new(),
            finished: Condvar::new(),
        });
        let for_worker = shared.clone();
        let worker = std::thread::Builder::new()
            .name("embed".into())
            .spawn(move || {
                lower_priority();
                work(&for_worker);
            })
            .map_err(|e| tracing::error!(error = %e, "cannot start the embedding thread"))
            .ok();
        BatchingEmbedder { shared, worker }
    }

    /// The wrapped embedder.
    pub fn inner(&self) -> &E {
        &self.shared.inner
    }
}

/// Lowers the calling thread's priority to [`WORKER_NICE`] (Linux: the nice value is per
/// thread, and threads it starts inherit it). Best effort: a failure only costs priority.
pub fn lower_priority() {
    #[cfg(target_os = "linux")]
    {
        // SAFETY: plain system calls on the calling thread's own id.
        let tid = unsafe { libc::gettid() };
        if unsafe { libc::setpriority(libc::PRIO_PROCESS, tid as libc::id_t, WORKER_NICE) } != 0 {
            tracing::debug!("could not lower the embedding thread's priority");
        }
    }
}

/// The worker: one pass at a time over everything queued, until stopped.
fn work<E: Embedder>(shared: &Shared<E>) {
    let mut state = shared.lock();
    loop {
        if state.queue.is_empty() {
            if state.stop {
                return;
            }
            state = shared.queued.wait(state).unwrap_or_else(|p| p.into_inner());
            continue;
        }
        let jobs = state.next_pass();
        drop(state);
        let outcomes = run(&shared.inner, &jobs);
        state = shared.lock();
        state.done.extend(jobs.iter().map(|j| j.id).zip(outcomes));
        shared.finished.notify_all();
    }
}

/// One pass over `jobs`: each job's outcome, in order. A panic of the wrapped embedder fails
/// the pass's callers and leaves the worker running.
fn run<E: Embedder>(inner: &E, jobs: &[Job]) -> Vec<Outcome> {
    let texts: Vec<&str> = jobs.iter().flat_map(|j| j.texts.iter().map(String::as_str)).collect();
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| inner.embed(&texts)))
        .unwrap_or_else(|_| Err(EmbedError::Inference("the embedding pass panicked".into())));
    if jobs.len() > 1 {
        tracing::trace!(requests = jobs.len(), texts = texts.len(), "shared embedding pass");
    }
    match outcome {
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

impl<E: Embedder + 'static> Drop for BatchingEmbedder<E> {
    fn drop(&mut self) {
        self.shared.lock().stop = true;
        self.shared.queued.notify_all();
        if let Some(worker) = self.worker.take() {
            let _ = worker.join();
        }
    }
}

impl<E: Embedder + 'static> std::fmt::Debug for BatchingEmbedder<E> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BatchingEmbedder").field("model_id", &self.inner().model_id()).finish()
    }
}

impl<E: Embedder + 'static> Embedder for BatchingEmbedder<E> {
    fn model_id(&self) -> &str {
        self.inner().model_id()
    }

    fn dims(&self) -> usize {
        self.inner().dims()
    }

    fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, EmbedError> {
        if texts.is_empty() {
            return Ok(Vec::new());
        }
        if texts.len() > MAX_BATCH_TEXTS || self.worker.is_none() {
            return self.inner().embed(texts);
        }
        let shared = &self.shared;
        // Copied and measured before taking the lock the worker and every caller share.
        let chars = texts.iter().map(|t| t.chars().count()).sum();
        let owned: Vec<String> = texts.iter().map(|t| t.to_string()).collect();
        let mut state = shared.lock();
        let id = state.next_id;
        state.next_id += 1;
        state.queue.push(Job { id, texts: owned, chars });
        shared.queued.notify_one();
        loop {
            if let Some(outcome) = state.done.remove(&id) {
                return outcome;
            }
            state = shared.finished.wait(state).unwrap_or_else(|p| p.into_inner());
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
        /// As `gate`, for a pass holding "query one".
        second_gate: Option<Arc<Barrier>>,
        /// The texts of each pass, in order.
        passes: Mutex<Vec<Vec<String>>>,
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
            self.passes.lock().unwrap().push(texts.iter().map(|t| t.to_string()).collect());
            if let Some(gate) = &self.gate
                && texts.contains(&"first")
            {
                gate.wait(); // the pass is running
                gate.wait(); // ... and the others have queued
            }
            if let Some(gate) = &self.second_gate
                && texts.contains(&"query one")
            {
                gate.wait();
                gate.wait();
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
        let b = Arc::new(BatchingEmbedder::new(fake));
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
        while b.shared.lock().queue.len() < 6 {
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

    /// Short requests queued behind long ones get the next pass to themselves; long ones
    /// then share passes of at most PASS_CHARS characters, oldest first, and are not starved:
    /// a short request queued during a short pass that passed them over waits for one of
    /// theirs.
    #[test]
    fn short_requests_go_first_and_long_passes_are_bounded() {
        let (gate, second) = (Arc::new(Barrier::new(2)), Arc::new(Barrier::new(2)));
        let fake =
            Fake { gate: Some(gate.clone()), second_gate: Some(second.clone()), ..Fake::default() };
        let b = Arc::new(BatchingEmbedder::new(fake));
        let first = {
            let b = b.clone();
            std::thread::spawn(move || b.embed(&["first"]).unwrap())
        };
        gate.wait(); // the first pass is running
        // Queued in this order: three notes of 2/5 of PASS_CHARS, two queries between them,
        // and one text exactly at the short limit and one just past it.
        let long = |c: char| c.to_string().repeat(PASS_CHARS * 2 / 5);
        let texts = [
            long('a'),
            "query one".to_string(),
            long('b'),
            "s".repeat(SHORT_CHARS),
            long('c'),
            "query two".to_string(),
            "t".repeat(SHORT_CHARS + 1),
        ];
        let mut callers = Vec::new();
        for (i, text) in texts.iter().enumerate() {
            let (batcher, text) = (b.clone(), text.clone());
            callers.push(std::thread::spawn(move || {
                assert_eq!(batcher.embed(&[&text]).unwrap(), vec![want(&text)]);
            }));
            while b.shared.lock().queue.len() < i + 1 {
                std::thread::yield_now();
            }
        }
        gate.wait();
        first.join().unwrap();
        second.wait(); // the pass of the short ones is running: queue another
        let late = {
            let batcher = b.clone();
            std::thread::spawn(move || batcher.embed(&["query three"]).unwrap())
        };
        while b.shared.lock().queue.iter().all(|j| j.texts != ["query three"]) {
            std::thread::yield_now();
        }
        second.wait();
        assert_eq!(late.join().unwrap(), vec![want("query three")]);
        for c in callers {
            c.join().unwrap();
        }
        let passes = b.inner().passes.lock().unwrap().clone();
        let pass = |i: &[usize]| i.iter().map(|&i| texts[i].clone()).collect::<Vec<_>>();
        assert_eq!(passes[0], ["first"]);
        assert_eq!(
            passes[1..],
            [
                pass(&[1, 3, 5]),                // the short ones, ahead of older long ones
                pass(&[0, 2]),                   // 4/5 of PASS_CHARS: a third note would pass it
                vec!["query three".to_string()], // short again, having waited one pass
                pass(&[4, 6]),                   // the rest
            ]
        );
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
        match b.embed(&["panic"]) {
            Err(EmbedError::Inference(m)) => assert_eq!(m, "the embedding pass panicked"),
            other => panic!("{other:?}"),
        }
        // The worker survived and nothing is left behind.
        assert_eq!(b.embed(&["ok"]).unwrap(), vec![want("ok")]);
        let state = b.shared.lock();
        assert!(state.queue.is_empty() && state.done.is_empty());
    }

    /// The passes run on the worker thread, at the lower priority (Linux), never on the
    /// caller's; dropping the batcher ends the worker.
    #[test]
    fn passes_run_on_the_worker_at_lower_priority() {
        #[derive(Default)]
        struct Where(Mutex<Vec<(String, i32)>>);
        impl Embedder for Where {
            fn model_id(&self) -> &str {
                "where"
            }
            fn dims(&self) -> usize {
                1
            }
            fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, EmbedError> {
                let name = std::thread::current().name().unwrap_or("").to_owned();
                // SAFETY: reads the calling thread's own nice value.
                #[cfg(target_os = "linux")]
                let nice = unsafe { libc::getpriority(libc::PRIO_PROCESS, libc::gettid() as _) };
                #[cfg(not(target_os = "linux"))]
                let nice = WORKER_NICE;
                self.0.lock().unwrap().push((name, nice));
                Ok(texts.iter().map(|_| vec![1.0]).collect())
            }
        }
        let b = BatchingEmbedder::new(Where::default());
        b.embed(&["a"]).unwrap();
        b.embed_query("b").unwrap();
        assert_eq!(*b.inner().0.lock().unwrap(), vec![("embed".to_owned(), WORKER_NICE); 2]);
        drop(b); // joins the worker: a hang here fails the test run
    }

    #[test]
    fn many_concurrent_callers_each_get_their_own_vectors() {
        let b = Arc::new(BatchingEmbedder::new(Fake::default()));
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
        let state = b.shared.lock();
        assert!(state.done.is_empty() && state.queue.is_empty());
    }
}
