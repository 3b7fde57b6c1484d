//! Near-duplicate warnings on write: reported, never refused, same scope only, readable
//! records only, supersession targets left out, and off when configured so.

use serde_json::{Value, json};
use spine_core::Caller;

use crate::common::*;

const SCOPE: &str = "acme:project:dup";
const NOTE: &str = "The CI pipeline caches the cargo registry between runs to save ten minutes.";
const REWORDED: &str =
    "The CI pipeline caches the cargo registry between runs, saving ten minutes.";

fn store(e: &Env, caller: &Caller, content: &str, scope: &str, extra: Value) -> Value {
    let mut v = json!({"content": content, "scope": scope, "source": "user-said", "category": "convention"});
    v.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
    serde_json::to_value(e.service.store_memory(caller, args(v)).unwrap()).unwrap()
}

#[test]
fn a_near_duplicate_is_reported_and_stored_anyway() {
    let e = env();
    let first = store(&e, &anon(), NOTE, SCOPE, json!({"summary": "CI caches the registry"}));
    assert!(first.get("similar").is_none() && first.get("note").is_none(), "{first}");

    let second = store(&e, &anon(), REWORDED, SCOPE, json!({}));
    let similar = second["similar"].as_array().expect("reported");
    assert_eq!(similar.len(), 1);
    assert_eq!(similar[0]["id"], first["id"]);
    assert_eq!(similar[0]["summary"], "CI caches the registry", "the summary stands in");
    assert!(similar[0]["score"].as_f64().unwrap() >= 0.92);
    let note = second["note"].as_str().unwrap();
    assert!(
        note.contains("supersede_memory") && note.contains(first["short_id"].as_str().unwrap())
    );
    let listed = e.service.list_memory(&anon(), args(json!({"scope": SCOPE}))).unwrap();
    assert_eq!(listed.memories.len(), 2, "never refused");

    // Another scope, and an unrelated note, report nothing.
    assert!(store(&e, &anon(), REWORDED, "acme:project:other", json!({})).get("similar").is_none());
    let unrelated = store(&e, &anon(), "Use tabs in Makefiles.", SCOPE, json!({}));
    assert!(unrelated.get("similar").is_none(), "{unrelated}");
}

#[test]
fn only_records_the_writer_can_read_are_reported() {
    let e = env();
    store(&e, &bob(), NOTE, SCOPE, json!({}));
    let mine = store(&e, &alice(), REWORDED, SCOPE, json!({}));
    assert!(mine.get("similar").is_none(), "bob's private record stays invisible: {mine}");
}

#[test]
fn supersede_reports_near_duplicates_other_than_its_targets() {
    let e = env();
    let target = store(&e, &anon(), NOTE, SCOPE, json!({}));
    let twin = store(&e, &anon(), REWORDED, SCOPE, json!({}));
    let r = e
        .service
        .supersede_memory(
            &anon(),
            args(json!({"content": "The CI pipeline caches the cargo registry between runs to save ten minutes and more.",
                        "scope": SCOPE, "source": "user-said", "category": "convention",
                        "supersedes": [target["id"]]})),
        )
        .unwrap();
    let r = serde_json::to_value(r).unwrap();
    let similar: Vec<&Value> = r["similar"].as_array().unwrap().iter().map(|s| &s["id"]).collect();
    assert_eq!(similar, [&twin["id"]], "the target is being replaced, not a duplicate");
}

#[test]
fn the_check_can_be_turned_off() {
    let e = env();
    let service = e.service.clone().with_similar_threshold(None);
    let v = |c: &str| {
        args(json!({"content": c, "scope": SCOPE, "source": "user-said", "category": "convention"}))
    };
    service.store_memory(&anon(), v(NOTE)).unwrap();
    let second = service.store_memory(&anon(), v(REWORDED)).unwrap();
    assert!(second.similar.is_none());
}
