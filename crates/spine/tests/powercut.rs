//! Power loss and failing disks (issue 66), the embedded store on `spine-faultfs`: a FUSE file
//! system that keeps every write not flushed in memory, forgets it on a power cut, and fails
//! flushes the way Linux does (the pages a failed flush did not write stay readable and are
//! never written by a later flush).
//!
//! - Power-cut storms: eight writers (the crash storm's mix: store, update, supersede,
//!   archive, set_visibility, delete) against `spine serve` on that file system; at a random
//!   count of acknowledged writes the server is killed and the disk loses whatever it had not
//!   flushed (every other cut tears the last page written to the log in half); the file
//!   system is mounted again and the server restarted. The process stopping first and the
//!   disk forgetting next leaves what a power cut leaves: exactly the flushed bytes.
//!   `SPINE_POWERCUT_CYCLES` sets the number of cuts (5 by default, as CI runs it; the long
//!   run in docs/reliability.md uses 50).
//! - Forty failed flushes during a storm, then a power cut.
//! - A full disk during a storm: writes refused, reads served, writes acknowledged again
//!   once space returns, without a restart; then a power cut.
//!
//! After each: every acknowledged write is there with its exact content and state, every
//! acknowledged delete is gone, search finds live records, `spine-review verify` is clean.

use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::json;
use spine_faultfs::{Disk, Fault};
use tempfile::TempDir;

use crate::common::*;
use crate::crash::{Ledger, WRITERS, check_ledger, random_in, serve_on, writer};

/// The embedded store's log, where a torn cut tears the last page written.
const WAL: &str = "spine.db-wal";

/// The disk, or `None` where this run cannot mount FUSE or runs on PostgreSQL.
fn disk() -> Option<(Disk, TempDir, TempDir)> {
    if embedded_only() {
        return None;
    }
    if !Disk::available_or_skip() {
        return None;
    }
    let backing = TempDir::new().unwrap();
    let mountpoint = TempDir::new().unwrap();
    let disk = Disk::mount(backing.path(), mountpoint.path()).unwrap();
    Some((disk, backing, mountpoint))
}

fn free_addr() -> String {
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    format!("127.0.0.1:{port}")
}

/// A storm's writers, `persist`ing through refusals when the disk fails under a live server.
struct Storm {
    writers: Vec<tokio::task::JoinHandle<()>>,
    acks: Arc<AtomicUsize>,
}

impl Storm {
    fn start(addr: &str, round: usize, ledger: &Arc<Mutex<Ledger>>, persist: bool) -> Storm {
        let acks = Arc::new(AtomicUsize::new(0));
        let writers = (0..WRITERS)
            .map(|w| {
                tokio::spawn(writer(
                    addr.to_owned(),
                    w,
                    round,
                    ledger.clone(),
                    acks.clone(),
                    persist,
                ))
            })
            .collect();
        Storm { writers, acks }
    }

    fn acks(&self) -> usize {
        self.acks.load(Ordering::SeqCst)
    }

    /// Waits until `n` more writes than now are acknowledged (at most a minute).
    async fn more(&self, n: usize, what: &str) {
        let at = self.acks() + n;
        let waited = tokio::time::timeout(Duration::from_secs(60), async {
            while self.acks() < at {
                assert!(!self.writers.iter().all(|w| w.is_finished()), "every writer stopped");
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
        });
        waited.await.unwrap_or_else(|_| panic!("{what}: no acknowledged writes for a minute"));
    }

    /// Stops the writers (a writer's failed assertion fails the test).
    async fn stop(self) {
        for w in self.writers {
            w.abort();
            if let Err(e) = w.await
                && e.is_panic()
            {
                std::panic::resume_unwind(e.into_panic());
            }
        }
    }
}

/// The power cut: the server stops at once, then the disk forgets what it had not flushed
/// (tearing the log's last page when `tear`); the file system comes back as after a reboot.
async fn power_cut(disk: &mut Disk, mut child: tokio::process::Child, tear: bool) {
    child.start_kill().unwrap(); // SIGKILL
    child.wait().await.unwrap();
    let cut = disk.cut(tear.then_some(Path::new(WAL))).unwrap();
    eprintln!("power cut: {} files lost unflushed writes, torn: {}", cut.files, cut.torn);
    disk.remount().unwrap();
}

/// Calls `store_memory` until one is refused (at most `tries`): the refusal's envelope.
async fn first_refusal(client: &Client, tries: usize) -> serde_json::Value {
    for i in 0..tries {
        let args = json!({"content": format!("probe {i}: the disk is failing"), "scope": "storm:project:crash", "source": "agent-inferred", "category": "gotcha"});
        let r = call(client, "store_memory", args).await;
        if r.is_error == Some(true) {
            return text_json(&r);
        }
    }
    panic!("{tries} writes on a failing disk were all acknowledged");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn acknowledged_writes_survive_power_cuts() {
    let Some((mut disk, _backing, _mountpoint)) = disk() else { return };
    let cycles: usize =
        std::env::var("SPINE_POWERCUT_CYCLES").ok().and_then(|k| k.parse().ok()).unwrap_or(5);
    let data = disk.path().to_owned();
    let addr = free_addr();
    let ledger = Arc::new(Mutex::new(Ledger::default()));
    for round in 0..cycles {
        let child = serve_on(&data, &addr, None).await;
        let storm = Storm::start(&addr, round, &ledger, false);
        storm.more(random_in(WRITERS * 4, WRITERS * 24), "the storm").await;
        eprintln!("round {round}: power cut after {} acknowledged writes", storm.acks());
        power_cut(&mut disk, child, round % 2 == 1).await;
        storm.stop().await;
    }
    let child = serve_on(&data, &addr, None).await;
    check_ledger(&data, &addr, child, ledger, cycles, None).await;
}

/// A failed flush is never followed by an acknowledgement it cannot back: the refused writes
/// answer `unavailable` naming the cause, the store recovers by itself (a checkpoint into the
/// database file, flushed), and a power cut afterwards loses nothing acknowledged.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn failed_fsyncs_are_never_acknowledged_and_lose_nothing() {
    let Some((mut disk, _backing, _mountpoint)) = disk() else { return };
    let data = disk.path().to_owned();
    let addr = free_addr();
    let ledger = Arc::new(Mutex::new(Ledger::default()));
    let child = serve_on(&data, &addr, None).await;
    let storm = Storm::start(&addr, 0, &ledger, true);
    storm.more(WRITERS * 4, "before the fault").await;

    const FAILURES: u64 = 40;
    disk.fail(Fault::Fsyncs { count: FAILURES as u32, errno: libc::EIO });
    let client = http_client_at(&addr).await;
    let refused = first_refusal(&client, 500).await;
    eprintln!("refused after a failed flush: {refused}");
    assert_eq!(refused["error"]["code"], "unavailable", "{refused}");
    let message = refused["error"]["message"].as_str().unwrap();
    assert!(message.contains("cannot make writes durable"), "{message}");
    let spent = tokio::time::timeout(Duration::from_secs(60), async {
        while disk.stats().failed_fsyncs < FAILURES {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    });
    spent.await.expect("the writers and the checkpoint ran into every failing flush");
    // Recovered without a restart: writes are acknowledged again.
    storm.more(WRITERS * 2, "after the fault").await;
    client.cancel().await.unwrap();
    power_cut(&mut disk, child, true).await;
    storm.stop().await;

    let child = serve_on(&data, &addr, None).await;
    check_ledger(&data, &addr, child, ledger, 1, None).await;
}

/// A full disk while the log grows: writes refused with `unavailable`, reads served, writes
/// acknowledged again once space returns, without a restart; a power cut afterwards loses
/// nothing acknowledged.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_full_disk_refuses_writes_serves_reads_and_recovers() {
    let Some((mut disk, _backing, _mountpoint)) = disk() else { return };
    let data = disk.path().to_owned();
    let addr = free_addr();
    let ledger = Arc::new(Mutex::new(Ledger::default()));
    let child = serve_on(&data, &addr, None).await;
    let storm = Storm::start(&addr, 0, &ledger, true);
    storm.more(WRITERS * 4, "before the disk fills").await;
    let client = http_client_at(&addr).await;
    let known = ok(call(
        &client,
        "store_memory",
        json!({"content": "Releases are cut from the main branch on Thursdays.", "scope": "storm:project:crash", "source": "agent-inferred", "category": "convention"}),
    )
    .await)["id"]
        .clone();

    disk.fill(true);
    let refused = first_refusal(&client, 5000).await;
    eprintln!("refused on a full disk: {refused}");
    assert_eq!(refused["error"]["code"], "unavailable", "{refused}");
    // Reads are served meanwhile.
    let got = ok(call(&client, "get_memory", json!({"id": known})).await);
    assert_eq!(got["id"], known);
    let hits = ok(call(
        &client,
        "search_memory",
        json!({"query": "which branch are releases cut from", "scope": "storm:project:crash"}),
    )
    .await);
    assert!(!hits["memories"].as_array().unwrap().is_empty(), "{hits}");

    disk.fill(false);
    storm.more(WRITERS * 2, "after space returns").await;
    client.cancel().await.unwrap();
    power_cut(&mut disk, child, false).await;
    storm.stop().await;

    let child = serve_on(&data, &addr, None).await;
    check_ledger(&data, &addr, child, ledger, 1, None).await;
}
