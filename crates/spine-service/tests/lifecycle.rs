//! supersede_memory, archive_memory and restore_memory against the real store and model
//! (SPEC supersede_memory, archive_memory, restore_memory, "Supersession rules", Errors 3/7/8).

use crate::common::*;

use serde_json::{Value, json};
use spine_core::{Caller, ErrorCode, Hint, IdRef};
use spine_service::views::Stored;
use spine_store::{Access, Gate};

const SCOPE: &str = "run1:project:spine";

fn put(env: &Env, caller: &Caller, content: &str) -> Stored {
    env.service
        .store_memory(
            caller,
            args(json!({"content": content, "scope": SCOPE, "source": "user-said",
                        "category": "decision"})),
        )
        .unwrap()
}

fn supersede_args(content: &str, targets: &[&str], extra: Value) -> Value {
    let mut v = json!({"content": content, "scope": SCOPE, "source": "user-said",
                       "category": "decision", "supersedes": targets});
    v.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
    v
}

fn supersede(env: &Env, caller: &Caller, v: Value) -> Result<Value, spine_core::Error> {
    env.service.supersede_memory(caller, args(v)).map(|r| serde_json::to_value(r).unwrap())
}

fn get(env: &Env, caller: &Caller, id: &str) -> Value {
    serde_json::to_value(env.service.get_memory(caller, args(json!({"id": id}))).unwrap()).unwrap()
}

fn search_ids(env: &Env, caller: &Caller, query: &str) -> Vec<String> {
    let r = env.service.search_memory(caller, args(json!({"query": query, "scope": SCOPE})));
    let v = serde_json::to_value(r.unwrap()).unwrap();
    v["memories"].as_array().unwrap().iter().map(|m| m["id"].as_str().unwrap().to_owned()).collect()
}

/// Every record of every test caller, in any state.
fn count(env: &Env) -> usize {
    [anon(), alice(), bob()]
        .iter()
        .map(|c| {
            let all = spine_store::Filter::new(spine_store::ScopeFilter::All);
            let access = Access::owned(c);
            let sel = spine_store::Selection { access: &access, filter: &all, gate: Gate::Off };
            env.store.count(sel).unwrap() as usize
        })
        .sum()
}

#[test]
fn chain_of_three_runs_forward_with_one_live_head() {
    let env = env();
    let a = put(&env, &anon(), "We deploy with Heroku.");
    let b = supersede(
        &env,
        &anon(),
        supersede_args("We deploy with Fly.io.", &[&a.id.to_string()], json!({})),
    )
    .unwrap();
    let b_id = b["id"].as_str().unwrap().to_owned();
    let c = supersede(
        &env,
        &anon(),
        supersede_args(
            "We deploy with Kubernetes on GKE.",
            &[b["short_id"].as_str().unwrap()],
            json!({}),
        ),
    )
    .unwrap();
    let c_id = c["id"].as_str().unwrap().to_owned();

    let ga = get(&env, &anon(), &a.id.to_string());
    assert_eq!(ga["superseded_by"], b_id);
    assert_eq!(ga["states"], json!(["superseded"]));
    assert_eq!(ga["content"], "We deploy with Heroku.", "target content untouched");
    let gb = get(&env, &anon(), &b_id);
    assert_eq!(gb["supersedes"], json!([a.id.to_string()]));
    assert_eq!(gb["superseded_by"], c_id);
    let gc = get(&env, &anon(), &c_id);
    assert_eq!(gc["supersedes"], json!([b_id]));
    assert!(gc.get("superseded_by").is_none());
    assert!(gc.get("states").is_none(), "the head is active");

    // Recall shows only the live head.
    assert_eq!(search_ids(&env, &anon(), "how do we deploy"), vec![c_id]);

    // Superseding a non-head is rejected, naming it, and writes nothing.
    let before = count(&env);
    let e =
        supersede(&env, &anon(), supersede_args("x", &[&a.id.to_string()], json!({}))).unwrap_err();
    assert_eq!(e.code, ErrorCode::FailedPrecondition);
    assert_eq!(e.hint, Some(Hint::AlreadySuperseded));
    assert!(e.message.contains(&a.id.to_string()), "{}", e.message);
    assert_eq!(count(&env), before);
}

/// Deleting a correction through the tools brings back what it corrected (docs/records.md,
/// "Deleting a record in a chain"): recall finds it again, it names no successor, and the
/// store verifies clean; deleting the middle of a chain links its ends.
#[test]
fn deleting_a_correction_brings_back_what_it_corrected() {
    let env = env();
    let del = |id: &str| env.service.delete_memory(&anon(), args(json!({"id": id}))).unwrap();
    let a = put(&env, &anon(), "We deploy with Heroku.").id.to_string();
    let b = supersede(&env, &anon(), supersede_args("We deploy with Fly.io.", &[&a], json!({})))
        .unwrap()["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let c = supersede(&env, &anon(), supersede_args("We deploy with GKE.", &[&b], json!({})))
        .unwrap()["id"]
        .as_str()
        .unwrap()
        .to_owned();
    del(&b);
    assert_eq!(get(&env, &anon(), &a)["superseded_by"], c, "A links to C");
    assert_eq!(search_ids(&env, &anon(), "how do we deploy"), vec![c.clone()]);
    del(&c);
    let ga = get(&env, &anon(), &a);
    assert!(ga.get("superseded_by").is_none() && ga.get("states").is_none(), "{ga}");
    assert_eq!(search_ids(&env, &anon(), "how do we deploy"), vec![a]);
    let page = spine_store::RowidPage { scope: None, after: 0, limit: 100 };
    let expect = spine_store::VectorExpectation { model: None, dims: None, configured: false };
    use spine_store::ReviewStore;
    let verified = match &env._db {
        Some(db) => spine_store::PgStore::connect(&db.url).unwrap().verify_page(page, &expect),
        None => spine_store::SqliteStore::open(env._dir.path()).unwrap().verify_page(page, &expect),
    }
    .unwrap();
    assert!(verified.violations.is_empty(), "{:?}", verified.violations);
}

#[test]
fn one_correction_merges_several_targets_and_duplicates_collapse() {
    let env = env();
    let a = put(&env, &anon(), "Tabs for indentation.");
    let b = put(&env, &anon(), "Indent with four spaces.");
    let a_short = a.short_id.as_str().to_lowercase();
    let r = supersede(
        &env,
        &anon(),
        supersede_args(
            "Indent with two spaces (rustfmt default is four; we override).",
            &[&a.id.to_string(), &a_short, &b.id.to_string(), &b.id.to_string()],
            json!({}),
        ),
    )
    .unwrap();
    let new = get(&env, &anon(), r["id"].as_str().unwrap());
    assert_eq!(new["supersedes"], json!([a.id.to_string(), b.id.to_string()]));
    for t in [&a, &b] {
        assert_eq!(get(&env, &anon(), &t.id.to_string())["superseded_by"], r["id"]);
    }
}

#[test]
fn rejections_name_every_offending_target_and_write_nothing() {
    let env = env();
    let alice = alice();
    let bob = bob();
    let mine = put(&env, &alice, "Use pnpm, not npm.");
    let other = put(&env, &bob, "Bob's private note.");
    let head = put(&env, &alice, "Old head.");
    supersede(&env, &alice, supersede_args("New head.", &[&head.id.to_string()], json!({})))
        .unwrap();
    let before = count(&env);

    // Not owned, nonexistent and malformed are one not_found, echoing only the input.
    let missing = "0000000000";
    let e = supersede(
        &env,
        &alice,
        supersede_args(
            "Use pnpm everywhere.",
            &[
                &mine.id.to_string(),
                &other.id.to_string(),
                missing,
                "not-an-id",
                &head.id.to_string(),
            ],
            json!({}),
        ),
    )
    .unwrap_err();
    assert_eq!(e.code, ErrorCode::NotFound);
    assert_eq!(e.field.as_deref(), Some("supersedes"));
    for named in
        [other.id.to_string(), missing.to_owned(), "not-an-id".to_owned(), head.id.to_string()]
    {
        assert!(e.message.contains(&named), "{named} named in {}", e.message);
    }
    assert!(!e.message.contains(other.short_id.as_str()), "never another record's identifier");
    assert!(!e.message.contains(&mine.id.to_string()), "valid targets are not offending");
    assert_eq!(count(&env), before);
    assert!(get(&env, &alice, &mine.id.to_string()).get("superseded_by").is_none());

    // A rule target rejects the call.
    let rule = spine_core::Memory {
        category: spine_core::Category::Rule,
        scope: spine_core::Scope::parse("scope", "rule:repo:spine").unwrap(),
        ..memory_like(&env, &alice, &mine.id.to_string())
    };
    let vector = vec![0.0f32; 384];
    env.store
        .insert(
            &spine_store::Access::operator(),
            &rule,
            spine_store::Embedding { model: "test", vector: &vector },
        )
        .unwrap();
    let e = supersede(
        &env,
        &alice,
        supersede_args("x", &[&rule.id.to_string(), &mine.id.to_string()], json!({})),
    )
    .unwrap_err();
    assert_eq!((e.code, e.hint), (ErrorCode::FailedPrecondition, Some(Hint::RuleImmutable)));
    assert!(e.message.contains(&rule.id.to_string()));
}

/// A copy of an existing record with a fresh id and short id.
fn memory_like(env: &Env, caller: &Caller, id: &str) -> spine_core::Memory {
    let mut m = env
        .store
        .resolve(&Access::owned(caller), &IdRef::parse("id", id).unwrap())
        .unwrap()
        .unwrap();
    m.id = spine_core::RecordId::mint();
    m.short_id = spine_core::ShortId::mint();
    m
}

#[test]
fn supersedes_entry_bounds_are_checked_before_resolution() {
    let env = env();
    let a = put(&env, &anon(), "Entry bounds.");
    let e = supersede(&env, &anon(), supersede_args("x", &[], json!({}))).unwrap_err();
    assert_eq!((e.field.as_deref(), e.hint), (Some("supersedes"), Some(Hint::Required)));
    let long = "a".repeat(257);
    let e = supersede(&env, &anon(), supersede_args("x", &[&a.id.to_string(), &long], json!({})))
        .unwrap_err();
    assert_eq!((e.field.as_deref(), e.hint), (Some("supersedes[1]"), Some(Hint::TooLong)));
    // 256 bytes is allowed through to resolution (and is simply not found).
    let e =
        supersede(&env, &anon(), supersede_args("x", &[&"a".repeat(256)], json!({}))).unwrap_err();
    assert_eq!(e.code, ErrorCode::NotFound);
    // The correcting record is validated like store_memory.
    let e = supersede(
        &env,
        &anon(),
        supersede_args("x", &[&a.id.to_string()], json!({"category": "rule"})),
    )
    .unwrap_err();
    assert_eq!(e.field.as_deref(), Some("category"));
    // owner/actor are server-set: an argument naming them is rejected, not obeyed.
    let e = spine_service::args::parse_args::<spine_service::args::SupersedeMemoryArgs>(
        json!({"content": "x", "scope": SCOPE, "source": "user-said", "category": "decision",
               "supersedes": [a.id.to_string()], "owner": "me"})
        .as_object()
        .cloned()
        .unwrap(),
    )
    .unwrap_err();
    assert_eq!((e.field.as_deref(), e.hint), (Some("owner"), Some(Hint::UnknownField)));
}

#[test]
fn validate_only_runs_the_preflight_without_writing() {
    let env = env();
    let a = put(&env, &anon(), "Validate only target.");
    let before = count(&env);
    let r = supersede(
        &env,
        &anon(),
        supersede_args(
            "Corrected.",
            &[a.short_id.as_str(), &a.id.to_string()],
            json!({"validate_only": true, "idempotency_key": "k1"}),
        ),
    )
    .unwrap();
    assert_eq!(r["validated"], true);
    assert_eq!(r["supersedes"], json!([a.id.to_string()]));
    assert_eq!(r["targets"][0]["id"], a.id.to_string());
    assert_eq!(r["targets"][0]["short_id"], a.short_id.as_str());
    assert!(r.get("id").is_none() && r.get("short_id").is_none());
    assert_eq!(count(&env), before);
    assert!(get(&env, &anon(), &a.id.to_string()).get("superseded_by").is_none());
    // validate_only never recorded the key: a real call with it succeeds.
    let real = supersede(
        &env,
        &anon(),
        supersede_args("Corrected.", &[&a.id.to_string()], json!({"idempotency_key": "k1"})),
    )
    .unwrap();
    assert!(real["id"].is_string());
    // And the rejection a real call would produce.
    let e = supersede(
        &env,
        &anon(),
        supersede_args("Again.", &[&a.id.to_string()], json!({"validate_only": true})),
    )
    .unwrap_err();
    assert_eq!(e.hint, Some(Hint::AlreadySuperseded));
}

#[test]
fn idempotency_key_replays_and_conflicts() {
    let env = env();
    let a = put(&env, &anon(), "Idempotent target A.");
    let b = put(&env, &anon(), "Idempotent target B.");
    let (ai, bi) = (a.id.to_string(), b.id.to_string());
    let first = supersede(
        &env,
        &anon(),
        supersede_args("Merged A and B.", &[&ai, &bi], json!({"idempotency_key": "fix-1"})),
    )
    .unwrap();
    let before = count(&env);
    // Same key, same set in another order and with a duplicate: the original result.
    let again = supersede(
        &env,
        &anon(),
        supersede_args(
            "Merged A and B.",
            &[&bi, a.short_id.as_str(), &ai],
            json!({"idempotency_key": "fix-1"}),
        ),
    )
    .unwrap();
    assert_eq!(again, first);
    assert_eq!(count(&env), before, "a replay writes nothing");
    // Same key, different set: conflict.
    let e = supersede(
        &env,
        &anon(),
        supersede_args("Merged A and B.", &[&ai], json!({"idempotency_key": "fix-1"})),
    )
    .unwrap_err();
    assert_eq!((e.code, e.field.as_deref()), (ErrorCode::Conflict, Some("idempotency_key")));
    // Replay check runs after existence: a deleted target is not_found, not a replay.
    env.service.delete_memory(&anon(), args(json!({"id": bi}))).unwrap();
    let e = supersede(
        &env,
        &anon(),
        supersede_args("Merged A and B.", &[&ai, &bi], json!({"idempotency_key": "fix-1"})),
    )
    .unwrap_err();
    assert_eq!(e.code, ErrorCode::NotFound);
    // Keys are per owner: another owner's identical key is independent.
    let c = put(&env, &alice(), "Alice's target.");
    let r = supersede(
        &env,
        &alice(),
        supersede_args("Alice's fix.", &[&c.id.to_string()], json!({"idempotency_key": "fix-1"})),
    )
    .unwrap();
    assert_ne!(r["id"], first["id"]);
    let e = supersede(
        &env,
        &anon(),
        supersede_args("x", &[&ai], json!({"idempotency_key": "k".repeat(257)})),
    )
    .unwrap_err();
    assert_eq!((e.field.as_deref(), e.hint), (Some("idempotency_key"), Some(Hint::TooLong)));
}

fn batch(
    env: &Env,
    caller: &Caller,
    tool: &str,
    ids: Vec<String>,
) -> Result<Value, spine_core::Error> {
    let a = args(json!({ "ids": ids }));
    let r = match tool {
        "archive" => env.service.archive_memory(caller, a),
        _ => env.service.restore_memory(caller, a),
    };
    r.map(|r| serde_json::to_value(r).unwrap())
}

fn outcomes(v: &Value) -> Vec<(String, String)> {
    v["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| (r["id"].as_str().unwrap().to_owned(), r["outcome"].as_str().unwrap().to_owned()))
        .collect()
}

#[test]
fn archive_and_restore_report_per_id_outcomes_in_order() {
    let env = env();
    let alice = alice();
    let a = put(&env, &alice, "Archive me: the CI cache key includes Cargo.lock.");
    let b = put(&env, &alice, "Keep me.");
    let bobs = put(&env, &bob(), "Bob's own record.");
    let (ai, bi) = (a.id.to_string(), b.id.to_string());

    let r = batch(
        &env,
        &alice,
        "archive",
        vec![ai.clone(), bobs.id.to_string(), a.short_id.as_str().to_lowercase(), "nope".into()],
    )
    .unwrap();
    assert_eq!(
        outcomes(&r),
        vec![
            (ai.clone(), "archived".into()),
            (String::new(), "not_found".into()),
            (ai.clone(), "already_archived".into()),
            (String::new(), "not_found".into()),
        ]
    );
    let ga = get(&env, &alice, &ai);
    assert_eq!(ga["states"], json!(["archived"]));
    assert_eq!(ga["archived_at"], "2027-01-15T08:00:00Z");
    assert!(search_ids(&env, &alice, "CI cache key").iter().all(|id| *id != ai));
    // Bob's record is untouched.
    assert!(get(&env, &bob(), &bobs.id.to_string()).get("archived_at").is_none());

    let r = batch(&env, &alice, "restore", vec![bi.clone(), ai.clone(), ai.clone()]).unwrap();
    assert_eq!(
        outcomes(&r),
        vec![
            (bi, "not_archived".into()),
            (ai.clone(), "restored".into()),
            (ai.clone(), "not_archived".into()),
        ]
    );
    assert!(get(&env, &alice, &ai).get("archived_at").is_none());
    assert!(search_ids(&env, &alice, "CI cache key").contains(&ai));
}

#[test]
fn archive_supersession_and_expiry_are_independent_markers() {
    let env = env();
    let a = put(&env, &anon(), "Independent markers.");
    let ai = a.id.to_string();
    batch(&env, &anon(), "archive", vec![ai.clone()]).unwrap();
    supersede(&env, &anon(), supersede_args("Replacement.", &[&ai], json!({}))).unwrap();
    assert_eq!(get(&env, &anon(), &ai)["states"], json!(["archived", "superseded"]));
    batch(&env, &anon(), "restore", vec![ai.clone()]).unwrap();
    let g = get(&env, &anon(), &ai);
    assert_eq!(g["states"], json!(["superseded"]));
    assert!(g["superseded_by"].is_string());
}

#[test]
fn malformed_batches_are_rejected_whole() {
    let env = env();
    let a = put(&env, &anon(), "Batch shape.");
    for (ids, field, hint) in [
        (vec![], "ids", Hint::Required),
        (vec![a.id.to_string(), "  ".into()], "ids[1]", Hint::Blank),
        (vec!["x".repeat(257)], "ids[0]", Hint::TooLong),
        (vec![a.id.to_string(); 1001], "ids", Hint::TooMany),
    ] {
        let e = batch(&env, &anon(), "archive", ids).unwrap_err();
        assert_eq!((e.field.as_deref(), e.hint), (Some(field), Some(hint)));
    }
    assert!(get(&env, &anon(), &a.id.to_string()).get("archived_at").is_none(), "nothing written");
    // 1000 entries (duplicates of one record) is accepted: one archived, 999 already.
    let r = batch(&env, &anon(), "archive", vec![a.id.to_string(); 1000]).unwrap();
    let o = outcomes(&r);
    assert_eq!(o.len(), 1000);
    assert_eq!(o[0].1, "archived");
    assert!(o[1..].iter().all(|(_, s)| s == "already_archived"));
}
