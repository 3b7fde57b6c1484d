//! `spine spine-review` end to end: the real binary against a real store, written by a real
//! `spine mcp` server (which stays up while the commands run) or directly through the store
//! (SQLite, or PostgreSQL with `SPINE_TEST_BACKEND=postgres`) where a test needs exact
//! states, and corrupted with raw SQL where verify must find something. Flags, printing
//! and exit codes; the review rules (state counts, consolidation, the purge gate and
//! selection, archive / restore outcomes) are tested in-process in spine-ops' `review` tests.

use std::path::Path;
use std::time::Duration;

use crate::common::*;
use rusqlite::{Connection, params};
use serde_json::{Value, json};
use spine_core::{EpochSeconds, Memory, RecordId};
use spine_store::Embedding;
use tempfile::TempDir;

const BUILTIN: &str = "builtin:all-MiniLM-L6-v2";
const DIMS: usize = 384;
const SCOPE: &str = "review:project:spine";
const OTHER: &str = "review:project:other";

/// `spine spine-review <args> --json`, which must succeed.
async fn review(data: &Path, args: &[&str]) -> Value {
    let mut all = vec!["spine-review"];
    all.extend_from_slice(args);
    all.push("--json");
    let r = spine(data, &all).await;
    assert_eq!(r.code, 0, "spine-review {args:?} failed: {}\n{}", r.stderr, r.stdout);
    r.json()
}

/// `spine spine-review <args>`, which must fail with a message containing `needle`.
async fn refused(data: &Path, args: &[&str], needle: &str) {
    let mut all = vec!["spine-review"];
    all.extend_from_slice(args);
    let r = spine(data, &all).await;
    assert_ne!(r.code, 0, "spine-review {args:?} succeeded: {}", r.stdout);
    assert!(r.stderr.contains(needle), "{needle:?} not in the error of {args:?}: {}", r.stderr);
    assert!(r.stdout.is_empty(), "a refused command printed: {}", r.stdout);
}

const T0: i64 = 1_700_000_000;

fn now_secs() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs() as i64
}

/// A record as `owner` would store it (empty owner: the anonymous bucket).
fn record(scope: &str, content: &str, owner: &str) -> Memory {
    spine_testkit::records::record(scope, content, owner, T0)
}

/// A unit vector of the built-in model's length pointing somewhere of its own.
fn vector(seed: u64) -> Vec<f32> {
    spine_testkit::records::unit_vector(seed, DIMS)
}

fn insert(store: &dyn spine_store::OperatorStore, m: &Memory, seed: u64) {
    store
        .insert(
            &spine_store::Access::operator(),
            m,
            Embedding { model: BUILTIN, vector: &vector(seed) },
        )
        .unwrap();
}

fn db(data: &Path) -> Connection {
    let c = Connection::open(data.join("spine.db")).unwrap();
    c.busy_timeout(Duration::from_secs(10)).unwrap();
    c
}

async fn store_memory(client: &Client, scope: &str, content: &str) -> String {
    let r = ok(call(
        client,
        "store_memory",
        json!({"content": content, "scope": scope, "source": "user-said",
               "category": "convention"}),
    )
    .await);
    r["id"].as_str().unwrap().to_owned()
}

fn get(data: &Path, id: &str) -> Option<Memory> {
    let store = open_store(data);
    store.get_many(&[RecordId::parse(id).unwrap()]).unwrap().pop()
}

#[tokio::test]
async fn sweeps_and_bad_input_are_refused_and_change_nothing() {
    let dir = TempDir::new().unwrap();
    let data = dir.path();
    // No store yet: nothing is created by a mistyped --data-dir (a database has no such
    // state).
    if !on_postgres() {
        refused(data, &["scan", "--all-scopes"], "no Spine store").await;
        assert!(!data.join("spine.db").exists());
    }

    let store = open_store(data);
    let mut archived = record(SCOPE, "archived and exported", "");
    archived.archived_at = Some(EpochSeconds::from_secs(T0));
    insert(&*store, &archived, 1);
    store
        .mark_exported(std::slice::from_ref(&archived), "x.jsonl", EpochSeconds::from_secs(T0))
        .unwrap();
    let active = record(SCOPE, "active", "");
    insert(&*store, &active, 2);

    // SPEC Errors 9: every sweep needs --scope or --all-scopes.
    for sweep in ["scan", "verify", "consolidate"] {
        refused(data, &[sweep], "--all-scopes").await;
        refused(data, &[sweep, "--scope", "no-colons"], "<run>:<tier>:<repo>").await;
    }
    refused(data, &["scan", "--scope", SCOPE, "--all-scopes"], "cannot be used with").await;
    // The free-form purge path needs a scope flag too; a purge needs a selection.
    for filter in [&["--category", "gotcha"][..], &["--tags", "x"], &["--older-than", "30d"]] {
        let mut args = vec!["purge", "--apply"];
        args.extend_from_slice(filter);
        refused(data, &args, "--scope <scope> or --all-scopes").await;
    }
    refused(data, &["purge", "--apply"], "say what to purge").await;
    refused(data, &["purge", "--class", "archived", "--scope", "", "--apply"], "must not be empty")
        .await;
    refused(data, &["purge", "--class", "forgotten"], "invalid value").await;
    refused(data, &["purge", "--category", "rumour", "--all-scopes"], "category must be one of")
        .await;
    refused(data, &["purge", "--older-than", "soon", "--all-scopes"], "such as 90s").await;
    refused(data, &["purge", "--tags", "a,,b", "--all-scopes"], "blank tag").await;
    for t in ["--threshold=0", "--threshold=1.5", "--threshold=-0.2", "--threshold=NaN"] {
        refused(data, &["consolidate", "--all-scopes", t], "--threshold must be").await;
    }
    // archive / restore: malformed, missing.
    refused(data, &["archive"], "--id").await;
    refused(data, &["archive", "--id", "not an id"], "UUID or a 10-character short_id").await;
    // A database URL that leads nowhere: refused with where and why, nothing touched.
    let url = "postgres://spine@127.0.0.1:1/spine";
    let r = spine(data, &["spine-review", "scan", "--all-scopes", "--database-url", url]).await;
    assert_ne!(r.code, 0);
    assert!(r.stderr.contains("cannot reach PostgreSQL at 127.0.0.1:1/spine"), "{}", r.stderr);

    // Nothing changed: the active record is still active, the archived one still there.
    let left = store.get_many(&[archived.id, active.id]).unwrap();
    assert_eq!(left.len(), 2);
    assert_eq!(left[1].archived_at, None);
}

/// The violations of `report` as (id, check) pairs.
fn found(report: &Value) -> Vec<(String, String)> {
    report["violations"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| (v["id"].as_str().unwrap().to_owned(), v["check"].as_str().unwrap().to_owned()))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn verify_passes_a_healthy_store_and_names_every_planted_violation() {
    if embedded_only() {
        return;
    }
    let dir = TempDir::new().unwrap();
    let data = dir.path();
    // A healthy store written by the real server: plain records, a chain, a merge, a rule.
    let client = stdio_client(data).await;
    let mut plain = Vec::new();
    for i in 0..12 {
        plain.push(
            store_memory(&client, SCOPE, &format!("Convention number {i} of the team")).await,
        );
    }
    let old = store_memory(&client, SCOPE, "Deploys go out on Tuesdays").await;
    let supersede = |content: &str, targets: Vec<&str>| {
        json!({"content": content, "scope": SCOPE, "source": "user-said",
               "category": "decision", "supersedes": targets})
    };
    let mid = ok(call(
        &client,
        "supersede_memory",
        supersede("Deploys go out on Wednesdays", vec![&old]),
    )
    .await)["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let head =
        ok(call(&client, "supersede_memory", supersede("Deploys go out on Thursdays", vec![&mid]))
            .await)["id"]
            .as_str()
            .unwrap()
            .to_owned();
    let (m1, m2) = (
        store_memory(&client, SCOPE, "Lint with clippy").await,
        store_memory(&client, SCOPE, "Format with rustfmt").await,
    );
    let merged = ok(call(
        &client,
        "supersede_memory",
        supersede("Lint with clippy, format with rustfmt", vec![&m1, &m2]),
    )
    .await)["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let rule = ok(call(
        &client,
        "store_rule",
        json!({"content": "Never force-push main", "scope": "rule:project:spine",
               "summary": "No force-push to main"}),
    )
    .await)["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let clean = review(data, &["verify", "--all-scopes"]).await;
    assert_eq!(clean["ok"], true, "{clean}");
    assert_eq!(clean["checked"], 19);
    assert_eq!(clean["embedder"]["model"], BUILTIN);
    assert_eq!(clean["embedder"]["dims"], DIMS);
    let human = spine(data, &["spine-review", "verify", "--all-scopes"]).await;
    assert_eq!(human.code, 0, "{}", human.stdout);
    assert!(human.stdout.contains("no violations"), "{}", human.stdout);
    assert!(human.stderr.contains("verifying: 19 to do"), "progress: {}", human.stderr);

    // Plant one violation of each kind, with raw SQL, while the server is still up.
    let c = db(data);
    let set_body = |id: &str, path: &str, value: Value| {
        c.execute(
            "UPDATE memories SET body = json_set(body, ?2, json(?3)) WHERE id = ?1",
            params![id, path, value.to_string()],
        )
        .unwrap();
    };
    let set_successor = |id: &str, succ: Option<&str>| {
        c.execute("UPDATE memories SET superseded_by = ?2 WHERE id = ?1", params![id, succ])
            .unwrap();
        match succ {
            Some(s) => set_body(id, "$.superseded_by", json!(s)),
            None => {
                c.execute(
                    "UPDATE memories SET body = json_remove(body, '$.superseded_by') WHERE id = ?1",
                    [id],
                )
                .unwrap();
            }
        }
    };
    let rowid = |id: &str| -> i64 {
        c.query_row("SELECT rowid FROM memories WHERE id = ?1", [id], |r| r.get(0)).unwrap()
    };
    // payload_corrupt
    c.execute("UPDATE memories SET body = '{\"id\": oops' WHERE id = ?1", [&plain[0]]).unwrap();
    // columns_mismatch: the column says archived, the payload does not.
    c.execute("UPDATE memories SET archived_at = 5 WHERE id = ?1", [&plain[1]]).unwrap();
    // missing_vector
    c.execute("DELETE FROM vectors WHERE memory = ?1", [rowid(&plain[2])]).unwrap();
    // vector_dimension: 3 finite, non-zero floats.
    let short: Vec<u8> = [0.5f32, 0.25, 0.125].iter().flat_map(|x| x.to_le_bytes()).collect();
    c.execute(
        "UPDATE vectors SET vec = ?2, dims = 3 WHERE memory = ?1",
        params![rowid(&plain[3]), short],
    )
    .unwrap();
    // vector_corrupt: the dims column disagrees with the bytes.
    c.execute("UPDATE vectors SET dims = 7 WHERE memory = ?1", [rowid(&plain[4])]).unwrap();
    // embedder_stamp
    c.execute("UPDATE vectors SET model = 'openai:other' WHERE memory = ?1", [rowid(&plain[5])])
        .unwrap();
    // duplicate_short_id: plain[7] takes plain[6]'s handle (column and payload agree).
    let taken: String = c
        .query_row("SELECT short_id FROM memories WHERE id = ?1", [&plain[6]], |r| r.get(0))
        .unwrap();
    c.execute("UPDATE memories SET short_id = ?2 WHERE id = ?1", params![&plain[7], taken])
        .unwrap();
    set_body(&plain[7], "$.short_id", json!(taken));
    // backlink_missing: the head forgets mid in its supersedes.
    set_body(&head, "$.supersedes", json!([]));
    // predecessor_not_superseded: m2 loses its successor, merged still lists it.
    set_successor(&m2, None);
    // dangling_successor
    let ghost = RecordId::mint().to_string();
    set_successor(&plain[8], Some(&ghost));
    // chain_cycle: plain[9] and plain[10] supersede each other.
    set_successor(&plain[9], Some(&plain[10]));
    set_successor(&plain[10], Some(&plain[9]));
    set_body(&plain[9], "$.supersedes", json!([plain[10]]));
    set_body(&plain[10], "$.supersedes", json!([plain[9]]));
    // rule_superseded: plain[11] claims the rule.
    set_successor(&rule, Some(&plain[11]));
    set_body(&plain[11], "$.supersedes", json!([rule]));
    // predecessor_other_successor: merged also lists old, which names mid.
    set_body(&merged, "$.supersedes", json!([m1, m2, old]));

    let r = spine(data, &["spine-review", "verify", "--all-scopes", "--json"]).await;
    assert_eq!(r.code, 1, "violations exit 1: {}", r.stderr);
    let report = r.json();
    assert_eq!(report["ok"], false);
    let got = found(&report);
    let expected = [
        (&plain[0], "payload_corrupt"),
        (&plain[1], "columns_mismatch"),
        (&plain[2], "missing_vector"),
        (&plain[3], "vector_dimension"),
        (&plain[4], "vector_corrupt"),
        (&plain[5], "embedder_stamp"),
        (&plain[6], "duplicate_short_id"),
        (&plain[7], "duplicate_short_id"),
        (&mid, "backlink_missing"),
        (&merged, "predecessor_not_superseded"),
        (&merged, "predecessor_other_successor"),
        (&plain[8], "dangling_successor"),
        (&plain[9], "chain_cycle"),
        (&plain[10], "chain_cycle"),
        (&rule, "rule_superseded"),
    ];
    for (id, check) in expected {
        assert!(got.contains(&(id.clone(), check.to_owned())), "{check} on {id} missing: {got:?}");
    }
    assert_eq!(got.len(), expected.len(), "nothing else reported: {got:#?}");
    assert_eq!(report["counts"]["duplicate_short_id"], 2);
    let v = &report["violations"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["check"] == "dangling_successor")
        .unwrap()["detail"];
    assert!(v.as_str().unwrap().contains(&ghost), "{v}");

    // Human output names each record and exits 1 too.
    let human = spine(data, &["spine-review", "verify", "--all-scopes"]).await;
    assert_eq!(human.code, 1);
    for (id, check) in expected {
        assert!(human.stdout.contains(id) && human.stdout.contains(check), "{}", human.stdout);
    }
    assert!(human.stdout.contains("15 violations"), "{}", human.stdout);

    // A scope with nothing wrong passes on its own.
    let rules = review(data, &["verify", "--scope", "rule:project:x"]).await;
    assert_eq!((rules["ok"].clone(), rules["checked"].clone()), (json!(true), json!(0)));
    // An OpenAI-compatible embedder configured instead: every vector has a foreign stamp.
    let r = spine(
        data,
        &[
            "spine-review",
            "verify",
            "--scope",
            SCOPE,
            "--json",
            "--embedder",
            "openai",
            "--embed-url",
            "http://127.0.0.1:9",
            "--embed-model",
            "m",
            "--embed-dims",
            "8",
        ],
    )
    .await;
    assert_eq!(r.code, 1);
    let report = r.json();
    assert_eq!(report["embedder"]["model"], "openai:m");
    // 18 records in the scope: one has no vector and one a corrupt one.
    assert_eq!(report["counts"]["embedder_stamp"], 16, "{}", report["counts"]);
    client.cancel().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn consolidate_proposes_then_applies_exactly_that_with_links_both_ways() {
    if embedded_only() {
        return;
    }
    let dir = TempDir::new().unwrap();
    let data = dir.path();
    let client = stdio_client(data).await;
    // Three copies of one convention (oldest first), a distinct record, the same text in
    // another scope, an archived copy, and two identical rules.
    let text = "Run cargo clippy with -D warnings before every commit";
    let a = store_memory(&client, SCOPE, text).await;
    let b = store_memory(&client, SCOPE, &format!("{text}.")).await;
    let distinct = store_memory(&client, SCOPE, "The staging database is reset every night").await;
    let c = store_memory(&client, SCOPE, &text.to_lowercase()).await;
    let elsewhere = store_memory(&client, OTHER, text).await;
    let archived = store_memory(&client, SCOPE, text).await;
    ok(call(&client, "archive_memory", json!({"ids": [archived]})).await);
    for _ in 0..2 {
        ok(call(
            &client,
            "store_rule",
            json!({"content": "Never force-push main", "scope": "rule:project:spine",
                   "summary": "No force-push"}),
        )
        .await);
    }

    let preview = review(data, &["consolidate", "--all-scopes"]).await;
    assert_eq!(preview["applied"], false);
    assert_eq!(preview["threshold"].as_f64().unwrap() as f32, 0.95);
    let proposals = preview["proposals"].as_array().unwrap();
    assert_eq!(proposals.len(), 1, "{preview:#}");
    let p = &proposals[0];
    assert_eq!(p["successor"]["id"], c.as_str(), "the newest copy is kept: {p:#}");
    let targets: Vec<&str> =
        p["supersedes"].as_array().unwrap().iter().map(|t| t["id"].as_str().unwrap()).collect();
    assert_eq!(targets, [a.as_str(), b.as_str()]);
    for t in p["supersedes"].as_array().unwrap() {
        assert!(t["similarity"].as_f64().unwrap() >= 0.95, "{t}");
        assert_eq!(t["status"], "proposed");
    }
    // The preview wrote nothing.
    for id in [&a, &b, &c] {
        let m = get(data, id).unwrap();
        assert!(m.superseded_by.is_none() && m.supersedes.is_empty(), "{m:?}");
    }
    let human = spine(data, &["spine-review", "consolidate", "--scope", SCOPE]).await;
    assert_eq!(human.code, 0);
    assert!(
        human.stdout.contains("would supersede") && human.stdout.contains("nothing written"),
        "{}",
        human.stdout
    );

    // Applying does exactly what the preview proposed.
    let applied = review(data, &["consolidate", "--all-scopes", "--apply"]).await;
    assert_eq!(applied["applied"], true);
    assert_eq!(applied["summary"]["applied"], 2, "{applied:#}");
    assert_eq!(applied["summary"]["skipped"], 0);
    let strip = |v: &Value| {
        let mut v = v.clone();
        for p in v.as_array_mut().unwrap() {
            for t in p["supersedes"].as_array_mut().unwrap() {
                t.as_object_mut().unwrap().remove("status");
            }
        }
        v
    };
    assert_eq!(strip(&applied["proposals"]), strip(&preview["proposals"]));
    let head = get(data, &c).unwrap();
    assert_eq!(
        head.supersedes.iter().map(|i| i.to_string()).collect::<Vec<_>>(),
        [a.clone(), b.clone()]
    );
    for id in [&a, &b] {
        assert_eq!(get(data, id).unwrap().superseded_by.map(|s| s.to_string()), Some(c.clone()));
    }
    for id in [&distinct, &elsewhere, &archived] {
        assert!(get(data, id).unwrap().superseded_by.is_none());
    }
    let rules = open_store(data);
    let conn = db(data);
    let rule_links: i64 = conn
        .query_row(
            "SELECT COUNT(*) FROM memories WHERE category = 'rule'
             AND (superseded_by IS NOT NULL OR json_array_length(body, '$.supersedes') > 0)",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(rule_links, 0, "rules are never superseded nor superseding");
    drop(rules);

    // The store is consistent, the server's recall hides the superseded copies, and there
    // is nothing left to consolidate.
    assert_eq!(review(data, &["verify", "--all-scopes"]).await["ok"], true);
    let found =
        ok(call(&client, "search_memory", json!({"query": text, "scope": SCOPE, "k": 10})).await);
    let hits: Vec<&str> =
        found["memories"].as_array().unwrap().iter().map(|m| m["id"].as_str().unwrap()).collect();
    assert!(
        hits.contains(&c.as_str()) && !hits.contains(&a.as_str()) && !hits.contains(&b.as_str()),
        "{hits:?}"
    );
    let again = review(data, &["consolidate", "--all-scopes", "--apply"]).await;
    assert_eq!(again["proposals"], json!([]));

    client.cancel().await.unwrap();
}

/// Purge end to end: the preview's human listing with the refusal's hint, then `--apply`
/// removing the record with its tags and vector (the selection rules are tested in-process
/// in spine-ops' `review` tests).
#[tokio::test]
async fn purge_previews_in_words_then_deletes_the_record_with_its_rows() {
    if embedded_only() {
        return;
    }
    let dir = TempDir::new().unwrap();
    let data = dir.path();
    let store = open_store(data);
    let past = EpochSeconds::from_secs(now_secs() - 60);
    let mut exported = record(SCOPE, "archived, exported as it is", "");
    exported.tags = vec!["old".into()];
    let mut unexported = record(SCOPE, "archived, never exported", "");
    for m in [&mut exported, &mut unexported] {
        m.archived_at = Some(past);
    }
    insert(&*store, &exported, 1);
    insert(&*store, &unexported, 2);
    store.mark_exported(std::slice::from_ref(&exported), "backup.jsonl", past).unwrap();

    let human = spine(data, &["spine-review", "purge", "--class", "archived"]).await;
    assert_eq!(human.code, 0);
    assert!(
        human.stdout.contains("would delete 1 record") && human.stdout.contains("nothing deleted"),
        "{}",
        human.stdout
    );
    assert!(human.stdout.contains("spine export"), "{}", human.stdout);
    assert_eq!(store.get_many(&[exported.id]).unwrap().len(), 1, "a preview deletes nothing");

    let conn = db(data);
    let rowid: i64 = conn
        .query_row("SELECT rowid FROM memories WHERE id = ?1", [exported.id.to_string()], |r| {
            r.get(0)
        })
        .unwrap();
    // Classes are comma-separated.
    let applied = review(data, &["purge", "--class", "expired,archived", "--apply"]).await;
    assert_eq!(applied["summary"]["deleted"], 1, "{applied:#}");
    assert_eq!(applied["outcomes"], json!([{"id": exported.id.to_string(), "deleted": true}]));
    assert!(store.get_many(&[exported.id]).unwrap().is_empty());
    assert_eq!(store.get_many(&[unexported.id]).unwrap().len(), 1);
    // The purge is in the audit log, as the operator's, with the record it deleted; the
    // preview before it left nothing there.
    let q = spine_store::AuditQuery { limit: 100, ..Default::default() };
    let events = store.audit_events(&q).unwrap();
    let purges: Vec<_> =
        events.iter().filter(|e| e.lane == spine_core::audit::Lane::Operator).collect();
    assert_eq!(purges.len(), 1, "{events:?}");
    assert_eq!((purges[0].action.as_str(), purges[0].outcome.as_str()), ("purge", "ok"));
    assert_eq!(purges[0].record_ids, [exported.id]);
    for table in ["memory_tags", "vectors"] {
        let n: i64 = conn
            .query_row(&format!("SELECT COUNT(*) FROM {table} WHERE memory = ?1"), [rowid], |r| {
                r.get(0)
            })
            .unwrap();
        assert_eq!(n, 0, "{table} rows go with the record");
    }
}

/// Archive and restore end to end: a short id in any case, one line per outcome, and the
/// `ambiguous` line naming every record a short id matches (the outcome rules are tested
/// in-process in spine-ops' `review` tests).
#[tokio::test]
async fn archive_and_restore_print_one_line_per_id() {
    if embedded_only() {
        return;
    }
    let dir = TempDir::new().unwrap();
    let data = dir.path();
    let store = open_store(data);
    let alices = record(SCOPE, "alice's private note", "alice@example.com");
    let bobs = record(SCOPE, "bob's private note", "bob@example.com");
    insert(&*store, &alices, 1);
    insert(&*store, &bobs, 2);
    let short = alices.short_id.as_str().to_lowercase();

    let r = review(data, &["archive", "--id", &short, "--id", &bobs.id.to_string()]).await;
    assert_eq!(r["results"][0]["outcome"], "archived");
    assert_eq!(r["results"][0]["id"], alices.id.to_string());
    assert_eq!(r["results"][1]["outcome"], "archived");
    let now = now_secs();
    for m in store.get_many(&[alices.id, bobs.id]).unwrap() {
        let at = m.archived_at.expect("archived").as_secs();
        assert!((now - 60..=now + 60).contains(&at), "{at}");
    }
    let restored = spine(data, &["spine-review", "restore", "--id", &short]).await;
    assert_eq!(restored.code, 0);
    let line = format!("restored: {} ({}, {SCOPE})", alices.short_id, alices.id);
    assert!(restored.stdout.contains(&line), "{}", restored.stdout);
    let human = spine(data, &["spine-review", "restore", "--id", &short]).await;
    assert_eq!(human.code, 0);
    assert!(human.stdout.contains("not_archived"), "{}", human.stdout);
    let unknown = RecordId::mint().to_string();
    let human = spine(data, &["spine-review", "restore", "--id", &unknown]).await;
    assert_eq!(human.code, 0);
    assert!(human.stdout.contains(&format!("not_found: {unknown}")), "{}", human.stdout);

    // A short id two records share is `ambiguous`, naming both, and changes neither.
    db(data)
        .execute(
            "UPDATE memories SET short_id = ?2 WHERE id = ?1",
            params![bobs.id.to_string(), alices.short_id.as_str()],
        )
        .unwrap();
    let human = spine(data, &["spine-review", "restore", "--id", alices.short_id.as_str()]).await;
    assert_eq!(human.code, 0);
    let line = format!("ambiguous: {} is the short_id of", alices.short_id);
    assert!(human.stdout.contains(&line), "{}", human.stdout);
    assert!(human.stdout.contains(&bobs.id.to_string()), "{}", human.stdout);
    assert!(store.get_many(&[bobs.id]).unwrap()[0].archived_at.is_some());

    // Every run is in the audit log, on the operator lane: the one that flipped records
    // names them, each that flipped nothing (not_archived, not_found, ambiguous) is one
    // event without records.
    let q = spine_store::AuditQuery { limit: 100, ..Default::default() };
    let mut events = store.audit_events(&q).unwrap();
    events.reverse();
    let runs: Vec<(&str, &str, Vec<RecordId>)> = events
        .iter()
        .filter(|e| e.lane == spine_core::audit::Lane::Operator)
        .map(|e| {
            let mut ids = e.record_ids.clone();
            ids.sort();
            (e.action.as_str(), e.outcome.as_str(), ids)
        })
        .collect();
    let mut both = vec![alices.id, bobs.id];
    both.sort();
    assert_eq!(
        runs,
        [
            ("archive", "ok", both),
            ("restore", "ok", vec![alices.id]),
            ("restore", "ok", vec![]),
            ("restore", "ok", vec![]),
            ("restore", "ok", vec![]),
        ],
        "{events:?}"
    );
    assert!(events.iter().all(|e| e.owner.is_empty() && !e.actor.is_empty()), "{events:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn commands_apply_beside_a_running_server_which_sees_their_writes() {
    let dir = TempDir::new().unwrap();
    let data = dir.path();
    let client = stdio_client(data).await;
    let keep = store_memory(&client, SCOPE, "Releases are cut from the main branch").await;
    let gone = store_memory(&client, SCOPE, "Feature flags are removed after two releases").await;
    let visible = |hits: &Value| -> Vec<String> {
        hits["memories"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| m["id"].as_str().unwrap().to_owned())
            .collect()
    };
    let list =
        || async { visible(&ok(call(&client, "list_memory", json!({"scope": SCOPE})).await)) };
    assert_eq!(list().await.len(), 2);
    let scan = review(data, &["scan", "--scope", SCOPE]).await;
    assert_eq!((scan["total"]["records"].clone(), scan["scope"].clone()), (json!(2), json!(SCOPE)));
    let human = spine(data, &["spine-review", "scan", "--all-scopes"]).await;
    assert_eq!(human.code, 0);
    assert!(human.stdout.contains("archived") && human.stdout.contains("expired"));
    assert!(human.stdout.contains("2 records in every scope"), "{}", human.stdout);

    // Archive through the operator command: the server's recall hides it at once.
    review(data, &["archive", "--id", &gone]).await;
    assert_eq!(list().await, std::slice::from_ref(&keep));
    let search =
        ok(call(&client, "search_memory", json!({"query": "feature flags", "scope": SCOPE})).await);
    assert!(!visible(&search).contains(&gone));
    review(data, &["restore", "--id", &gone]).await;
    assert_eq!(list().await.len(), 2);

    // Purge it after an export (here: marked exported) and an archive; the server no longer
    // finds it at all.
    review(data, &["archive", "--id", &gone]).await;
    let store = open_store(data);
    let rec = store.get_many(&[RecordId::parse(&gone).unwrap()]).unwrap();
    store.mark_exported(&rec, "backup.jsonl", EpochSeconds::from_secs(now_secs())).unwrap();
    let purged = review(data, &["purge", "--class", "archived", "--scope", SCOPE, "--apply"]).await;
    assert_eq!(purged["summary"]["deleted"], 1);
    let got = call(&client, "get_memory", json!({"id": gone})).await;
    assert_eq!(err(got)["code"], "not_found");
    let search =
        ok(call(&client, "search_memory", json!({"query": "feature flags", "scope": SCOPE})).await);
    assert_eq!(visible(&search), std::slice::from_ref(&keep));
    // The server keeps writing; the store stays consistent.
    store_memory(&client, SCOPE, "Written after the purge").await;
    assert_eq!(review(data, &["verify", "--scope", SCOPE]).await["checked"], 2);
    client.cancel().await.unwrap();
}
