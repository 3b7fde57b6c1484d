//! Property-based fuzzing of tool-argument decoding (`parse_args` for every tool's argument
//! type, as both the MCP tools and the Connect API decode them) and of list cursors.
//! Arbitrary JSON built from the tools' own argument names and from noise; no panic, and
//! every refusal is `invalid_argument` naming a field and a hint (SPEC Errors 1).
//! `SPINE_FUZZ_CASES` sets the cases per target (default 2,000).

use proptest::prelude::*;
use schemars::JsonSchema;
use serde::de::DeserializeOwned;
use serde_json::{Map, Value, json};
use spine_core::{ErrorCode, Hint, RecordId, Timestamp};
use spine_store::Cursor;

use crate::args::*;
use crate::request::{decode_cursor, encode_cursor};

fn config() -> ProptestConfig {
    let cases = std::env::var("SPINE_FUZZ_CASES").ok().and_then(|c| c.parse().ok());
    ProptestConfig {
        cases: cases.unwrap_or(2_000),
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

/// Every argument name of every tool, and a few that none has.
const KEYS: &[&str] = &[
    "content",
    "scope",
    "source",
    "category",
    "tags",
    "repo",
    "workspace",
    "worktree_path",
    "base_dir",
    "summary",
    "citations",
    "not_before",
    "not_after",
    "query",
    "k",
    "limit",
    "offset",
    "cursor",
    "categories",
    "created_after",
    "created_before",
    "full",
    "cross_spine",
    "budget",
    "id",
    "ids",
    "supersedes",
    "validate_only",
    "idempotency_key",
    "shared",
    "kind",
    "scopes",
    "state",
    "min_score",
    "ref",
    "locator",
    "pin",
    "excerpt",
    "confirm",
    "prefix",
    "categoies",
    "",
    "\u{0}",
    "__proto__",
];

fn leaf() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        any::<f64>().prop_map(|f| json!(f)),
        prop_oneof![Just(0i64), Just(1), Just(1000), Just(1001), Just(-1)].prop_map(Value::from),
        any::<String>().prop_map(Value::from),
        "(user-said|agent-inferred|decision|preference|convention|gotcha|discovery|rule|map|fact|file|commit|url|repo|live|archived|all)"
            .prop_map(Value::from),
        "[a-z]{1,8}:(project|repo|user):[a-z0-9.-]{1,12}".prop_map(Value::from),
        "20[0-9]{2}-[01][0-9]-[0-3][0-9]T[0-2][0-9]:[0-5][0-9]:[0-5][0-9](Z|\\+01:00|)".prop_map(Value::from),
        "[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}".prop_map(Value::from),
        "[0-9A-HJKMNP-TV-Z]{10}".prop_map(Value::from),
    ]
}

fn value() -> impl Strategy<Value = Value> {
    leaf().prop_recursive(4, 64, 8, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..8).prop_map(Value::Array),
            prop::collection::btree_map(prop::sample::select(KEYS), inner, 0..6).prop_map(|m| {
                Value::Object(m.into_iter().map(|(k, v)| (k.to_owned(), v)).collect())
            }),
        ]
    })
}

fn arguments() -> impl Strategy<Value = Map<String, Value>> {
    prop::collection::btree_map(prop::sample::select(KEYS), value(), 0..10)
        .prop_map(|m| m.into_iter().map(|(k, v)| (k.to_owned(), v)).collect())
}

/// Decodes `args` as `T`: a refusal must be a well-formed invalid argument.
fn decode<T: DeserializeOwned + JsonSchema>(
    args: &Map<String, Value>,
) -> Result<(), TestCaseError> {
    if let Err(e) = parse_args::<T>(args.clone()) {
        prop_assert_eq!(e.code, ErrorCode::InvalidArgument, "{:?}", e);
        // The field names the argument at fault: empty only when the caller's key is.
        let named = e.field.as_deref().is_some_and(|f| !f.is_empty() || args.contains_key(""));
        prop_assert!(named, "no field: {:?}", e);
        prop_assert!(e.hint.is_some(), "no hint: {:?}", e);
    }
    Ok(())
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn every_tool_decodes_arbitrary_arguments(args in arguments()) {
        decode::<StoreMemoryArgs>(&args)?;
        decode::<ScheduleMemoryArgs>(&args)?;
        decode::<SupersedeMemoryArgs>(&args)?;
        decode::<SearchMemoryArgs>(&args)?;
        decode::<ListMemoryArgs>(&args)?;
        decode::<ListScheduledArgs>(&args)?;
        decode::<IdArgs>(&args)?;
        decode::<UpdateMemoryArgs>(&args)?;
        decode::<BatchIdsArgs>(&args)?;
        decode::<DeleteAllArgs>(&args)?;
        decode::<SetVisibilityArgs>(&args)?;
        decode::<ListTagsArgs>(&args)?;
        decode::<RelatedMemoriesArgs>(&args)?;
        decode::<StoreDiscoveryArgs>(&args)?;
        decode::<SearchDiscoveryArgs>(&args)?;
        decode::<StoreRuleArgs>(&args)?;
        decode::<ListRulesArgs>(&args)?;
    }

    #[test]
    fn cursors_round_trip(micros in any::<i64>(), id in any::<u128>()) {
        let c = Cursor {
            created_at: Timestamp::from_micros(micros),
            id: RecordId::from_uuid(uuid::Uuid::from_u128(id)),
        };
        let back = decode_cursor(&encode_cursor(c)).expect("an issued cursor decodes");
        prop_assert_eq!(back, c);
    }

    #[test]
    fn garbage_cursors_are_refused(s in prop_oneof![
        any::<String>(),
        "[A-Za-z0-9_-]{0,120}",
        any::<(i64, String)>().prop_map(|(m, id)| {
            use base64::Engine as _;
            base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(format!("v1:{m}:{id}"))
        }),
    ]) {
        if let Err(e) = decode_cursor(&s) {
            prop_assert_eq!(e.field.as_deref(), Some("cursor"));
            prop_assert_eq!(e.hint, Some(Hint::MalformedCursor));
        }
    }
}
