//! `spine-bench writes N [SECONDS]`: the embedded store's write path under concurrency, with
//! nothing else in the way (no model, no HTTP): N threads each storing one record per call,
//! as N sessions' `store_memory` calls reach the store, and one more thread counting a
//! `get_memory` touch on a stored record in a loop. Prints records/s, each write's and each
//! touch's p50/p95/p99. What it shows is how writers share the one write connection (the
//! writes queued together commit together, `spine-store`'s `sqlite/combine.rs`) and the
//! flushes of the log (`sqlite/durable.rs`).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::Result;
use spine_core::{Memory, Timestamp};
use spine_store::{Embedding, SqliteStore, Store};
use spine_testkit::records::{record, unit_vector};

/// The model's width, so a row weighs what a real one does.
const DIMS: usize = 384;

fn note(thread: usize, i: usize) -> Memory {
    let text = format!("writer {thread} note {i}: the deploy script retries twice before paging");
    record("bench:project:writes", &text, "", 1_800_000_000 + i as i64)
}

fn summary(what: &str, mut ms: Vec<f64>) {
    ms.sort_by(f64::total_cmp);
    if ms.is_empty() {
        println!("{what:<8} none");
        return;
    }
    let p = |q| crate::percentile(&ms, q);
    println!("{what:<8} {:>7} {:>8.2} {:>8.2} {:>8.2}", ms.len(), p(0.50), p(0.95), p(0.99));
}

/// Runs `writers` threads for `seconds` on a fresh store.
pub fn run(writers: usize, seconds: u64) -> Result<()> {
    let dir = tempfile::tempdir()?;
    let store = Arc::new(SqliteStore::open(dir.path())?);
    let vector = unit_vector(7, DIMS);
    let touched = note(usize::MAX, 0);
    store.insert(
        &spine_store::Access::operator(),
        &touched,
        Embedding { model: "bench", vector: &vector },
    )?;
    let stop = AtomicBool::new(false);
    let started = Instant::now();
    let (writes, touches) = std::thread::scope(|s| {
        let handles: Vec<_> = (0..writers)
            .map(|w| {
                let (store, vector, stop) = (&store, &vector, &stop);
                s.spawn(move || -> Result<Vec<f64>> {
                    let mut ms = Vec::new();
                    for i in 0.. {
                        if stop.load(Ordering::Relaxed) {
                            break;
                        }
                        let m = note(w, i);
                        let t = Instant::now();
                        store.insert(
                            &spine_store::Access::operator(),
                            &m,
                            Embedding { model: "bench", vector },
                        )?;
                        ms.push(t.elapsed().as_secs_f64() * 1e3);
                    }
                    Ok(ms)
                })
            })
            .collect();
        let toucher = s.spawn(|| -> Result<Vec<f64>> {
            let mut ms = Vec::new();
            let mut at = 1_800_000_000_000_000;
            while !stop.load(Ordering::Relaxed) {
                at += 1;
                let t = Instant::now();
                store.touch(&touched.id, Timestamp::from_micros(at))?;
                ms.push(t.elapsed().as_secs_f64() * 1e3);
                // A reader's pace, not a spin: one touch a millisecond at the most.
                std::thread::sleep(Duration::from_millis(1));
            }
            Ok(ms)
        });
        std::thread::sleep(Duration::from_secs(seconds));
        stop.store(true, Ordering::Relaxed);
        let mut writes = Vec::new();
        for h in handles {
            writes.extend(h.join().expect("a writer panicked")?);
        }
        Ok::<_, anyhow::Error>((writes, toucher.join().expect("the toucher panicked")?))
    })?;
    let secs = started.elapsed().as_secs_f64();
    println!(
        "spine-bench writes: {writers} writers, {secs:.1} s, {:.0} records/s",
        writes.len() as f64 / secs
    );
    println!("{:<8} {:>7} {:>8} {:>8} {:>8}", "call", "n", "p50 ms", "p95 ms", "p99 ms");
    summary("insert", writes);
    summary("touch", touches);
    Ok(())
}
