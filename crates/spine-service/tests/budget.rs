//! `max_chars` on the recall tools: whole records until the budget, the flag, a cursor that
//! continues at the first record left out, and the bounds.

use serde_json::{Value, json};
use spine_core::Hint;

use crate::common::*;

const SCOPE: &str = "acme:project:budget";

fn seed(e: &Env, n: usize) {
    for i in 0..n {
        e.at(T0 + i as i64);
        let content = format!("Budget note {i}: the deploy script retries the upload {i} times.");
        let v = json!({"content": content, "scope": SCOPE, "source": "user-said", "category": "gotcha"});
        e.service.store_memory(&anon(), args(v)).unwrap();
    }
}

fn list(e: &Env, extra: Value) -> Value {
    let mut v = json!({"scope": SCOPE});
    v.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
    serde_json::to_value(e.service.list_memory(&anon(), args(v)).unwrap()).unwrap()
}

fn contents(r: &Value, key: &str) -> Vec<String> {
    r[key].as_array().unwrap().iter().map(|m| m["content"].as_str().unwrap().to_owned()).collect()
}

#[test]
fn a_budget_pages_whole_records_and_the_cursor_resumes_where_it_cut() {
    let e = env();
    seed(&e, 6);
    let all = list(&e, json!({}));
    assert!(all.get("truncated_by_budget").is_none(), "no budget, no flag");
    let one = serde_json::to_string(&all["memories"][0]).unwrap().chars().count();

    // Room for two records and a half.
    let budget = one * 5 / 2;
    let mut seen = Vec::new();
    let mut cursor = String::new();
    loop {
        let page = list(&e, json!({"max_chars": budget, "cursor": cursor}));
        let text: usize =
            page["memories"].as_array().unwrap().iter().map(|m| m.to_string().len() + 1).sum();
        assert!(text <= budget, "{text} > {budget}");
        seen.extend(contents(&page, "memories"));
        cursor = page["next_cursor"].as_str().unwrap().to_owned();
        if page["truncated_by_budget"] == true {
            assert_eq!(page["memories"].as_array().unwrap().len(), 2);
            assert!(!cursor.is_empty(), "the cursor continues after a cut");
        }
        if cursor.is_empty() {
            break;
        }
    }
    assert_eq!(seen, contents(&all, "memories"), "every record once, in order");

    // A budget smaller than one record still returns one, so paging moves on.
    let tiny = list(&e, json!({"max_chars": 1}));
    assert_eq!(
        (tiny["memories"].as_array().unwrap().len(), &tiny["truncated_by_budget"]),
        (1, &json!(true))
    );
}

#[test]
fn search_rules_discoveries_and_related_say_when_the_budget_cut() {
    let e = env();
    seed(&e, 4);
    let search = |max: u64| {
        let v = json!({"query": "deploy upload retries", "scope": SCOPE, "max_chars": max});
        serde_json::to_value(e.service.search_memory(&anon(), args(v)).unwrap()).unwrap()
    };
    assert_eq!(search(0)["memories"].as_array().unwrap().len(), 4, "0 is no budget");
    let cut = search(200);
    assert_eq!(
        (cut["memories"].as_array().unwrap().len(), &cut["truncated_by_budget"]),
        (1, &json!(true))
    );

    for (i, line) in ["Always run cargo fmt", "Never force-push main"].iter().enumerate() {
        let v = json!({"content": format!("Rule {i}: {line}."), "scope": "rule:repo:budget", "summary": line});
        e.service.store_rule(&anon(), args(v)).unwrap();
    }
    let rules = e
        .service
        .list_rules(&anon(), args(json!({"scopes": ["rule:repo:budget"], "max_chars": 10})))
        .unwrap();
    assert_eq!((rules.rules.len(), rules.truncated_by_budget), (1, Some(true)));

    let listed = list(&e, json!({}));
    let id = listed["memories"][0]["id"].as_str().unwrap();
    let related =
        e.service.related_memories(&anon(), args(json!({"id": id, "max_chars": 1}))).unwrap();
    assert_eq!((related.related.len(), related.truncated_by_budget), (1, Some(true)));

    let discoveries = e
        .service
        .search_discovery(&anon(), args(json!({"query": "x", "cross_spine": true, "max_chars": 5})))
        .unwrap();
    assert_eq!(discoveries.truncated_by_budget, None, "nothing found, nothing cut");
}

#[test]
fn max_chars_is_bounded() {
    let e = env();
    let at = |n: u64| {
        try_args(json!({"scope": SCOPE, "max_chars": n}))
            .and_then(|a| e.service.list_memory(&anon(), a))
    };
    assert!(at(10_000_000).is_ok());
    let err = at(10_000_001).unwrap_err();
    assert_eq!((err.field.as_deref(), err.hint), (Some("max_chars"), Some(Hint::OutOfRange)));
}
