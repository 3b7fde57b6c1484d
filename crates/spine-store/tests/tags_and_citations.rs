//! Reads over tags and citations on SQLite and, when a server is configured, PostgreSQL:
//! `Store::sharing` (related_memories' tag and citation edges: the other records the caller
//! reads, through the gate, that carry one of the anchor's tags or cite one of its
//! citations) and `Store::tag_counts` (list_tags).

use spine_core::{
    Caller, Citation, CitationKind, EpochSeconds, Memory, Scope, Timestamp, Visibility,
};
use spine_store::{Access, Filter, Gate, ScopeFilter, Selection, Shared, Store};
use spine_testkit::records::record;

const SCOPE: &str = "acme:project:web";

fn cite(kind: CitationKind, reference: &str) -> Citation {
    Citation {
        kind,
        reference: reference.into(),
        locator: String::new(),
        pin: String::new(),
        excerpt: String::new(),
    }
}

/// The anchor (alice's, tags `ui` and `db`, citing `file src/a.rs`) and records around it,
/// each named by what it has in common with the anchor and who may read it.
fn fixture() -> Vec<Memory> {
    let mut out = Vec::new();
    let mut add = |content: &str, owner: &str, secs: i64, edit: &dyn Fn(&mut Memory)| {
        let mut m = record(SCOPE, content, owner, 1_800_000_000 + secs);
        edit(&mut m);
        out.push(m);
    };
    add("anchor", "alice", 1, &|m| {
        m.tags = vec!["ui".into(), "db".into()];
        m.citations = vec![cite(CitationKind::File, "src/a.rs")];
    });
    add("tag ui", "alice", 2, &|m| m.tags = vec!["ui".into()]);
    add("tag db, shared by bob", "bob", 3, &|m| {
        m.tags = vec!["db".into(), "x".into()];
        m.visibility = Visibility::Shared;
    });
    add("tag db, bob's own", "bob", 4, &|m| m.tags = vec!["db".into()]);
    add("tag ui, archived", "alice", 5, &|m| {
        m.tags = vec!["ui".into()];
        m.archived_at = Some(EpochSeconds::from_secs(1_800_000_100));
    });
    add("no tag in common", "alice", 6, &|m| m.tags = vec!["uix".into()]);
    add("cites the file", "alice", 7, &|m| {
        m.citations =
            vec![cite(CitationKind::Url, "https://x"), cite(CitationKind::File, "src/a.rs")];
    });
    add("cites the path as a url", "alice", 8, &|m| {
        m.citations = vec![cite(CitationKind::Url, "src/a.rs")];
    });
    add("cites another file", "alice", 9, &|m| {
        m.citations = vec![cite(CitationKind::File, "src/b.rs")];
    });
    out
}

fn check(store: &dyn Store, records: &[Memory]) {
    let anchor = &records[0];
    let alice = Access::read(&Caller::authenticated("alice", "alice"));
    let gate = Gate::ActiveAt(Timestamp::from_micros(1_900_000_000_000_000));
    let contents = |shared: Shared<'_>, limit: usize| -> Vec<String> {
        let found = store.sharing(&alice, gate, &anchor.id, shared, limit).unwrap();
        found.into_iter().map(|m| m.content).collect()
    };
    // Most recent first; never the anchor, bob's private record or an archived one.
    let tags = Shared::Tags(&anchor.tags);
    assert_eq!(contents(tags, 10), vec!["tag db, shared by bob", "tag ui"]);
    assert_eq!(contents(tags, 1), vec!["tag db, shared by bob"]);
    assert!(contents(Shared::Tags(&[]), 10).is_empty());
    // A citation matches on kind and ref together.
    let citations = Shared::Citations(&anchor.citations);
    assert_eq!(contents(citations, 10), vec!["cites the file"]);
    assert!(contents(Shared::Citations(&[]), 10).is_empty());
    // Without the gate the archived record is there too.
    let all = store.sharing(&alice, Gate::Off, &anchor.id, tags, 10).unwrap();
    assert_eq!(all.len(), 3);
}

fn check_tag_counts(store: &dyn Store) {
    let alice = Access::read(&Caller::authenticated("alice", "alice"));
    let gate = Gate::ActiveAt(Timestamp::from_micros(1_900_000_000_000_000));
    let counts = |filter: &Filter, limit: usize| -> Vec<(String, u64)> {
        let sel = Selection { access: &alice, filter, gate };
        let counts = store.tag_counts(sel, limit).unwrap();
        counts.into_iter().map(|t| (t.tag, t.count)).collect()
    };
    let pairs = |p: &[(&str, u64)]| -> Vec<(String, u64)> {
        p.iter().map(|(t, n)| (t.to_string(), *n)).collect()
    };
    // Over what alice reads through the gate: not bob's own record, not the archived one.
    // Count descending, then tag ascending.
    let here = Filter::new(ScopeFilter::One(Scope::parse("scope", SCOPE).unwrap()));
    assert_eq!(counts(&here, 10), pairs(&[("db", 2), ("ui", 2), ("uix", 1), ("x", 1)]));
    assert_eq!(counts(&here, 3), pairs(&[("db", 2), ("ui", 2), ("uix", 1)]));
    assert_eq!(counts(&Filter::new(ScopeFilter::All), 10).len(), 4);
    let elsewhere =
        Filter::new(ScopeFilter::One(Scope::parse("scope", "acme:project:api").unwrap()));
    assert!(counts(&elsewhere, 10).is_empty());
}

#[test]
fn related_records_and_tag_counts_are_what_the_caller_reads_through_the_gate() {
    let records = fixture();
    crate::on_both_engines(&records, |store| {
        check(store, &records);
        check_tag_counts(store);
    });
}
