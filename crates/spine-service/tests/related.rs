//! related_memories against the real store and model, read against SPEC "related_memories",
//! "Supersession rules", "Errors" 2 and "Authentication" 4.

use serde_json::{Value, json};
use spine_core::{Caller, ErrorCode, Hint, Memory, RecordId, ShortId};
use spine_embed::Embedder;
use spine_service::views::Stored;
use spine_store::{Access, Embedding};

use crate::common::*;

const SCOPE: &str = "run1:project:spine";
const ELSEWHERE: &str = "run1:project:other";

impl Env {
    fn put(&self, caller: &Caller, content: &str, extra: Value) -> Stored {
        let mut v = json!({"content": content, "scope": SCOPE, "source": "user-said", "category": "decision"});
        v.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
        self.service.store_memory(caller, args(v)).unwrap()
    }

    fn related(&self, caller: &Caller, v: Value) -> Result<Value, spine_core::Error> {
        try_args(v)
            .and_then(|a| self.service.related_memories(caller, a))
            .map(|r| serde_json::to_value(r).unwrap())
    }

    fn related_to(&self, caller: &Caller, id: RecordId) -> Value {
        self.related(caller, json!({"id": id.to_string()})).unwrap()
    }

    fn share(&self, caller: &Caller, id: RecordId) {
        self.service
            .set_visibility(caller, args(json!({"id": id.to_string(), "shared": true})))
            .unwrap();
    }

    /// Stores a record of `caller` that supersedes `targets`, straight through the store
    /// (the same transaction supersede_memory uses), reusing `vector` to save embeddings.
    fn supersede_raw(
        &self,
        caller: &Caller,
        content: &str,
        targets: &[RecordId],
        vector: &[f32],
    ) -> RecordId {
        let mut m: Memory = serde_json::from_value(json!({
            "id": RecordId::mint().to_string(), "short_id": ShortId::mint().to_string(),
            "content": content, "scope": SCOPE, "source": "user-said", "category": "decision",
            "created_at": "2027-01-15T08:00:00Z", "actor": caller.actor(),
            "supersedes": targets.iter().map(|t| t.to_string()).collect::<Vec<_>>(),
        }))
        .unwrap();
        m.owner = Some(caller.owner().to_owned());
        let model = embedder();
        let embedding = Embedding { model: model.model_id(), vector };
        self.store
            .supersede(&Access::owned(caller), &m, embedding, targets, None)
            .unwrap()
            .unwrap();
        m.id
    }

    fn supersede(&self, caller: &Caller, content: &str, targets: &[RecordId]) -> RecordId {
        let v = embedder().embed(&[content]).unwrap().remove(0);
        self.supersede_raw(caller, content, targets, &v)
    }
}

fn items(r: &Value) -> &Vec<Value> {
    r["related"].as_array().unwrap()
}

/// The related item of record `id`, if any.
fn item(r: &Value, id: RecordId) -> Option<&Value> {
    items(r).iter().find(|i| i["memory"]["id"] == id.to_string())
}

/// The edge of type `ty` linking record `id` to the anchor, if any.
fn edge(r: &Value, id: RecordId, ty: &str) -> Option<Value> {
    item(r, id)?["edges"].as_array().unwrap().iter().find(|e| e["type"] == ty).cloned()
}

/// Ids of the related records with an edge of type `ty`, in result order.
fn with_edge(r: &Value, ty: &str) -> Vec<String> {
    items(r)
        .iter()
        .filter(|i| i["edges"].as_array().unwrap().iter().any(|e| e["type"] == ty))
        .map(|i| i["memory"]["id"].as_str().unwrap().to_owned())
        .collect()
}

fn id_strings(ids: &[RecordId]) -> Vec<String> {
    ids.iter().map(|id| id.to_string()).collect()
}

// ---------- anchor ----------

#[test]
fn unknown_or_malformed_anchor_is_rejected_echoing_only_the_input() {
    let e = env();
    let missing = RecordId::mint().to_string();
    let err = e.related(&anon(), json!({"id": missing})).unwrap_err();
    assert_eq!((err.code, err.field.as_deref()), (ErrorCode::NotFound, Some("id")));
    assert_eq!(err.message, format!("no memory {missing:?} that you can access"));
    let err = e.related(&anon(), json!({"id": "not an id"})).unwrap_err();
    assert_eq!((err.code, err.hint), (ErrorCode::InvalidArgument, Some(Hint::MalformedId)));
}

#[test]
fn another_owners_private_anchor_is_not_found_and_a_shared_one_is_readable() {
    let e = env();
    let private = e.put(&bob(), "Bob's private notes on the deploy pipeline.", json!({}));
    let shared = e.put(&bob(), "Bob's shared notes on the deploy pipeline.", json!({}));
    e.share(&bob(), shared.id);
    for input in [private.id.to_string(), private.short_id.as_str().to_owned()] {
        let err = e.related(&alice(), json!({"id": input})).unwrap_err();
        assert_eq!(err.code, ErrorCode::NotFound);
        assert_eq!(err.message, format!("no memory {input:?} that you can access"));
        if input == private.short_id.as_str() {
            assert!(!err.message.contains(&private.id.to_string()));
        }
    }
    let r = e.related(&alice(), json!({"id": shared.short_id.as_str()})).unwrap();
    assert_eq!(r["anchor"]["id"], shared.id.to_string());
    assert!(item(&r, private.id).is_none(), "bob's private record is no neighbour of alice's");
}

#[test]
fn anchor_is_compact_by_default_full_on_request_and_never_touched() {
    let e = env();
    let s = e.put(
        &anon(),
        "The store keeps vectors beside the payload.",
        json!({"summary": "vectors beside payload",
               "citations": [{"kind": "file", "ref": "src/store.rs"}]}),
    );
    let r = e.related_to(&anon(), s.id);
    assert_eq!(r["anchor"]["summary"], "vectors beside payload");
    assert!(r["anchor"].get("content").is_none());
    assert!(r["anchor"].get("citations").is_none());
    assert_eq!(r["related"], json!([]));
    assert_eq!(r["truncated"], false);
    let r = e.related(&anon(), json!({"id": s.id.to_string(), "full": true})).unwrap();
    assert_eq!(r["anchor"]["content"], "The store keeps vectors beside the payload.");
    assert_eq!(r["anchor"]["citations"][0]["ref"], "src/store.rs");
    assert_eq!(r["anchor"]["access_count"], 0, "related_memories is not a strong-signal touch");
}

// ---------- supersession ----------

#[test]
fn chain_of_three_reports_direction_and_depth_from_every_position() {
    let e = env();
    let a = e.put(&alice(), "Deploys run on Fridays.", json!({})).id;
    let b = e.supersede(&alice(), "Deploys run on Thursdays.", &[a]);
    let c = e.supersede(&alice(), "Deploys run on Wednesdays.", &[b]);
    let sup = |r: &Value, id| {
        let x = edge(r, id, "supersession").unwrap();
        (x["direction"].as_str().unwrap().to_owned(), x["depth"].as_u64().unwrap())
    };

    let middle = e.related_to(&alice(), b);
    assert_eq!(middle["anchor"]["states"], json!(["superseded"]));
    assert_eq!(sup(&middle, a), ("predecessor".into(), 1));
    assert_eq!(sup(&middle, c), ("successor".into(), 1));
    assert_eq!(item(&middle, a).unwrap()["memory"]["states"], json!(["superseded"]));
    assert!(item(&middle, c).unwrap()["memory"].get("states").is_none(), "the head is active");

    let head = e.related_to(&alice(), c);
    assert_eq!(sup(&head, b), ("predecessor".into(), 1));
    assert_eq!(sup(&head, a), ("predecessor".into(), 2));
    assert_eq!(with_edge(&head, "supersession"), id_strings(&[b, a]), "nearest first");

    let tail = e.related_to(&alice(), a);
    assert_eq!(sup(&tail, b), ("successor".into(), 1));
    assert_eq!(sup(&tail, c), ("successor".into(), 2));
    let x = edge(&tail, c, "supersession").unwrap();
    let mut keys: Vec<&String> = x.as_object().unwrap().keys().collect();
    keys.sort();
    assert_eq!(keys, ["depth", "direction", "type"], "only a supersession edge's own fields");
}

#[test]
fn supersession_items_come_first_and_superseded_records_are_not_gated() {
    let e = env();
    let a = e.put(&anon(), "Cache entries expire after an hour.", json!({"tags": ["cache"]})).id;
    let other = e.put(&anon(), "Cache keys include the tenant.", json!({"tags": ["cache"]})).id;
    let b = e.supersede(&anon(), "Cache entries expire after a day.", &[a]);
    let r = e.related_to(&anon(), b);
    assert_eq!(items(&r)[0]["memory"]["id"], a.to_string());
    assert!(edge(&r, a, "supersession").is_some());
    assert!(edge(&r, a, "vector").is_none(), "a superseded record is no vector neighbour");
    assert!(edge(&r, other, "vector").is_some());
}

#[test]
fn a_correcting_record_reaches_all_its_predecessors_up_to_the_cap() {
    let e = env();
    let v = embedder().embed(&["Retry policy."]).unwrap().remove(0);
    let olds: Vec<RecordId> = (0..51)
        .map(|i| e.supersede_raw(&anon(), &format!("Retry policy v{i}."), &[], &v))
        .collect();
    let head = e.supersede_raw(&anon(), "Retry policy, final.", &olds, &v);
    let r = e.related_to(&anon(), head);
    assert_eq!(with_edge(&r, "supersession").len(), 50);
    assert_eq!(r["truncated"], true);

    let e = env();
    let olds: Vec<RecordId> = (0..50)
        .map(|i| e.supersede_raw(&anon(), &format!("Retry policy v{i}."), &[], &v))
        .collect();
    let head = e.supersede_raw(&anon(), "Retry policy, final.", &olds, &v);
    let r = e.related_to(&anon(), head);
    assert_eq!(with_edge(&r, "supersession").len(), 50);
    assert_eq!(r["truncated"], false, "exactly 50 is not truncated");
}

#[test]
fn the_walk_stops_at_depth_16() {
    let e = env();
    let v = embedder().embed(&["Log level."]).unwrap().remove(0);
    let mut chain = vec![e.supersede_raw(&anon(), "Log level 0.", &[], &v)];
    for i in 1..=17 {
        let prev = *chain.last().unwrap();
        chain.push(e.supersede_raw(&anon(), &format!("Log level {i}."), &[prev], &v));
    }
    // chain[17] is the head; chain[0] is 17 links behind it.
    let r = e.related_to(&anon(), chain[17]);
    assert_eq!(with_edge(&r, "supersession").len(), 16);
    assert_eq!(edge(&r, chain[1], "supersession").unwrap()["depth"], 16);
    assert!(item(&r, chain[0]).is_none());
    assert_eq!(r["truncated"], true, "the depth bound left a record out");
    let r = e.related_to(&anon(), chain[1]);
    assert_eq!(with_edge(&r, "supersession").len(), 17, "16 successors and 1 predecessor");
    assert_eq!(r["truncated"], false);
}

#[test]
fn an_unreadable_link_ends_the_walk_on_its_side() {
    let e = env();
    let a = e.put(&alice(), "Staging uses port 8080.", json!({})).id;
    let b = e.supersede(&alice(), "Staging uses port 8081.", &[a]);
    let c = e.supersede(&alice(), "Staging uses port 8082.", &[b]);
    e.share(&alice(), a);
    e.share(&alice(), c);
    let r = e.related_to(&bob(), c);
    assert!(item(&r, b).is_none(), "alice's private record never appears for bob");
    assert!(item(&r, a).is_none(), "nothing beyond an unreadable link is revealed");
    let r = e.related_to(&alice(), c);
    assert_eq!(with_edge(&r, "supersession"), id_strings(&[b, a]));
}

// ---------- citations ----------

#[test]
fn citation_edges_name_the_shared_citations() {
    let e = env();
    let anchor = e.put(
        &anon(),
        "The store module owns authorization.",
        json!({"citations": [{"kind": "file", "ref": "src/store.rs", "locator": "L1-9"},
                             {"kind": "url", "ref": "https://example.com/design"},
                             {"kind": "file", "ref": "src/store.rs", "locator": "L40"}]}),
    );
    let both = e.put(
        &anon(),
        "Design doc for the store.",
        json!({"scope": ELSEWHERE,
               "citations": [{"kind": "url", "ref": "https://example.com/design"},
                             {"kind": "file", "ref": "src/store.rs", "locator": "L200"}]}),
    );
    let one = e.put(
        &anon(),
        "The store uses SQLite.",
        json!({"scope": ELSEWHERE, "citations": [{"kind": "file", "ref": "src/store.rs"}]}),
    );
    let other_kind = e.put(
        &anon(),
        "Commit that introduced the store.",
        json!({"scope": ELSEWHERE, "citations": [{"kind": "commit", "ref": "src/store.rs"}]}),
    );
    let r = e.related_to(&anon(), anchor.id);
    assert_eq!(
        edge(&r, both.id, "citation").unwrap(),
        json!({"type": "citation", "shared_citations": [
            {"kind": "file", "ref": "src/store.rs"},
            {"kind": "url", "ref": "https://example.com/design"}]})
    );
    assert_eq!(
        edge(&r, one.id, "citation").unwrap()["shared_citations"],
        json!([{"kind": "file", "ref": "src/store.rs"}])
    );
    assert!(item(&r, other_kind.id).is_none(), "a citation is shared only with the same kind");
    assert_eq!(r["truncated"], false);
}

#[test]
fn citation_and_tag_edges_are_recall_gated() {
    let e = env();
    let cite = json!([{"kind": "file", "ref": "Makefile"}]);
    let anchor = e.put(&anon(), "Tabs in Makefiles.", json!({"tags": ["make"], "citations": cite}));
    let later = e
        .service
        .schedule_memory(
            &anon(),
            args(json!({"content": "Makefiles move to just.", "scope": ELSEWHERE,
                        "source": "user-said", "category": "decision", "tags": ["make"],
                        "citations": cite, "not_before": "2030-01-01T00:00:00Z"})),
        )
        .unwrap();
    let r = e.related_to(&anon(), anchor.id);
    assert!(item(&r, later.id).is_none(), "a scheduled record is not related yet");
}

#[test]
fn citation_cap_is_20_and_truncated_says_more_existed() {
    let e = env();
    let cite = json!([{"kind": "repo", "ref": "https://example.com/spine"}]);
    let anchor = e.put(&anon(), "Spine is the memory service.", json!({"citations": cite}));
    for i in 0..20 {
        e.put(&anon(), &format!("Fact {i}."), json!({"scope": ELSEWHERE, "citations": cite}));
    }
    let r = e.related_to(&anon(), anchor.id);
    assert_eq!((with_edge(&r, "citation").len(), &r["truncated"]), (20, &json!(false)));
    e.put(&anon(), "Fact 20.", json!({"scope": ELSEWHERE, "citations": cite}));
    let r = e.related_to(&anon(), anchor.id);
    assert_eq!((with_edge(&r, "citation").len(), &r["truncated"]), (20, &json!(true)));
}

// ---------- tags ----------

#[test]
fn tag_edges_carry_sorted_shared_tags_and_jaccard_weight_highest_first() {
    let e = env();
    let anchor = e.put(&anon(), "Backups run nightly.", json!({"tags": ["ops", "db", "backup"]}));
    let same = e.put(
        &anon(),
        "Restore drills.",
        json!({"scope": ELSEWHERE, "tags": ["backup", "db", "ops"]}),
    );
    let two = e.put(&anon(), "DB ops.", json!({"scope": ELSEWHERE, "tags": ["db", "ops"]}));
    let one = e.put(&anon(), "UI ops.", json!({"scope": ELSEWHERE, "tags": ["ops", "ui"]}));
    let none = e.put(&anon(), "UI.", json!({"scope": ELSEWHERE, "tags": ["ui"]}));
    let r = e.related_to(&anon(), anchor.id);
    assert_eq!(with_edge(&r, "tag"), id_strings(&[same.id, two.id, one.id]));
    assert_eq!(items(&r).len(), 3, "other scopes give no vector neighbours");
    assert_eq!(
        edge(&r, same.id, "tag").unwrap(),
        json!({"type": "tag", "shared_tags": ["backup", "db", "ops"], "tag_weight": 1.0})
    );
    let t = edge(&r, two.id, "tag").unwrap();
    assert_eq!(t["shared_tags"], json!(["db", "ops"]));
    assert!((t["tag_weight"].as_f64().unwrap() - 2.0 / 3.0).abs() < 1e-6);
    let t = edge(&r, one.id, "tag").unwrap();
    assert_eq!(t["shared_tags"], json!(["ops"]));
    assert!((t["tag_weight"].as_f64().unwrap() - 0.25).abs() < 1e-6, "1 shared of 4 distinct");
    assert!(item(&r, none.id).is_none());
}

#[test]
fn tag_cap_is_20_keeping_the_heaviest() {
    let e = env();
    let anchor = e.put(&anon(), "Feature flags.", json!({"tags": ["flags", "release"]}));
    let heavy =
        e.put(&anon(), "Flag rollout.", json!({"scope": ELSEWHERE, "tags": ["flags", "release"]}));
    for i in 0..20 {
        e.put(
            &anon(),
            &format!("Flag {i}."),
            json!({"scope": ELSEWHERE, "tags": ["flags", format!("f{i}")]}),
        );
    }
    let r = e.related_to(&anon(), anchor.id);
    let tagged = with_edge(&r, "tag");
    assert_eq!((tagged.len(), &r["truncated"]), (20, &json!(true)));
    assert_eq!(tagged[0], heavy.id.to_string(), "the heaviest survives the cut though oldest");
}

// ---------- vector ----------

fn seed_scope(e: &Env) -> Stored {
    let anchor = e.put(&anon(), "We use PostgreSQL with pgvector for vector search.", json!({}));
    for content in [
        "The database is Postgres; embeddings live in a pgvector column.",
        "The user prefers tabs over spaces in Go code.",
        "Never run cargo clean in CI; the cache takes ten minutes to rebuild.",
        "Error types implement IntoResponse so handlers return them directly.",
        "Release notes are written by hand.",
        "Commit messages use the imperative mood.",
        "The staging cluster runs on three nodes.",
        "Dependencies are pinned in Cargo.lock.",
        "Logs are shipped to Loki.",
    ] {
        e.put(&anon(), content, json!({}));
    }
    anchor
}

#[test]
fn vector_edges_are_the_k_nearest_in_the_anchors_scope_by_cosine() {
    let e = env();
    let anchor = seed_scope(&e);
    e.put(&anon(), "Postgres with pgvector handles vector search.", json!({"scope": ELSEWHERE}));
    let r = e.related(&anon(), json!({"id": anchor.id.to_string(), "k": 1})).unwrap();
    assert_eq!(items(&r).len(), 1);
    let m = &items(&r)[0];
    assert!(m["memory"]["content"].as_str().unwrap().contains("pgvector column"));
    let score = m["edges"][0]["score"].as_f64().unwrap();
    assert!(score > 0.5 && score <= 1.0, "score is a cosine: {score}");
    assert_eq!(m["edges"][0].as_object().unwrap().len(), 2, "type and score only");

    let r = e.related(&anon(), json!({"id": anchor.id.to_string(), "k": 0})).unwrap();
    assert_eq!(with_edge(&r, "vector").len(), 8, "k=0 resolves to 8");
    assert_eq!(r["truncated"], false, "the vector cap is by design, not a truncation");
    let scores: Vec<f64> =
        items(&r).iter().map(|i| i["edges"][0]["score"].as_f64().unwrap()).collect();
    assert!(scores.windows(2).all(|w| w[0] >= w[1]), "nearest first: {scores:?}");
    let r = e.related(&anon(), json!({"id": anchor.id.to_string(), "k": 1000})).unwrap();
    assert_eq!(with_edge(&r, "vector").len(), 9, "every other record of the scope");

    let err = e.related(&anon(), json!({"id": anchor.id.to_string(), "k": 1001})).unwrap_err();
    assert_eq!((err.field.as_deref(), err.hint), (Some("k"), Some(Hint::OutOfRange)));
}

// ---------- merging and authorization ----------

#[test]
fn a_record_linked_several_ways_appears_once_with_one_edge_per_type() {
    let e = env();
    let cite = json!([{"kind": "file", "ref": "src/cache.rs"}]);
    let a = e.put(
        &anon(),
        "Cache entries expire after an hour.",
        json!({"tags": ["cache"], "citations": cite}),
    );
    let b = e.supersede(&anon(), "Cache entries expire after a day.", &[a.id]);
    let twin = e.put(
        &anon(),
        "Cache entries live for an hour.",
        json!({"tags": ["cache"], "citations": cite}),
    );
    let r = e.related_to(&anon(), a.id);
    assert_eq!(items(&r).len(), 2);
    let types = |id| -> Vec<String> {
        item(&r, id).unwrap()["edges"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["type"].as_str().unwrap().to_owned())
            .collect()
    };
    assert_eq!(types(twin.id), ["citation", "tag", "vector"]);
    assert_eq!(types(b), ["supersession", "vector"]);
    assert_eq!(items(&r)[0]["memory"]["id"], b.to_string(), "supersession first");
}

#[test]
fn another_owners_private_records_never_appear() {
    let e = env();
    let cite = json!([{"kind": "file", "ref": "deploy.sh"}]);
    let extra = json!({"tags": ["deploy"], "citations": cite});
    let anchor = e.put(&alice(), "Deploy with the deploy.sh script.", extra.clone());
    let private = e.put(&bob(), "Deploy with the deploy.sh script, says Bob.", extra.clone());
    let shared = e.put(&bob(), "Deploy only with deploy.sh.", extra.clone());
    e.share(&bob(), shared.id);
    let r = e.related(&alice(), json!({"id": anchor.id.to_string(), "k": 1000})).unwrap();
    assert!(item(&r, private.id).is_none());
    let types: Vec<&str> = item(&r, shared.id).unwrap()["edges"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["type"].as_str().unwrap())
        .collect();
    assert_eq!(types, ["citation", "tag", "vector"], "sharing grants read");
}
