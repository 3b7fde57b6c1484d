//! The argument parser's envelopes: unknown, missing and mistyped arguments, and the core
//! types parsed at the edge.

use super::*;
use serde_json::json;

fn obj(v: Value) -> Map<String, Value> {
    v.as_object().cloned().unwrap()
}

#[test]
fn core_types_are_parsed_at_the_edge_with_the_operations_envelopes() {
    let record = |scope: &str, when: &str| {
        obj(json!({"content": "c", "scope": scope, "source": "user-said",
                   "category": "gotcha", "not_after": when}))
    };
    let a = parse_args::<ScheduleMemoryArgs>(record("a:project:x", "")).unwrap();
    assert_eq!(
        (a.scope.as_str(), a.category, a.not_after),
        ("a:project:x", Category::Gotcha, None)
    );
    let e = parse_args::<ScheduleMemoryArgs>(record("nope", "")).unwrap_err();
    assert_eq!((e.field.as_deref(), e.hint), (Some("scope"), Some(Hint::MalformedScope)));
    assert!(e.message.starts_with("scope must look like <run>:<tier>:<repo>"), "{}", e.message);
    let e = parse_args::<ScheduleMemoryArgs>(record("", "")).unwrap_err();
    assert_eq!((e.field.as_deref(), e.hint), (Some("scope"), Some(Hint::Required)));
    let e = parse_args::<ScheduleMemoryArgs>(record("a:project:x", "soon")).unwrap_err();
    assert_eq!((e.field.as_deref(), e.hint), (Some("not_after"), Some(Hint::MalformedTimestamp)));
    assert!(e.message.starts_with("not_after must be an RFC 3339 time"), "{}", e.message);
    let mut bad_source = record("a:project:x", "");
    bad_source.insert("source".into(), json!("hearsay"));
    let e = parse_args::<ScheduleMemoryArgs>(bad_source).unwrap_err();
    assert_eq!((e.field.as_deref(), e.hint), (Some("source"), Some(Hint::InvalidValue)));
    // A wrong JSON type is still serde's invalid_type, not a stale edge envelope.
    let e = parse_args::<ScheduleMemoryArgs>(record("x:y", "")).unwrap_err();
    assert_eq!(e.hint, Some(Hint::MalformedScope));
    let mut typed = record("a:project:x", "");
    typed.insert("scope".into(), json!(5));
    let e = parse_args::<ScheduleMemoryArgs>(typed).unwrap_err();
    assert_eq!((e.field.as_deref(), e.hint), (Some("scope"), Some(Hint::InvalidType)));

    let e = parse_args::<IdArgs>(obj(json!({"id": " "}))).unwrap_err();
    assert_eq!((e.field.as_deref(), e.hint), (Some("id"), Some(Hint::Blank)));
    let a = parse_args::<IdArgs>(obj(json!({"id": "abcdefghjk"}))).unwrap();
    assert_eq!(a.id.input, "abcdefghjk", "the caller's spelling is kept for messages");
    let a = parse_args::<ListMemoryArgs>(obj(json!({"scope": "a:b:c", "created_after": ""})));
    assert_eq!(a.unwrap().created_after, None, "blank is absent");
}

#[test]
fn unknown_argument_is_named() {
    let e = parse_args::<ListTagsArgs>(obj(json!({"limt": 3}))).unwrap_err();
    assert_eq!(e.field.as_deref(), Some("limt"));
    assert_eq!(e.hint, Some(Hint::UnknownField));
}

#[test]
fn missing_required_argument_is_named() {
    let e = parse_args::<IdArgs>(obj(json!({}))).unwrap_err();
    assert_eq!(e.field.as_deref(), Some("id"));
    assert_eq!(e.hint, Some(Hint::Required));
}

#[test]
fn wrong_type_names_the_path() {
    let e = parse_args::<SearchMemoryArgs>(obj(json!({"query": "q", "k": "eight"}))).unwrap_err();
    assert_eq!(e.field.as_deref(), Some("k"));
    assert_eq!(e.hint, Some(Hint::InvalidType));
    let e = parse_args::<SearchMemoryArgs>(obj(json!({"query": "q", "k": -1}))).unwrap_err();
    assert_eq!(e.field.as_deref(), Some("k"));
}

#[test]
fn shared_record_fields_keep_their_names_in_every_tool() {
    let record = json!({
        "content": "c", "scope": "a:b:c", "source": "user-said", "category": "decision",
        "citations": [{"kind": "file", "ref": "a"}, {"kind": "blog", "ref": "b"}]
    });
    let mut schedule = obj(record.clone());
    schedule.insert("not_after".into(), json!("2030-01-01T00:00:00Z"));
    let e = parse_args::<ScheduleMemoryArgs>(schedule).unwrap_err();
    assert_eq!(e.field.as_deref(), Some("citations[1].kind"));
    assert_eq!(e.hint, Some(Hint::InvalidValue));
    let mut supersede = obj(record);
    supersede.insert("supersedes".into(), json!(["x"]));
    let e = parse_args::<SupersedeMemoryArgs>(supersede.clone()).unwrap_err();
    assert_eq!(e.field.as_deref(), Some("citations[1].kind"));
    supersede.remove("citations");
    supersede.remove("content");
    let e = parse_args::<SupersedeMemoryArgs>(supersede.clone()).unwrap_err();
    assert_eq!((e.field.as_deref(), e.hint), (Some("content"), Some(Hint::Required)));
    supersede.insert("content".into(), json!("c"));
    supersede.insert("tgas".into(), json!([]));
    let e = parse_args::<SupersedeMemoryArgs>(supersede.clone()).unwrap_err();
    assert_eq!((e.field.as_deref(), e.hint), (Some("tgas"), Some(Hint::UnknownField)));
    supersede.remove("tgas");
    let a = parse_args::<SupersedeMemoryArgs>(supersede).unwrap();
    assert_eq!((a.supersedes.len(), StoreMemoryArgs::from(a).content.as_str()), (1, "c"));
}

#[test]
fn closed_sets_are_parsed_here_and_blank_optional_ones_are_absent() {
    let a = parse_args::<SearchDiscoveryArgs>(obj(json!({"query": "q", "kind": ""}))).unwrap();
    assert_eq!(a.kind, None);
    let a = parse_args::<SearchDiscoveryArgs>(obj(json!({"query": "q", "kind": "fact"})));
    assert_eq!(a.unwrap().kind, Some(DiscoveryKind::Fact));
    let e = parse_args::<SearchDiscoveryArgs>(obj(json!({"query": "q", "kind": "blog"})));
    let e = e.unwrap_err();
    assert_eq!((e.field.as_deref(), e.hint), (Some("kind"), Some(Hint::InvalidValue)));
    let e = parse_args::<SearchDiscoveryArgs>(obj(json!({"query": "q", "kind": 3})));
    assert_eq!(e.unwrap_err().hint, Some(Hint::InvalidType));
    let e = parse_args::<StoreDiscoveryArgs>(obj(json!({
        "content": "c", "kind": "", "citations": [], "scope": "discovery:a:b"
    })))
    .unwrap_err();
    assert_eq!((e.field.as_deref(), e.hint), (Some("kind"), Some(Hint::InvalidValue)));
    let a = parse_args::<ListScheduledArgs>(obj(json!({"state": "expired"}))).unwrap();
    assert_eq!(a.state, Some(ScheduledState::Expired));
}

#[test]
fn bad_citation_kind_names_the_entry() {
    let e = parse_args::<StoreMemoryArgs>(obj(json!({
        "content": "c", "scope": "a:b:c", "source": "user-said", "category": "decision",
        "citations": [{"kind": "file", "ref": "a"}, {"kind": "blog", "ref": "b"}]
    })))
    .unwrap_err();
    assert_eq!(e.field.as_deref(), Some("citations[1].kind"));
    assert_eq!(e.hint, Some(Hint::InvalidValue));
}
