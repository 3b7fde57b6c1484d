//! `spine-bench soak --minutes N`: a server under a working day's load for N minutes, one
//! row a window (a minute by default), and a verdict.
//!
//! `--sessions` kept-alive MCP sessions call tools back to back on the working-agent mix
//! ([`super::TOOLS`]) over a store of at most `--records` of their records (once it is
//! full, each store is matched by a delete of the oldest: the store's size holds, so what
//! grows after that is not data), `--writers` more store new records and delete them again
//! without pause (the writer storm),
//! `spine export` of every scope runs beside them every `--export-every` minutes against the
//! same data directory, and the checkpoint thread copies the log as it grows. Each window
//! prints calls/s, p50 and p99 per tool, failed calls, and the server's resident memory, open
//! files and threads from `/proc`. The run fails (exit 1) when any call or export failed,
//! when the server's anonymous resident memory (its own, not the data file's pages it maps)
//! at the end is more than [`RSS_GROWTH`] above what it was after the warm-up, or when the last window's p99 over every call is more than [`P99_GROWTH`] above
//! the warm-up window's and more than [`P99_SLACK_MS`] higher (a few milliseconds either way
//! on a quiet store is noise, not a leak).
//!
//! The warm-up window is the first that ends at or after `--warmup` minutes (5 by default)
//! and starts with the store full (`--records`); a run with no window after it (CI's two
//! minutes) judges failures only: its caches (records' terms, SQLite's pages) are still
//! filling, which is not a leak. Neither is a store that grows (`--records 0`): growth is
//! then judged only from a full store, never.

use std::io::Write as _;

use super::*;

/// Resident memory may grow this much after the warm-up (10%).
pub(crate) const RSS_GROWTH: f64 = 0.10;
/// The p99 of every call may grow this much over the warm-up window's (50%) ...
pub(crate) const P99_GROWTH: f64 = 0.50;
/// ... or by at most this much in absolute terms.
pub(crate) const P99_SLACK_MS: f64 = 25.0;

/// `spine-bench soak`: a server under steady load, window by window.
#[derive(Debug, Parser)]
#[command(name = "spine-bench soak")]
struct Args {
    /// How long to run.
    #[arg(long, default_value_t = 60.0)]
    minutes: f64,
    /// The `spine` binary to start on a fresh data directory [default: target/release/spine].
    #[arg(long)]
    binary: Option<PathBuf>,
    /// Sessions on the working-agent mix.
    #[arg(long, default_value_t = 50)]
    sessions: usize,
    /// Sessions that store and delete records without pause (the writer storm).
    #[arg(long, default_value_t = 4)]
    writers: usize,
    /// The most records the mix keeps: once it holds this many, each store is followed by
    /// a delete of its oldest record (0: no limit, the store grows and growth is not judged).
    #[arg(long, default_value_t = 5000)]
    records: usize,
    /// Minutes between two runs of `spine export` beside the load (0: none).
    #[arg(long, default_value_t = 3.0)]
    export_every: f64,
    /// Seconds a row covers.
    #[arg(long, default_value_t = 60.0)]
    window: f64,
    /// Minutes after which memory and p99 are taken as the baseline.
    #[arg(long, default_value_t = 5.0)]
    warmup: f64,
    /// Which texts to store and search for.
    #[arg(long, value_enum, default_value_t = Texts::Code)]
    corpus: Texts,
    /// Seed of the sessions' choices.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// One JSON line instead of the table.
    #[arg(long)]
    json: bool,
    /// Extra `spine serve` arguments.
    #[arg(last = true)]
    serve_args: Vec<String>,
}

/// One window's figures.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Window {
    /// Minutes since the start, at the window's end.
    pub(crate) at_min: f64,
    pub(crate) calls_per_s: f64,
    /// Failed calls in the window.
    pub(crate) failed: usize,
    /// p50 and p99 (ms) per tool.
    pub(crate) tools: BTreeMap<&'static str, (f64, f64)>,
    /// p99 (ms) over every call of the window.
    pub(crate) p99_ms: f64,
    pub(crate) rss_mib: Option<f64>,
    /// The anonymous part of it: the server's own memory, without the pages of the data
    /// file it maps (the OS's page cache, which grows with the file and is given back under
    /// pressure). What the growth rule reads.
    pub(crate) anon_mib: Option<f64>,
    pub(crate) open_files: Option<usize>,
    pub(crate) threads: Option<usize>,
    /// Exports finished in the window, and how many of them failed.
    pub(crate) exports: usize,
    pub(crate) exports_failed: usize,
    /// The mix's live records at the window's end.
    pub(crate) records: usize,
}

/// Why a run failed; empty when it passed. `cap`: the store's size once full (`--records`;
/// 0: it grows, and growth is not judged).
pub(crate) fn verdict(windows: &[Window], warmup_min: f64, cap: usize) -> Vec<String> {
    let mut out = Vec::new();
    let Some(last) = windows.last() else {
        return vec!["no window finished".into()];
    };
    let failed: usize = windows.iter().map(|w| w.failed).sum();
    if failed > 0 {
        out.push(format!("{failed} calls failed"));
    }
    let exports_failed: usize = windows.iter().map(|w| w.exports_failed).sum();
    if exports_failed > 0 {
        out.push(format!("{exports_failed} exports failed"));
    }
    // The warm-up window; a run with no window after it judges no growth (CI's two
    // minutes: caches still filling are not a leak).
    let Some(base) = baseline(windows, warmup_min, cap).map(|i| &windows[i]) else {
        return out;
    };
    if let (Some(before), Some(after)) = (base.anon_mib, last.anon_mib)
        && after > before * (1.0 + RSS_GROWTH)
    {
        out.push(format!(
            "resident memory (anonymous) grew from {before:.0} MiB (minute {:.1}) to {after:.0} MiB",
            base.at_min
        ));
    }
    if last.p99_ms > base.p99_ms * (1.0 + P99_GROWTH) && last.p99_ms > base.p99_ms + P99_SLACK_MS {
        out.push(format!(
            "p99 grew from {:.1} ms (minute {:.1}) to {:.1} ms",
            base.p99_ms, base.at_min, last.p99_ms
        ));
    }
    out
}

/// The warm-up window's index: the first ending at or after `warmup_min` that began with the
/// store full, when a window follows it.
fn baseline(windows: &[Window], warmup_min: f64, cap: usize) -> Option<usize> {
    if cap == 0 {
        return None;
    }
    (1..windows.len().saturating_sub(1))
        .find(|&i| windows[i].at_min >= warmup_min - 1e-9 && windows[i - 1].records >= cap)
}

/// `spine-bench soak [flags] [-- serve args]`.
pub fn run(args: &[String]) -> Result<()> {
    let args = Args::parse_from(
        std::iter::once("spine-bench soak".to_owned()).chain(args.iter().cloned()),
    );
    let positive = |x: f64| x > 0.0 && x.is_finite();
    if !positive(args.minutes) || !positive(args.window) || args.sessions == 0 {
        bail!("--minutes, --window and --sessions must be positive");
    }
    if !(args.export_every >= 0.0 && args.export_every.is_finite()) {
        bail!("--export-every must be 0 (none) or a number of minutes");
    }
    let corpus = match args.corpus {
        Texts::Code => corpus::documents(DOCUMENTS)?,
        Texts::Prose => {
            crate::prose::pairs(DOCUMENTS)?.0.into_iter().map(|p| (p.code, p.query)).collect()
        }
    };
    let failures = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?
        .block_on(soak(args, corpus))?;
    if !failures.is_empty() {
        bail!("soak failed: {}", failures.join("; "));
    }
    Ok(())
}

async fn soak(args: Args, corpus: Vec<(String, String)>) -> Result<Vec<String>> {
    let binary = args.binary.clone().unwrap_or_else(|| "target/release/spine".into());
    let (server, url) = start(&binary, &args.serve_args, &[]).await?;
    let pid = server.child.id();
    let mut mix = Workload::new(Mode::Mix, corpus.clone(), String::new());
    if args.records > 0 {
        mix = mix.capped(args.records);
    }
    let mix = Arc::new(mix);
    // The writers store and delete (churn): writes that leave the store's size to the mix.
    // Their texts differ from the mix's (their own run mark): each is embedded anew.
    let storm = Arc::new(Workload::new(Mode::Churn, corpus, "w-".into()));
    let mut sessions: Vec<(Session, Arc<Workload>)> = Vec::new();
    for i in 0..args.sessions + args.writers {
        let work = if i < args.sessions { &mix } else { &storm };
        let s = Session::open(&url, false).await.with_context(|| format!("session {i}"))?;
        sessions.push((s, work.clone()));
    }
    for _ in 0..SEED_RECORDS {
        let store = store_args(mix.document());
        let result = sessions[0].0.call(Tool::Store, &store).await.context("seed records")?;
        mix.stored(&store, &result).context("seed records")?;
    }
    let exports = Arc::new(Mutex::new((0usize, 0usize, Vec::<String>::new())));
    let exporter = (args.export_every > 0.0).then(|| {
        let (exports, binary) = (exports.clone(), binary.clone());
        let every = Duration::from_secs_f64(args.export_every * 60.0);
        let data_dir = server.data_dir().to_owned();
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(every).await;
                let (b, d) = (binary.clone(), data_dir.clone());
                let outcome = tokio::task::spawn_blocking(move || export(&b, &d)).await;
                let mut e = exports.lock().expect("no export panics holding the tally");
                e.0 += 1;
                if let Err(why) = outcome.map_err(anyhow::Error::from).and_then(|r| r) {
                    e.1 += 1;
                    if e.2.len() < KEPT_ERRORS {
                        e.2.push(format!("export: {why:#}"));
                    }
                }
            }
        })
    });

    let started = Instant::now();
    let end = started + Duration::from_secs_f64(args.minutes * 60.0);
    let mut windows = Vec::new();
    let mut seed = args.seed;
    if !args.json {
        println!(
            "spine-bench soak: {} mix sessions + {} writers, {} min, windows of {} s, export every {} min, {url}\n",
            args.sessions, args.writers, args.minutes, args.window, args.export_every
        );
        println!(
            "{:>6} {:>8} {:>8} {:>6} {:>8} {:>8} {:>9} {:>6} {:>8} {:>8}  per tool p50/p99 ms",
            "min",
            "records",
            "calls/s",
            "failed",
            "p99 ms",
            "RSS MiB",
            "anon MiB",
            "files",
            "threads",
            "exports"
        );
    }
    while Instant::now() < end {
        let from = Instant::now();
        let deadline = (from + Duration::from_secs_f64(args.window)).min(end);
        let tasks: Vec<_> = sessions
            .drain(..)
            .map(|(s, work)| {
                seed = seed.wrapping_add(1);
                let w = work.clone();
                tokio::spawn(async move { (drive(s, w, deadline, seed).await, work) })
            })
            .collect();
        for task in tasks {
            sessions.push(task.await.context("a session task")?);
        }
        let secs = from.elapsed().as_secs_f64();
        let (exported, exports_failed) = {
            let mut e = exports.lock().expect("no export panics holding the tally");
            let out = (e.0, e.1);
            (e.0, e.1) = (0, 0);
            out
        };
        let mut window = measure_window(
            &[&mix, &storm],
            started.elapsed().as_secs_f64() / 60.0,
            secs,
            pid,
            (exported, exports_failed),
        );
        window.records = mix.live();
        if args.json {
            println!("{}", serde_json::to_string(&window)?);
        } else {
            print_row(&window);
        }
        windows.push(window);
    }
    if let Some(e) = exporter {
        e.abort();
    }
    for (s, _) in sessions {
        s.close().await;
    }
    drop(server);
    let mut failures = verdict(&windows, args.warmup, args.records);
    for w in [&mix, &storm] {
        let (_, errors) = &*w.outcomes.lock().expect("the sessions ended");
        failures.extend(errors.iter().map(|e| format!("first errors: {e}")));
    }
    failures.extend(exports.lock().expect("the exports ended").2.iter().cloned());
    if !args.json {
        let judged = baseline(&windows, args.warmup, args.records).is_some();
        match (failures.is_empty(), judged) {
            (true, true) => println!("\npassed: no failed call or export, memory and p99 steady"),
            (true, false) => println!(
                "\npassed: no failed call or export (memory and p99 not judged: no window after \
                 the {} min warm-up that began with the store full)",
                args.warmup
            ),
            (false, _) => println!("\nfailed: {}", failures.join("; ")),
        }
    }
    let _ = std::io::stdout().flush();
    Ok(failures)
}

/// The window just ended: the outcomes the sessions of `works` recorded (taken, so the next
/// window starts empty) and the server's `/proc` figures now.
fn measure_window(
    works: &[&Arc<Workload>],
    at_min: f64,
    secs: f64,
    pid: u32,
    (exports, exports_failed): (usize, usize),
) -> Window {
    let mut merged: BTreeMap<Tool, (Vec<f64>, usize)> = BTreeMap::new();
    for w in works {
        let (tally, _) = &mut *w.outcomes.lock().expect("the sessions ended");
        for (tool, (ms, failed)) in std::mem::take(tally) {
            let e = merged.entry(tool).or_default();
            e.0.extend(ms);
            e.1 += failed;
        }
    }
    let mut all: Vec<f64> = merged.values().flat_map(|(ms, _)| ms.iter().copied()).collect();
    all.sort_by(f64::total_cmp);
    let tools = merged
        .iter_mut()
        .filter(|(_, (ms, _))| !ms.is_empty())
        .map(|(tool, (ms, _))| {
            ms.sort_by(f64::total_cmp);
            (tool.name(), (percentile(ms, 0.50), percentile(ms, 0.99)))
        })
        .collect();
    Window {
        at_min,
        calls_per_s: all.len() as f64 / secs.max(1e-9),
        failed: merged.values().map(|(_, f)| f).sum(),
        tools,
        p99_ms: if all.is_empty() { 0.0 } else { percentile(&all, 0.99) },
        rss_mib: status_mib(pid, "VmRSS:"),
        anon_mib: status_mib(pid, "RssAnon:"),
        open_files: std::fs::read_dir(format!("/proc/{pid}/fd")).ok().map(|d| d.count()),
        threads: status_count(pid, "Threads:"),
        exports,
        exports_failed,
        records: 0,
    }
}

/// A count field of `/proc/PID/status` (`Threads:`).
fn status_count(pid: u32, field: &str) -> Option<usize> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status.lines().find_map(|l| l.strip_prefix(field))?.trim().parse().ok()
}

fn print_row(w: &Window) {
    let opt = |v: Option<String>| v.unwrap_or_else(|| "-".into());
    let tools: Vec<String> =
        w.tools.iter().map(|(t, (p50, p99))| format!("{t} {p50:.0}/{p99:.0}")).collect();
    println!(
        "{:>6.1} {:>8} {:>8.1} {:>6} {:>8.1} {:>8} {:>9} {:>6} {:>8} {:>8}  {}",
        w.at_min,
        w.records,
        w.calls_per_s,
        w.failed,
        w.p99_ms,
        opt(w.rss_mib.map(|m| format!("{m:.0}"))),
        opt(w.anon_mib.map(|m| format!("{m:.0}"))),
        opt(w.open_files.map(|n| n.to_string())),
        opt(w.threads.map(|n| n.to_string())),
        format!("{}/{}", w.exports - w.exports_failed, w.exports),
        tools.join(", ")
    );
    let _ = std::io::stdout().flush();
}

/// `spine export --all-scopes` of the server's data directory, beside it, to a file removed
/// afterwards: every record read through a second process while the server writes.
fn export(binary: &Path, data_dir: &Path) -> Result<()> {
    // A name of its own in a directory removed afterwards: export never overwrites a file.
    let dir = tempfile::tempdir()?;
    let run = Command::new(binary)
        .arg("export")
        .arg("--data-dir")
        .arg(data_dir)
        .arg("--all-scopes")
        .arg("--output")
        .arg(dir.path().join("export.jsonl"))
        .env("SPINE_LOG", "warn")
        .stdin(Stdio::null())
        .output()
        .with_context(|| format!("running {} export", binary.display()))?;
    if !run.status.success() {
        bail!("{}: {}", run.status, snippet(String::from_utf8_lossy(&run.stderr).trim()));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn window(at_min: f64, p99_ms: f64, rss: f64) -> Window {
        Window {
            at_min,
            calls_per_s: 10.0,
            failed: 0,
            tools: BTreeMap::new(),
            p99_ms,
            rss_mib: Some(rss + 50.0),
            anon_mib: Some(rss),
            open_files: Some(20),
            threads: Some(10),
            exports: 0,
            exports_failed: 0,
            records: 100,
        }
    }

    #[test]
    fn a_steady_run_passes_and_each_rule_fails_it() {
        let steady: Vec<Window> = (1..=10).map(|m| window(m as f64, 100.0, 200.0)).collect();
        assert!(verdict(&steady, 5.0, 100).is_empty());
        // Memory: 10% over the warm-up window (minute 5) fails; the first minutes do not count.
        let mut grew = steady.clone();
        grew[0].anon_mib = Some(100.0);
        grew[9].anon_mib = Some(219.0);
        grew[9].rss_mib = Some(900.0);
        assert!(verdict(&grew, 5.0, 100).is_empty(), "the mapped file does not count");
        grew[9].anon_mib = Some(221.0);
        assert!(
            verdict(&grew, 5.0, 100)[0].contains("resident memory (anonymous) grew from 200 MiB")
        );
        // p99: 50% and 25 ms over the warm-up window's.
        let mut slow = steady.clone();
        slow[9].p99_ms = 150.0;
        assert!(verdict(&slow, 5.0, 100).is_empty());
        slow[9].p99_ms = 151.0;
        assert!(verdict(&slow, 5.0, 100)[0].contains("p99 grew"));
        let mut quick = steady.clone();
        (quick[4].p99_ms, quick[9].p99_ms) = (4.0, 20.0);
        assert!(verdict(&quick, 5.0, 100).is_empty(), "a few ms are noise");
        // A failed call or export fails the run.
        let mut failed = steady.clone();
        failed[3].failed = 1;
        failed[6].exports_failed = 1;
        assert_eq!(verdict(&failed, 5.0, 100).len(), 2);
        // A run with no window after the warm-up judges failures only.
        let short = [window(1.0, 100.0, 200.0), window(2.0, 900.0, 900.0)];
        assert!(verdict(&short, 5.0, 100).is_empty());
        let three =
            [window(1.0, 100.0, 200.0), window(2.0, 100.0, 200.0), window(3.0, 900.0, 900.0)];
        assert!(
            verdict(&three, 1.0, 100)[0].contains("(minute 2.0)"),
            "the first window starts empty"
        );
        assert!(verdict(&three, 1.0, 0).is_empty(), "a store that grows is not judged");
        assert_eq!(verdict(&[], 5.0, 100), ["no window finished"]);
    }

    #[test]
    fn the_warm_up_window_is_the_first_that_begins_with_the_store_full() {
        // Full (100 records) only from minute 7: minute 8 is the baseline, not minute 5.
        let mut filling: Vec<Window> = (1..=12).map(|m| window(m as f64, 100.0, 200.0)).collect();
        for (m, w) in filling.iter_mut().enumerate().take(6) {
            w.records = 10 * (m + 1);
            w.anon_mib = Some(100.0 + 10.0 * m as f64);
        }
        assert_eq!(baseline(&filling, 5.0, 100), Some(7));
        assert!(verdict(&filling, 5.0, 100).is_empty(), "growth while filling is data");
        filling[11].anon_mib = Some(221.0);
        assert!(verdict(&filling, 5.0, 100)[0].contains("(minute 8.0)"));
        // Never full: nothing to compare against.
        assert_eq!(baseline(&filling, 5.0, 1000), None);
    }
}
