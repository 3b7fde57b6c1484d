//! Property-based fuzzing of the edge parsers: scopes, ids (UUID and short), and the lexical
//! tokenizer. Arbitrary Unicode and near-miss inputs; no panic, errors that name the field
//! and a hint, round trips, bounded output. `SPINE_FUZZ_CASES` sets the cases per target
//! (default 2,000; docs/reliability.md gives the long run).

use proptest::prelude::*;

use crate::{ErrorCode, IdRef, RecordId, Scope, ShortId, lexical};

pub(crate) fn config() -> ProptestConfig {
    let cases = std::env::var("SPINE_FUZZ_CASES").ok().and_then(|c| c.parse().ok());
    ProptestConfig {
        cases: cases.unwrap_or(2_000),
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

/// Strings a user or an agent might send: arbitrary Unicode, and near-misses of each grammar.
fn text() -> impl Strategy<Value = String> {
    prop_oneof![
        any::<String>(),
        "[a-z0-9:_./ -]{0,40}",
        "[a-zA-Z0-9]{1,12}:[a-z]{0,10}:[a-zA-Z0-9._/-]{0,30}",
        "(rule|discovery):(repo|project):[a-z0-9.-]{0,20}",
        "[0-9A-Za-z-]{8,14}",
        "[0-9a-fA-F-]{30,40}",
        ".{0,300}",
    ]
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn scope_parse(input in text()) {
        match Scope::parse("scope", &input) {
            Ok(scope) => {
                let again = Scope::parse("scope", scope.as_str()).expect("a parsed scope re-parses");
                prop_assert_eq!(again, scope);
            }
            Err(e) => {
                prop_assert_eq!(e.code, ErrorCode::InvalidArgument);
                prop_assert_eq!(e.field.as_deref(), Some("scope"));
                prop_assert!(e.hint.is_some());
                prop_assert!(e.message.len() < 400 + input.len().min(1000));
            }
        }
    }

    #[test]
    fn short_id_parse(input in text()) {
        if let Some(id) = ShortId::parse(&input) {
            prop_assert_eq!(id.as_str().len(), ShortId::LEN);
            prop_assert_eq!(ShortId::parse(id.as_str()), Some(id.clone()));
            prop_assert_eq!(ShortId::parse(&id.as_str().to_lowercase()), Some(id));
        }
    }

    #[test]
    fn minted_short_ids_survive_how_people_write_them(dash in 0usize..=10, lower in any::<bool>()) {
        let id = ShortId::mint();
        let mut written = id.as_str().to_owned();
        written.insert(dash, '-');
        if lower {
            written = written.to_lowercase();
        }
        prop_assert_eq!(ShortId::parse(&written), Some(id));
    }

    #[test]
    fn id_ref_parse(input in text()) {
        match IdRef::parse("id", &input) {
            Ok(IdRef::Id(id)) => prop_assert_eq!(RecordId::parse(&id.to_string()), Some(id)),
            Ok(IdRef::Short(s)) => prop_assert_eq!(ShortId::parse(s.as_str()), Some(s)),
            Err(e) => {
                prop_assert_eq!(e.field.as_deref(), Some("id"));
                prop_assert!(e.hint.is_some());
            }
        }
    }

    #[test]
    fn lexical_terms(input in text()) {
        let terms = lexical::terms(&input);
        // A compound yields itself and its parts at each of four joiner levels and camelCase,
        // so a byte lands in at most six terms (and lower-casing grows a character by at most
        // half): output linear in the input, never an empty term.
        let bytes: usize = terms.iter().map(String::len).sum();
        prop_assert!(bytes <= 10 * input.len(), "{} term bytes from {} input bytes", bytes, input.len());
        prop_assert!(terms.iter().all(|t| !t.is_empty()));
        let query = lexical::query_terms(&input);
        prop_assert!(query.len() <= terms.len());
    }
}
