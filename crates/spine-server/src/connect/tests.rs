//! The Connect error mapping, and the conversions checked against the JSON route they
//! replaced: a request gives the arguments (or the envelope) its tool call would, and a
//! result gives the message proto3 JSON read from the tool's result.

use serde_json::{Value, json};

use super::*;

#[test]
fn errors_keep_the_envelope_in_the_message() {
    let e = Error::invalid("scope", spine_core::Hint::MalformedScope, "scope must look like a:b:c");
    let c = connect_error(&e);
    assert_eq!(c.code, ConnectCode::InvalidArgument);
    assert!(
        c.message.as_deref().unwrap_or_default().contains("field: scope; hint: malformed_scope")
    );
    assert_eq!(connect_error(&Error::not_found("id", "no memory")).code, ConnectCode::NotFound);
}

#[test]
fn field_and_hint_travel_as_an_error_info_detail() {
    use buffa::Message;
    let e = Error::invalid("scope", spine_core::Hint::MalformedScope, "scope must look like a:b:c");
    let c = connect_error(&e);
    assert_eq!(c.details.len(), 1);
    assert_eq!(c.details[0].type_url, ERROR_INFO);
    let bytes = base64::Engine::decode(
        &base64::engine::general_purpose::STANDARD_NO_PAD,
        c.details[0].value.as_deref().unwrap(),
    )
    .unwrap();
    let info = ErrorInfo::decode_from_slice(&bytes).unwrap();
    assert_eq!((info.field.as_str(), info.hint.as_str()), ("scope", "malformed_scope"));
    // An error with neither carries no detail.
    assert!(connect_error(&Error::internal("a bug")).details.is_empty());
}

/// Every class of Spine error has its Connect code. failed_precondition, already_exists
/// and internal come from no method of this API today (the rule-immutability and
/// idempotency errors belong to MCP writes), so the mapping is checked here.
#[test]
fn every_error_class_has_its_connect_code() {
    let rule = spine_core::Hint::RuleImmutable;
    let cases = [
        (Error::invalid("k", spine_core::Hint::OutOfRange, "k"), ConnectCode::InvalidArgument),
        (Error::not_found("id", "no memory"), ConnectCode::NotFound),
        (Error::failed_precondition("id", rule, "a rule"), ConnectCode::FailedPrecondition),
        (
            Error::conflict("idempotency_key", spine_core::Hint::IdempotencyMismatch, "reused"),
            ConnectCode::AlreadyExists,
        ),
        (Error::unauthenticated("no token"), ConnectCode::Unauthenticated),
        (Error::unavailable("the model failed"), ConnectCode::Unavailable),
        (Error::internal("a bug"), ConnectCode::Internal),
    ];
    for (e, code) in cases {
        assert_eq!(connect_error(&e).code, code, "{e:?}");
    }
    let c = connect_error(&Error::failed_precondition("id", rule, "a rule is shared"));
    assert_eq!(c.message.as_deref(), Some("a rule is shared (field: id; hint: rule_immutable)"));
}
/// The JSON arguments the Connect API used to build for a request: unset, empty and
/// `false` fields left out.
fn json_args(pairs: &[(&str, Value)]) -> serde_json::Map<String, Value> {
    pairs
        .iter()
        .filter(|(_, v)| !matches!(v, Value::Null | Value::Bool(false)))
        .filter(|(_, v)| v.as_array().is_none_or(|a| !a.is_empty()))
        .map(|(k, v)| ((*k).to_owned(), v.clone()))
        .collect()
}

/// The outcome of a conversion, comparable across the two routes.
fn outcome<T: std::fmt::Debug>(r: Result<T, Error>) -> String {
    match r {
        Ok(a) => format!("{a:?}"),
        Err(e) => format!("{:?} {:?} {}", e.field, e.hint, e.message),
    }
}

#[test]
fn requests_convert_as_their_tool_calls_parse() {
    use spine_service::args::parse_args;
    let searches = [
        ("which TLS library", Some("a:b:c"), vec![], Some("")),
        ("q", None, vec!["tls".to_owned()], Some("2026-05-01T09:00:00Z")),
        ("q", Some("a:b:c"), vec![], Some("soon")),
        ("q\0", Some("a:b:c"), vec![], None),
        ("q", Some(""), vec!["ok".to_owned(), "n\0".to_owned()], Some("soon")),
    ];
    for (query, scope, tags, after) in searches {
        let r = SearchMemoriesRequest {
            query: query.into(),
            scope: scope.map(Into::into),
            k: Some(3),
            tags: tags.clone(),
            created_after: after.map(Into::into),
            full: true,
            ..Default::default()
        };
        let json = json_args(&[
            ("query", json!(query)),
            ("scope", json!(scope)),
            ("k", json!(3)),
            ("tags", json!(tags)),
            ("created_after", json!(after)),
            ("full", json!(true)),
        ]);
        assert_eq!(
            outcome(SearchMemoryArgs::try_from(r)),
            outcome(parse_args::<SearchMemoryArgs>(json)),
            "{query:?} {scope:?} {after:?}"
        );
    }
    for id in ["", " ", "not an id", "abcdefghjk", "0190f5a0-0000-7000-8000-000000000001", "a\0"] {
        let r = GetMemoryRequest { id: id.into(), ..Default::default() };
        let json = json_args(&[("id", json!(id))]);
        assert_eq!(outcome(IdArgs::try_from(r)), outcome(parse_args::<IdArgs>(json)), "{id:?}");
        let r = RelatedMemoriesRequest { id: id.into(), full: true, ..Default::default() };
        let json = json_args(&[("id", json!(id)), ("full", json!(true))]);
        assert_eq!(
            outcome(RelatedMemoriesArgs::try_from(r)),
            outcome(parse_args::<RelatedMemoriesArgs>(json)),
            "{id:?}"
        );
    }
    let r = ListMemoriesRequest { created_before: Some("x".into()), ..Default::default() };
    let json = json_args(&[("limit", json!(1000)), ("created_before", json!("x"))]);
    assert_eq!(outcome(ListMemoryArgs::try_from(r)), outcome(parse_args::<ListMemoryArgs>(json)));
    let ids = vec!["a".to_owned(), "b\0".to_owned()];
    let r = ArchiveMemoryRequest { ids: ids.clone(), ..Default::default() };
    assert_eq!(
        outcome(BatchIdsArgs::try_from(r)),
        outcome(parse_args::<BatchIdsArgs>(json_args(&[("ids", json!(ids))])))
    );
    let r = ListRulesRequest { scopes: vec!["rule:repo:x".into()], ..Default::default() };
    let json = json_args(&[("scopes", json!(["rule:repo:x"]))]);
    assert_eq!(outcome(ListRulesArgs::try_from(r)), outcome(parse_args::<ListRulesArgs>(json)));
}

/// The response the Connect API used to read from a tool's JSON result.
fn via_json<P: serde::de::DeserializeOwned>(result: impl serde::Serialize, nest: bool) -> P {
    let mut v = serde_json::to_value(result).unwrap();
    if nest {
        let o = v.as_object_mut().unwrap();
        let mut coverage = serde_json::Map::new();
        for key in ["searched_scopes", "scopes_truncated", "scopes_unknown"] {
            if let Some(x) = o.remove(key) {
                coverage.insert(key.to_owned(), x);
            }
        }
        o.insert("coverage".into(), Value::Object(coverage));
    }
    serde_json::from_value(v).unwrap()
}

/// A record with every field set.
fn full_record() -> spine_core::Memory {
    use spine_core::{CitationKind, DiscoveryKind, EpochSeconds, RecordId, SummarySource};
    let mut m = spine_testkit::records::record("a:b:c", "content", "alice", 1_700_000_000);
    m.repo = "spine".into();
    m.workspace = "w".into();
    m.worktree_path = "/w".into();
    m.base_dir = "/b".into();
    m.tags = vec!["x".into(), "y".into()];
    m.summary = "sum".into();
    m.summary_source = SummarySource::Auto;
    m.summary_model = "m".into();
    m.summary_egress_at = Some(spine_core::Timestamp::from_micros(1_700_000_000_123_456));
    m.not_before = Some(EpochSeconds::from_secs(1_600_000_000));
    m.not_after = Some(EpochSeconds::from_secs(1_800_000_000));
    m.supersedes = vec![RecordId::mint()];
    m.superseded_by = Some(RecordId::mint());
    m.archived_at = Some(EpochSeconds::from_secs(1_750_000_000));
    m.access_count = 4;
    m.last_accessed_at = Some(spine_core::Timestamp::from_micros(1_710_000_000_000_000));
    m.kind = Some(DiscoveryKind::Fact);
    m.citations = vec![spine_core::Citation {
        kind: CitationKind::File,
        reference: "src/lib.rs".into(),
        locator: "1-2".into(),
        pin: String::new(),
        excerpt: "e".into(),
    }];
    m
}

#[test]
fn results_convert_as_proto3_json_read_them() {
    use spine_core::State;
    use spine_service::views::{self, MemoryView};
    let full = MemoryView::new(full_record(), vec![State::Archived, State::Superseded], true);
    let mut compact = MemoryView::new(
        spine_testkit::records::record("a:b:c", &"long ".repeat(100), "", 1_700_000_001),
        vec![],
        false,
    );
    compact.score = Some(0.123_456_7);
    compact.relevance = Some(0.9);
    let search = views::SearchResult {
        memories: vec![full.clone(), compact.clone()],
        coverage: views::Coverage {
            searched_scopes: Some(vec!["a:b:c".into()]),
            scopes_truncated: Some(false),
            scopes_unknown: None,
        },
        recall_gate_hidden: Some(views::GateHidden { total: 2, archived: 1, ..Default::default() }),
        truncated_by_budget: Some(true),
    };
    let want: SearchMemoriesResponse = via_json(&search, true);
    assert_eq!(SearchMemoriesResponse::from(search), want);

    let list = views::ListResult {
        memories: vec![compact.clone()],
        next_cursor: "c".into(),
        total: Some(7),
        coverage: views::Coverage::default(),
        recall_gate_hidden: None,
        truncated_by_budget: None,
    };
    let want: ListMemoriesResponse = via_json(&list, true);
    assert_eq!(ListMemoriesResponse::from(list), want);

    let want: GetMemoryResponse = via_json(json!({ "memory": &full }), false);
    assert_eq!(GetMemoryResponse::from(full.clone()), want);

    let rules = views::RulesResult {
        rules: vec![
            views::RuleEntry::Compact(views::RuleView::new(full_record())),
            views::RuleEntry::Full(Box::new(full.clone())),
        ],
        advisory: Some("many".into()),
        truncated: true,
        coverage: views::Coverage { scopes_unknown: Some(true), ..Default::default() },
        truncated_by_budget: None,
    };
    let want: ListRulesResponse = via_json(&rules, true);
    assert_eq!(ListRulesResponse::from(rules), want);

    let shared = views::SharedCitation {
        kind: spine_core::CitationKind::Url,
        reference: "https://example.org".into(),
    };
    let related = views::RelatedResult {
        anchor: full.clone(),
        related: vec![views::RelatedItem {
            memory: compact,
            edges: vec![
                views::Edge::supersession(views::Direction::Successor, 2),
                views::Edge::citation(vec![shared]),
                views::Edge::tag(vec!["x".into()], 0.5),
                views::Edge::vector(0.75),
            ],
        }],
        truncated: false,
        truncated_by_budget: Some(true),
    };
    let want: RelatedMemoriesResponse = via_json(&related, false);
    assert_eq!(RelatedMemoriesResponse::from(related), want);

    let batch = views::BatchResult {
        results: vec![views::BatchOutcome {
            input: "i".into(),
            id: String::new(),
            outcome: "not_found".into(),
        }],
    };
    let want: BatchResponse = via_json(&batch, false);
    assert_eq!(BatchResponse::from(batch), want);

    let tags = views::TagsResult {
        tags: vec![views::TagCountView { tag: "t".into(), count: 3 }],
        more: true,
    };
    let want: ListTagsResponse = via_json(&tags, false);
    assert_eq!(ListTagsResponse::from(tags), want);

    let want: ListScopesResponse =
        via_json(json!({"scopes": [{"scope": "a:b:c", "records": 2}], "truncated": false}), false);
    assert_eq!(ListScopesResponse::from((vec![("a:b:c".to_owned(), 2)], false)), want);
}
