//! Concurrent embedding requests coalesced into shared forward passes, in two lanes: short
//! requests (search queries) beside and ahead of long ones (notes), both at a lowered
//! priority.
//!
//! Many sessions store and search at once; each call embeds one or two texts. Run one by
//! one, those calls queue for the CPU anyway, and each small forward pass uses it poorly
//! (a ten-token query is a matrix product with ten rows). [`BatchingEmbedder`] runs passes
//! on worker threads: a worker takes every request of its lane waiting at that moment,
//! embeds all their texts in one call of the wrapped embedder, and hands each caller its own
//! vectors; requests that arrive during a pass are served together by the next one. A lone
//! caller is never delayed: there is no timer, only the queue that forms while the model is
//! busy (the "group commit" of databases).
//!
//! Two lanes, each with its worker and its own thread pool for the model's parallel work
//! (Linux nice values; elsewhere the threads keep the default priority):
//! - **short** requests (at most [`SHORT_CHARS`] characters in all: a search query, a brief
//!   note) at nice [`QUERY_NICE`];
//! - **long** requests (notes, content updates) at nice [`WORKER_NICE`], in passes of at
//!   most [`PASS_CHARS`] characters, oldest first.
//!
//! A search embeds one short query (~6 ms alone) and a store a note (~25–45 ms at 460
//! characters). In one queue, under 50 sessions, a query waited for passes full of notes:
//! `search_memory` took 1.6 s at p50 inside the server; with short requests served first
//! but still one pass at a time, it waited for the note pass running when it arrived and
//! took 180–690 ms (README "Performance"). With the lanes, a query never waits for a note:
//! its pass runs beside the note pass, and the kernel's scheduler gives the query's threads
//! three quarters of the cores while both run (nice 5 against nice 10: weights 335 and 110);
//! under that load `search_memory` took 33–47 ms at p50 inside the server (five runs). Calls that embed
//! nothing (`get_memory`, `list_memory`…) and the machine's other processes (nice 0, weight
//! 1,024) stay ahead of both lanes: at nice 0 the query lane took the CPU from the load
//! generator beside it, whose calls then waited 3–6 times longer. On an idle machine
//! priority changes nothing, and a lone request of either kind has the machine's cores for
//! its pass.
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

/// The nice value of the long lane's threads (Linux; elsewhere they keep the default).
pub const WORKER_NICE: i32 = 10;

/// The nice value of the short lane's threads: ahead of the long lane's, behind calls that
/// embed nothing and the machine's other work (module docs).
pub const QUERY_NICE: i32 = 5;

/// A request whose texts hold at most this many characters in all is short (a search
/// query, a brief note): it goes to the short lane (module docs).
pub const SHORT_CHARS: usize = 256;

/// The characters of requests a long pass takes (at least one request): two notes of 460
/// characters, ~50–100 ms of embedding on the README's 2-core machine. A store waits for the
/// passes ahead of it and then for its own; notes this long gain little from sharing a pass
/// (padding to the longest text of the pass costs what the larger products gain).
pub const PASS_CHARS: usize = 1024;

type Outcome = Result<Vec<Vec<f32>>, EmbedError>;

struct Job {
    id: u64,
    texts: Vec<String>,
    /// Characters of all its texts.
    chars: usize,
}

/// The two lanes, as indices into [`State::queues`] and [`Shared::queued`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Lane {
    Short = 0,
    Long = 1,
}

impl Lane {
    fn of(chars: usize) -> Lane {
        if chars <= SHORT_CHARS { Lane::Short } else { Lane::Long }
    }

    /// The name of the lane's worker; its pool's threads are `{name}-{i}`.
    fn name(self) -> &'static str {
        match self {
            Lane::Short => "embed-query",
            Lane::Long => "embed",
        }
    }

    /// The nice value of the lane's threads.
    fn nice(self) -> i32 {
        match self {
            Lane::Short => QUERY_NICE,
            Lane::Long => WORKER_NICE,
        }
    }
}

#[derive(Default)]
struct State {
    next_id: u64,
    /// Requests waiting for a pass, per lane, oldest first.
    queues: [Vec<Job>; 2],
    /// Finished requests not yet collected by their caller.
    done: HashMap<u64, Outcome>,
    /// The batcher is being dropped: each worker ends once its queue is empty.
    stop: bool,
}

impl State {
    /// The requests of `lane`'s next pass, removed from its queue (which must not be empty):
    /// the oldest requests up to [`MAX_BATCH_TEXTS`] texts and, in the long lane,
    /// [`PASS_CHARS`] characters; at least one request.
    fn next_pass(&mut self, lane: Lane) -> Vec<Job> {
        let (mut texts, mut chars) = (0, 0);
        let queue = &mut self.queues[lane as usize];
        let n = queue
            .iter()
            .take_while(|j| {
                let first = texts == 0;
                texts += j.texts.len();
                chars += j.chars;
                first || (texts <= MAX_BATCH_TEXTS && (lane == Lane::Short || chars <= PASS_CHARS))
            })
            .count();
        queue.drain(..n).collect()
    }
}

struct Shared<E> {
    inner: E,
    state: Mutex<State>,
    /// Per lane, signalled when a request is queued (or on stop): wakes its worker.
    queued: [Condvar; 2],
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
    /// The workers of the two lanes; empty if they could not be started (then every call
    /// runs on its caller's thread).
    workers: Vec<std::thread::JoinHandle<()>>,
}

/// How many passes of one lane may run at once on a machine of `threads` threads: one per
/// four threads (at most eight), so that on many cores several small passes share the
/// lane's pool instead of one pass leaving most of it idle; `SPINE_EMBED_PASSES` overrides.
pub fn passes_per_lane(threads: usize) -> usize {
    let set = std::env::var("SPINE_EMBED_PASSES").ok().and_then(|v| v.trim().parse().ok());
    match set {
        Some(n) if n > 0 => n,
        _ => (threads / 4).clamp(1, 8),
    }
}

impl<E: Embedder + 'static> BatchingEmbedder<E> {
    /// `inner` behind the batcher, with the workers of both lanes started. On the 2-core
    /// machine of the README, eight threads storing 460-character notes got 62 documents/s
    /// sharing passes and 41/s each embedding on its own (`cargo run --release -p
    /// spine-embed --example throughput`).
    pub fn new(inner: E) -> Self {
        Self::with_passes(inner, None)
    }

    /// [`BatchingEmbedder::new`] with `passes` passes per lane at most at once (else
    /// [`passes_per_lane`]'s number).
    pub fn with_passes(inner: E, passes: Option<usize>) -> Self {
        let shared = Arc::new(Shared {
            inner,
            state: Mutex::default(),
            queued: [Condvar::new(), Condvar::new()],
            finished: Condvar::new(),
        });
        let mut workers = Vec::new();
        for lane in [Lane::Short, Lane::Long] {
            match start(&shared, lane, passes) {
                Ok(started) => workers.extend(started),
                Err(e) => {
                    tracing::error!(error = %e, lane = lane.name(), "cannot start the embedding threads");
                    // Whatever started ends: the calls then run on their callers' threads.
                    shared.lock().stop = true;
                    shared.queued.iter().for_each(Condvar::notify_all);
                    workers.drain(..).for_each(|w| drop(w.join()));
                    break;
                }
            }
        }
        BatchingEmbedder { shared, workers }
    }

    /// The wrapped embedder.
    pub fn inner(&self) -> &E {
        &self.shared.inner
    }
}

/// Starts `lane`'s workers (`passes` of them, else [`passes_per_lane`]'s number) with the
/// thread pool they share (at the lane's priority). Fails only if no worker could start;
/// if some could, the lane runs with fewer.
fn start<E: Embedder + 'static>(
    shared: &Arc<Shared<E>>,
    lane: Lane,
    passes: Option<usize>,
) -> std::io::Result<Vec<std::thread::JoinHandle<()>>> {
    // As many threads as the global pool (RAYON_NUM_THREADS, else one per CPU). The
    // lane's concurrent passes share them: rayon's work stealing gives a lone pass every
    // thread and splits them between passes running at once, so the lane never runs more
    // compute threads than the machine has.
    let pool = Arc::new(
        rayon::ThreadPoolBuilder::new()
            .thread_name(move |i| format!("{}-{i}", lane.name()))
            .start_handler(move |_| set_nice(lane.nice()))
            .build()
            .map_err(std::io::Error::other)?,
    );
    let passes = passes.unwrap_or_else(|| passes_per_lane(pool.current_num_threads())).max(1);
    let mut workers = Vec::with_capacity(passes);
    for w in 0..passes {
        let (shared, pool) = (shared.clone(), pool.clone());
        let name = if w == 0 { lane.name().to_owned() } else { format!("{}-pass{w}", lane.name()) };
        let spawned = std::thread::Builder::new().name(name).spawn(move || {
            set_nice(lane.nice());
            work(&shared, lane, &pool);
        });
        match spawned {
            Ok(worker) => workers.push(worker),
            // Fewer concurrent passes, but the lane works.
            Err(e) if !workers.is_empty() => {
                tracing::warn!(error = %e, lane = lane.name(), passes = workers.len(), "fewer embedding passes at once");
                break;
            }
            Err(e) => return Err(e),
        }
    }
    Ok(workers)
}

/// Lowers the calling thread's priority to [`WORKER_NICE`] (Linux: the nice value is per
/// thread, and threads it starts inherit it). Best effort: a failure only costs priority.
pub fn lower_priority() {
    set_nice(WORKER_NICE);
}

/// Sets the calling thread's nice value to `nice`, or leaves it if it is already at least
/// that (a thread is never given a higher priority than it had). Linux only; best effort.
fn set_nice(nice: i32) {
    #[cfg(target_os = "linux")]
    {
        // SAFETY: plain system calls on the calling thread's own id.
        let tid = unsafe { libc::gettid() } as libc::id_t;
        let current = unsafe { libc::getpriority(libc::PRIO_PROCESS, tid) };
        if current < nice && unsafe { libc::setpriority(libc::PRIO_PROCESS, tid, nice) } != 0 {
            tracing::debug!(nice, "could not lower the embedding thread's priority");
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = nice;
}

/// One of a lane's workers: one pass at a time over what its lane has queued, until
/// stopped; the lane's other workers run theirs meanwhile. The passes run on `pool`, so the
/// model's parallel work stays on the lane's threads.
fn work<E: Embedder>(shared: &Shared<E>, lane: Lane, pool: &rayon::ThreadPool) {
    let mut state = shared.lock();
    loop {
        if state.queues[lane as usize].is_empty() {
            if state.stop {
                return;
            }
            state = shared.queued[lane as usize].wait(state).unwrap_or_else(|p| p.into_inner());
            continue;
        }
        let jobs = state.next_pass(lane);
        if !state.queues[lane as usize].is_empty() {
            // More than this pass is waiting: an idle worker of the lane takes the next.
            shared.queued[lane as usize].notify_one();
        }
        drop(state);
        let outcomes = pool.install(|| run(&shared.inner, &jobs));
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
        self.shared.queued.iter().for_each(Condvar::notify_all);
        for worker in self.workers.drain(..) {
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
        if texts.len() > MAX_BATCH_TEXTS || self.workers.is_empty() {
            return self.inner().embed(texts);
        }
        let shared = &self.shared;
        // Copied and measured before taking the lock the worker and every caller share.
        let chars = texts.iter().map(|t| t.chars().count()).sum();
        let owned: Vec<String> = texts.iter().map(|t| t.to_string()).collect();
        let lane = Lane::of(chars) as usize;
        let mut state = shared.lock();
        let id = state.next_id;
        state.next_id += 1;
        state.queues[lane].push(Job { id, texts: owned, chars });
        shared.queued[lane].notify_one();
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
        /// Waited at twice by a pass holding a text that starts with "first".
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
                && texts.iter().any(|t| t.starts_with("first"))
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
        let b = Arc::new(BatchingEmbedder::with_passes(fake, Some(1)));
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
        while b.shared.lock().queues[Lane::Short as usize].len() < 6 {
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

    /// A query is embedded while a note's pass runs, without waiting for it; requests of a
    /// lane queued during its pass share the next one, and long passes hold at most
    /// PASS_CHARS characters, oldest first.
    #[test]
    fn queries_do_not_wait_for_notes_and_long_passes_are_bounded() {
        let (gate, second) = (Arc::new(Barrier::new(2)), Arc::new(Barrier::new(2)));
        let fake =
            Fake { gate: Some(gate.clone()), second_gate: Some(second.clone()), ..Fake::default() };
        let b = Arc::new(BatchingEmbedder::with_passes(fake, Some(1)));
        let call = |text: String| {
            let b = b.clone();
            std::thread::spawn(move || assert_eq!(b.embed(&[&text]).unwrap(), vec![want(&text)]))
        };
        let queued = |lane: Lane, n: usize| {
            while b.shared.lock().queues[lane as usize].len() < n {
                std::thread::yield_now();
            }
        };
        let first = format!("first {}", "n".repeat(PASS_CHARS / 2));
        let note = call(first.clone());
        gate.wait(); // the note's pass is running
        let query = call("query one".to_string());
        // ... and beside it, the query's (in one queue it would wait: fail, do not hang).
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        while b.inner().passes.lock().unwrap().len() < 2 {
            assert!(std::time::Instant::now() < deadline, "the query waited for the note");
            std::thread::yield_now();
        }
        second.wait();
        // Queued meanwhile: three notes of 2/5 of PASS_CHARS and one just past the short
        // limit; one text exactly at the short limit and another query.
        let long = |c: char| c.to_string().repeat(PASS_CHARS * 2 / 5);
        let texts = [long('a'), long('b'), long('c'), "t".repeat(SHORT_CHARS + 1)];
        // One at a time, so that each queue's order is known.
        let mut notes = Vec::new();
        for (i, text) in texts.iter().enumerate() {
            notes.push(call(text.clone()));
            queued(Lane::Long, i + 1);
        }
        let shorts = ["s".repeat(SHORT_CHARS), "query two".to_string()];
        let (tx, rx) = std::sync::mpsc::channel();
        for (i, text) in shorts.iter().enumerate() {
            let (b, tx, text) = (b.clone(), tx.clone(), text.clone());
            std::thread::spawn(move || tx.send(b.embed(&[&text]).unwrap() == vec![want(&text)]));
            queued(Lane::Short, i + 1);
        }
        second.wait();
        query.join().unwrap();
        // Every query is answered while the note's pass still holds the gate: in one queue
        // they would wait for it (and this would time out instead of deadlocking).
        for _ in &shorts {
            let got = rx.recv_timeout(std::time::Duration::from_secs(60));
            assert_eq!(got, Ok(true), "a short request waited for the long pass");
        }
        gate.wait();
        note.join().unwrap();
        notes.into_iter().for_each(|n| n.join().unwrap());
        let passes = b.inner().passes.lock().unwrap().clone();
        let pass = |t: &[&String]| t.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(
            passes,
            [
                vec![first],
                vec!["query one".to_string()],
                pass(&[&shorts[0], &shorts[1]]), // queued during the query's pass: one pass
                pass(&[&texts[0], &texts[1]]),   // 4/5 of PASS_CHARS: a third note would pass it
                pass(&[&texts[2], &texts[3]]),   // the rest
            ]
        );
    }

    /// With two passes per lane, a note arriving while another note's pass runs gets a pass
    /// of its own at once, beside the first (on many cores one pass leaves most of them
    /// idle); each caller still gets its own vectors.
    #[test]
    fn a_lane_runs_passes_side_by_side() {
        let gate = Arc::new(Barrier::new(2));
        let b = Arc::new(BatchingEmbedder::with_passes(
            Fake { gate: Some(gate.clone()), ..Fake::default() },
            Some(2),
        ));
        let call = |text: String| {
            let b = b.clone();
            std::thread::spawn(move || assert_eq!(b.embed(&[&text]).unwrap(), vec![want(&text)]))
        };
        let first = call(format!("first {}", "n".repeat(SHORT_CHARS)));
        gate.wait(); // the first note's pass is running
        let second = call("m".repeat(SHORT_CHARS + 1));
        // The second note's pass starts while the first still holds the gate (with one pass
        // at a time this would wait for it: fail, do not hang).
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        while b.inner().passes.lock().unwrap().len() < 2 {
            assert!(std::time::Instant::now() < deadline, "the second note waited for the first");
            std::thread::yield_now();
        }
        second.join().unwrap();
        gate.wait();
        first.join().unwrap();
        assert_eq!(b.inner().calls.load(Ordering::SeqCst), 2);
        assert_eq!(b.workers.len(), 4, "two workers per lane");
    }

    #[test]
    fn passes_per_lane_grow_with_the_cores() {
        if std::env::var_os("SPINE_EMBED_PASSES").is_some() {
            return; // set by whoever runs the tests: the formula is not in use
        }
        assert_eq!([1, 2, 4, 7, 8, 16, 32, 64].map(passes_per_lane), [1, 1, 1, 1, 2, 4, 8, 8]);
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
        assert!(state.queues.iter().all(Vec::is_empty) && state.done.is_empty());
    }

    /// Each lane's passes run on its own pool's threads, never the caller's: short ones at
    /// QUERY_NICE, long ones at WORKER_NICE (Linux; never above the priority the process
    /// had); dropping the batcher ends the workers.
    #[test]
    fn each_lane_runs_on_its_own_threads_at_its_priority() {
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
                self.0.lock().unwrap().push((name, nice()));
                Ok(texts.iter().map(|_| vec![1.0]).collect())
            }
        }
        fn nice() -> i32 {
            // SAFETY: reads the calling thread's own nice value.
            #[cfg(target_os = "linux")]
            return unsafe { libc::getpriority(libc::PRIO_PROCESS, libc::gettid() as _) };
            #[cfg(not(target_os = "linux"))]
            return 0;
        }
        let b = BatchingEmbedder::new(Where::default());
        b.embed(&["a"]).unwrap();
        b.embed_query("b").unwrap();
        b.embed(&["c".repeat(SHORT_CHARS + 1).as_str()]).unwrap();
        let seen = b.inner().0.lock().unwrap().clone();
        let at = |n: i32| if cfg!(target_os = "linux") { n.max(nice()) } else { nice() };
        assert_eq!(seen.len(), 3);
        for (name, priority) in &seen[..2] {
            assert!(name.starts_with("embed-query-"), "{name}");
            assert_eq!(*priority, at(QUERY_NICE));
        }
        let (name, priority) = &seen[2];
        assert!(name.starts_with("embed-") && !name.starts_with("embed-query"), "{name}");
        assert_eq!(*priority, at(WORKER_NICE));
        drop(b); // joins the workers: a hang here fails the test run
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
        assert!(state.done.is_empty() && state.queues.iter().all(Vec::is_empty));
    }
}
