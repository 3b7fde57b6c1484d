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
    /// The threads each pass could spread over (rayon's count where it ran), in order.
    threads: Mutex<Vec<usize>>,
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
        self.threads.lock().unwrap().push(rayon::current_num_threads());
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
/// idle); each caller still gets its own vectors. The lone pass spreads over every thread,
/// the one beside it runs on its worker's thread alone.
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
    let all = rayon::ThreadPoolBuilder::new().build().unwrap().current_num_threads();
    assert_eq!(*b.inner().threads.lock().unwrap(), [all, 1]);
}

#[test]
fn passes_per_lane_grow_with_the_cores() {
    if std::env::var_os("SPINE_EMBED_PASSES").is_some() {
        return; // set by whoever runs the tests: the formula is not in use
    }
    assert_eq!([0, 1, 2, 16, 64].map(passes_per_lane), [1, 1, 2, 16, 64]);
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
    assert!(state.queues.iter().all(Vec::is_empty));
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
    assert!(state.queues.iter().all(Vec::is_empty));
}
