//! The write requests' checks: which argument a call with two bad ones reports, and what
//! the configured rules change.

use serde_json::{Value, json};
use spine_core::secrets::SecretsPolicy;
use spine_core::{Hint, Limits, MAX_ID_BYTES};

use super::*;
use crate::args::parse_args;

fn args<T: serde::de::DeserializeOwned + schemars::JsonSchema>(v: Value) -> T {
    parse_args(v.as_object().cloned().expect("an object")).expect("well-formed arguments")
}

fn rules(secrets: SecretsPolicy) -> WriteRules {
    WriteRules { limits: Limits::default(), secrets }
}

/// The field and hint a check reports.
fn reported<T: std::fmt::Debug>(r: Result<T, Error>) -> (String, Hint) {
    let e = r.expect_err("a rejection");
    (e.field.unwrap_or_default(), e.hint.expect("a hint"))
}

fn record(extra: Value) -> Value {
    let mut v = json!({"content": "use rustls", "scope": "t:project:spine",
                       "source": "user-said", "category": "decision"});
    v.as_object_mut().unwrap().extend(extra.as_object().cloned().unwrap());
    v
}

#[test]
fn store_reports_content_before_scope_and_scope_before_category() {
    let r = rules(SecretsPolicy::Reject);
    let a = record(json!({"content": " ", "scope": "rule:repo:spine"}));
    assert_eq!(reported(StoreRequest::check(args(a), &r)), ("content".into(), Hint::Blank));
    let a = record(json!({"scope": "rule:repo:spine", "category": "rule"}));
    assert_eq!(reported(StoreRequest::check(args(a), &r)).0, "scope");
    let a = record(json!({"category": "discovery", "tags": [" "]}));
    assert_eq!(reported(StoreRequest::check(args(a), &r)).0, "category");
}

#[test]
fn store_screens_by_the_secrets_policy_and_drops_duplicate_tags() {
    let a = || args(record(json!({"content": "key AKIAIOSFODNN7EXAMPLE", "tags": ["a", "a"]})));
    let e = reported(StoreRequest::check(a(), &rules(SecretsPolicy::Reject)));
    assert_eq!(e, ("content".into(), Hint::SecretDetected));
    let r = StoreRequest::check(a(), &rules(SecretsPolicy::Redact)).expect("redacted");
    assert!(!r.record().content.contains("AKIAIOSFODNN7EXAMPLE"));
    assert_eq!(r.record().tags, ["a"]);
}

#[test]
fn schedule_reports_the_window_before_the_record() {
    let r = rules(SecretsPolicy::Reject);
    let a = record(json!({"category": "discovery"}));
    assert_eq!(reported(ScheduleRequest::check(args(a), &r)).0, "category");
    let a = record(json!({"content": " "}));
    assert_eq!(
        reported(ScheduleRequest::check(args(a), &r)),
        ("not_before".into(), Hint::Required)
    );
    let a = record(json!({"content": " ", "not_before": "2026-01-02T00:00:00Z",
                          "not_after": "2026-01-01T00:00:00Z"}));
    assert_eq!(
        reported(ScheduleRequest::check(args(a), &r)),
        ("not_after".into(), Hint::EmptyWindow)
    );
    let a = record(json!({"not_after": "2026-01-01T00:00:00Z"}));
    let s = ScheduleRequest::check(args(a), &r).expect("an open start");
    assert!(s.not_before.is_none() && s.not_after.is_some());
}

#[test]
fn supersede_reports_targets_then_key_then_record() {
    let r = rules(SecretsPolicy::Reject);
    let a = record(json!({"supersedes": [], "idempotency_key": " ", "content": " "}));
    assert_eq!(
        reported(SupersedeRequest::check(args(a), &r)),
        ("supersedes".into(), Hint::Required)
    );
    let long = "a".repeat(MAX_ID_BYTES + 1);
    let a = record(json!({"supersedes": ["x", long], "idempotency_key": " "}));
    assert_eq!(
        reported(SupersedeRequest::check(args(a), &r)),
        ("supersedes[1]".into(), Hint::TooLong)
    );
    let a = record(json!({"supersedes": ["x"], "idempotency_key": " ", "content": " "}));
    assert_eq!(
        reported(SupersedeRequest::check(args(a), &r)),
        ("idempotency_key".into(), Hint::Blank)
    );
    let a = record(json!({"supersedes": ["x"], "content": " "}));
    assert_eq!(reported(SupersedeRequest::check(args(a), &r)), ("content".into(), Hint::Blank));
    let a = record(json!({"supersedes": ["not an id", "x"]}));
    let s = SupersedeRequest::check(args(a), &r).expect("targets resolve later");
    assert_eq!(s.supersedes[0].input, "not an id");
    assert!(s.supersedes[0].id.is_none());
}

#[test]
fn discovery_needs_citations_before_its_scope_and_rule_its_scope_before_its_summary() {
    let r = rules(SecretsPolicy::Reject);
    let a = json!({"content": "x", "kind": "map", "citations": [], "scope": "rule:repo:spine"});
    assert_eq!(reported(KnowledgeRequest::discovery(args(a), &r)).0, "citations");
    let a = json!({"content": "x", "scope": "discovery:repo:spine", "summary": "two\nlines"});
    assert_eq!(
        reported(KnowledgeRequest::rule(args(a), &r)),
        ("scope".into(), Hint::ReservedScope)
    );
    let a = json!({"content": "x", "scope": "rule:repo:spine", "summary": "two\nlines"});
    assert_eq!(reported(KnowledgeRequest::rule(args(a), &r)), ("summary".into(), Hint::MultiLine));
}

#[test]
fn update_and_visibility_turn_shared_into_a_visibility() {
    let u: UpdateRequest =
        args::<UpdateMemoryArgs>(json!({"id": "0190e6a5-8b3c-7000-8000-000000000001", "content": "x", "shared": true, "tags": ["a", "b", "a"]}))
            .into();
    assert_eq!(
        (u.visibility, u.tags),
        (Some(Visibility::Shared), Some(vec!["a".into(), "b".into()]))
    );
    let v: VisibilityRequest = args::<SetVisibilityArgs>(
        json!({"id": "0190e6a5-8b3c-7000-8000-000000000001", "shared": false}),
    )
    .into();
    assert_eq!(v.visibility, Visibility::Private);
}
