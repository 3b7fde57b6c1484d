//! Behaviour of the service operations against the real store and the real model, read
//! against SPEC sections. Time is a ManualClock so boundaries are exact.

use serde_json::{Value, json};
use spine_core::{
    Caller, Clock, EpochSeconds, ErrorCode, Hint, IdRef, Limits, ListState, Memory, RecordId,
    Timestamp,
};
use spine_embed::Embedder;
use spine_service::args::*;
use spine_store::{Access, Embedding};

use crate::common::*;

const SCOPE: &str = "run1:project:spine";

impl Env {
    fn store(&self, caller: &Caller, content: &str, extra: Value) -> spine_service::views::Stored {
        let mut v = json!({"content": content, "scope": SCOPE, "source": "user-said", "category": "decision"});
        v.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
        self.service.store_memory(caller, args(v)).unwrap()
    }

    fn search(&self, caller: &Caller, v: Value) -> Value {
        serde_json::to_value(self.service.search_memory(caller, args(v)).unwrap()).unwrap()
    }

    fn list(&self, caller: &Caller, v: Value) -> Value {
        serde_json::to_value(self.service.list_memory(caller, args(v)).unwrap()).unwrap()
    }

    fn get(&self, caller: &Caller, id: &str) -> Result<Value, spine_core::Error> {
        try_args(json!({"id": id}))
            .and_then(|a| self.service.get_memory(caller, a))
            .map(|v| serde_json::to_value(v).unwrap())
    }

    fn count(&self, caller: &Caller) -> usize {
        self.list(caller, json!({"cross_spine": true, "limit": 1000}))["memories"]
            .as_array()
            .unwrap()
            .len()
    }
}

fn contents(v: &Value) -> Vec<String> {
    v["memories"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["content"].as_str().or(m["summary"].as_str()).unwrap().to_owned())
        .collect()
}

// ---------- store_memory / get_memory ----------

#[test]
fn store_then_get_returns_every_field_and_counts_touches() {
    let e = env();
    let s = e.store(
        &anon(),
        "We chose SQLite in WAL mode for the embedded store.",
        json!({"tags": ["storage", "db", "storage"], "repo": "spine", "summary": "SQLite WAL",
               "citations": [{"kind": "file", "ref": "src/store.rs", "locator": "L1-9"}]}),
    );
    assert_eq!(s.short_id.as_str().len(), 10);
    let m = e.get(&anon(), &s.id.to_string()).unwrap();
    assert_eq!(m["content"], "We chose SQLite in WAL mode for the embedded store.");
    assert_eq!(m["tags"], json!(["storage", "db"]), "duplicate tags collapse");
    assert_eq!(m["summary_source"], "client");
    assert_eq!(m["owner"], "");
    assert_eq!(m["actor"], "");
    assert_eq!(m["visibility"], "");
    assert_eq!(m["schema_version"], spine_core::SCHEMA_VERSION);
    assert_eq!(m["citations"][0]["ref"], "src/store.rs");
    assert_eq!(m["created_at"], "2027-01-15T08:00:00Z");
    assert_eq!(m["access_count"], 1);
    assert!(m.get("states").is_none(), "active records carry no states");
    let again = e.get(&anon(), &s.short_id.as_str().to_lowercase()).unwrap();
    assert_eq!(again["access_count"], 2, "short_id accepted case-insensitively");
    assert_eq!(again["last_accessed_at"], "2027-01-15T08:00:00Z");
}

#[test]
fn search_and_list_never_count_as_touches() {
    let e = env();
    let s = e.store(&anon(), "Tabs, not spaces, in Makefiles.", json!({}));
    e.search(&anon(), json!({"query": "makefile indentation", "scope": SCOPE}));
    e.list(&anon(), json!({"scope": SCOPE}));
    assert_eq!(e.get(&anon(), &s.id.to_string()).unwrap()["access_count"], 1);
}

#[test]
fn rejected_store_calls_name_field_and_hint_and_store_nothing() {
    let e = env();
    let base =
        json!({"content": "c", "scope": SCOPE, "source": "user-said", "category": "decision"});
    let cases: Vec<(Value, &str, Hint)> = vec![
        (json!({"scope": "discovery:repo:x"}), "scope", Hint::ReservedScope),
        (json!({"scope": "rule:repo:x"}), "scope", Hint::ReservedScope),
        (json!({"scope": "only:two"}), "scope", Hint::MalformedScope),
        (json!({"category": "discovery"}), "category", Hint::InvalidValue),
        (json!({"category": "rule"}), "category", Hint::InvalidValue),
        (json!({"category": "idea"}), "category", Hint::InvalidValue),
        (json!({"source": "user"}), "source", Hint::InvalidValue),
        (json!({"content": "x".repeat(65537)}), "content", Hint::TooLong),
        (json!({"content": "   "}), "content", Hint::Blank),
        (
            json!({"tags": vec!["t"; 129].iter().enumerate().map(|(i, _)| format!("t{i}")).collect::<Vec<_>>()}),
            "tags",
            Hint::TooMany,
        ),
        (json!({"tags": ["x".repeat(129)]}), "tags[0]", Hint::TooLong),
        (json!({"summary": "s".repeat(513)}), "summary", Hint::TooLong),
        (
            json!({"citations": vec![json!({"kind": "url", "ref": "https://x"}); 51]}),
            "citations",
            Hint::TooMany,
        ),
        (
            json!({"citations": [{"kind": "url", "ref": "u", "excerpt": "e".repeat(16385)}]}),
            "citations[0].excerpt",
            Hint::TooLong,
        ),
        (json!({"repo": "r".repeat(4097)}), "repo", Hint::TooLong),
    ];
    for (patch, field, hint) in cases {
        let mut v = base.clone();
        v.as_object_mut().unwrap().extend(patch.as_object().unwrap().clone());
        let err = match parse_args::<StoreMemoryArgs>(v.as_object().cloned().unwrap()) {
            Err(err) => err,
            Ok(a) => e.service.store_memory(&anon(), a).unwrap_err(),
        };
        assert_eq!(err.code, ErrorCode::InvalidArgument, "{patch}");
        assert_eq!(err.field.as_deref(), Some(field), "{patch}");
        assert_eq!(err.hint, Some(hint), "{patch}");
    }
    assert_eq!(e.count(&anon()), 0, "no rejected call stored anything");
}

#[test]
fn limits_at_exactly_n_are_accepted() {
    let e = env();
    let tags: Vec<String> = (0..128).map(|i| format!("{i:0>128}")).collect();
    e.store(
        &anon(),
        &"x".repeat(65536),
        json!({"tags": tags, "summary": "s".repeat(512),
               "citations": vec![json!({"kind": "url", "ref": "u", "excerpt": "e".repeat(16384)}); 50]}),
    );
    assert_eq!(e.count(&anon()), 1);
}

#[test]
fn configured_limits_are_enforced() {
    let limits = Limits { max_content_bytes: 10, max_tags: 1, ..Limits::default() };
    let e = env_with(limits);
    e.store(&anon(), &"x".repeat(10), json!({"tags": ["a"]}));
    let a: StoreMemoryArgs = args(
        json!({"content": "x".repeat(11), "scope": SCOPE, "source": "user-said", "category": "gotcha"}),
    );
    assert_eq!(e.service.store_memory(&anon(), a).unwrap_err().field.as_deref(), Some("content"));
    let a: StoreMemoryArgs = args(
        json!({"content": "x", "scope": SCOPE, "source": "user-said", "category": "gotcha", "tags": ["a", "b"]}),
    );
    assert_eq!(e.service.store_memory(&anon(), a).unwrap_err().hint, Some(Hint::TooMany));
}

#[test]
fn get_unknown_and_malformed_ids() {
    let e = env();
    let err = e.get(&anon(), &RecordId::mint().to_string()).unwrap_err();
    assert_eq!(err.code, ErrorCode::NotFound);
    let err = e.get(&anon(), "not an id").unwrap_err();
    assert_eq!((err.code, err.hint), (ErrorCode::InvalidArgument, Some(Hint::MalformedId)));
}

// ---------- schedule_memory and the recall gate ----------

fn schedule(
    e: &Env,
    content: &str,
    nb: Option<i64>,
    na: Option<i64>,
) -> Result<spine_service::views::Stored, spine_core::Error> {
    let mut v = json!({"content": content, "scope": SCOPE, "source": "user-said", "category": "convention"});
    if let Some(nb) = nb {
        v["not_before"] = json!(EpochSeconds::from_secs(nb).to_rfc3339());
    }
    if let Some(na) = na {
        v["not_after"] = json!(EpochSeconds::from_secs(na).to_rfc3339());
    }
    try_args(v).and_then(|a| e.service.schedule_memory(&anon(), a))
}

#[test]
fn schedule_needs_a_bound_and_a_non_empty_window() {
    let e = env();
    let err = schedule(&e, "c", None, None).unwrap_err();
    assert_eq!(err.hint, Some(Hint::Required));
    let err = schedule(&e, "c", Some(T0 + 10), Some(T0 + 10)).unwrap_err();
    assert_eq!((err.field.as_deref(), err.hint), (Some("not_after"), Some(Hint::EmptyWindow)));
    let err = schedule(&e, "c", Some(T0 + 11), Some(T0 + 10)).unwrap_err();
    assert_eq!(err.hint, Some(Hint::EmptyWindow));
    assert!(schedule(&e, "c", Some(T0 + 9), Some(T0 + 10)).is_ok());
    let a: ScheduleMemoryArgs = args(
        json!({"content": "c", "scope": SCOPE, "source": "agent-inferred", "category": "discovery", "not_after": "2030-01-01T00:00:00Z"}),
    );
    assert_eq!(
        e.service.schedule_memory(&anon(), a).unwrap_err().field.as_deref(),
        Some("category")
    );
    let a = try_args::<ScheduleMemoryArgs>(
        json!({"content": "c", "scope": SCOPE, "source": "user-said", "category": "gotcha", "not_after": "next tuesday"}),
    );
    let err = a.and_then(|a| e.service.schedule_memory(&anon(), a)).unwrap_err();
    assert_eq!(
        (err.field.as_deref(), err.hint),
        (Some("not_after"), Some(Hint::MalformedTimestamp))
    );
    let all =
        e.service.list_scheduled(&anon(), args(json!({"scope": SCOPE, "state": "all"}))).unwrap();
    assert_eq!(all.memories.len(), 1, "only the accepted call stored a record");
}

#[test]
fn window_is_half_open_in_search_list_and_get() {
    let e = env();
    let s = schedule(
        &e,
        "The release branch is frozen for the launch.",
        Some(T0 + 100),
        Some(T0 + 200),
    )
    .unwrap();
    let q = json!({"query": "is the release branch frozen", "scope": SCOPE});
    let visible = |e: &Env| {
        let r = e.search(&anon(), q.clone());
        let l = e.list(&anon(), json!({"scope": SCOPE}));
        assert_eq!(
            r["memories"].as_array().unwrap().len(),
            l["memories"].as_array().unwrap().len()
        );
        (r["memories"].as_array().unwrap().len() == 1, r["recall_gate_hidden"].clone())
    };
    e.at(T0 + 99);
    let (shown, hidden) = visible(&e);
    assert!(!shown, "scheduled one second before not_before");
    assert_eq!(
        hidden,
        json!({"total": 1, "archived": 0, "superseded": 0, "expired": 0, "scheduled": 1})
    );
    assert_eq!(e.get(&anon(), &s.id.to_string()).unwrap()["states"], json!(["scheduled"]));
    e.at(T0 + 100);
    assert!(visible(&e).0, "active when now equals not_before");
    e.at(T0 + 199);
    assert!(visible(&e).0);
    e.at(T0 + 200);
    let (shown, hidden) = visible(&e);
    assert!(!shown, "expired when now equals not_after");
    assert_eq!(hidden["expired"], 1);
    assert_eq!(hidden["scheduled"], 0, "expired suppresses scheduled");
    assert_eq!(e.get(&anon(), &s.id.to_string()).unwrap()["states"], json!(["expired"]));
}

#[test]
fn list_scheduled_by_state() {
    let e = env();
    schedule(&e, "future", Some(T0 + 100), None).unwrap();
    schedule(&e, "past", None, Some(T0 - 1)).unwrap();
    schedule(&e, "current", Some(T0 - 10), Some(T0 + 10)).unwrap();
    e.store(&anon(), "plain", json!({}));
    let ls = |state: Option<&str>| {
        let mut v = json!({"scope": SCOPE});
        if let Some(s) = state {
            v["state"] = json!(s);
        }
        serde_json::to_value(e.service.list_scheduled(&anon(), args(v)).unwrap()).unwrap()
    };
    assert_eq!(contents(&ls(None)), vec!["future"]);
    assert_eq!(ls(None)["memories"][0]["states"], json!(["scheduled"]));
    assert_eq!(contents(&ls(Some("expired"))), vec!["past"]);
    let mut all = contents(&ls(Some("all")));
    all.sort();
    assert_eq!(all, vec!["future", "past"]);
    // A state outside the closed set is refused where the arguments are parsed.
    let err = spine_service::args::parse_args::<spine_service::args::ListScheduledArgs>(
        json!({"scope": SCOPE, "state": "active"}).as_object().cloned().unwrap(),
    )
    .unwrap_err();
    assert_eq!((err.field.as_deref(), err.hint), (Some("state"), Some(Hint::InvalidValue)));
    // An empty state is the default, as if omitted.
    let blank = e.service.list_scheduled(&anon(), args(json!({"scope": SCOPE, "state": ""})));
    assert_eq!(blank.unwrap().memories.len(), 1);
    let err = e.service.list_scheduled(&anon(), args(json!({"state": "all"}))).unwrap_err();
    assert_eq!((err.field.as_deref(), err.hint), (Some("scope"), Some(Hint::Required)));
}

#[test]
fn browse_lists_each_state_with_its_states() {
    let e = env();
    let share = |id: &spine_core::RecordId| {
        e.service
            .set_visibility(&alice(), args(json!({"id": id.to_string(), "shared": true})))
            .unwrap();
    };
    let old = e.store(&alice(), "old", json!({}));
    share(&old.id);
    e.service
        .supersede_memory(&alice(), args(json!({"supersedes": [old.id.to_string()], "content": "new", "scope": SCOPE, "source": "user-said", "category": "decision"})))
        .unwrap();
    let gone = e.store(&alice(), "gone", json!({}));
    share(&gone.id);
    e.service.archive_memory(&alice(), args(json!({"ids": [gone.id.to_string()]}))).unwrap();
    let mine = e.store(&bob(), "bob's archived", json!({}));
    e.service.archive_memory(&bob(), args(json!({"ids": [mine.id.to_string()]}))).unwrap();
    let mut v = json!({"content": "later", "scope": SCOPE, "source": "user-said", "category": "convention"});
    v["not_before"] = json!(EpochSeconds::from_secs(T0 + 100).to_rfc3339());
    share(&e.service.schedule_memory(&alice(), args(v)).unwrap().id);
    let browse = |who: &Caller, state: ListState| {
        let r = e.service.browse_memory(who, args(json!({"scope": SCOPE})), state).unwrap();
        let v = serde_json::to_value(r).unwrap();
        let states: Vec<Value> =
            v["memories"].as_array().unwrap().iter().map(|m| m["states"].clone()).collect();
        (contents(&v), states)
    };
    assert_eq!(browse(&alice(), ListState::Live), (vec!["new".into()], vec![Value::Null]));
    assert_eq!(
        browse(&alice(), ListState::Superseded),
        (vec!["old".into()], vec![json!(["superseded"])])
    );
    assert_eq!(
        browse(&alice(), ListState::Archived),
        (vec!["gone".into()], vec![json!(["archived"])])
    );
    // Bob reads Alice's shared records in any state but his own private ones only...
    assert_eq!(browse(&bob(), ListState::Archived).0, vec!["bob's archived", "gone"]);
    // ...and scheduled records are their owner's alone (SPEC Authentication 6).
    assert_eq!(browse(&alice(), ListState::Scheduled).0, vec!["later"]);
    assert!(browse(&bob(), ListState::Scheduled).0.is_empty());
    assert!(browse(&alice(), ListState::Expired).0.is_empty());
    e.at(T0 + 100);
    assert_eq!(browse(&alice(), ListState::Live).0, vec!["later", "new"]);
    assert_eq!(browse(&alice(), ListState::All).0.len(), 4);
}

#[test]
fn list_scheduled_is_owner_only_even_cross_spine() {
    let e = env();
    let a: ScheduleMemoryArgs = args(
        json!({"content": "alice's plan", "scope": SCOPE, "source": "user-said", "category": "decision", "not_before": "2030-01-01T00:00:00Z"}),
    );
    let s = e.service.schedule_memory(&alice(), a).unwrap();
    e.service
        .set_visibility(&alice(), args(json!({"id": s.id.to_string(), "shared": true})))
        .unwrap();
    let r = e
        .service
        .list_scheduled(&bob(), args(json!({"cross_spine": true, "state": "all"})))
        .unwrap();
    assert!(r.memories.is_empty());
    assert_eq!(r.coverage.searched_scopes, Some(vec![]));
    let r = e.service.list_scheduled(&alice(), args(json!({"cross_spine": true}))).unwrap();
    assert_eq!(r.memories.len(), 1);
}

// ---------- search_memory ----------

fn seed(e: &Env) {
    e.store(
        &anon(),
        "We use PostgreSQL with pgvector for the shared deployment.",
        json!({"tags": ["db", "infra"], "category": "decision"}),
    );
    e.store(
        &anon(),
        "The user prefers tabs over spaces in Go code.",
        json!({"tags": ["style"], "category": "preference"}),
    );
    e.store(
        &anon(),
        "Never run cargo clean in CI; the cache takes ten minutes to rebuild.",
        json!({"tags": ["ci", "infra"], "category": "gotcha"}),
    );
    e.store(
        &anon(),
        "Error types implement IntoResponse so handlers return them directly.",
        json!({"tags": ["http"], "category": "convention"}),
    );
}

#[test]
fn search_ranks_by_meaning_and_reports_dense_score() {
    let e = env();
    seed(&e);
    let r = e.search(
        &anon(),
        json!({"query": "which database do we use for vectors?", "scope": SCOPE, "k": 2}),
    );
    let hits = r["memories"].as_array().unwrap();
    assert_eq!(hits.len(), 2);
    assert!(hits[0]["content"].as_str().unwrap().contains("PostgreSQL"));
    let s0 = hits[0]["score"].as_f64().unwrap();
    assert!(s0 > 0.3 && s0 <= 1.0, "score is a cosine: {s0}");
    assert!(hits[0].get("citations").is_none());
    assert!(r.get("searched_scopes").is_none(), "coverage keys only on cross-spine calls");
    assert_eq!(r["recall_gate_hidden"]["total"], 0);
}

#[test]
fn k_resolution_and_bounds() {
    let e = env();
    for i in 0..10 {
        e.store(&anon(), &format!("Memory number {i} about caching."), json!({}));
    }
    let n = |k: Value| {
        e.search(&anon(), json!({"query": "caching", "scope": SCOPE, "k": k}))["memories"]
            .as_array()
            .unwrap()
            .len()
    };
    assert_eq!(n(json!(0)), 8, "k=0 resolves to 8");
    assert_eq!(n(json!(1)), 1);
    assert_eq!(n(json!(1000)), 10);
    let err = e
        .service
        .search_memory(&anon(), args(json!({"query": "q", "scope": SCOPE, "k": 1001})))
        .unwrap_err();
    assert_eq!((err.field.as_deref(), err.hint), (Some("k"), Some(Hint::OutOfRange)));
    let err = e.service.search_memory(&anon(), args(json!({"query": "q"}))).unwrap_err();
    assert_eq!((err.field.as_deref(), err.hint), (Some("scope"), Some(Hint::Required)));
    let err =
        e.service.search_memory(&anon(), args(json!({"query": " ", "scope": SCOPE}))).unwrap_err();
    assert_eq!(err.field.as_deref(), Some("query"));
}

#[test]
fn tags_are_and_and_categories_are_or() {
    let e = env();
    seed(&e);
    let q = |extra: Value| {
        let mut v = json!({"query": "infrastructure", "scope": SCOPE, "k": 10});
        v.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
        let mut c = contents(&e.search(&anon(), v));
        c.sort();
        c
    };
    assert_eq!(q(json!({"tags": ["infra"]})).len(), 2);
    assert_eq!(q(json!({"tags": ["infra", "db"]})).len(), 1);
    assert_eq!(q(json!({"tags": ["infra", "style"]})).len(), 0);
    assert_eq!(q(json!({"categories": ["gotcha", "preference"]})).len(), 2);
    assert_eq!(
        q(json!({"categories": ["nonsense"]})).len(),
        0,
        "unmatched category is zero results, not an error"
    );
    assert_eq!(q(json!({"categories": []})).len(), 4, "empty categories = no filter");
}

#[test]
fn created_window_is_inclusive_after_exclusive_before() {
    let e = env();
    for i in 0..3 {
        e.at(T0 + i);
        e.store(&anon(), &format!("note {i} about logging"), json!({}));
    }
    let t = |s: i64| EpochSeconds::from_secs(s).to_rfc3339();
    let r = e.search(&anon(), json!({"query": "logging", "scope": SCOPE, "created_after": t(T0 + 1), "created_before": t(T0 + 2)}));
    assert_eq!(contents(&r), vec!["note 1 about logging"]);
    let l = e.list(&anon(), json!({"scope": SCOPE, "created_after": t(T0 + 1)}));
    assert_eq!(contents(&l), vec!["note 2 about logging", "note 1 about logging"]);
    let err = try_args(json!({"scope": SCOPE, "created_before": "today"}))
        .and_then(|a| e.service.list_memory(&anon(), a))
        .unwrap_err();
    assert_eq!(
        (err.field.as_deref(), err.hint),
        (Some("created_before"), Some(Hint::MalformedTimestamp))
    );
}

#[test]
fn cross_spine_reports_every_readable_scope() {
    let e = env();
    e.store(&anon(), "alpha fact", json!({"scope": "r:t:alpha"}));
    e.store(&anon(), "beta fact", json!({"scope": "r:t:beta"}));
    e.store(&alice(), "alice's private fact", json!({"scope": "r:t:alice-only"}));
    let r =
        e.search(&anon(), json!({"query": "fact", "cross_spine": true, "scope": "ignored:x:y"}));
    assert_eq!(r["memories"].as_array().unwrap().len(), 2);
    assert_eq!(r["searched_scopes"], json!(["r:t:alpha", "r:t:beta"]));
    assert_eq!(r["scopes_truncated"], false);
    let l = e.list(&anon(), json!({"cross_spine": true}));
    assert_eq!(l["searched_scopes"], json!(["r:t:alpha", "r:t:beta"]));
}

#[test]
fn cross_spine_list_with_an_explicit_limit_reports_the_exact_total() {
    // SPEC list_memory: on a cross-spine list an explicit limit makes the underlying total an
    // exact count across all readable scopes.
    let e = env();
    for i in 0..5 {
        e.store(&anon(), &format!("alpha fact {i}"), json!({"scope": "r:t:alpha"}));
    }
    for i in 0..4 {
        e.store(&anon(), &format!("beta fact {i}"), json!({"scope": "r:t:beta", "tags": ["b"]}));
    }
    let hidden = e.store(&anon(), "archived fact", json!({"scope": "r:t:beta"}));
    e.service.archive_memory(&anon(), args(json!({"ids": [hidden.id.to_string()]}))).unwrap();
    e.store(&alice(), "alice's private fact", json!({"scope": "r:t:alpha"}));

    let l = e.list(&anon(), json!({"cross_spine": true, "limit": 2}));
    assert_eq!(l["memories"].as_array().unwrap().len(), 2);
    assert_eq!(l["total"], 9, "every readable recall-visible record, not the page");
    let next =
        e.list(&anon(), json!({"cross_spine": true, "limit": 2, "cursor": l["next_cursor"]}));
    assert_eq!(next["total"], 9, "the same total on every page");
    assert_eq!(
        e.list(&anon(), json!({"cross_spine": true, "limit": 1000, "tags": ["b"]}))["total"],
        4
    );
    assert_eq!(e.list(&alice(), json!({"cross_spine": true, "limit": 1}))["total"], 1);
    assert!(e.list(&anon(), json!({"cross_spine": true}))["total"].is_null(), "no explicit limit");
    assert!(e.list(&anon(), json!({"cross_spine": true, "limit": 0}))["total"].is_null());
    assert!(e.list(&anon(), json!({"scope": "r:t:alpha", "limit": 2}))["total"].is_null());
}

#[test]
fn full_view_carries_citations_and_compact_prefers_summary() {
    let e = env();
    e.store(&anon(), "Long content about retries and backoff.", json!({"summary": "Retry with backoff", "citations": [{"kind": "url", "ref": "https://example.org"}]}));
    e.store(&anon(), &"word ".repeat(100), json!({}));
    let r = e.list(&anon(), json!({"scope": SCOPE}));
    let compact = &r["memories"];
    assert_eq!(compact[0]["content_truncated"], true);
    assert_eq!(compact[0]["content"].as_str().unwrap().chars().count(), 281);
    assert_eq!(compact[1]["summary"], "Retry with backoff");
    assert!(compact[1].get("content").is_none());
    assert!(compact[1].get("citations").is_none());
    let full = e.list(&anon(), json!({"scope": SCOPE, "full": true}));
    assert_eq!(full["memories"][1]["citations"][0]["kind"], "url");
    assert_eq!(full["memories"][1]["content"], "Long content about retries and backoff.");
    assert_eq!(full["memories"][0]["content"].as_str().unwrap().len(), 500);
}

// ---------- search_memory: lexical ranking (SPEC search rule 1) ----------

/// Everyday project memories, so that term statistics look like a real store's: a word
/// such as "config" or "tests" is common, an identifier is rare.
fn background(e: &Env) {
    for c in [
        "Run the test suite with cargo test before every commit.",
        "The user wants error messages to name the field that failed.",
        "Configuration files use TOML, never YAML.",
        "The database schema is migrated at startup.",
        "Logs go to stderr in JSON when running in production.",
        "The HTTP server binds to loopback unless told otherwise.",
        "Deploys happen on Tuesdays after the standup.",
        "Use anyhow only in the binary; libraries define error types with thiserror.",
        "The CI pipeline caches the target directory between runs.",
        "Environment variables override values from the config file.",
        "Integration tests start a real server on a random port.",
        "The user prefers small pull requests with one change each.",
    ] {
        e.store(&anon(), c, json!({}));
    }
}

/// Stores `records` beside the background and returns the hits for `query`.
fn lexical_case(records: &[&str], query: &str, k: u64) -> Vec<Value> {
    let e = env();
    background(&e);
    for r in records {
        e.store(&anon(), r, json!({}));
    }
    e.search(&anon(), json!({"query": query, "scope": SCOPE, "k": k}))["memories"]
        .as_array()
        .unwrap()
        .clone()
}

#[test]
fn identifier_query_ranks_the_record_naming_it_first_and_keeps_the_cosine_as_score() {
    let records = [
        "Known crash in load_config_from_env when SPINE_HOME is blank.",
        "Loading settings panics when an environment variable is blank.",
        "The config crate crashes on blank environment variables.",
        "Startup panics when a required setting is missing.",
        "Reading configuration panics if a variable holds an empty string.",
        "Settings loading crashes on empty environment values.",
    ];
    let query = "load_config_from_env panics on empty var";
    let hits = lexical_case(&records, query, 3);
    assert_eq!(hits[0]["content"], records[0]);
    // SPEC search rule 1: `score` is the dense similarity, so the lexical step leaves the
    // order non-monotonic in it — here a paraphrase of the query is closer by cosine.
    let v = embedder().embed(&[query, records[0]]).unwrap();
    let cosine = spine_embed::cosine(&v[0], &v[1]) as f64;
    let s0 = hits[0]["score"].as_f64().unwrap();
    assert!((s0 - cosine).abs() < 1e-5, "score {s0} is the cosine {cosine}");
    assert!(hits[1..].iter().any(|h| h["score"].as_f64().unwrap() > s0), "{hits:?}");
}

/// The lexical step reads each record's terms through a cache keyed by the record's stored
/// payload: a record edited after a search is tokenised afresh, so its new words count at
/// once (keyed by id alone, the old terms would rank the paraphrases first).
#[test]
fn an_edited_record_is_matched_by_its_new_words_in_the_next_search() {
    let e = env();
    background(&e);
    let records = [
        "Known crash in config loading when SPINE_HOME is blank.",
        "Loading settings panics when an environment variable is blank.",
        "The config crate crashes on blank environment variables.",
        "Startup panics when a required setting is missing.",
        "Reading configuration panics if a variable holds an empty string.",
        "Settings loading crashes on empty environment values.",
    ];
    let id = e.store(&anon(), records[0], json!({})).id;
    for r in &records[1..] {
        e.store(&anon(), r, json!({}));
    }
    let query =
        json!({"query": "load_config_from_env panics on empty var", "scope": SCOPE, "k": 3});
    let edited = "Known crash in load_config_from_env when SPINE_HOME is blank.";
    assert!(!contents(&e.search(&anon(), query.clone())).contains(&edited.to_owned()));
    e.service.update_memory(&anon(), args(json!({"id": id, "content": edited}))).unwrap();
    assert_eq!(contents(&e.search(&anon(), query))[0], edited);
}

#[test]
fn path_query_ranks_the_record_with_that_path_first() {
    let records = [
        "The Store trait is declared in crates/spine-store/src/lib.rs.",
        "The Store trait is implemented in crates/spine-store/src/sqlite.rs.",
        "The Service struct is declared in crates/spine-service/src/lib.rs.",
        "Core types are declared in crates/spine-core/src/lib.rs.",
    ];
    let hits = lexical_case(&records, "crates/spine-store/src/lib.rs", 4);
    assert_eq!(hits[0]["content"], records[0]);
    let hits = lexical_case(&records, "what is in crates/spine-core/src/lib.rs", 4);
    assert_eq!(hits[0]["content"], records[3]);
}

#[test]
fn version_query_ranks_the_record_with_that_version_first() {
    let records = [
        "candle v0.11.1 fixed the layer norm regression.",
        "candle v0.10.2 introduced the layer norm regression.",
        "The layer norm regression in candle is fixed upstream.",
        "candle v0.9.0 changed the softmax API.",
    ];
    for query in ["v0.11.1 layer norm", "0.11.1 layer norm"] {
        let hits = lexical_case(&records, query, 4);
        assert_eq!(hits[0]["content"], records[0], "{query}");
    }
}

#[test]
fn error_string_query_ranks_the_record_quoting_it_first() {
    let records = [
        "E0502 on conn: the prepared statement still borrows it; drop the statement first.",
        "Borrow checker errors on the connection mean a statement outlives its scope.",
        "Mutable borrows of the connection must not escape the lock guard.",
        "The connection is shared behind a mutex.",
    ];
    let hits = lexical_case(&records, "error[E0502]: cannot borrow `conn` as mutable", 4);
    assert_eq!(hits[0]["content"], records[0]);
}

#[test]
fn other_owners_records_do_not_sway_the_lexical_order() {
    // Two of alice's records each carry one of the query's two rare words, and sit close by
    // cosine; bob then stores many private records carrying one of them. Term statistics
    // taken over the whole store would make that word common and flip alice's order; they
    // are taken over the caller's pool, so nothing bob keeps can change what alice sees.
    let e = env();
    let (a, b) = ("The zorblax setting is enabled.", "The quuxify setting is enabled.");
    e.store(&alice(), a, json!({}));
    e.store(&alice(), b, json!({}));
    let query = json!({"query": "zorblax quuxify setting", "scope": SCOPE, "k": 2});
    let before = e.search(&alice(), query.clone());
    let hits = before["memories"].as_array().unwrap();
    let gap = (hits[0]["score"].as_f64().unwrap() - hits[1]["score"].as_f64().unwrap()).abs();
    assert!(gap < 0.1, "the two records must be within the lexical weight: {gap}");
    for i in 0..40 {
        let word = if contents(&before)[0] == a { "zorblax" } else { "quuxify" };
        e.store(&bob(), &format!("Note {i}: {word} appears in bob's notes."), json!({}));
    }
    let after = e.search(&alice(), query);
    assert_eq!(contents(&after), contents(&before));
    assert_eq!(after["memories"], before["memories"]);
}

#[test]
fn a_query_sharing_no_words_with_a_record_still_finds_it_first() {
    let e = env();
    seed(&e);
    // Shares "preference" with the query; the record meant shares no word with it.
    e.store(&anon(), "The preference file lives in the home directory.", json!({}));
    let r = e.search(
        &anon(),
        json!({"query": "indentation preference for golang", "scope": SCOPE, "k": 2}),
    );
    assert_eq!(contents(&r)[0], "The user prefers tabs over spaces in Go code.");
}

#[test]
fn a_record_repeating_one_query_word_does_not_outrank_the_meaning() {
    let e = env();
    seed(&e);
    e.store(&anon(), "Vectors in the physics module are stored as three floats.", json!({}));
    let r = e.search(
        &anon(),
        json!({"query": "which database do we use for vectors?", "scope": SCOPE, "k": 2}),
    );
    assert!(contents(&r)[0].contains("PostgreSQL"));
}

#[test]
fn without_shared_words_the_order_is_the_dense_order() {
    let mut e = env();
    // The lexical rule alone: the neighbour step (next test) may lift a record next to a hit.
    e.service = e.service.clone().with_neighbour_weight(0.0);
    seed(&e);
    let r = e.search(&anon(), json!({"query": "relational engine", "scope": SCOPE, "k": 4}));
    let scores: Vec<f64> =
        r["memories"].as_array().unwrap().iter().map(|h| h["score"].as_f64().unwrap()).collect();
    assert_eq!(scores.len(), 4);
    assert!(scores.windows(2).all(|w| w[0] >= w[1]), "{scores:?}");
}

/// The question record matches best; the answer stored right after it shares no word with the
/// query and is far by meaning, yet it leads the rest once its neighbour lends it part of
/// the lead (`rank`, neighbour step). Without the step it is not in the top two.
#[test]
fn the_record_stored_next_to_the_best_hit_is_lifted_by_it() {
    let mut e = env();
    for text in [
        "Which message broker should the billing service use for invoices?",
        "We settled on NATS JetStream after Tuesday's load test.",
        "The search indexer reads change events from the outbox table.",
        "The billing service retries failed card payments three times.",
        "Staging deploys run every night at two.",
    ] {
        e.store(&anon(), text, json!({}));
    }
    let query = json!({"query": "message broker for billing invoices", "scope": SCOPE, "k": 2});
    let with = contents(&e.search(&anon(), query.clone()));
    assert_eq!(with[0], "Which message broker should the billing service use for invoices?");
    assert_eq!(with[1], "We settled on NATS JetStream after Tuesday's load test.", "{with:?}");
    e.service = e.service.clone().with_neighbour_weight(0.0);
    let without = contents(&e.search(&anon(), query));
    assert!(!without.contains(&"We settled on NATS JetStream after Tuesday's load test.".into()));
}

/// A small store of short developer notes (the case of issue 65): the question shares
/// "releases" with the release-notes record and no word with the deploy record, which the
/// model ranks first by a wide margin. Divided by the best BM25 in a pool of seven, that one
/// word earned the full lexical weight and won; as a share of the question it earns nothing.
const SMALL_STORE: [&str; 7] = [
    "Run cargo fmt before every commit.",
    "Deploys happen on Thursdays.",
    "The staging database is reset every Sunday night.",
    "Release notes are written in Markdown under docs/releases.",
    "Alice owns the billing service.",
    "We pin PostgreSQL 16 in production.",
    "Feature flags live in config/flags.toml.",
];

#[test]
fn a_question_in_other_words_keeps_its_answer_first_in_a_small_store() {
    let mut e = env();
    for c in SMALL_STORE {
        e.store(&anon(), c, json!({}));
    }
    let query = json!({"query": "which weekday do we ship releases", "scope": SCOPE, "k": 3});
    let hits = e.search(&anon(), query.clone());
    assert_eq!(contents(&hits)[0], "Deploys happen on Thursdays.", "{hits}");
    // The words the record holds still count: the same store, asked in its words.
    let r =
        e.search(&anon(), json!({"query": "where do release notes go", "scope": SCOPE, "k": 1}));
    assert_eq!(contents(&r)[0], SMALL_STORE[3]);
    // Dense order agrees: the lexical step only must not overrule it.
    e.service = e.service.clone().with_lexical_weight(0.0).with_neighbour_weight(0.0);
    assert_eq!(contents(&e.search(&anon(), query))[0], "Deploys happen on Thursdays.");
}

#[test]
fn syntax_characters_in_a_query_are_only_text() {
    let e = env();
    seed(&e);
    for query in ["\"unbalanced", "NEAR(cargo clean)", "cache*", "-ci OR ^tabs", "scope:x (a)"] {
        let r = e.search(&anon(), json!({"query": query, "scope": SCOPE}));
        assert_eq!(r["memories"].as_array().unwrap().len(), 4, "{query}");
    }
}

// ---------- list_memory ----------

#[test]
fn list_pages_most_recent_first_with_cursor_or_offset() {
    let e = env();
    for i in 0..5 {
        e.at(T0 + i);
        e.store(&anon(), &format!("m{i}"), json!({}));
    }
    let p1 = e.list(&anon(), json!({"scope": SCOPE, "limit": 2}));
    assert_eq!(contents(&p1), vec!["m4", "m3"]);
    let c = p1["next_cursor"].as_str().unwrap().to_owned();
    let p2 = e.list(&anon(), json!({"scope": SCOPE, "limit": 2, "cursor": c}));
    assert_eq!(contents(&p2), vec!["m2", "m1"]);
    let p3 = e.list(&anon(), json!({"scope": SCOPE, "limit": 2, "cursor": p2["next_cursor"]}));
    assert_eq!(contents(&p3), vec!["m0"]);
    assert_eq!(p3["next_cursor"], "", "empty next_cursor on the last page");
    let off = e.list(&anon(), json!({"scope": SCOPE, "limit": 2, "offset": 3}));
    assert_eq!(contents(&off), vec!["m1", "m0"]);
    let err = e
        .service
        .list_memory(&anon(), args(json!({"scope": SCOPE, "cursor": c, "offset": 1})))
        .unwrap_err();
    assert_eq!((err.field.as_deref(), err.hint), (Some("cursor"), Some(Hint::MutuallyExclusive)));
    assert_eq!(
        e.list(&anon(), json!({"scope": SCOPE, "limit": 0}))["memories"].as_array().unwrap().len(),
        5
    );
    let err =
        e.service.list_memory(&anon(), args(json!({"scope": SCOPE, "limit": 1001}))).unwrap_err();
    assert_eq!((err.field.as_deref(), err.hint), (Some("limit"), Some(Hint::OutOfRange)));
    assert!(e.service.list_memory(&anon(), args(json!({"scope": SCOPE, "limit": 1000}))).is_ok());
}

#[test]
fn list_default_limit_is_20() {
    let e = env();
    for i in 0..21 {
        e.store(&anon(), &format!("m{i}"), json!({}));
    }
    let l = e.list(&anon(), json!({"scope": SCOPE}));
    assert_eq!(l["memories"].as_array().unwrap().len(), 20);
    assert_ne!(l["next_cursor"], "");
}

// ---------- authorization ----------

fn insert_raw(e: &Env, owner: Option<&str>, content: &str) -> Memory {
    let mut m: Memory = serde_json::from_value(json!({
        "id": RecordId::mint().to_string(), "short_id": spine_core::ShortId::mint().to_string(),
        "content": content, "scope": SCOPE, "source": "user-said", "category": "decision",
        "created_at": "2026-01-01T00:00:00Z"
    }))
    .unwrap();
    m.owner = owner.map(str::to_owned);
    let v = embedder().embed(&[content]).unwrap().remove(0);
    e.store
        .insert(
            &spine_store::Access::operator(),
            &m,
            Embedding { model: embedder().model_id(), vector: &v },
        )
        .unwrap();
    m
}

#[test]
fn legacy_records_without_owner_key_are_invisible() {
    let e = env();
    let m = insert_raw(&e, None, "legacy record about caching");
    assert_eq!(e.get(&anon(), &m.id.to_string()).unwrap_err().code, ErrorCode::NotFound);
    assert_eq!(e.get(&alice(), &m.id.to_string()).unwrap_err().code, ErrorCode::NotFound);
    assert!(contents(&e.search(&anon(), json!({"query": "caching", "scope": SCOPE}))).is_empty());
    assert_eq!(e.count(&anon()), 0);
}

#[test]
fn private_records_are_not_found_for_others_and_sharing_grants_read_only() {
    let e = env();
    let s = e.store(&alice(), "Alice's deployment notes", json!({"tags": ["ops"]}));
    let id = s.id.to_string();
    for caller in [bob(), anon()] {
        let err = e.get(&caller, &id).unwrap_err();
        assert_eq!(err.code, ErrorCode::NotFound);
        assert!(!err.message.contains(s.short_id.as_str()));
        assert!(
            contents(&e.search(&caller, json!({"query": "deployment", "scope": SCOPE}))).is_empty()
        );
        assert!(e.service.list_tags(&caller, args(json!({}))).unwrap().tags.is_empty());
    }
    // Writes by another caller look exactly like a missing record.
    let missing = RecordId::mint().to_string();
    for target in [&id, &missing] {
        let errs = [
            e.service
                .update_memory(&bob(), args(json!({"id": target, "content": "x"})))
                .unwrap_err(),
            e.service.delete_memory(&bob(), args(json!({"id": target}))).unwrap_err(),
            e.service
                .set_visibility(&bob(), args(json!({"id": target, "shared": true})))
                .unwrap_err(),
        ];
        for err in errs {
            assert_eq!(err.code, ErrorCode::NotFound);
            assert_eq!(err.message, format!("no memory {target:?} that you can access"));
        }
    }
    e.service.set_visibility(&alice(), args(json!({"id": id, "shared": true}))).unwrap();
    assert_eq!(e.get(&bob(), &id).unwrap()["visibility"], "shared");
    assert_eq!(
        e.get(&anon(), &id).unwrap_err().code,
        ErrorCode::NotFound,
        "anonymous reads only ownerless records"
    );
    assert_eq!(
        e.service.update_memory(&bob(), args(json!({"id": id, "content": "x"}))).unwrap_err().code,
        ErrorCode::NotFound
    );
    let r = e.service.delete_all(&bob(), args(json!({"scope": SCOPE}))).unwrap();
    assert_eq!(r.deleted, Some(0));
    assert!(e.get(&alice(), &id).is_ok());
}

#[test]
fn ambiguous_short_id_is_not_found() {
    let e = env();
    let a = insert_raw(&e, Some(""), "one");
    let mut b = insert_raw(&e, Some(""), "two");
    b.short_id = a.short_id.clone();
    let duplicated = e.store.replace(&Access::owned(&anon()), &b, None);
    if postgres() {
        // The database enforces unique short ids: the duplicate never lands.
        assert!(duplicated.is_err(), "PostgreSQL refuses a second record with a short id");
        assert!(e.get(&anon(), a.short_id.as_str()).is_ok());
        return;
    }
    duplicated.unwrap();
    let err = e.get(&anon(), a.short_id.as_str()).unwrap_err();
    assert_eq!(err.code, ErrorCode::NotFound);
    assert!(e.get(&anon(), &a.id.to_string()).is_ok(), "the full UUID still resolves");
    assert!(matches!(IdRef::parse("id", a.short_id.as_str()).unwrap(), IdRef::Short(_)));
}

// ---------- update / delete / visibility ----------

#[test]
fn update_re_embeds_replaces_tags_and_touches() {
    let e = env();
    let s = e.store(&anon(), "Deploys happen on Fridays.", json!({"tags": ["ops", "deploy"]}));
    let id = s.id.to_string();
    let r = e.service.update_memory(&anon(), args(json!({"id": id, "content": "Lunch is served at noon in the cafeteria.", "tags": ["food"]}))).unwrap();
    assert_eq!(r.status, "updated");
    let hits = e.search(&anon(), json!({"query": "when is lunch", "scope": SCOPE, "k": 1}));
    assert_eq!(hits["memories"][0]["id"], id.as_str());
    assert!(hits["memories"][0]["score"].as_f64().unwrap() > 0.4, "vector follows the new content");
    let m = e.get(&anon(), &id).unwrap();
    assert_eq!(m["tags"], json!(["food"]));
    assert_eq!(m["access_count"], 2, "update and get both touch");
    assert_eq!(m["created_at"], "2027-01-15T08:00:00Z");
    assert_eq!(m["short_id"], s.short_id.as_str());
    e.service.update_memory(&anon(), args(json!({"id": id, "content": "Lunch is served at noon in the cafeteria.", "tags": []}))).unwrap();
    assert_eq!(e.get(&anon(), &id).unwrap()["tags"], json!([]));
    e.service.update_memory(&anon(), args(json!({"id": id, "content": "Lunch is served at noon in the cafeteria.", "shared": true}))).unwrap();
    assert_eq!(e.get(&anon(), &id).unwrap()["visibility"], "shared");
}

#[test]
fn client_summary_must_be_addressed_when_content_changes() {
    let e = env();
    let s = e.store(&anon(), "Use rustls, not OpenSSL.", json!({"summary": "rustls only"}));
    let id = s.id.to_string();
    let err = e
        .service
        .update_memory(&anon(), args(json!({"id": id, "content": "Use rustls with ring."})))
        .unwrap_err();
    assert_eq!(
        (err.field.as_deref(), err.hint),
        (Some("summary"), Some(Hint::SummaryNotAddressed))
    );
    assert_eq!(
        e.get(&anon(), &id).unwrap()["content"],
        "Use rustls, not OpenSSL.",
        "rejected update changed nothing"
    );
    // Same content: the summary need not be addressed.
    e.service
        .update_memory(
            &anon(),
            args(json!({"id": id, "content": "Use rustls, not OpenSSL.", "tags": ["tls"]})),
        )
        .unwrap();
    e.service
        .update_memory(
            &anon(),
            args(json!({"id": id, "content": "Use rustls with ring.", "summary": "rustls only"})),
        )
        .unwrap();
    e.service
        .update_memory(
            &anon(),
            args(json!({"id": id, "content": "Use rustls with ring!", "summary": ""})),
        )
        .unwrap();
    let m = e.get(&anon(), &id).unwrap();
    assert!(m.get("summary").is_none());
    assert_eq!(m["summary_source"], "");
    // Without a client summary, content may change freely.
    e.service.update_memory(&anon(), args(json!({"id": id, "content": "Use rustls."}))).unwrap();
}

#[test]
fn auto_summary_is_dropped_when_content_changes() {
    let e = env();
    let mut m = insert_raw(&e, Some(""), "Original text about queues.");
    m.summary = "queues".into();
    m.summary_source = spine_core::SummarySource::Auto;
    m.summary_model = "builtin:extractive".into();
    m.summary_egress_at = Some(Timestamp::from_micros(1));
    e.store.replace(&Access::owned(&anon()), &m, None).unwrap();
    e.service
        .update_memory(
            &anon(),
            args(json!({"id": m.id.to_string(), "content": "New text about streams."})),
        )
        .unwrap();
    let v = e.get(&anon(), &m.id.to_string()).unwrap();
    assert_eq!(v["summary_source"], "");
    assert!(v.get("summary_model").is_none() && v.get("summary_egress_at").is_none());
}

#[test]
fn update_bounds_apply_only_when_changed() {
    let limits = Limits { max_tags: 2, ..Limits::default() };
    let e = env_with(limits);
    let m = insert_raw(&e, Some(""), "record");
    let mut over = m.clone();
    over.tags = vec!["a".into(), "b".into(), "c".into()];
    e.store.replace(&Access::owned(&anon()), &over, None).unwrap();
    // Tags unchanged (already over the new bound): accepted.
    e.service
        .update_memory(
            &anon(),
            args(json!({"id": m.id.to_string(), "content": "record", "tags": ["a", "b", "c"]})),
        )
        .unwrap();
    let err = e
        .service
        .update_memory(
            &anon(),
            args(json!({"id": m.id.to_string(), "content": "record", "tags": ["a", "b", "d"]})),
        )
        .unwrap_err();
    assert_eq!(err.hint, Some(Hint::TooMany));
}

#[test]
fn schema_version_is_never_lowered_by_a_write() {
    let e = env();
    let mut m = insert_raw(&e, Some(""), "from the future");
    m.schema_version = spine_core::SCHEMA_VERSION + 7;
    e.store.replace(&Access::owned(&anon()), &m, None).unwrap();
    let id = m.id.to_string();
    assert_eq!(
        e.get(&anon(), &id).unwrap()["schema_version"],
        spine_core::SCHEMA_VERSION + 7,
        "read normally"
    );
    e.service.update_memory(&anon(), args(json!({"id": id, "content": "edited"}))).unwrap();
    assert_eq!(e.get(&anon(), &id).unwrap()["schema_version"], spine_core::SCHEMA_VERSION + 7);
    let legacy = insert_raw(&e, Some(""), "old");
    let mut old = legacy.clone();
    old.schema_version = 0;
    e.store.replace(&Access::owned(&anon()), &old, None).unwrap();
    assert_eq!(
        e.get(&anon(), &legacy.id.to_string()).unwrap()["schema_version"],
        0,
        "absent reads as 0"
    );
    e.service
        .set_visibility(&anon(), args(json!({"id": legacy.id.to_string(), "shared": false})))
        .unwrap();
    assert_eq!(
        e.get(&anon(), &legacy.id.to_string()).unwrap()["schema_version"],
        spine_core::SCHEMA_VERSION
    );
}

#[test]
fn delete_and_delete_all() {
    let e = env();
    let a = e.store(&anon(), "a", json!({}));
    e.store(&anon(), "b", json!({}));
    e.store(&anon(), "c", json!({"scope": "r:t:other"}));
    let other = e.store(&alice(), "alice's", json!({}));
    let r = e.service.delete_memory(&anon(), args(json!({"id": a.short_id.to_string()}))).unwrap();
    assert_eq!(r.status, "deleted");
    assert_eq!(e.get(&anon(), &a.id.to_string()).unwrap_err().code, ErrorCode::NotFound);
    assert_eq!(
        e.service.delete_memory(&anon(), args(json!({"id": a.id.to_string()}))).unwrap_err().code,
        ErrorCode::NotFound
    );
    let r = e.service.delete_all(&anon(), args(json!({"scope": SCOPE}))).unwrap();
    assert_eq!((r.status.as_str(), r.deleted), ("scope cleared", Some(1)));
    assert_eq!(e.count(&anon()), 1);
    assert!(
        e.get(&alice(), &other.id.to_string()).is_ok(),
        "delete_all leaves other owners' records"
    );
    let err = try_args(json!({"scope": "bad"}))
        .and_then(|a| e.service.delete_all(&anon(), a))
        .unwrap_err();
    assert_eq!(err.field.as_deref(), Some("scope"));
}

// ---------- list_tags ----------

#[test]
fn list_tags_counts_recall_visible_records() {
    let e = env();
    e.store(&anon(), "1", json!({"tags": ["a", "b"]}));
    e.store(&anon(), "2", json!({"tags": ["a"]}));
    e.store(&anon(), "3", json!({"tags": ["c"], "scope": "r:t:other"}));
    schedule(&e, "4", Some(T0 + 1000), None).unwrap();
    let mut hidden_tagged: ScheduleMemoryArgs = args(
        json!({"content": "5", "scope": SCOPE, "source": "user-said", "category": "decision", "not_after": "2000-01-01T00:00:00Z"}),
    );
    hidden_tagged.tags = Some(vec!["a".into(), "z".into()]);
    e.service.schedule_memory(&anon(), hidden_tagged).unwrap();
    let t = e.service.list_tags(&anon(), args(json!({}))).unwrap();
    let got: Vec<(String, u64)> = t.tags.iter().map(|t| (t.tag.clone(), t.count)).collect();
    assert_eq!(got, vec![("a".into(), 2), ("b".into(), 1), ("c".into(), 1)]);
    assert!(!t.more);
    let t = e.service.list_tags(&anon(), args(json!({"scope": SCOPE, "limit": 1}))).unwrap();
    assert_eq!((t.tags.len(), t.more), (1, true));
    let err = e.service.list_tags(&anon(), args(json!({"limit": 1001}))).unwrap_err();
    assert_eq!((err.field.as_deref(), err.hint), (Some("limit"), Some(Hint::OutOfRange)));
    assert_eq!(e.clock.now().as_micros(), T0 * 1_000_000);
}
