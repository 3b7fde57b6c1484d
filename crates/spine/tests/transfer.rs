//! Export, import, prune-expired and migrate end to end: records written through the real
//! binary over MCP, the operator commands run as the real binary on the same data
//! directory (with a server still running where the test says so), results checked in the
//! files, in the store and through the server. Flags, printing, exit codes and the
//! composition with a running server; the import and migrate rules (strict lines, resume,
//! files that are no export, stamping) are tested in-process in spine-ops.

use std::collections::BTreeSet;
use std::path::Path;

use crate::common::*;
use serde_json::{Value, json};
use spine_core::{
    Caller, Category, EpochSeconds, Memory, RecordId, SCHEMA_VERSION, Scope, ShortId, Source,
    Timestamp,
};
use spine_store::Embedding;
use tempfile::TempDir;

const BUILTIN: &str = "builtin:all-MiniLM-L6-v2";
const SCOPE: &str = "transfer:project:spine";

async fn ok_run(data: &Path, args: &[&str]) -> Run {
    let r = spine(data, args).await;
    assert!(r.ok, "spine {args:?} failed:\n{}\n{}", r.stdout, r.stderr);
    r
}

async fn refused(data: &Path, args: &[&str], needles: &[&str]) -> Run {
    let r = spine(data, args).await;
    assert!(!r.ok, "spine {args:?} succeeded: {}", r.stdout);
    for n in needles {
        assert!(r.stderr.contains(n), "{n:?} not in the error of {args:?}: {}", r.stderr);
    }
    assert!(!r.stderr.contains("panicked"), "{}", r.stderr);
    r
}

fn lines(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path).unwrap().lines().map(String::from).collect()
}

fn write_lines(path: &Path, lines: &[String]) {
    std::fs::write(path, lines.iter().map(|l| format!("{l}\n")).collect::<String>()).unwrap();
}

/// The record lines of an export, in order.
fn record_lines(lines: &[String]) -> Vec<&str> {
    lines.iter().map(String::as_str).filter(|l| l.starts_with(r#"{"record":"#)).collect()
}

/// The audit lines of an export, in order.
fn audit_lines(lines: &[String]) -> Vec<&str> {
    lines.iter().map(String::as_str).filter(|l| l.starts_with(r#"{"audit":"#)).collect()
}

fn record_id(line: &str) -> String {
    let v: Value = serde_json::from_str(line).unwrap();
    v["record"]["id"].as_str().expect("a record line").to_owned()
}

fn open(data: &Path) -> Box<dyn spine_store::OperatorStore> {
    open_store(data)
}

async fn store_memory(client: &Client, args: Value) -> String {
    ok(call(client, "store_memory", args).await)["id"].as_str().unwrap().to_owned()
}

fn note(content: &str) -> Value {
    json!({"content": content, "scope": SCOPE, "source": "user-said", "category": "convention"})
}

/// A record with every kind of field and state, written through the server, plus a legacy
/// record (no owner key, no schema_version) written straight into the store. Returns the
/// ids.
async fn populate(client: &Client, data: &Path) -> Vec<String> {
    let mut ids = Vec::new();
    ids.push(
        store_memory(
            client,
            json!({
                "content": "Deploys go through make deploy; never push to prod by hand.",
                "scope": SCOPE, "source": "user-said", "category": "decision",
                "tags": ["deploy", "ops"], "repo": "github.com/acme/spine", "workspace": "ws-1",
                "worktree_path": "/src/spine", "base_dir": "/src", "summary": "Deploy with make",
                "citations": [{"kind": "file", "ref": "Makefile", "locator": "L10-20",
                               "pin": "abc123", "excerpt": "deploy:\n\t./ship"}]
            }),
        )
        .await,
    );
    // Read twice: access statistics are part of the record.
    ok(call(client, "get_memory", json!({"id": ids[0]})).await);
    ok(call(client, "get_memory", json!({"id": ids[0]})).await);
    let shared = store_memory(client, note("Prefer snake_case for SQL columns.")).await;
    ok(call(client, "set_visibility", json!({"id": shared, "shared": true})).await);
    ids.push(shared);
    let sched = ok(call(
        client,
        "schedule_memory",
        json!({"content": "Code freeze for the release.", "scope": SCOPE, "source": "user-said",
               "category": "decision", "not_before": "2999-01-01T00:00:00Z",
               "not_after": "2999-02-01T00:00:00Z"}),
    )
    .await);
    ids.push(sched["id"].as_str().unwrap().to_owned());
    let expired = ok(call(
        client,
        "schedule_memory",
        json!({"content": "The old staging host was retired.", "scope": "other:project:x",
               "source": "agent-inferred", "category": "gotcha",
               "not_after": "2020-01-01T00:00:00Z"}),
    )
    .await);
    ids.push(expired["id"].as_str().unwrap().to_owned());
    let old = store_memory(client, note("Releases are cut from develop.")).await;
    let fix = ok(call(
        client,
        "supersede_memory",
        json!({"content": "Releases are cut from main.", "scope": SCOPE, "source": "user-said",
               "category": "convention", "supersedes": [old]}),
    )
    .await);
    let fix = fix["id"].as_str().unwrap().to_owned();
    ok(call(client, "archive_memory", json!({"ids": [fix]})).await);
    ids.extend([old, fix]);
    let d = ok(call(
        client,
        "store_discovery",
        json!({"content": "The HTTP router is assembled in http.rs.", "kind": "fact",
               "scope": "discovery:repo:spine",
               "citations": [{"kind": "file", "ref": "crates/spine-server/src/http.rs"}]}),
    )
    .await);
    ids.push(d["id"].as_str().unwrap().to_owned());
    let r = ok(call(
        client,
        "store_rule",
        json!({"content": "Every public function has a doc comment.", "scope": "rule:repo:spine",
               "summary": "Document every public function."}),
    )
    .await);
    ids.push(r["id"].as_str().unwrap().to_owned());

    // A legacy record: no owner key and no schema_version, as written before either existed.
    let mut legacy = Memory::new(
        ShortId::mint(),
        "Written before ownership existed.".into(),
        Scope::parse("scope", SCOPE).unwrap(),
        Source::UserSaid,
        Category::Preference,
        &Caller::anonymous(),
        Timestamp::from_micros(1_700_000_000_123_456),
    );
    legacy.owner = None;
    legacy.schema_version = 0;
    let v: Vec<f32> = (0..384).map(|i| ((i * 7 % 13) as f32 - 6.0) / 10.0).collect();
    open(data)
        .insert(&spine_store::Access::operator(), &legacy, Embedding { model: BUILTIN, vector: &v })
        .unwrap();
    ids.push(legacy.id.to_string());
    ids
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn export_then_import_into_an_empty_store_reproduces_every_record_line() {
    let (a, b, files) = (TempDir::new().unwrap(), TempDir::new().unwrap(), TempDir::new().unwrap());
    let client = stdio_client(a.path()).await;
    let ids = populate(&client, a.path()).await;
    let n = ids.len();

    // Exported while the server that wrote the records keeps running.
    let a_file = files.path().join("a.jsonl");
    let out = ok_run(a.path(), &["export", "--output", a_file.to_str().unwrap(), "--json"]).await;
    let summary = out.json();
    assert_eq!(summary["records"], n);
    assert_eq!(summary["with_vectors"], n);
    assert_eq!(summary["marked_exported"], n);
    assert!(out.stderr.contains(&format!("exporting: {n}/{n}")), "{}", out.stderr);
    let a_lines = lines(&a_file);
    let e = audit_lines(&a_lines).len();
    assert!(e >= 8, "the writes' audit events are exported: {a_lines:?}");
    assert_eq!(summary["audit_events"], e);
    assert_eq!(a_lines.len(), n + e + 2, "header, records, audit events, end");
    let header: Value = serde_json::from_str(&a_lines[0]).unwrap();
    assert_eq!(header["header"]["format"], "spine-export");
    assert_eq!(header["header"]["version"], 2);
    assert_eq!(header["header"]["vectors"], true);
    assert_eq!(header["header"]["scope"], Value::Null);
    assert_eq!(a_lines[n + e + 1], format!(r#"{{"end":{{"records":{n},"audit_events":{e}}}}}"#));
    // The log follows the records, oldest first, as `spine audit --json` prints it.
    let first_event: Value = serde_json::from_str(&a_lines[n + 1]).unwrap();
    let log = ok_run(a.path(), &["audit", "--json", "--limit", "1000"]).await.json();
    let oldest = log["events"].as_array().unwrap().last().unwrap().clone();
    assert_eq!(first_event["audit"], oldest);
    let exported: BTreeSet<String> = a_lines[1..=n].iter().map(|l| record_id(l)).collect();
    assert_eq!(exported, ids.iter().cloned().collect(), "every record, of every owner");
    for line in &a_lines[1..=n] {
        let v: Value = serde_json::from_str(line).unwrap();
        assert_eq!(v["vector"]["model"], BUILTIN);
        assert_eq!(v["vector"]["dims"], 384);
    }
    let legacy: Value = serde_json::from_str(&a_lines[n]).unwrap();
    assert!(
        legacy["record"].get("owner").is_none() && legacy["record"].get("schema_version").is_none()
    );
    let first: Value = serde_json::from_str(&a_lines[1]).unwrap();
    assert_eq!(first["record"]["access_count"], 2);
    assert_eq!(first["record"]["citations"][0]["excerpt"], "deploy:\n\t./ship");

    // Every exported record now passes the purge gate.
    let parsed: Vec<RecordId> = ids.iter().map(|i| RecordId::parse(i).unwrap()).collect();
    assert!(open(a.path()).exported_unchanged(&parsed).unwrap().iter().all(|x| *x));

    // The same export on stdout, with the summary on stderr.
    let stdout = ok_run(a.path(), &["export"]).await;
    let stdout_lines: Vec<&str> = stdout.stdout.lines().collect();
    assert_eq!(stdout_lines[1..], a_lines[1..].iter().map(String::as_str).collect::<Vec<_>>()[..]);
    let said = format!("exported {n} records ({n} with vectors) and {e} audit events to stdout");
    assert!(stdout.stderr.contains(&said), "{}", stdout.stderr);

    // One scope only.
    let scoped = ok_run(a.path(), &["export", "--scope", "rule:repo:spine"]).await;
    let scoped: Vec<&str> = scoped.stdout.lines().collect();
    assert_eq!(scoped.len(), 4, "header, the rule, its store_rule event, end");
    assert!(scoped[0].contains(r#""scope":"rule:repo:spine""#));
    assert_eq!(record_id(scoped[1]), ids[7]);
    let event: Value = serde_json::from_str(scoped[2]).unwrap();
    assert_eq!(event["audit"]["action"], "store_rule");

    // Into an empty data directory, then out again: the same record lines, byte for byte.
    let imported =
        ok_run(b.path(), &["import", a_file.to_str().unwrap(), "--batch", "3", "--json"]).await;
    let s = imported.json();
    assert_eq!((s["records"].as_u64(), s["imported"].as_u64()), (Some(n as u64), Some(n as u64)));
    assert_eq!((s["already_present"].as_u64(), s["embedded"].as_u64()), (Some(0), Some(0)));
    assert_eq!(s["complete"], true);
    assert_eq!(s["embedders"], json!({ BUILTIN: n }));
    let b_file = files.path().join("b.jsonl");
    ok_run(b.path(), &["export", "--output", b_file.to_str().unwrap()]).await;
    assert_eq!(
        (s["audit_events"].as_u64(), s["audit_imported"].as_u64()),
        (Some(e as u64), Some(e as u64))
    );
    let b_lines = lines(&b_file);
    assert_eq!(record_lines(&b_lines), record_lines(&a_lines), "identical, vectors included");
    // The copy's log: every event of the original, and the import's own (one per batch).
    let (a_log, b_log) = (audit_lines(&a_lines), audit_lines(&b_lines));
    assert!(a_log.iter().all(|l| b_log.contains(l)), "every event carried over");
    assert_eq!(b_log.len(), a_log.len() + n.div_ceil(3), "and one per import batch");

    // Importing again changes nothing: every id and every event is present.
    let again = ok_run(b.path(), &["import", a_file.to_str().unwrap()]).await;
    assert!(again.stdout.contains("imported 0 records"), "{}", again.stdout);
    assert!(again.stdout.contains(&format!("skipped {n} records already present")));
    assert!(
        again
            .stdout
            .contains(&format!("imported 0 audit events into the audit log ({e} already there)")),
        "{}",
        again.stdout
    );
    let b2_file = files.path().join("b2.jsonl");
    ok_run(b.path(), &["export", "-o", b2_file.to_str().unwrap()]).await;
    let b2_lines = lines(&b2_file);
    assert_eq!(record_lines(&b2_lines), record_lines(&a_lines));
    assert_eq!(audit_lines(&b2_lines).len(), b_log.len() + 1, "the second import's own event");

    // A server on the copy finds records by the imported vectors and serves them whole.
    client.cancel().await.unwrap();
    let copy = stdio_client(b.path()).await;
    let found = ok(call(
        &copy,
        "search_memory",
        json!({"query": "Deploys go through make deploy; never push to prod by hand.",
               "scope": SCOPE, "k": 1}),
    )
    .await);
    assert_eq!(found["memories"][0]["id"], ids[0].as_str());
    assert!(found["memories"][0]["score"].as_f64().unwrap() > 0.99, "{found}");
    let got = ok(call(&copy, "get_memory", json!({"id": ids[0]})).await);
    assert_eq!(got["access_count"], 3);
    assert_eq!(got["tags"], json!(["deploy", "ops"]));
    copy.cancel().await.unwrap();
}

/// Five plain records written through the server; the export file's lines.
async fn five_records(files: &Path) -> (TempDir, Vec<String>) {
    let a = TempDir::new().unwrap();
    let client = stdio_client(a.path()).await;
    for i in 0..5 {
        store_memory(&client, note(&format!("Convention number {i}: keep it simple."))).await;
    }
    client.cancel().await.unwrap();
    let file = files.join("five.jsonl");
    ok_run(a.path(), &["export", "-o", file.to_str().unwrap()]).await;
    (a, lines(&file))
}

/// Five plain records stored directly (no server, no model); the export file's lines.
async fn five_stored(files: &Path) -> (TempDir, Vec<String>) {
    let a = TempDir::new().unwrap();
    let store = open(a.path());
    let v: Vec<f32> = (0..384).map(|i| ((i * 7 % 13) as f32 - 6.0) / 10.0).collect();
    for i in 0..5 {
        let m = Memory::new(
            ShortId::mint(),
            format!("Convention number {i}: keep it simple."),
            Scope::parse("scope", SCOPE).unwrap(),
            Source::UserSaid,
            Category::Convention,
            &Caller::anonymous(),
            Timestamp::from_micros(1_750_000_000_000_000 + i),
        );
        store
            .insert(&spine_store::Access::operator(), &m, Embedding { model: BUILTIN, vector: &v })
            .unwrap();
    }
    let file = files.join("five.jsonl");
    ok_run(a.path(), &["export", "-o", file.to_str().unwrap()]).await;
    (a, lines(&file))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn records_exported_without_vectors_are_embedded_on_import() {
    let files = TempDir::new().unwrap();
    let (a, with_vectors) = five_records(files.path()).await;
    let bare = files.path().join("bare.jsonl");
    let out =
        ok_run(a.path(), &["export", "--no-vectors", "-o", bare.to_str().unwrap(), "--json"]).await;
    assert_eq!(out.json()["with_vectors"], 0);
    let bare_lines = lines(&bare);
    assert!(bare_lines[0].contains(r#""vectors":false"#));
    assert!(bare_lines.iter().all(|l| !l.contains(r#""vector""#)));

    let c = TempDir::new().unwrap();
    let s = ok_run(c.path(), &["import", bare.to_str().unwrap(), "--json"]).await.json();
    assert_eq!((s["imported"].as_u64(), s["embedded"].as_u64()), (Some(5), Some(5)));
    assert_eq!(s["embedders"], json!({ BUILTIN: 5 }));
    // The import is one operator event naming the five records it wrote.
    let events = operator_events(c.path()).await;
    assert_eq!(events.len(), 1, "{events:?}");
    assert_eq!(
        (events[0]["action"].as_str(), events[0]["outcome"].as_str()),
        (Some("import"), Some("ok"))
    );
    assert_eq!(events[0]["record_ids"].as_array().unwrap().len(), 5);
    let (source, copy) = (open(a.path()), open(c.path()));
    for line in &with_vectors[1..6] {
        let id = RecordId::parse(&record_id(line)).unwrap();
        let original = source.vector(&id, BUILTIN).unwrap().unwrap();
        let embedded = copy.vector(&id, BUILTIN).unwrap().expect("embedded on import");
        assert!(spine_core::cosine(&original, &embedded) > 0.9999);
    }
    // The records themselves are exact.
    let again = ok_run(c.path(), &["export", "--no-vectors"]).await;
    let again: Vec<String> = again.stdout.lines().map(String::from).collect();
    assert_eq!(record_lines(&again), record_lines(&bare_lines));
}

/// The operator lane's audit events in `data`'s store, newest first.
async fn operator_events(data: &std::path::Path) -> Vec<Value> {
    let all = ok_run(data, &["audit", "--json", "--limit", "1000"]).await.json();
    let events = all["events"].as_array().unwrap();
    events.iter().filter(|e| e["lane"] == "operator").cloned().collect()
}

fn rfc3339_ago(secs: i64) -> String {
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap();
    EpochSeconds::from_secs(now.as_secs() as i64 - secs).to_rfc3339()
}

fn ids_of(report: &Value, key: &str) -> BTreeSet<String> {
    report[key].as_array().unwrap().iter().map(|r| r["id"].as_str().unwrap().to_owned()).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prune_expired_previews_then_deletes_exactly_what_it_listed_while_a_server_runs() {
    let d = TempDir::new().unwrap();
    let server = stdio_client(d.path()).await;
    let windowed = |content: &str, scope: &str, not_after: &str| {
        json!({"content": content, "scope": scope, "source": "user-said",
               "category": "decision", "not_after": not_after})
    };
    let mut long_ago = BTreeSet::new();
    for (content, scope) in [
        ("Freeze one", "a:project:x"),
        ("Freeze two", "a:project:x"),
        ("Freeze three", "b:project:y"),
    ] {
        let r =
            ok(call(&server, "schedule_memory", windowed(content, scope, "2020-01-01T00:00:00Z"))
                .await);
        long_ago.insert(r["id"].as_str().unwrap().to_owned());
    }
    let recent = ok(call(
        &server,
        "schedule_memory",
        windowed("Freeze four", "a:project:x", &rfc3339_ago(3600)),
    )
    .await);
    let recent = recent["id"].as_str().unwrap().to_owned();
    // Not expired: a future window, no window, archived, superseded.
    ok(call(
        &server,
        "schedule_memory",
        windowed("Freeze five", "a:project:x", "2999-01-01T00:00:00Z"),
    )
    .await);
    let plain = store_memory(&server, note("No window at all.")).await;
    let archived = store_memory(&server, note("Archived, not expired.")).await;
    ok(call(&server, "archive_memory", json!({"ids": [archived]})).await);
    ok(call(
        &server,
        "supersede_memory",
        json!({"content": "Replacement.", "scope": SCOPE,
        "source": "user-said", "category": "convention", "supersedes": [plain]}),
    )
    .await);
    let total = open(d.path()).count_records(None).unwrap();
    assert_eq!(total, 8);

    // The preview lists every expired record and changes nothing.
    let preview = ok_run(d.path(), &["prune-expired", "--json"]).await.json();
    assert_eq!(preview["applied"], false);
    assert_eq!(preview["total"], 4);
    assert_eq!(preview["by_scope"], json!({"a:project:x": 3, "b:project:y": 1}));
    let mut all_expired = long_ago.clone();
    all_expired.insert(recent.clone());
    assert_eq!(ids_of(&preview, "records"), all_expired);
    assert_eq!(open(d.path()).count_records(None).unwrap(), total);
    let human = ok_run(d.path(), &["prune-expired"]).await;
    assert!(human.stdout.contains("preview: 4 expired records"), "{}", human.stdout);
    assert!(human.stdout.contains("--apply"), "{}", human.stdout);
    assert!(human.stdout.contains(&recent), "{}", human.stdout);

    // A grace period of a day leaves the one that expired an hour ago.
    let graced = ok_run(d.path(), &["prune-expired", "--older-than", "1d", "--json"]).await.json();
    assert_eq!(ids_of(&graced, "records"), long_ago);
    assert_eq!(open(d.path()).count_records(None).unwrap(), total);

    // --apply deletes exactly what that preview listed.
    let applied = ok_run(d.path(), &["prune-expired", "--older-than", "1d", "--apply", "--json"])
        .await
        .json();
    assert_eq!(applied["applied"], true);
    assert_eq!(ids_of(&applied, "records"), long_ago);
    assert_eq!(applied["by_scope"], graced["by_scope"]);
    assert_eq!(applied["changed_meanwhile"], json!([]));
    assert_eq!(open(d.path()).count_records(None).unwrap(), total - 3);
    // Previews leave no event; the applying run leaves one naming what it deleted.
    let events = operator_events(d.path()).await;
    assert_eq!(events.len(), 1, "{events:?}");
    assert_eq!(events[0]["action"], "prune-expired");
    let named: BTreeSet<String> = events[0]["record_ids"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap().to_owned())
        .collect();
    assert_eq!(named, long_ago);

    // The running server sees the deletions at once.
    for id in &long_ago {
        let e = err(call(&server, "get_memory", json!({"id": id})).await);
        assert_eq!(e["code"], "not_found", "{e}");
    }
    let expired =
        ok(call(&server, "list_scheduled", json!({"cross_spine": true, "state": "expired"})).await);
    let listed: Vec<&str> =
        expired["memories"].as_array().unwrap().iter().map(|m| m["id"].as_str().unwrap()).collect();
    assert_eq!(listed, [recent.as_str()]);

    // Then the rest; then nothing is left to prune.
    let applied = ok_run(d.path(), &["prune-expired", "--apply"]).await;
    assert!(applied.stdout.contains("deleted 1 expired record"), "{}", applied.stdout);
    let none = ok_run(d.path(), &["prune-expired"]).await;
    assert!(none.stdout.contains("nothing to prune"), "{}", none.stdout);
    assert_eq!(open(d.path()).count_records(None).unwrap(), total - 4);
    let kept = ok(call(&server, "list_memory", json!({"cross_spine": true})).await);
    let contents: Vec<&str> = kept["memories"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["content"].as_str().unwrap())
        .collect();
    assert_eq!(contents, ["Replacement.", "Freeze five"], "{kept}");
    server.cancel().await.unwrap();
}

/// A record line with a hand-built payload: `edit` changes the record's JSON.
fn crafted(
    content: &str,
    edit: impl FnOnce(&mut serde_json::Map<String, Value>),
) -> (String, String) {
    spine_testkit::records::export_line(SCOPE, content, edit)
}

fn header() -> String {
    spine_testkit::records::export_header()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn migrate_stamps_older_records_leaves_newer_ones_and_says_so_the_second_time() {
    let (e, files) = (TempDir::new().unwrap(), TempDir::new().unwrap());
    let (old_id, old) = crafted("Written before schema versions.", |o| {
        o.remove("schema_version");
    });
    let newer_version = SCHEMA_VERSION + 98;
    let (newer_id, newer) = crafted("Written by a newer spine.", |o| {
        o.insert("schema_version".into(), json!(newer_version));
        o.insert("ranking_hint".into(), json!({"weight": 3}));
    });
    let (_, current) = crafted("Written by this spine.", |_| {});
    let file = files.path().join("mixed.jsonl");
    write_lines(&file, &[header(), old, newer.clone(), current, r#"{"end":{"records":3}}"#.into()]);
    let s = ok_run(e.path(), &["import", file.to_str().unwrap(), "--json"]).await.json();
    assert_eq!((s["imported"].as_u64(), s["embedded"].as_u64()), (Some(3), Some(3)));

    // A server runs on the directory throughout.
    let server = stdio_client(e.path()).await;
    let report = ok_run(e.path(), &["migrate", "--batch", "2", "--json"]).await.json();
    assert_eq!(report["schema_version"], SCHEMA_VERSION);
    assert_eq!(
        (report["migrated"].as_u64(), report["already_current"].as_u64()),
        (Some(1), Some(1))
    );
    assert_eq!(report["newer"], 1);
    // The server running on the directory serves the migrated record; the newer one keeps
    // its stamp (the migrate rules are tested in-process in spine-ops).
    let got = ok(call(&server, "get_memory", json!({"id": old_id})).await);
    assert_eq!(got["schema_version"], SCHEMA_VERSION);
    assert_eq!(got["content"], "Written before schema versions.");
    let got = ok(call(&server, "get_memory", json!({"id": newer_id})).await);
    assert_eq!(got["schema_version"], newer_version, "never lowered");

    // Idempotent: the second run changes nothing and says so.
    let second = ok_run(e.path(), &["migrate"]).await;
    assert!(
        second.stdout.contains("nothing to migrate: 2 records at schema version"),
        "{}",
        second.stdout
    );
    assert!(second.stdout.contains("1 record stamped newer"), "{}", second.stdout);
    server.cancel().await.unwrap();

    // An old record carrying a key this spine does not know is kept, never stripped.
    let f = TempDir::new().unwrap();
    let (odd_id, odd) = crafted("Old, with an unknown key.", |o| {
        o.remove("schema_version");
        o.insert("mystery".into(), json!("keep me"));
    });
    write_lines(&file, &[header(), odd.clone(), r#"{"end":{"records":1}}"#.into()]);
    ok_run(f.path(), &["import", file.to_str().unwrap()]).await;
    let r =
        refused(f.path(), &["migrate"], &["1 record could not be migrated without losing data"])
            .await;
    assert!(r.stdout.contains(&odd_id) && r.stdout.contains("mystery"), "{}", r.stdout);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn misuse_exits_non_zero_with_a_message() {
    let files = TempDir::new().unwrap();
    let (a, good) = five_stored(files.path()).await;
    let a = a.path();
    let existing = files.path().join("five.jsonl");
    let before = std::fs::read(&existing).unwrap();

    refused(a, &["export", "--json"], &["--json needs --output"]).await;
    refused(
        a,
        &["export", "-o", existing.to_str().unwrap()],
        &["exists already", "never overwrites"],
    )
    .await;
    assert_eq!(std::fs::read(&existing).unwrap(), before, "untouched");
    refused(a, &["export", "--scope", "not a scope"], &[]).await;
    refused(a, &["export", "--scope", SCOPE, "--all-scopes"], &["cannot be used with"]).await;
    if !on_postgres() {
        // A mistyped --data-dir (a database has no such state).
        let missing = files.path().join("no-such-dir");
        refused(&missing, &["export"], &["no Spine store in", "--data-dir"]).await;
        refused(&missing, &["prune-expired"], &["no Spine store in"]).await;
        refused(&missing, &["migrate"], &["no Spine store in"]).await;
        assert!(!missing.exists(), "no store was created");
    }
    refused(a, &["prune-expired", "--older-than", "soon"], &["such as 90s"]).await;
    refused(a, &["migrate", "--batch", "0"], &["--batch"]).await;

    let b = TempDir::new().unwrap();
    let b = b.path().join("fresh");
    refused(
        &b,
        &["import", files.path().join("nope.jsonl").to_str().unwrap()],
        &["opening", "nope.jsonl"],
    )
    .await;
    let headless = files.path().join("headless.jsonl");
    write_lines(&headless, &good[1..]);
    refused(&b, &["import", headless.to_str().unwrap()], &["line 1:", "not the header"]).await;
    assert!(!b.exists(), "a file that is no export creates no store");
    // The import rules on the file (its lines, its end) are tested in-process in spine-ops;
    // here a file cut short: what it holds is imported, and the command says so and fails.
    let c = TempDir::new().unwrap();
    let cut_file = files.path().join("cut.jsonl");
    write_lines(&cut_file, &good[..4]);
    let cut = refused(
        c.path(),
        &["import", cut_file.to_str().unwrap()],
        &["cut short", "3 records it holds were imported"],
    )
    .await;
    assert!(cut.stdout.contains("imported 3 records"), "{}", cut.stdout);
}
