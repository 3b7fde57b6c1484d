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
//! Two lanes, each with one worker per core and a pool of every core for the model's
//! parallel work (Linux nice values; elsewhere the threads keep the default priority):
//! - **short** requests (at most [`SHORT_CHARS`] characters in all: a search query, a brief
//!   note) at nice [`QUERY_NICE`];
//! - **long** requests (notes, content updates) at nice [`WORKER_NICE`], in passes of at
//!   most [`PASS_CHARS`] characters, oldest first.
//!
//! A search embeds one short query and a store a note, several times longer to embed. In
//! one queue, under 50 sessions, a query waited for passes full of notes; with short
//! requests served first but still one pass at a time, it waited for the note pass running
//! when it arrived (docs/performance.md, "Queries before notes"). With the lanes, a query
//! never waits for a note: its pass runs beside the note pass, and the kernel's scheduler
//! gives the query's threads three quarters of the cores while both run (nice 5 against
//! nice 10: weights 335 and 110); under that load `search_memory`'s p50 inside the server
//! fell several times over (same section). Calls that embed nothing (`get_memory`,
//! `list_memory`…) and the machine's other processes (nice 0, weight 1,024) stay ahead of
//! both lanes: at nice 0 the query lane took the CPU from the load generator beside it,
//! whose calls then waited several times longer. On an idle machine priority changes
//! nothing, and a lone request of either kind has the machine's cores for its pass.
//!
//! Many cores: a pass that runs alone (no other pass running, none able to start) spreads
//! over the lane's pool of every core, for the lowest latency; passes that run side by side
//! each run on their worker's one thread. A query's pass is a dozen rows per product:
//! spread over 16 threads it woke all of them for every small step. On a 16-core Xeon one
//! thread per pass gave 50 callers more queries a second at less CPU each, and 32 callers
//! storing notes more notes a second, with a lone caller as fast as before (`throughput`
//! example, `callers`; docs/performance.md, "Cores").
//!
//! Invariant: each caller gets exactly the vectors the wrapped embedder returns for its
//! texts (the built-in model's vectors do not depend on what they are batched with, see
//! its `batching_and_padding_do_not_change_vectors` test), in order, or an error.

use std::sync::mpsc::{SyncSender, sync_channel};
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
/// characters (their embedding time: docs/performance.md, "Queries before notes"). A store
/// waits for the
/// passes ahead of it and then for its own; notes this long gain little from sharing a pass
/// (padding to the longest text of the pass costs what the larger products gain).
pub const PASS_CHARS: usize = 1024;

type Outcome = Result<Vec<Vec<f32>>, EmbedError>;

struct Job {
    texts: Vec<String>,
    /// Characters of all its texts.
    chars: usize,
    /// Where its caller waits for the outcome: one channel per request, so that a finished
    /// pass wakes only its own callers (with one condition variable for all, every pass
    /// woke every waiting caller, 50 of them under 50 sessions, to look for its result).
    reply: SyncSender<Outcome>,
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
    /// Requests waiting for a pass, per lane, oldest first.
    queues: [Vec<Job>; 2],
    /// The batcher is being dropped: each worker ends once its queue is empty.
    stop: bool,
    /// Per lane: its workers, and those of them running a pass now.
    workers: [usize; 2],
    busy: [usize; 2],
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

    /// Whether the one pass running now (just taken) will stay alone: no other pass runs,
    /// and none can start beside it (nothing queued, or no idle worker in that lane).
    fn runs_alone(&self) -> bool {
        let can_start = |l: usize| !self.queues[l].is_empty() && self.busy[l] < self.workers[l];
        self.busy.iter().sum::<usize>() == 1 && !can_start(0) && !can_start(1)
    }
}

struct Shared<E> {
    inner: E,
    state: Mutex<State>,
    /// Per lane, signalled when a request is queued (or on stop): wakes its worker.
    queued: [Condvar; 2],
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
/// thread (side by side, each runs on one thread; module docs); `SPINE_EMBED_PASSES`
/// overrides.
pub fn passes_per_lane(threads: usize) -> usize {
    let set = std::env::var("SPINE_EMBED_PASSES").ok().and_then(|v| v.trim().parse().ok());
    match set {
        Some(n) if n > 0 => n,
        _ => threads.max(1),
    }
}

impl<E: Embedder + 'static> BatchingEmbedder<E> {
    /// `inner` behind the batcher, with the workers of both lanes started. On the 2-core
    /// machine of the README, eight threads storing 460-character notes got more documents a
    /// second sharing passes than each embedding on its own (`cargo run --release -p
    /// spine-embed --example throughput`; docs/performance.md, "Cores").
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

/// Starts `lane`'s workers (`passes` of them, else [`passes_per_lane`]'s number) and the
/// machine-wide pool they share for passes that run alone, all at the lane's priority.
/// Fails only if no worker could start; if some could, the lane runs with fewer.
fn start<E: Embedder + 'static>(
    shared: &Arc<Shared<E>>,
    lane: Lane,
    passes: Option<usize>,
) -> std::io::Result<Vec<std::thread::JoinHandle<()>>> {
    // As many threads as the global pool (RAYON_NUM_THREADS, else one per CPU).
    let wide = Arc::new(
        rayon::ThreadPoolBuilder::new()
            .thread_name(move |i| format!("{}-wide-{i}", lane.name()))
            .start_handler(move |_| set_nice(lane.nice()))
            .build()
            .map_err(std::io::Error::other)?,
    );
    let passes = passes.unwrap_or_else(|| passes_per_lane(wide.current_num_threads())).max(1);
    shared.lock().workers[lane as usize] = passes;
    let mut workers = Vec::with_capacity(passes);
    for w in 0..passes {
        let (lane_shared, wide) = (shared.clone(), wide.clone());
        let name = if w == 0 { lane.name().to_owned() } else { format!("{}-{w}", lane.name()) };
        let spawned = std::thread::Builder::new().name(name).spawn(move || {
            set_nice(lane.nice());
            // The worker is the one thread of a pool of its own, so that a pass it runs
            // itself stays on it: the model's parallel steps and rten-gemm see one thread
            // and run inline, without waking anyone.
            let own = rayon::ThreadPoolBuilder::new().num_threads(1).use_current_thread().build();
            if let Err(e) = &own {
                tracing::warn!(error = %e, lane = lane.name(), "embedding passes share one pool");
            }
            work(&lane_shared, lane, &wide, own.is_ok());
        });
        match spawned {
            Ok(worker) => workers.push(worker),
            // Fewer concurrent passes, but the lane works.
            Err(e) if !workers.is_empty() => {
                shared.lock().workers[lane as usize] = workers.len();
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
/// stopped; the lane's other workers run theirs meanwhile. A pass that starts while no other
/// runs and nothing else waits runs on `wide`, every thread of the machine, for the lowest
/// latency; any other runs on the worker's own thread (`narrow`, else on `wide` too), so
/// that passes side by side each keep a core busy instead of all of them waking every
/// thread for each small step (module docs).
fn work<E: Embedder>(shared: &Shared<E>, lane: Lane, wide: &rayon::ThreadPool, narrow: bool) {
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
        state.busy[lane as usize] += 1;
        let alone = state.runs_alone();
        drop(state);
        let outcomes = if alone || !narrow {
            wide.install(|| run(&shared.inner, &jobs))
        } else {
            run(&shared.inner, &jobs)
        };
        // The pass counts as done before its callers are answered, so a pass that starts
        // meanwhile sees it finished and may take every thread; the lock is taken again
        // after, not held while answering.
        state = shared.lock();
        state.busy[lane as usize] -= 1;
        drop(state);
        for (job, outcome) in jobs.iter().zip(outcomes) {
            // A caller that is gone (it cannot be: it waits until answered) needs nothing.
            let _ = job.reply.send(outcome);
        }
        state = shared.lock();
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

    fn ready(&self) -> Result<(), String> {
        self.inner().ready()
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
        let (reply, outcome) = sync_channel(1);
        let mut state = shared.lock();
        state.queues[lane].push(Job { texts: owned, chars, reply });
        shared.queued[lane].notify_one();
        drop(state);
        // Every queued request is answered (workers end only once their queue is empty);
        // a worker that died without answering drops the sender.
        outcome.recv().unwrap_or_else(|_| {
            Err(EmbedError::Inference("the embedding worker stopped before answering".into()))
        })
    }
}

#[cfg(test)]
mod tests;
