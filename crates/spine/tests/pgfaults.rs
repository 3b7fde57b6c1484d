//! PostgreSQL faults (issue 66): two `spine serve` nodes on one database, and a fault in the
//! middle of the two big writes — a supersede of 20 targets and an archive of 500 ids — at
//! the worst moment: the node killed with SIGKILL, the database stopped with `pg_ctl -m
//! immediate`, or every connection of the node cut by a relay (`scripts/bench-relay.py`,
//! SIGUSR1). Each operation must be all or nothing, every acknowledged write must be there,
//! `spine-review verify` must find no violation, and a node that lives through the fault
//! answers `unavailable` within its connect timeout while the database is down and serves
//! again by itself.
//!
//! **The worst moment, on purpose.** A fault that lands at a random time mostly hits a node
//! resolving ids or embedding, before anything is written. Each fault here instead lands
//! while the operation's transaction has written part of its rows: a `psql` session of the
//! test holds a lock the transaction needs next, and the fault comes once
//! `pg_stat_activity` shows the node's backend waiting on it with a transaction id (it has
//! written). For the supersede it is an uncommitted idempotency row with the call's key —
//! the successor is inserted and all 20 targets stamped, only the key row and the commit
//! are left; for the archive a row lock on the median record (by id), so the one `UPDATE`
//! has archived about half of the 500 when it stops. The lock is then released. A node that
//! died or lost its connection never commits a supersede (its COMMIT was never sent); an
//! archive is one statement whose end of transaction the server already received, so it
//! may commit unacknowledged — both are allowed, half of either is not.
//!
//! Each test runs on a cluster of its own (scripts/postgres.sh), so stopping it touches no
//! other test; the PostgreSQL pass runs them. No sleep but short polls inside deadlines.

use std::path::PathBuf;
use std::process::Stdio;
use std::time::{Duration, Instant};

use rmcp::model::CallToolRequestParams;
use rmcp::transport::StreamableHttpClientTransport;
use serde_json::{Value, json};
use tempfile::TempDir;
use tokio::io::AsyncWriteExt;

use crate::common::*;
use crate::crash::{pg_ctl, serve_on};

const PSQL: &str = "/usr/lib/postgresql/15/bin/psql";
/// Targets of one supersede.
const TARGETS: usize = 20;
/// Ids of one archive.
const BATCH: usize = 500;
const TARGET_SCOPE: &str = "pgfaults:project:targets";
const BATCH_SCOPE: &str = "pgfaults:project:batch";
/// How long a call waits for a connection before it fails as `unavailable`: spine-store's
/// `CONNECT_TIMEOUT` (postgres/mod.rs); no flag or variable changes it.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// Slack above it for a debug build on a busy 2-core machine.
const MARGIN: Duration = Duration::from_secs(1);
/// The longest any poll of these tests waits.
const DEADLINE: Duration = Duration::from_secs(30);

/// A node's backend is stopped inside a transaction that has written (it has an xid),
/// waiting on a lock.
const STALLED: &str = "SELECT EXISTS (SELECT 1 FROM pg_stat_activity
    WHERE datname = current_database() AND application_name = 'spine'
      AND wait_event_type = 'Lock' AND backend_xid IS NOT NULL)";
/// No transaction that has written is open any more (the dead node's one has ended).
const SETTLED: &str = "SELECT NOT EXISTS (SELECT 1 FROM pg_stat_activity
    WHERE datname = current_database() AND backend_xid IS NOT NULL
      AND pid <> pg_backend_pid())";
/// The test's blocking session holds its lock.
const HELD: &str = "SELECT EXISTS (SELECT 1 FROM pg_stat_activity
    WHERE application_name = 'pgfaults-blocker' AND state = 'idle in transaction'
      AND backend_xid IS NOT NULL)";

/// A PostgreSQL cluster of the test's own, started by scripts/postgres.sh; stopped and
/// removed on drop.
struct Cluster {
    url: String,
    root: PathBuf,
    /// The server options scripts/postgres.sh started it with (they are not in its config).
    options: String,
}

impl Cluster {
    fn start() -> Cluster {
        let out = std::process::Command::new("bash")
            .arg(crate::common::repo().join("scripts/postgres.sh"))
            .stderr(Stdio::null())
            .output()
            .unwrap();
        assert!(out.status.success(), "scripts/postgres.sh starts a cluster");
        let url = String::from_utf8(out.stdout).unwrap().trim().to_owned();
        let root = std::fs::read_dir("/tmp")
            .unwrap()
            .filter_map(|e| e.ok().map(|e| e.path()))
            .find(|p| std::fs::read_to_string(p.join("url")).is_ok_and(|u| u.trim() == url))
            .expect("the cluster's directory");
        let port = url.rsplit_once(':').unwrap().1.split('/').next().unwrap().to_owned();
        let options = format!(
            "-c listen_addresses=127.0.0.1 -p {port} -k {} -c fsync=on -c max_connections=200",
            root.display()
        );
        Cluster { url, root, options }
    }

    fn port(&self) -> u16 {
        self.url.rsplit_once(':').unwrap().1.split('/').next().unwrap().parse().unwrap()
    }

    /// The database's URL through a relay listening on `port`.
    fn through(&self, port: u16) -> String {
        self.url.replace(&format!(":{}/", self.port()), &format!(":{port}/"))
    }

    /// Stops the server at once: no checkpoint, every backend killed, recovery from the WAL
    /// on the next start.
    fn crash(&self) {
        pg_ctl(&self.root.join("data"), &["-m", "immediate", "stop"]);
    }

    fn restart(&self) {
        let log = self.root.join("log");
        let log = log.to_str().unwrap();
        pg_ctl(&self.root.join("data"), &["-l", log, "-w", "-o", &self.options, "start"]);
    }

    /// One statement's result, as `psql -At` prints it.
    fn query(&self, sql: &str) -> String {
        let out = std::process::Command::new(PSQL)
            .args(["-X", "-A", "-t", "-q", "-v", "ON_ERROR_STOP=1", "-d", &self.url, "-c", sql])
            .env("PGAPPNAME", "pgfaults")
            .output()
            .unwrap();
        assert!(out.status.success(), "{sql}: {}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8(out.stdout).unwrap().trim().to_owned()
    }

    /// Polls `sql` (a boolean) until it is true; how long that took.
    async fn wait_for(&self, what: &str, sql: &str) -> Duration {
        let started = Instant::now();
        while self.query(sql) != "t" {
            assert!(started.elapsed() < DEADLINE, "waited {DEADLINE:?} for {what}");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        started.elapsed()
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let _ = std::process::Command::new("bash")
            .arg(crate::common::repo().join("scripts/postgres.sh"))
            .args(["stop", &self.url])
            .output();
    }
}

/// A `psql` session of the test's own, holding in an open transaction the lock a node's
/// write will wait on.
struct Blocker {
    session: tokio::process::Child,
    stdin: Option<tokio::process::ChildStdin>,
}

impl Blocker {
    /// Runs `sql` in a transaction left open; returns once the session holds its lock.
    async fn hold(cluster: &Cluster, sql: &str) -> Blocker {
        let mut session = tokio::process::Command::new(PSQL)
            .args(["-X", "-q", "-v", "ON_ERROR_STOP=1", "-d", &cluster.url])
            .env("PGAPPNAME", "pgfaults-blocker")
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        let mut stdin = session.stdin.take().unwrap();
        stdin.write_all(format!("BEGIN;\n{sql};\n").as_bytes()).await.unwrap();
        stdin.flush().await.unwrap();
        cluster.wait_for("the blocking session's lock", HELD).await;
        Blocker { session, stdin: Some(stdin) }
    }

    /// Rolls its transaction back and ends the session (one the database's crash ended
    /// already is only reaped).
    async fn release(mut self) {
        if let Some(mut stdin) = self.stdin.take() {
            let _ = stdin.write_all(b"ROLLBACK;\n").await;
        }
        let ended = tokio::time::timeout(DEADLINE, self.session.wait()).await;
        assert!(ended.is_ok(), "the blocking session ends");
    }
}

/// `scripts/bench-relay.py` (no delay) in front of the cluster.
struct Relay {
    child: tokio::process::Child,
    port: u16,
}

impl Relay {
    async fn to(cluster: &Cluster) -> Relay {
        let port = free_port();
        let child = tokio::process::Command::new("python3")
            .arg(crate::common::repo().join("scripts/bench-relay.py"))
            .args([port.to_string(), cluster.port().to_string(), "0".into()])
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        let started = Instant::now();
        while tokio::net::TcpStream::connect(("127.0.0.1", port)).await.is_err() {
            assert!(started.elapsed() < DEADLINE, "the relay listens");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        Relay { child, port }
    }

    /// Cuts every connection open through it (SIGUSR1); new ones are relayed as before.
    fn cut(&self) {
        let pid = self.child.id().expect("the relay runs") as libc::pid_t;
        // SAFETY: kill has no memory preconditions; pid is our own child.
        assert_eq!(unsafe { libc::kill(pid, libc::SIGUSR1) }, 0, "signal the relay");
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

async fn client(addr: &str) -> Client {
    let transport = StreamableHttpClientTransport::from_uri(format!("http://{addr}/mcp"));
    rmcp::ServiceExt::serve((), transport).await.expect("initialize over HTTP")
}

/// What a call that may meet a fault heard.
#[derive(Debug)]
enum Answer {
    /// Success.
    Done,
    /// The `unavailable` error, with its message. Any other error fails the test.
    Unavailable(String),
    /// No answer: the node is gone.
    Cut,
}

async fn answer(client: &Client, tool: &'static str, args: Value) -> Answer {
    let sent = client.call_tool(
        CallToolRequestParams::new(tool).with_arguments(args.as_object().cloned().unwrap()),
    );
    match tokio::time::timeout(DEADLINE, sent).await {
        Err(_) | Ok(Err(_)) => Answer::Cut,
        Ok(Ok(r)) if r.is_error == Some(true) => {
            let e = text_json(&r)["error"].clone();
            assert_eq!(e["code"], "unavailable", "{tool} under a fault: {e}");
            Answer::Unavailable(e["message"].as_str().unwrap_or_default().to_owned())
        }
        Ok(Ok(_)) => Answer::Done,
    }
}

#[derive(Clone, Copy, Debug)]
enum Op {
    Supersede,
    Archive,
}

/// What a faulted operation left in the database.
#[derive(Debug, PartialEq)]
enum Outcome {
    Nothing,
    All,
}

/// An acknowledged record and the content it was stored with.
#[derive(Clone)]
struct Stored {
    id: String,
    content: String,
}

/// Two nodes on one cluster: A takes the faults, B (straight to the database) checks.
struct Faults {
    cluster: Cluster,
    /// The database URL node A uses (the relay's, when there is one).
    a_url: String,
    a: tokio::process::Child,
    a_addr: String,
    _b: tokio::process::Child,
    b_addr: String,
    on_b: Client,
    dirs: (TempDir, TempDir),
    /// The live targets of the next supersede.
    targets: Vec<Stored>,
    /// The records every archive names.
    batch: Vec<Stored>,
    /// Acknowledged (or found committed) supersessions: targets and successor.
    superseded: Vec<(Vec<Stored>, Stored)>,
    /// Supersede attempts so far (each successor's scope and content name it).
    attempt: usize,
    /// The arguments of the last supersede sent.
    sent: Value,
}

fn fix_scope(attempt: usize) -> String {
    format!("pgfaults:project:fix-{attempt}")
}

fn correction(attempt: usize) -> String {
    format!("Correction {attempt}: deploys go out on Tuesdays after the freeze, not Fridays.")
}

fn record(content: &str, scope: &str) -> Value {
    json!({"content": content, "scope": scope, "source": "user-said", "category": "decision"})
}

/// Stores `contents` in `scope` through the node at `addr`, four sessions at once.
async fn store_all(addr: &str, scope: &'static str, contents: Vec<String>) -> Vec<Stored> {
    let mut sessions = tokio::task::JoinSet::new();
    for (part, chunk) in contents.chunks(contents.len().div_ceil(4)).enumerate() {
        let (addr, chunk) = (addr.to_owned(), chunk.to_vec());
        sessions.spawn(async move {
            let c = client(&addr).await;
            let mut stored = Vec::new();
            for content in chunk {
                let r = ok(call(&c, "store_memory", record(&content, scope)).await);
                stored.push(Stored { id: r["id"].as_str().unwrap().to_owned(), content });
            }
            (part, stored)
        });
    }
    let mut parts = sessions.join_all().await;
    parts.sort_by_key(|(part, _)| *part);
    parts.into_iter().flat_map(|(_, stored)| stored).collect()
}

impl Faults {
    /// Starts two nodes on `cluster` (A on `a_url`, B straight to it) and stores the
    /// targets and the batch.
    async fn start(cluster: Cluster, a_url: String) -> Faults {
        let dirs = (TempDir::new().unwrap(), TempDir::new().unwrap());
        let (a_addr, b_addr) =
            (format!("127.0.0.1:{}", free_port()), format!("127.0.0.1:{}", free_port()));
        let a = serve_on(dirs.0.path(), &a_addr, Some(&a_url)).await;
        let b = serve_on(dirs.1.path(), &b_addr, Some(&cluster.url)).await;
        let on_b = client(&b_addr).await;
        let started = Instant::now();
        let targets = fresh_targets(&b_addr, 0).await;
        let batch = (0..BATCH)
            .map(|i| {
                format!("Batch note {i}: nightly job {i} writes its report to reports/{i}.txt.")
            })
            .collect();
        let batch = store_all(&b_addr, BATCH_SCOPE, batch).await;
        eprintln!("stored {} records in {:?}", TARGETS + BATCH, started.elapsed());
        Faults {
            cluster,
            a_url,
            a,
            a_addr,
            _b: b,
            b_addr,
            on_b,
            dirs,
            targets,
            batch,
            superseded: Vec::new(),
            attempt: 0,
            sent: Value::Null,
        }
    }

    /// A new node A in place of a killed one, on the same database.
    async fn restart_a(&mut self) {
        self.a = serve_on(self.dirs.0.path(), &self.a_addr, Some(&self.a_url)).await;
    }

    /// The arguments of the next supersede of the live targets.
    fn supersede_args(&mut self, key: Option<&str>) -> Value {
        self.attempt += 1;
        let mut args = record(&correction(self.attempt), &fix_scope(self.attempt));
        args["supersedes"] = json!(self.targets.iter().map(|t| &t.id).collect::<Vec<_>>());
        if let Some(key) = key {
            args["idempotency_key"] = json!(key);
        }
        self.sent = args.clone();
        args
    }

    /// Sends `op` to node A and returns once its transaction has written and waits on the
    /// test's lock: the call in flight, and the lock to release.
    async fn stall(&mut self, op: Op) -> (tokio::task::JoinHandle<Answer>, Blocker) {
        let (tool, args, hold) = match op {
            Op::Supersede => {
                let key = format!("pgfaults-{}", self.attempt + 1);
                let args = self.supersede_args(Some(&key));
                // The anonymous caller's owner is the empty string.
                let hold = format!(
                    "INSERT INTO idempotency (owner, key, fingerprint, id, short_id)
                     VALUES ('', '{key}', '', '', '')"
                );
                ("supersede_memory", args, hold)
            }
            Op::Archive => {
                let mut ids: Vec<&str> = self.batch.iter().map(|s| s.id.as_str()).collect();
                let args = json!({ "ids": ids });
                ids.sort_unstable();
                let hold =
                    format!("SELECT 1 FROM memories WHERE id = '{}' FOR UPDATE", ids[BATCH / 2]);
                ("archive_memory", args, hold)
            }
        };
        let blocker = Blocker::hold(&self.cluster, &hold).await;
        let addr = self.a_addr.clone();
        let call = tokio::spawn(async move { answer(&client(&addr).await, tool, args).await });
        let took = self.cluster.wait_for("node A's transaction to stop half-way", STALLED).await;
        assert!(!call.is_finished(), "{op:?} answered before its transaction stopped");
        eprintln!("{op:?}: node A's transaction stopped half-way after {took:?}");
        (call, blocker)
    }

    /// The live records of `scope`, read on node B; each known one with its stored content.
    async fn live(&self, scope: &str) -> Vec<String> {
        let listed =
            ok(call(&self.on_b, "list_memory", json!({"scope": scope, "limit": 1000})).await);
        let known: Vec<&Stored> = self.batch.iter().chain(&self.targets).collect();
        let mut ids = Vec::new();
        for m in listed["memories"].as_array().unwrap() {
            let id = m["id"].as_str().unwrap().to_owned();
            if let Some(s) = known.iter().find(|s| s.id == id) {
                assert_eq!(m["content"], json!(s.content), "{id}: its content");
            }
            ids.push(id);
        }
        ids
    }

    /// What the last `op` left, read on node B once no transaction is open: all of it or
    /// none (a half is a failure). After all of it the next operation gets fresh targets
    /// (a supersede) or the batch is restored (an archive).
    async fn outcome(&mut self, op: Op) -> Outcome {
        self.cluster.wait_for("the faulted transaction to end", SETTLED).await;
        match op {
            Op::Supersede => {
                let successors = self.live(&fix_scope(self.attempt)).await;
                let live = self.live(TARGET_SCOPE).await;
                let left = self.targets.iter().filter(|t| live.contains(&t.id)).count();
                match (successors.as_slice(), left) {
                    ([], TARGETS) => Outcome::Nothing,
                    ([successor], 0) => {
                        for t in &self.targets {
                            let m = ok(call(&self.on_b, "get_memory", json!({"id": t.id})).await);
                            assert_eq!(m["superseded_by"], json!(successor), "{}", t.id);
                        }
                        // Its idempotency key committed with it: the same call again is
                        // answered with the same correction.
                        if self.sent.get("idempotency_key").is_some() {
                            let again = self.sent.clone();
                            let r = ok(call(&self.on_b, "supersede_memory", again).await);
                            assert_eq!(r["id"], json!(successor), "the key's replay");
                        }
                        let done =
                            Stored { id: successor.clone(), content: correction(self.attempt) };
                        let next = fresh_targets(&self.b_addr, self.attempt).await;
                        self.superseded.push((std::mem::replace(&mut self.targets, next), done));
                        Outcome::All
                    }
                    (s, left) => panic!(
                        "a supersede half-applied: {} successors, {left} of {TARGETS} targets still live",
                        s.len()
                    ),
                }
            }
            Op::Archive => match self.live(BATCH_SCOPE).await.len() {
                BATCH => Outcome::Nothing,
                0 => {
                    let ids: Vec<&str> = self.batch.iter().map(|s| s.id.as_str()).collect();
                    let r = ok(call(&self.on_b, "restore_memory", json!({"ids": ids})).await);
                    let results = r["results"].as_array().unwrap();
                    assert!(results.iter().all(|o| o["outcome"] == "restored"), "{r}");
                    assert_eq!(self.live(BATCH_SCOPE).await.len(), BATCH, "restored");
                    Outcome::All
                }
                n => panic!("an archive half-applied: {n} of {BATCH} records still live"),
            },
        }
    }

    /// `op` on node A without a fault: acknowledged, and all of it is there.
    async fn acknowledged(&mut self, op: Op) {
        let on_a = client(&self.a_addr).await;
        match op {
            Op::Supersede => {
                let args = self.supersede_args(None);
                ok(call(&on_a, "supersede_memory", args).await);
            }
            Op::Archive => {
                let ids: Vec<&str> = self.batch.iter().map(|s| s.id.as_str()).collect();
                let r = ok(call(&on_a, "archive_memory", json!({"ids": ids})).await);
                let results = r["results"].as_array().unwrap();
                assert!(results.iter().all(|o| o["outcome"] == "archived"), "{r}");
            }
        }
        assert_eq!(self.outcome(op).await, Outcome::All, "an acknowledged {op:?} is whole");
    }

    /// Polls node `addr` with a read until it succeeds: how long that took, and how many
    /// calls answered `unavailable` first.
    async fn recovered(&self, addr: &str) -> (Duration, usize) {
        let c = client(addr).await;
        let started = Instant::now();
        let mut refused = 0;
        loop {
            match answer(&c, "list_memory", json!({"scope": TARGET_SCOPE})).await {
                Answer::Done => return (started.elapsed(), refused),
                Answer::Unavailable(_) => refused += 1,
                Answer::Cut => panic!("node {addr} stopped answering"),
            }
            assert!(started.elapsed() < DEADLINE, "node {addr} did not recover by itself");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Every acknowledged write is there, and `spine-review verify` finds no violation.
    async fn finish(self) {
        assert_eq!(self.live(BATCH_SCOPE).await.len(), BATCH, "the batch, restored");
        let live = self.live(TARGET_SCOPE).await;
        assert!(self.targets.iter().all(|t| live.contains(&t.id)), "the live targets");
        for (targets, successor) in &self.superseded {
            let m = ok(call(&self.on_b, "get_memory", json!({"id": successor.id})).await);
            assert_eq!(m["content"], json!(successor.content));
            for t in targets {
                let m = ok(call(&self.on_b, "get_memory", json!({"id": t.id})).await);
                assert_eq!(m["content"], json!(t.content));
                assert_eq!(m["superseded_by"], json!(successor.id), "{}", t.id);
            }
        }
        let out = tokio::process::Command::new(SPINE)
            .args(["spine-review", "verify", "--all-scopes", "--json"])
            .env("SPINE_DATABASE_URL", &self.cluster.url)
            .env("SPINE_LOG", "warn")
            .output()
            .await
            .unwrap();
        let run = Run::of(out);
        assert!(run.ok, "spine-review verify found violations:\n{}\n{}", run.stdout, run.stderr);
        eprintln!(
            "every acknowledged write there ({} supersessions); verify clean",
            self.superseded.len()
        );
    }
}

/// Stores a new set of supersede targets (`round` tells their contents apart).
async fn fresh_targets(addr: &str, round: usize) -> Vec<Stored> {
    let contents = (0..TARGETS)
        .map(|i| format!("Deploy rule {i} of round {round}: deploys go out on Fridays."))
        .collect();
    store_all(addr, TARGET_SCOPE, contents).await
}

/// Node A killed with SIGKILL in the middle of each write, node B checks; a new node A
/// serves afterwards.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_node_killed_mid_write_leaves_all_or_nothing() {
    if !on_postgres() {
        eprintln!("skipped: the PostgreSQL pass runs it");
        return;
    }
    let cluster = Cluster::start();
    let url = cluster.url.clone();
    let mut f = Faults::start(cluster, url).await;
    for op in [Op::Supersede, Op::Archive] {
        let (call, blocker) = f.stall(op).await;
        f.a.start_kill().unwrap(); // SIGKILL
        f.a.wait().await.unwrap();
        blocker.release().await;
        // The client may wait out its own timeout for a node that will never answer: an
        // answer it already has must not be an acknowledgement, and none can come.
        if call.is_finished() {
            let heard = call.await.unwrap();
            assert!(!matches!(heard, Answer::Done), "a killed node acknowledged {op:?}");
        } else {
            call.abort();
        }
        let outcome = f.outcome(op).await;
        eprintln!("{op:?}, node killed: {outcome:?}");
        f.restart_a().await;
        f.acknowledged(op).await;
    }
    f.finish().await;
}

/// The database stopped (`pg_ctl -m immediate`) in the middle of each write: the call
/// answers `unavailable`, both nodes answer `unavailable` within the connect timeout while
/// it is down, and both serve again by themselves once it is back.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_database_stopped_mid_write_leaves_all_or_nothing() {
    if !on_postgres() {
        eprintln!("skipped: the PostgreSQL pass runs it");
        return;
    }
    let cluster = Cluster::start();
    let url = cluster.url.clone();
    let mut f = Faults::start(cluster, url).await;
    for op in [Op::Supersede, Op::Archive] {
        let (call, blocker) = f.stall(op).await;
        let stopped = Instant::now();
        f.cluster.crash();
        let heard = call.await.unwrap();
        let took = stopped.elapsed();
        let Answer::Unavailable(why) = heard else { panic!("{op:?}: {heard:?}") };
        assert!(took <= CONNECT_TIMEOUT + MARGIN, "{op:?} answered after {took:?}");
        eprintln!("{op:?}, database stopped: unavailable {took:?} after the stop ({why})");
        blocker.release().await;
        for addr in [&f.a_addr, &f.b_addr] {
            let c = client(addr).await;
            let probes = [
                ("store_memory", record("Written while the database is down.", TARGET_SCOPE)),
                ("get_memory", json!({"id": f.batch[0].id})),
                ("archive_memory", json!({"ids": [f.batch[0].id]})),
            ];
            for (tool, args) in probes {
                let asked = Instant::now();
                let heard = answer(&c, tool, args).await;
                let took = asked.elapsed();
                assert!(matches!(heard, Answer::Unavailable(_)), "{tool} on {addr}: {heard:?}");
                assert!(took <= CONNECT_TIMEOUT + MARGIN, "{tool} on {addr} took {took:?}");
                eprintln!("  database down: {tool} on {addr}: unavailable in {took:?}");
            }
            // Readiness says so too (issue 68): a load balancer stops sending calls here.
            let asked = Instant::now();
            let (status, text) = readyz(addr).await;
            let took = asked.elapsed();
            assert_eq!(status, 503, "/readyz on {addr} while the database is down: {text}");
            assert!(text.starts_with("not ready: the database is unavailable"), "{text}");
            assert!(took <= CONNECT_TIMEOUT + MARGIN, "/readyz on {addr} took {took:?}");
        }
        f.cluster.restart();
        for addr in [&f.a_addr, &f.b_addr] {
            let (took, refused) = f.recovered(addr).await;
            eprintln!("  database back: {addr} served after {took:?} ({refused} refused first)");
            assert_eq!(readyz(addr).await, (200, "ready\n".to_owned()), "{addr} ready again");
        }
        let outcome = f.outcome(op).await;
        eprintln!("{op:?}, database stopped: {outcome:?}");
        f.acknowledged(op).await;
    }
    f.finish().await;
}

/// Every connection of node A cut by the relay it reaches the database through, in the
/// middle of each write: the call answers `unavailable` at once and the node serves again by
/// itself.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_relay_cut_mid_write_leaves_all_or_nothing() {
    if !on_postgres() {
        eprintln!("skipped: the PostgreSQL pass runs it");
        return;
    }
    let cluster = Cluster::start();
    let relay = Relay::to(&cluster).await;
    let url = cluster.through(relay.port);
    let mut f = Faults::start(cluster, url).await;
    for op in [Op::Supersede, Op::Archive] {
        let (call, blocker) = f.stall(op).await;
        let cut = Instant::now();
        relay.cut();
        let heard = call.await.unwrap();
        let took = cut.elapsed();
        let Answer::Unavailable(why) = heard else { panic!("{op:?}: {heard:?}") };
        assert!(took <= CONNECT_TIMEOUT + MARGIN, "{op:?} answered after {took:?}");
        eprintln!("{op:?}, connections cut: unavailable {took:?} after the cut ({why})");
        blocker.release().await;
        let outcome = f.outcome(op).await;
        eprintln!("{op:?}, connections cut: {outcome:?}");
        let (took, refused) = f.recovered(&f.a_addr).await;
        eprintln!("  node A served after {took:?} ({refused} refused first)");
        f.acknowledged(op).await;
    }
    f.finish().await;
}

/// `GET /readyz` on a node: its status and body.
async fn readyz(addr: &str) -> (u16, String) {
    let r = reqwest::get(format!("http://{addr}/readyz")).await.unwrap();
    (r.status().as_u16(), r.text().await.unwrap())
}
