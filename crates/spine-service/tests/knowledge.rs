//! Discoveries and rules (SPEC "Discovery records", "Rule records", store_discovery,
//! search_discovery, store_rule, list_rules) against the real store and the real model.

use serde_json::{Value, json};
use spine_core::{
    Caller, Category, EpochSeconds, Error, ErrorCode, Hint, Memory, RecordId, ShortId,
};
use spine_embed::Embedder;
use spine_service::args::*;
use spine_service::views::Stored;
use spine_store::{Access, Embedding, Filter, Gate, ScopeFilter, Selection};

use crate::common::*;

const DISC: &str = "discovery:repo:spine";
const RULES: &str = "rule:repo:spine";

fn obj(v: Value) -> serde_json::Map<String, Value> {
    v.as_object().cloned().unwrap()
}

/// `base` with the keys of `patch` replaced (a null value removes the key).
fn patched(base: &Value, patch: &Value) -> Value {
    let mut v = base.clone();
    for (k, x) in patch.as_object().unwrap() {
        if x.is_null() {
            v.as_object_mut().unwrap().remove(k);
        } else {
            v[k] = x.clone();
        }
    }
    v
}

fn discovery_args(patch: Value) -> Value {
    patched(
        &json!({
            "content": "The store keeps each record's JSON in one payload column.",
            "kind": "fact",
            "citations": [{"kind": "file", "ref": "crates/spine-store/src/lib.rs", "locator": "L9-12"}],
            "scope": DISC,
        }),
        &patch,
    )
}

fn rule_args(patch: Value) -> Value {
    patched(
        &json!({
            "content": "Every public function in the core crate has a doc comment.",
            "scope": RULES,
            "summary": "Document every public function",
        }),
        &patch,
    )
}

impl Env {
    /// store_discovery through the same argument parser the transports use.
    fn discover(&self, caller: &Caller, v: Value) -> Result<Stored, Error> {
        let a = parse_args::<StoreDiscoveryArgs>(obj(v))?;
        self.service.store_discovery(caller, a)
    }

    fn rule(&self, caller: &Caller, v: Value) -> Result<Stored, Error> {
        let a = parse_args::<StoreRuleArgs>(obj(v))?;
        self.service.store_rule(caller, a)
    }

    fn search_disc(&self, caller: &Caller, v: Value) -> Result<Value, Error> {
        let a = parse_args::<SearchDiscoveryArgs>(obj(v))?;
        self.service.search_discovery(caller, a).map(|r| serde_json::to_value(r).unwrap())
    }

    fn rules(&self, caller: &Caller, v: Value) -> Result<Value, Error> {
        let a = parse_args::<ListRulesArgs>(obj(v))?;
        self.service.list_rules(caller, a).map(|r| serde_json::to_value(r).unwrap())
    }

    fn get_json(&self, caller: &Caller, id: &str) -> Value {
        serde_json::to_value(self.service.get_memory(caller, args(json!({"id": id}))).unwrap())
            .unwrap()
    }

    /// Every record in the store, any owner, any state.
    fn total(&self) -> usize {
        let mut n = 0;
        for caller in [anon(), alice(), bob()] {
            let filter = Filter::new(ScopeFilter::All);
            let sel =
                Selection { access: &Access::owned(&caller), filter: &filter, gate: Gate::Off };
            n += self.store.count(sel).unwrap() as usize;
        }
        n
    }
}

fn assert_rejected(r: Result<impl std::fmt::Debug, Error>, field: &str, hint: Hint) {
    let err = r.expect_err("call must be rejected");
    assert_eq!(err.code, ErrorCode::InvalidArgument, "{err}");
    assert_eq!(err.field.as_deref(), Some(field), "{err}");
    assert_eq!(err.hint, Some(hint), "{err}");
}

fn summaries(v: &Value, key: &str) -> Vec<String> {
    v[key]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["summary"].as_str().or(m["content"].as_str()).unwrap().to_owned())
        .collect()
}

fn citations(n: usize, excerpt_bytes: usize) -> Value {
    json!(vec![
        json!({"kind": "url", "ref": "https://example.org/doc", "excerpt": "e".repeat(excerpt_bytes)});
        n
    ])
}

// ---------- store_discovery ----------

#[test]
fn rejected_discovery_calls_name_field_and_hint_and_store_nothing() {
    let e = env();
    let cases: Vec<(Value, &str, Hint)> = vec![
        (json!({"citations": []}), "citations", Hint::Required),
        (json!({"citations": null}), "citations", Hint::Required),
        (json!({"citations": citations(51, 0)}), "citations", Hint::TooMany),
        (json!({"citations": citations(1, 16 * 1024 + 1)}), "citations[0].excerpt", Hint::TooLong),
        (json!({"content": "x".repeat(64 * 1024 + 1)}), "content", Hint::TooLong),
        (json!({"content": " "}), "content", Hint::Blank),
        (json!({"kind": null}), "kind", Hint::Required),
        (json!({"kind": "guess"}), "kind", Hint::InvalidValue),
        (json!({"scope": "run1:project:spine"}), "scope", Hint::MalformedScope),
        (json!({"scope": "rule:repo:spine"}), "scope", Hint::ReservedScope),
        (json!({"scope": "discovery:"}), "scope", Hint::MalformedScope),
        (json!({"scope": "discovery: spine"}), "scope", Hint::MalformedScope),
        (json!({"source": "agent-inferred"}), "source", Hint::UnknownField),
        (json!({"category": "discovery"}), "category", Hint::UnknownField),
        (json!({"summary": "s".repeat(513)}), "summary", Hint::TooLong),
        (json!({"tags": [""]}), "tags[0]", Hint::Blank),
        (json!({"id": "not an id"}), "id", Hint::MalformedId),
    ];
    for (patch, field, hint) in cases {
        assert_rejected(e.discover(&anon(), discovery_args(patch)), field, hint);
    }
    assert_eq!(e.total(), 0, "no rejected call stored anything");
}

#[test]
fn discovery_limits_at_exactly_n_are_accepted_and_fields_are_server_set() {
    let e = env();
    let s = e
        .discover(
            &alice(),
            discovery_args(json!({
                "content": "d".repeat(64 * 1024),
                "kind": "map",
                "citations": citations(50, 16 * 1024),
                "tags": ["layout", "layout"],
                "summary": "How the store is laid out",
            })),
        )
        .unwrap();
    let m = e.get_json(&alice(), &s.id.to_string());
    assert_eq!(m["category"], "discovery");
    assert_eq!(m["source"], "agent-inferred");
    assert_eq!(m["kind"], "map");
    assert_eq!(m["visibility"], "", "discoveries are private by default");
    assert_eq!(m["owner"], "alice@example.com");
    assert_eq!(m["summary_source"], "client");
    assert_eq!(m["tags"], json!(["layout"]));
    assert_eq!(m["citations"].as_array().unwrap().len(), 50);
    assert_eq!(m["schema_version"], spine_core::SCHEMA_VERSION);
}

#[test]
fn replace_discovery_in_place_keeps_id_short_id_and_created_at() {
    let e = env();
    let first = e
        .discover(&anon(), discovery_args(json!({"tags": ["store"], "summary": "payload column"})))
        .unwrap();
    e.at(T0 + 3600);
    let again = e
        .discover(
            &anon(),
            discovery_args(json!({
                "id": first.short_id.as_str().to_lowercase(),
                "content": "Vectors are compared with cosine similarity in search.",
                "kind": "map",
                "citations": [{"kind": "commit", "ref": "abc123"}],
                "scope": "discovery:repo:other",
            })),
        )
        .unwrap();
    assert_eq!((again.id, again.short_id.clone()), (first.id, first.short_id.clone()));
    let m = e.get_json(&anon(), &first.id.to_string());
    assert_eq!(m["created_at"], "2027-01-15T08:00:00Z");
    assert_eq!(m["content"], "Vectors are compared with cosine similarity in search.");
    assert_eq!(m["kind"], "map");
    assert_eq!(m["scope"], "discovery:repo:other");
    assert_eq!(m["citations"], json!([{"kind": "commit", "ref": "abc123"}]));
    assert_eq!(m["tags"], json!([]), "omitted tags are replaced by none");
    assert!(m.get("summary").is_none(), "omitted summary is replaced by none");
    assert_eq!(m["summary_source"], "");
    assert_eq!(e.total(), 1);
    // Re-embedded: the new content is what search finds.
    let r = e
        .search_disc(&anon(), json!({"query": "cosine similarity of vectors", "cross_spine": true}))
        .unwrap();
    assert_eq!(r["discoveries"][0]["id"], first.id.to_string());
    assert!(r["discoveries"][0]["score"].as_f64().unwrap() > 0.5, "{r}");
}

#[test]
fn replace_needs_your_own_record_of_the_same_kind() {
    let e = env();
    let alices = e.discover(&alice(), discovery_args(json!({}))).unwrap();
    // Even once shared (readable by bob), it stays alice's to write.
    e.service
        .set_visibility(&alice(), args(json!({"id": alices.id.to_string(), "shared": true})))
        .unwrap();
    let memory = e
        .service
        .store_memory(
            &bob(),
            args(json!({"content": "m", "scope": "run1:project:spine", "source": "user-said", "category": "decision"})),
        )
        .unwrap();
    let rule = e.rule(&bob(), rule_args(json!({}))).unwrap();
    for target in [
        alices.id.to_string(),
        alices.short_id.to_string(),
        memory.id.to_string(),
        rule.id.to_string(),
        RecordId::mint().to_string(),
    ] {
        let err = e.discover(&bob(), discovery_args(json!({"id": target}))).unwrap_err();
        assert_eq!((err.code, err.field.as_deref()), (ErrorCode::NotFound, Some("id")), "{target}");
        assert!(err.message.contains(&target));
    }
    assert_eq!(e.get_json(&alice(), &alices.id.to_string())["owner"], "alice@example.com");
    assert_eq!(e.total(), 3, "nothing was written by the rejected replacements");
}

// ---------- search_discovery ----------

#[test]
fn search_discovery_filters_kind_and_carries_citations_and_created_at() {
    let e = env();
    e.discover(
        &anon(),
        discovery_args(json!({"kind": "map", "content": "The server crate wires MCP tools to the service.", "summary": "server layout"})),
    )
    .unwrap();
    e.discover(
        &anon(),
        discovery_args(json!({"kind": "fact", "content": "The MCP server registers each tool once.", "summary": "tool registration"})),
    )
    .unwrap();
    let q = |kind: Value| {
        e.search_disc(
            &anon(),
            json!({"query": "how are MCP tools wired", "scope": DISC, "kind": kind}),
        )
    };
    let maps = q(json!("map")).unwrap();
    assert_eq!(summaries(&maps, "discoveries"), ["server layout"]);
    let item = &maps["discoveries"][0];
    assert_eq!(item["kind"], "map");
    assert_eq!(item["created_at"], "2027-01-15T08:00:00Z");
    assert_eq!(item["citations"][0]["ref"], "crates/spine-store/src/lib.rs");
    assert!(item["score"].as_f64().unwrap() > 0.0);
    assert_eq!(summaries(&q(json!("fact")).unwrap(), "discoveries"), ["tool registration"]);
    assert_eq!(q(Value::Null).unwrap()["discoveries"].as_array().unwrap().len(), 2);
    assert_rejected(q(json!("note")), "kind", Hint::InvalidValue);
    assert!(maps.get("searched_scopes").is_none(), "scope-confined calls carry no coverage");
}

#[test]
fn search_discovery_orders_by_cosine_and_applies_the_recall_gate() {
    let e = env();
    let near = e
        .discover(
            &alice(),
            discovery_args(json!({"content": "SQLite busy timeout is five seconds."})),
        )
        .unwrap();
    let far = e
        .discover(&alice(), discovery_args(json!({"content": "The logo is drawn in blue."})))
        .unwrap();
    let r = e
        .search_disc(&alice(), json!({"query": "sqlite busy timeout", "scope": DISC, "k": 0}))
        .unwrap();
    let ids: Vec<&str> =
        r["discoveries"].as_array().unwrap().iter().map(|d| d["id"].as_str().unwrap()).collect();
    assert_eq!(ids, [near.id.to_string(), far.id.to_string()]);
    let scores: Vec<f64> =
        r["discoveries"].as_array().unwrap().iter().map(|d| d["score"].as_f64().unwrap()).collect();
    assert!(scores[0] > scores[1]);
    let one = e.search_disc(&alice(), json!({"query": "sqlite", "scope": DISC, "k": 1})).unwrap();
    assert_eq!(one["discoveries"].as_array().unwrap().len(), 1);

    e.store
        .set_archived(&Access::owned(&alice()), &[near.id], Some(EpochSeconds::from_secs(T0)))
        .unwrap();
    let r =
        e.search_disc(&alice(), json!({"query": "sqlite busy timeout", "scope": DISC})).unwrap();
    assert_eq!(r["discoveries"].as_array().unwrap().len(), 1, "archived discovery hidden");
    assert_eq!(r["discoveries"][0]["id"], far.id.to_string());
    // Private discoveries stay private.
    let r = e.search_disc(&bob(), json!({"query": "logo", "scope": DISC})).unwrap();
    assert!(r["discoveries"].as_array().unwrap().is_empty());
}

#[test]
fn rejected_search_discovery_calls() {
    let e = env();
    let base = json!({"query": "q", "scope": DISC});
    let cases: Vec<(Value, &str, Hint)> = vec![
        (json!({"query": "  "}), "query", Hint::Blank),
        (json!({"query": "q".repeat(16 * 1024 + 1)}), "query", Hint::TooLong),
        (json!({"scope": null}), "scope", Hint::Required),
        (json!({"scope": "run1:project:spine"}), "scope", Hint::MalformedScope),
        (json!({"scope": "rule:repo:spine"}), "scope", Hint::ReservedScope),
        (json!({"k": 1001}), "k", Hint::OutOfRange),
        (json!({"categories": ["discovery"]}), "categories", Hint::UnknownField),
    ];
    for (patch, field, hint) in cases {
        assert_rejected(e.search_disc(&anon(), patched(&base, &patch)), field, hint);
    }
    assert!(e.search_disc(&anon(), patched(&base, &json!({"k": 1000}))).is_ok());
}

#[test]
fn cross_spine_search_spans_only_discovery_scopes() {
    let e = env();
    e.discover(&anon(), discovery_args(json!({"scope": "discovery:repo:b"}))).unwrap();
    e.discover(&anon(), discovery_args(json!({"scope": "discovery:repo:a"}))).unwrap();
    e.rule(&anon(), rule_args(json!({}))).unwrap();
    e.service
        .store_memory(
            &anon(),
            args(json!({"content": "payload column", "scope": "run1:project:spine", "source": "user-said", "category": "decision"})),
        )
        .unwrap();
    let r = e
        .search_disc(
            &anon(),
            json!({"query": "payload column", "cross_spine": true, "scope": "ignored"}),
        )
        .unwrap();
    assert_eq!(r["discoveries"].as_array().unwrap().len(), 2);
    assert!(r["discoveries"].as_array().unwrap().iter().all(|d| d["category"] == "discovery"));
    assert_eq!(r["searched_scopes"], json!(["discovery:repo:a", "discovery:repo:b"]));
    assert_eq!(r["scopes_truncated"], false);
}

#[test]
fn store_discovery_accepts_any_scope_starting_with_discovery() {
    // SPEC store_discovery: scope "Must start with `discovery:`".
    let e = env();
    for scope in ["discovery:spine", "discovery:repo:spine", "discovery:a:b:c"] {
        let d = e.discover(&anon(), discovery_args(json!({"scope": scope}))).unwrap();
        let found =
            e.search_disc(&anon(), json!({"query": "payload column", "scope": scope})).unwrap();
        assert_eq!(found["discoveries"][0]["id"], d.id.to_string(), "{scope}");
        assert_eq!(found["discoveries"][0]["scope"], scope);
    }
    let all = e.search_disc(&anon(), json!({"query": "payload", "cross_spine": true})).unwrap();
    assert_eq!(
        all["searched_scopes"],
        json!(["discovery:a:b:c", "discovery:repo:spine", "discovery:spine"])
    );
}

#[test]
fn discoveries_stay_out_of_list_memory_but_search_memory_without_categories_finds_them() {
    let e = env();
    e.discover(&anon(), discovery_args(json!({}))).unwrap();
    e.rule(
        &anon(),
        rule_args(json!({"content": "Payload columns hold one JSON document per record."})),
    )
    .unwrap();
    let list =
        e.service.list_memory(&anon(), args(json!({"cross_spine": true, "limit": 1000}))).unwrap();
    let categories: Vec<Category> = list.memories.iter().map(|m| m.category).collect();
    assert_eq!(categories, [Category::Rule], "the rule, never the discovery");
    let list = e.service.list_memory(&anon(), args(json!({"scope": DISC}))).unwrap();
    assert!(list.memories.is_empty(), "not even in their own scope");
    let q = |extra: Value| {
        let v = patched(&json!({"query": "payload column", "cross_spine": true}), &extra);
        e.service.search_memory(&anon(), args(v)).unwrap().memories.len()
    };
    // SPEC search_memory: categories omitted or empty is no filter.
    assert_eq!(q(json!({})), 2, "the discovery and the rule");
    assert_eq!(q(json!({"categories": []})), 2);
    assert_eq!(q(json!({"categories": ["discovery"]})), 1);
    assert_eq!(q(json!({"categories": ["rule"]})), 1);
    assert_eq!(q(json!({"categories": ["decision"]})), 0, "a filter excludes them");
}

// ---------- store_rule ----------

#[test]
fn rejected_rule_calls_name_field_and_hint_and_store_nothing() {
    let e = env();
    let cases: Vec<(Value, &str, Hint)> = vec![
        (json!({"summary": "first line\nsecond line"}), "summary", Hint::MultiLine),
        (json!({"summary": "carriage\rreturn"}), "summary", Hint::MultiLine),
        (json!({"summary": "s".repeat(257)}), "summary", Hint::TooLong),
        (json!({"summary": null}), "summary", Hint::Required),
        (json!({"summary": " "}), "summary", Hint::Required),
        (json!({"content": "c".repeat(8 * 1024 + 1)}), "content", Hint::TooLong),
        (json!({"scope": "rule:team:spine"}), "scope", Hint::MalformedScope),
        (json!({"scope": "rule:repo"}), "scope", Hint::MalformedScope),
        (json!({"scope": "run1:project:spine"}), "scope", Hint::MalformedScope),
        (json!({"scope": "discovery:repo:spine"}), "scope", Hint::ReservedScope),
        (json!({"category": "rule"}), "category", Hint::UnknownField),
        (json!({"source": "user-said"}), "source", Hint::UnknownField),
        (json!({"visibility": "shared"}), "visibility", Hint::UnknownField),
        (json!({"citations": []}), "citations", Hint::UnknownField),
        (json!({"id": " "}), "id", Hint::Blank),
        (json!({"id": "nope"}), "id", Hint::MalformedId),
    ];
    for (patch, field, hint) in cases {
        assert_rejected(e.rule(&anon(), rule_args(patch)), field, hint);
    }
    assert_eq!(e.total(), 0, "no rejected call stored anything");
}

#[test]
fn rule_limits_at_exactly_n_are_accepted_and_fields_are_server_set() {
    let e = env();
    let s = e
        .rule(
            &alice(),
            rule_args(json!({
                "content": "c".repeat(8 * 1024),
                "summary": "s".repeat(256),
                "scope": "rule:project:spine",
                "tags": ["docs"],
            })),
        )
        .unwrap();
    let m = e.get_json(&alice(), &s.id.to_string());
    assert_eq!(m["category"], "rule");
    assert_eq!(m["source"], "user-said");
    assert_eq!(m["visibility"], "shared");
    assert_eq!(m["summary_source"], "client");
    assert_eq!(m["schema_version"], spine_core::SCHEMA_VERSION);
    // Always shared: another authenticated caller reads it.
    assert_eq!(e.get_json(&bob(), &s.id.to_string())["id"], s.id.to_string());
    // An empty id creates.
    e.rule(&alice(), rule_args(json!({"id": ""}))).unwrap();
    assert_eq!(e.total(), 2);
}

#[test]
fn replace_rule_in_place_keeps_id_short_id_and_created_at() {
    let e = env();
    let first = e.rule(&alice(), rule_args(json!({"tags": ["docs"]}))).unwrap();
    e.at(T0 + 60);
    let again = e
        .rule(
            &alice(),
            rule_args(json!({
                "id": first.id.to_string(),
                "content": "Every public item in every crate has a doc comment.",
                "summary": "Document every public item",
                "scope": "rule:project:spine",
            })),
        )
        .unwrap();
    assert_eq!((again.id, again.short_id.clone()), (first.id, first.short_id.clone()));
    let m = e.get_json(&alice(), &first.short_id.to_string());
    assert_eq!(m["created_at"], "2027-01-15T08:00:00Z");
    assert_eq!(m["content"], "Every public item in every crate has a doc comment.");
    assert_eq!(m["summary"], "Document every public item");
    assert_eq!(m["scope"], "rule:project:spine");
    assert_eq!(m["tags"], json!([]));
    assert_eq!(m["visibility"], "shared");
    assert_eq!(e.total(), 1);

    // Bob can read alice's rule but not replace it; nor can a discovery be replaced as a rule.
    let disc = e.discover(&alice(), discovery_args(json!({}))).unwrap();
    for (caller, target) in [(bob(), first.id.to_string()), (alice(), disc.id.to_string())] {
        let err = e.rule(&caller, rule_args(json!({"id": target}))).unwrap_err();
        assert_eq!(err.code, ErrorCode::NotFound, "{target}");
    }
    assert_eq!(
        e.get_json(&alice(), &first.id.to_string())["summary"],
        "Document every public item"
    );
}

// ---------- list_rules ----------

#[test]
fn list_rules_is_oldest_first_within_scopes_and_across_all_scopes() {
    let e = env();
    let mut t = T0;
    let mut rule = |scope: &str, summary: &str, tags: Value| {
        t += 10;
        e.at(t);
        e.rule(&alice(), rule_args(json!({"scope": scope, "summary": summary, "tags": tags})))
            .unwrap()
    };
    rule("rule:repo:b", "b1", json!(["x", "y"]));
    rule("rule:repo:a", "a1", json!(["x"]));
    rule("rule:project:p", "p1", json!([]));
    rule("rule:repo:b", "b2", json!(["y"]));
    rule("rule:repo:a", "a2", json!(["x", "y"]));
    e.discover(&alice(), discovery_args(json!({}))).unwrap();
    e.service
        .store_memory(
            &alice(),
            args(json!({"content": "m", "scope": "run1:project:spine", "source": "user-said", "category": "decision"})),
        )
        .unwrap();

    let all = e.rules(&bob(), json!({})).unwrap();
    assert_eq!(summaries(&all, "rules"), ["b1", "a1", "p1", "b2", "a2"]);
    assert_eq!(
        all["searched_scopes"],
        json!(["rule:project:p", "rule:repo:a", "rule:repo:b"]),
        "only rule scopes"
    );
    assert_eq!(all["scopes_truncated"], false);
    assert_eq!(all["truncated"], false);
    assert!(all.get("advisory").is_none());

    let some =
        e.rules(&bob(), json!({"scopes": ["rule:repo:b", "rule:repo:a", "rule:repo:b"]})).unwrap();
    assert_eq!(summaries(&some, "rules"), ["b1", "b2", "a1", "a2"], "scope by scope, as given");
    assert!(some.get("searched_scopes").is_none(), "coverage only when scopes are omitted");

    let tagged = e.rules(&bob(), json!({"tags": ["x", "y"]})).unwrap();
    assert_eq!(summaries(&tagged, "rules"), ["b1", "a2"], "tags are ANDed");
    let none = e.rules(&bob(), json!({"scopes": ["rule:repo:none"]})).unwrap();
    assert!(none["rules"].as_array().unwrap().is_empty());
}

#[test]
fn compact_rule_view_has_no_content_and_full_has_every_field() {
    let e = env();
    e.rule(&anon(), rule_args(json!({"tags": ["docs"]}))).unwrap();
    let compact = e.rules(&anon(), json!({"scopes": [RULES]})).unwrap();
    let r = compact["rules"][0].as_object().unwrap();
    let mut keys: Vec<&str> = r.keys().map(String::as_str).collect();
    keys.sort();
    assert_eq!(keys, ["created_at", "id", "scope", "short_id", "summary", "tags"]);
    assert_eq!(r["summary"], "Document every public function");
    assert_eq!(r["tags"], json!(["docs"]));

    let full = e.rules(&anon(), json!({"scopes": [RULES], "full": true})).unwrap();
    let r = &full["rules"][0];
    assert_eq!(r["content"], "Every public function in the core crate has a doc comment.");
    assert_eq!(r["category"], "rule");
    assert_eq!(r["source"], "user-said");
    assert_eq!(r["visibility"], "shared");
    assert_eq!(r["summary_source"], "client");
}

#[test]
fn list_rules_rejects_non_rule_scopes_naming_the_entry() {
    let e = env();
    let cases: Vec<(Value, &str, Hint)> = vec![
        (json!({"scopes": [RULES, "run1:project:spine"]}), "scopes[1]", Hint::MalformedScope),
        (json!({"scopes": ["discovery:repo:spine"]}), "scopes[0]", Hint::ReservedScope),
        (json!({"scopes": [RULES, RULES, "rule:team:x"]}), "scopes[2]", Hint::MalformedScope),
        (json!({"scopes": [""]}), "scopes[0]", Hint::Required),
        (json!({"tags": [" "]}), "tags[0]", Hint::Blank),
        (json!({"scope": RULES}), "scope", Hint::UnknownField),
    ];
    for (v, field, hint) in cases {
        assert_rejected(e.rules(&anon(), v), field, hint);
    }
}

#[test]
fn archived_and_expired_rules_are_not_listed() {
    let e = env();
    let archived = e.rule(&alice(), rule_args(json!({"summary": "archived"}))).unwrap();
    e.rule(&alice(), rule_args(json!({"summary": "kept"}))).unwrap();
    e.store
        .set_archived(&Access::owned(&alice()), &[archived.id], Some(EpochSeconds::from_secs(T0)))
        .unwrap();
    // No tool puts a window on a rule; write one directly to check the gate.
    let mut expiring = raw_rule(&alice(), RULES, T0);
    expiring.summary = "expiring".into();
    expiring.not_after = Some(EpochSeconds::from_secs(T0 + 100));
    insert(&e, &expiring);

    e.at(T0 + 99);
    for v in [json!({}), json!({"scopes": [RULES]})] {
        assert_eq!(summaries(&e.rules(&alice(), v).unwrap(), "rules"), ["kept", "expiring"]);
    }
    e.at(T0 + 100);
    for v in [json!({}), json!({"scopes": [RULES]})] {
        assert_eq!(summaries(&e.rules(&alice(), v).unwrap(), "rules"), ["kept"]);
    }
}

#[test]
fn advisory_appears_above_fifty_rules_in_a_scope_and_never_at_fifty() {
    let e = env();
    for i in 0..50 {
        let tags = if i % 2 == 0 { json!(["even"]) } else { json!([]) };
        e.rule(&anon(), rule_args(json!({"summary": format!("rule {i}"), "tags": tags}))).unwrap();
        e.rule(
            &anon(),
            rule_args(json!({"scope": "rule:project:other", "summary": format!("other {i}")})),
        )
        .unwrap();
    }
    for v in [json!({}), json!({"scopes": [RULES, "rule:project:other"]})] {
        let r = e.rules(&anon(), v).unwrap();
        assert_eq!(r["rules"].as_array().unwrap().len(), 100);
        assert!(r.get("advisory").is_none(), "50 per scope is not above 50: {r}");
    }

    e.rule(&anon(), rule_args(json!({"summary": "rule 50", "tags": ["even"]}))).unwrap();
    for v in [json!({}), json!({"scopes": [RULES]})] {
        let r = e.rules(&anon(), v).unwrap();
        let advisory = r["advisory"].as_str().expect("51 rules in one scope");
        assert!(advisory.starts_with("rule:repo:spine holds 51 rules; more than 50"), "{advisory}");
        assert!(!advisory.contains("rule:project:other"), "{advisory}");
        assert_eq!(r["truncated"], false);
    }
    // The count is of the rules matching the call: 26 tagged `even` earn no advisory.
    let r = e.rules(&anon(), json!({"tags": ["even"]})).unwrap();
    assert_eq!(r["rules"].as_array().unwrap().len(), 26);
    assert!(r.get("advisory").is_none());
}

// ---------- list_rules caps (records written straight to the store: 2000+ embeddings would
// make the test slow, and list_rules never reads vectors) ----------

fn raw_rule(caller: &Caller, scope: &str, secs: i64) -> Memory {
    let mut m: Memory = serde_json::from_value(json!({
        "id": RecordId::mint().to_string(), "short_id": ShortId::mint().to_string(),
        "content": "raw rule", "scope": scope, "source": "user-said", "category": "rule",
        "summary": "raw", "summary_source": "client", "visibility": "shared",
        "created_at": EpochSeconds::from_secs(secs).to_rfc3339(),
    }))
    .unwrap();
    m.owner = Some(caller.owner().to_owned());
    m
}

fn insert(e: &Env, m: &Memory) {
    let v = vec![0.0; 384];
    e.store
        .insert(
            &spine_store::Access::operator(),
            m,
            Embedding { model: embedder().model_id(), vector: &v },
        )
        .unwrap();
}

#[test]
fn list_rules_caps_at_1000_per_scope_and_1000_in_total() {
    let e = env();
    for i in 0..1001 {
        insert(&e, &raw_rule(&anon(), "rule:repo:big", T0 + i));
    }
    for i in 0..60 {
        insert(&e, &raw_rule(&anon(), "rule:repo:late", T0 + 2000 + i));
    }
    let newest_big = raw_rule(&anon(), "rule:repo:big", T0 + 5000);
    insert(&e, &newest_big);

    let r = e.rules(&anon(), json!({"scopes": ["rule:repo:big", "rule:repo:late"]})).unwrap();
    let rules = r["rules"].as_array().unwrap();
    assert_eq!(rules.len(), 1060, "1000 per scope");
    assert_eq!(rules[0]["created_at"], EpochSeconds::from_secs(T0).to_rfc3339());
    assert_eq!(rules[999]["created_at"], EpochSeconds::from_secs(T0 + 999).to_rfc3339());
    assert_eq!(rules[1000]["scope"], "rule:repo:late");
    assert_eq!(r["truncated"], true);
    let advisory = r["advisory"].as_str().unwrap();
    assert!(advisory.contains("rule:repo:big holds at least 1001 rules"), "{advisory}");
    assert!(advisory.contains("rule:repo:late holds 60 rules"), "{advisory}");

    // Without scopes: the 1000 oldest overall, all from rule:repo:big — yet the advisory
    // still counts rule:repo:late, which the cap left out of the page.
    let r = e.rules(&anon(), json!({})).unwrap();
    let rules = r["rules"].as_array().unwrap();
    assert_eq!(rules.len(), 1000, "1000 in total");
    assert!(rules.iter().all(|m| m["scope"] == "rule:repo:big"));
    assert_eq!(rules[999]["created_at"], EpochSeconds::from_secs(T0 + 999).to_rfc3339());
    assert_eq!(r["truncated"], true);
    assert_eq!(r["searched_scopes"], json!(["rule:repo:big", "rule:repo:late"]));
    let advisory = r["advisory"].as_str().unwrap();
    assert!(advisory.contains("rule:repo:big holds at least 1000 rules"), "{advisory}");
    assert!(advisory.contains("rule:repo:late holds at least 51 rules"), "{advisory}");
    assert!(!rules.iter().any(|m| m["id"] == newest_big.id.to_string()));
}

/// SPEC Rule records / Authentication 5: every write tool on a rule. Visibility and
/// supersession are refused; content edits keep the rule's bounds; archive and delete work.
#[test]
fn rule_guard_on_every_write_tool() {
    let e = env();
    let r = e.rule(&alice(), rule_args(json!({}))).unwrap();
    let id = r.id.to_string();
    let before = e.get_json(&alice(), &id);

    let refused = |r: Result<Value, Error>, field: &str| {
        let err = r.unwrap_err();
        assert_eq!(
            (err.code, err.field.as_deref(), err.hint),
            (ErrorCode::FailedPrecondition, Some(field), Some(Hint::RuleImmutable)),
            "{err}"
        );
    };
    let vis = e.service.set_visibility(&alice(), args(json!({"id": id, "shared": false})));
    refused(vis.map(|v| serde_json::to_value(v).unwrap()), "id");
    let upd = e.service.update_memory(
        &alice(),
        args(json!({"id": id, "content": before["content"], "shared": false})),
    );
    refused(upd.map(|v| serde_json::to_value(v).unwrap()), "shared");
    let sup = e.service.supersede_memory(
        &alice(),
        args(json!({"content": "x", "scope": "run1:project:spine", "source": "user-said",
                    "category": "decision", "supersedes": [id]})),
    );
    refused(sup.map(|v| serde_json::to_value(v).unwrap()), "supersedes");
    // Content edits must address the client summary and keep the rule's own bounds.
    let upd = e.service.update_memory(&alice(), args(json!({"id": id, "content": "Changed."})));
    assert_rejected(upd, "summary", Hint::SummaryNotAddressed);
    let upd = e.service.update_memory(
        &alice(),
        args(json!({"id": id, "content": "Changed.", "summary": "two\nlines"})),
    );
    assert_rejected(upd, "summary", Hint::MultiLine);
    let upd = e
        .service
        .update_memory(&alice(), args(json!({"id": id, "content": "Changed.", "summary": ""})));
    assert_rejected(upd, "summary", Hint::Required);
    let upd = e.service.update_memory(
        &alice(),
        args(json!({"id": id, "content": "c".repeat(8 * 1024 + 1), "summary": "s"})),
    );
    assert_rejected(upd, "content", Hint::TooLong);
    assert_eq!(e.get_json(&alice(), &id)["content"], before["content"], "nothing changed");
    // Other owners cannot write it although they can read it.
    let upd = e
        .service
        .update_memory(&bob(), args(json!({"id": id, "content": "Bob's.", "summary": "Bob's"})));
    assert_eq!(upd.unwrap_err().code, ErrorCode::NotFound);
    assert_eq!(e.get_json(&bob(), &id)["visibility"], "shared");
    // Rule scopes are reserved for store_rule.
    let s = e.service.store_memory(
        &alice(),
        args(json!({"content": "x", "scope": RULES, "source": "user-said",
                    "category": "decision"})),
    );
    assert_rejected(s, "scope", Hint::ReservedScope);
    // Allowed: a content edit within bounds, archive/restore, and delete.
    e.service
        .update_memory(
            &alice(),
            args(json!({"id": id, "content": "Document public items.", "summary": "Docs"})),
        )
        .unwrap();
    let arch = e.service.archive_memory(&alice(), args(json!({"ids": [id]}))).unwrap();
    assert_eq!(arch.results[0].outcome, "archived");
    e.service.restore_memory(&alice(), args(json!({"ids": [id]}))).unwrap();
    e.service.delete_memory(&alice(), args(json!({"id": id}))).unwrap();
    assert_eq!(e.total(), 0);
}
