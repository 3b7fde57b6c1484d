//! verify on both backends: paging, and every check a row can fail.

use std::collections::BTreeSet;

use spine_core::{Category, Memory, RecordId};
use spine_store::Check;

use super::{OTHER, SCOPE, T, V, backends, e, record, same, scope, verify_all};

/// Records each breaking one invariant (or none), with the violations verify must report.
struct VerifyFixture {
    records: Vec<(Memory, &'static str, Vec<f32>)>,
    want: BTreeSet<(RecordId, Check)>,
    /// Corrupted by SQL after the insert.
    no_vector: RecordId,
    misstated: RecordId,
    mismatched: RecordId,
    corrupt: RecordId,
}

fn verify_fixture() -> VerifyFixture {
    let r = |content: &str| record(SCOPE, content, "alice", T);
    let mut out = Vec::new();
    let mut want = BTreeSet::new();
    let fine = r("fine");
    // A proper supersession: nothing to report.
    let (mut old, mut new) = (r("old"), r("new"));
    old.superseded_by = Some(new.id);
    new.supersedes = vec![old.id];
    // Superseded by a record that does not exist.
    let mut dangling = r("dangling");
    dangling.superseded_by = Some(RecordId::mint());
    want.insert((dangling.id, Check::DanglingSuccessor));
    // Superseded by a record that does not list it.
    let (mut unlisted, forgetful) = (r("unlisted"), r("forgetful"));
    unlisted.superseded_by = Some(forgetful.id);
    want.insert((unlisted.id, Check::BacklinkMissing));
    // Supersedes a record that is not superseded: a second live head.
    let (live, mut second_head) = (r("live"), r("second head"));
    second_head.supersedes = vec![live.id];
    want.insert((second_head.id, Check::PredecessorNotSuperseded));
    // Supersedes a record that names another successor.
    let (mut q, mut s1, mut s2) = (r("q"), r("s1"), r("s2"));
    q.superseded_by = Some(s1.id);
    s1.supersedes = vec![q.id];
    s2.supersedes = vec![q.id];
    want.insert((s2.id, Check::PredecessorOtherSuccessor));
    // A cycle: x -> y -> x.
    let (mut x, mut y) = (r("x"), r("y"));
    x.superseded_by = Some(y.id);
    y.superseded_by = Some(x.id);
    x.supersedes = vec![y.id];
    y.supersedes = vec![x.id];
    want.insert((x.id, Check::ChainCycle));
    want.insert((y.id, Check::ChainCycle));
    // A superseded rule.
    let (mut rule, mut over_rule) = (r("rule"), r("over rule"));
    rule.category = Category::Rule;
    rule.superseded_by = Some(over_rule.id);
    over_rule.supersedes = vec![rule.id];
    want.insert((rule.id, Check::RuleSuperseded));
    // Vectors: another embedder, another length, all zeros.
    let stranger = r("stranger");
    want.insert((stranger.id, Check::EmbedderStamp));
    let longer = r("longer");
    want.insert((longer.id, Check::VectorDimension));
    let zeros = r("zeros");
    want.insert((zeros.id, Check::VectorCorrupt));
    // Broken by SQL after the insert.
    let (no_vector, misstated, mismatched, corrupt) =
        (r("no vector"), r("misstated"), r("mismatched"), r("corrupt"));
    want.insert((no_vector.id, Check::MissingVector));
    want.insert((misstated.id, Check::VectorCorrupt));
    want.insert((mismatched.id, Check::ColumnsMismatch));
    want.insert((corrupt.id, Check::PayloadCorrupt));
    let ids = (no_vector.id, misstated.id, mismatched.id, corrupt.id);
    for m in [
        fine,
        old,
        new,
        dangling,
        unlisted,
        forgetful,
        live,
        second_head,
        q,
        s1,
        s2,
        x,
        y,
        rule,
        over_rule,
        no_vector,
        misstated,
        mismatched,
        corrupt,
    ] {
        out.push((m, "m", V.to_vec()));
    }
    out.push((stranger, "other", V.to_vec()));
    out.push((longer, "m", vec![1.0, 2.0, 3.0]));
    out.push((zeros, "m", vec![0.0, 0.0]));
    VerifyFixture {
        records: out,
        want,
        no_vector: ids.0,
        misstated: ids.1,
        mismatched: ids.2,
        corrupt: ids.3,
    }
}

#[test]
fn verify_pages_find_the_same_violations() {
    let backends = backends();
    let f = verify_fixture();
    let mut elsewhere = record(OTHER, "elsewhere", "alice", T);
    elsewhere.superseded_by = Some(RecordId::mint());
    for b in &backends {
        for (m, model, v) in &f.records {
            b.put(m, e(model, v));
        }
        b.put(&elsewhere, e("m", V));
        b.drop_vector(&f.no_vector);
        // Not 3: PostgreSQL's index of 3-dimension vectors refuses a 2-component vector
        // stated as 3 (the schema keeps that corruption out).
        b.misstate_dims(&f.misstated, 5);
        b.sql(&format!("UPDATE memories SET category = 'fact' WHERE id = '{}'", f.mismatched));
        // Written as PostgreSQL prints jsonb, so both backends decode the same text.
        b.sql(&format!(
            r#"UPDATE memories SET body = '{{"broken": true}}' WHERE id = '{}'"#,
            f.corrupt
        ));
    }
    let (pages, found) = same(&backends, |b| verify_all(b.store(), Some(&scope()), 4));
    let n = f.records.len() as u64;
    assert_eq!(pages.iter().sum::<u64>(), n);
    assert_eq!(pages.len() as u64, n.div_ceil(4));
    assert!(pages[..pages.len() - 1].iter().all(|p| *p == 4), "{pages:?}");
    let got: BTreeSet<(RecordId, Check)> =
        found.iter().map(|v| (RecordId::parse(&v.id).unwrap(), v.check)).collect();
    assert_eq!(got, f.want, "{found:#?}");
    assert_eq!(found.len(), f.want.len(), "one violation each: {found:#?}");
    let detail = |id: &RecordId| &found.iter().find(|v| v.id == id.to_string()).unwrap().detail;
    assert_eq!(detail(&f.misstated), "8 bytes stored for a vector of 5 dimensions");
    assert_eq!(detail(&f.mismatched), "columns differ from the payload: category");
    assert!(found.iter().all(|v| v.scope == SCOPE));

    // Every scope: the other scope's dangling record too; one page holds everything.
    let (pages, all) = same(&backends, |b| verify_all(b.store(), None, 1000));
    assert_eq!(pages, vec![n + 1]);
    assert_eq!(all.len(), found.len() + 1);
    let last = all.last().unwrap();
    assert_eq!(
        (last.id.as_str(), last.check),
        (elsewhere.id.to_string().as_str(), Check::DanglingSuccessor)
    );

    // Short ids are unique here (and PostgreSQL enforces it).
    assert!(same(&backends, |b| b.store().duplicate_short_ids(None).unwrap()).is_empty());
    assert!(same(&backends, |b| b.store().duplicate_short_ids(Some(&scope())).unwrap()).is_empty());
}

/// Deleting a record in a chain splices it out, on both engines and whichever delete runs:
/// its predecessors name its successor (or become live heads when it had none), the
/// successor lists them beside it, and verify stays clean — as it must on a store that
/// only ever used the tools.
#[test]
fn deleting_a_record_in_a_chain_splices_it_out_and_verify_stays_clean() {
    use spine_core::Caller;
    use spine_store::Access;
    let backends = backends();
    same(&backends, |b| {
        let s = b.store();
        let alice = Access::owned(&Caller::authenticated("alice", "alice"));
        let put = |content: &str, scope: &str| {
            let m = record(scope, content, "alice", T);
            b.put(&m, e("m", V));
            m.id
        };
        let supersede = |content: &str, scope: &str, targets: &[RecordId]| {
            let mut m = record(scope, content, "alice", T);
            m.supersedes = targets.to_vec();
            s.supersede(&alice, &m, e("m", V), targets, None).unwrap().unwrap();
            m.id
        };
        let get = |id: &RecordId| s.get_many(&[*id]).unwrap().pop().unwrap();
        // A ← B ← C: deleting B links A to C.
        let a = put("Deploys go out on Tuesdays", SCOPE);
        let b_ = supersede("Deploys go out on Wednesdays", SCOPE, &[a]);
        let c = supersede("Deploys go out on Thursdays", SCOPE, &[b_]);
        assert!(s.delete(&alice, &b_).unwrap());
        assert_eq!(get(&a).superseded_by, Some(c));
        let mut listed = get(&c).supersedes;
        listed.sort();
        let mut want = vec![a, b_];
        want.sort();
        assert_eq!(listed, want, "A joins, the deleted B stays listed (as purged ones do)");
        // X, Y ← M (a merge, the head): deleting M makes X and Y live heads again.
        let (x, y) = (put("Lint with clippy", SCOPE), put("Format with rustfmt", SCOPE));
        let m = supersede("Lint with clippy, format with rustfmt", SCOPE, &[x, y]);
        assert!(s.delete(&alice, &m).unwrap());
        assert_eq!((get(&x).superseded_by, get(&y).superseded_by), (None, None));
        // P ← Q ← R with Q and R in another scope, deleted together: P is a live head;
        // P2 ← Q2 ← R2 with only Q2 there: P2 names R2, which lists P2.
        let p = put("Staging resets on Sundays", SCOPE);
        let q = supersede("Staging resets on Saturdays", OTHER, &[p]);
        supersede("Staging resets nightly", OTHER, &[q]);
        let p2 = put("Alice owns billing", SCOPE);
        let q2 = supersede("Bob owns billing", OTHER, &[p2]);
        let r2 = supersede("Carol owns billing", SCOPE, &[q2]);
        let other = spine_core::Scope::parse("scope", OTHER).unwrap();
        assert_eq!(s.delete_scope(&alice, &other).unwrap(), 3);
        assert_eq!(get(&p).superseded_by, None);
        assert_eq!(get(&p2).superseded_by, Some(r2));
        assert!(get(&r2).supersedes.contains(&p2));
        let (_, violations) = verify_all(s, None, 100);
        assert!(violations.is_empty(), "{violations:?}");
        // The chains as each engine left them, for `same`.
        [a, x, y, p, p2].map(|id| get(&id).superseded_by.is_some())
    });
}
