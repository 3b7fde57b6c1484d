//! Measures load time and embedding throughput of the built-in model, alone and with
//! concurrent callers sharing passes through a [`BatchingEmbedder`]:
//! `cargo run --release -p spine-embed --example throughput`. With `-- queries`, it only
//! embeds 2,000 queries one at a time (a steady load to profile, e.g. under `perf record`);
//! with `-- callers N query|note S`, N threads embed new texts through the batcher for S
//! seconds, as a server's sessions do (texts/s, latency, CPU time per text);
//! with `-- lengths`, it embeds 200 new texts of each length from 1 to 48 words one at a
//! time on the global pool (`RAYON_NUM_THREADS` sets its size) and prints p10/p50/p95;
//! with `-- load`, it loads the model 20 more times and prints the median and the range
//! (load time varies from run to run with the page cache and the other thread's timing).

use std::sync::Arc;
use std::time::Instant;

use spine_embed::{BatchingEmbedder, BuiltinEmbedder, Embedder, default_model_dir};

const THREADS: usize = 8;

/// A ~460-character note, different for each `i`.
fn document(i: usize) -> String {
    let mut s = format!(
        "Note {i}: the deploy of service {} failed on {} because the disk of the build runner \
         was full. The fix is to prune old images before each build and to alert when free \
         space drops under 10 GB; the on-call engineer should check the runner dashboard \
         first, then the retention settings of the image registry mirror, and never delete \
         the cache volume by hand since the next build would re-download everything",
        i % 7,
        ["monday", "tuesday", "the release day", "a weekend"][i % 4]
    );
    s.truncate(460);
    s
}

fn query(i: usize) -> String {
    format!("why did deploy {i} of service {} fail", i % 7)
}

/// Texts per second with `threads` callers each embedding its share one text at a time.
fn concurrent(e: &Arc<dyn Embedder>, texts: &[String], threads: usize) -> f64 {
    let started = Instant::now();
    std::thread::scope(|s| {
        for part in texts.chunks(texts.len().div_ceil(threads)) {
            let e = e.clone();
            s.spawn(move || {
                for t in part {
                    e.embed(&[t]).expect("embed");
                }
            });
        }
    });
    texts.len() as f64 / started.elapsed().as_secs_f64()
}

/// This process's CPU time so far (user + system), in seconds.
fn cpu_seconds() -> f64 {
    // SAFETY: getrusage only writes the struct it is given.
    let mut u: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut u) };
    let s = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    s(u.ru_utime) + s(u.ru_stime)
}

/// `callers` threads, each embedding a new text of `kind` (`query` or `note`) one at a time
/// through the batcher for `seconds`, as the sessions of a server do: texts/s, latency
/// p50/p95 and the CPU time each text took (a pass's parallel overhead shows there).
fn callers_for(e: &Arc<dyn Embedder>, callers: usize, kind: &str, seconds: f64) {
    let (cpu, started) = (cpu_seconds(), Instant::now());
    let until = started + std::time::Duration::from_secs_f64(seconds);
    let mut ms: Vec<f64> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..callers)
            .map(|c| {
                let e = e.clone();
                s.spawn(move || {
                    let mut ms = Vec::new();
                    let mut i = c * 1_000_000;
                    while Instant::now() < until {
                        let text = if kind == "note" { document(i) } else { query(i) };
                        let t = Instant::now();
                        e.embed(&[&text]).expect("embed");
                        ms.push(t.elapsed().as_secs_f64() * 1e3);
                        i += 1;
                    }
                    ms
                })
            })
            .collect();
        handles.into_iter().flat_map(|h| h.join().expect("caller")).collect()
    });
    let (wall, cpu) = (started.elapsed().as_secs_f64(), cpu_seconds() - cpu);
    ms.sort_by(f64::total_cmp);
    let at = |p: f64| ms[((ms.len() - 1) as f64 * p) as usize];
    println!(
        "{callers} callers, {kind}: {:.1}/s, p50 {:.2} ms, p95 {:.2} ms, {:.2} CPU-ms each, {:.1} cores busy",
        ms.len() as f64 / wall,
        at(0.5),
        at(0.95),
        cpu * 1e3 / ms.len() as f64,
        cpu / wall
    );
}

fn one_at_a_time(e: &dyn Embedder, texts: &[String]) -> f64 {
    let started = Instant::now();
    for t in texts {
        e.embed(&[t]).expect("embed");
    }
    started.elapsed().as_secs_f64() * 1e3 / texts.len() as f64
}

/// One text at a time, by length in words: where a query's pass time goes as it grows.
fn lengths(model: &BuiltinEmbedder) {
    let words: Vec<&str> = "why did the deploy of service three fail on the release day when \
        the disk of the build runner was full and the cache volume was deleted by hand so that \
        the next build had to download everything again from the registry mirror which was slow"
        .split_whitespace()
        .collect();
    for n in [1usize, 4, 8, 12, 24, 48] {
        let text = words.iter().cycle().take(n).copied().collect::<Vec<_>>().join(" ");
        for i in 0..20 {
            model.embed(&[&format!("{text} warm {i}")]).expect("embed");
        }
        let mut ms: Vec<f64> = (0..200)
            .map(|i| {
                let started = Instant::now();
                model.embed(&[&format!("{text} {i}")]).expect("embed");
                started.elapsed().as_secs_f64() * 1e3
            })
            .collect();
        ms.sort_by(f64::total_cmp);
        println!("{n:>3} words: p10 {:.2} p50 {:.2} p95 {:.2} ms", ms[20], ms[100], ms[190]);
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    spine_embed::configure_threads();
    let started = Instant::now();
    let model = Arc::new(BuiltinEmbedder::load(&default_model_dir())?);
    println!("load: {:.0} ms", started.elapsed().as_secs_f64() * 1e3);

    if std::env::args().nth(1).as_deref() == Some("load") {
        drop(model);
        let mut ms: Vec<f64> = (0..20)
            .map(|_| {
                let started = Instant::now();
                drop(BuiltinEmbedder::load(&default_model_dir()).expect("load"));
                started.elapsed().as_secs_f64() * 1e3
            })
            .collect();
        ms.sort_by(f64::total_cmp);
        println!("load, 20 times: median {:.0} ms, {:.0}–{:.0} ms", ms[10], ms[0], ms[19]);
        return Ok(());
    }

    if std::env::args().nth(1).as_deref() == Some("lengths") {
        lengths(&model);
        return Ok(());
    }

    if std::env::args().nth(1).as_deref() == Some("callers") {
        let arg = |i: usize, default: &str| std::env::args().nth(i).unwrap_or(default.into());
        let callers: usize = arg(2, "1").parse()?;
        let kind = arg(3, "query");
        let seconds: f64 = arg(4, "3").parse()?;
        let batched: Arc<dyn Embedder> = Arc::new(BatchingEmbedder::new(model.clone()));
        callers_for(&batched, callers, &kind, seconds);
        return Ok(());
    }

    let docs: Vec<String> = (0..96).map(document).collect();
    let queries: Vec<String> = (0..192).map(query).collect();
    model.embed(&[&docs[0], &queries[0]])?; // warm up
    if std::env::args().nth(1).as_deref() == Some("queries") {
        let many: Vec<String> = (0..2000).map(query).collect();
        let mut ms: Vec<f64> = many
            .iter()
            .map(|q| {
                let started = Instant::now();
                model.embed(&[q]).expect("embed");
                started.elapsed().as_secs_f64() * 1e3
            })
            .collect();
        ms.sort_by(f64::total_cmp);
        let at = |p: f64| ms[((ms.len() - 1) as f64 * p) as usize];
        println!(
            "query, one at a time: p50 {:.2} ms, p95 {:.2} ms, p99 {:.2} ms",
            at(0.5),
            at(0.95),
            at(0.99)
        );
        return Ok(());
    }

    println!("query, one at a time: {:.2} ms each", one_at_a_time(&*model, &queries));
    println!("460-char document, one at a time: {:.2} ms each", one_at_a_time(&*model, &docs));
    let refs: Vec<&str> = docs.iter().map(String::as_str).collect();
    let started = Instant::now();
    model.embed(&refs)?;
    println!(
        "460-char documents, one call: {:.1} documents/s",
        docs.len() as f64 / started.elapsed().as_secs_f64()
    );

    let direct: Arc<dyn Embedder> = model.clone();
    let batched: Arc<dyn Embedder> = Arc::new(BatchingEmbedder::new(model.clone()));
    for (name, texts) in [("queries", &queries), ("documents", &docs)] {
        println!(
            "{name}, {THREADS} threads: {:.1}/s each on its own, {:.1}/s sharing passes",
            concurrent(&direct, texts, THREADS),
            concurrent(&batched, texts, THREADS)
        );
    }
    Ok(())
}
