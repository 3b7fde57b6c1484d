//! Import's file rules and migrate in-process: files that are no export (refused before any
//! store is opened), strict record and vector lines, records without vectors embedded on
//! import, and migrate stamping older records, leaving newer ones and keeping what it cannot
//! carry.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde_json::{Value, json};
use spine_core::SCHEMA_VERSION;
use spine_embed::{EmbedError, Embedder};
use spine_ops::stop::Never;
use spine_ops::transfer::{Exported, Target, export, import};
use spine_ops::{Error, Silent, migrate};
use spine_store::{OperatorStore, SqliteStore, Store, TransferStore};

use super::{NOW, SCOPE, at, put, record, store};

/// A deterministic embedder stamped `fake`.
struct Fake;

fn fake_vector(text: &str) -> Vec<f32> {
    vec![1.0, text.len() as f32, text.bytes().map(f32::from).sum::<f32>()]
}

impl Embedder for Fake {
    fn model_id(&self) -> &str {
        "fake"
    }
    fn dims(&self) -> usize {
        3
    }
    fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, EmbedError> {
        Ok(texts.iter().map(|t| fake_vector(t)).collect())
    }
}

fn fake() -> Result<Arc<dyn Embedder>, Error> {
    Ok(Arc::new(Fake))
}

fn opener(dir: &Path) -> impl FnOnce() -> Result<Box<dyn OperatorStore>, Error> + '_ {
    move || Ok(Box::new(SqliteStore::open(dir)?))
}

fn lines(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path).unwrap().lines().map(String::from).collect()
}

fn write_lines(path: &Path, lines: &[String]) {
    std::fs::write(path, lines.iter().map(|l| format!("{l}\n")).collect::<String>()).unwrap();
}

/// Five records with 3-float vectors, exported (vectors included unless `bare`).
fn five(dir: &Path, bare: bool) -> (SqliteStore, PathBuf) {
    let s = SqliteStore::open(&dir.join("a")).unwrap();
    for i in 0..5 {
        put(
            &s,
            &record(&format!("Convention number {i}: keep it simple."), i),
            &[0.5, 0.25, i as f32],
        );
    }
    let file = dir.join(if bare { "bare.jsonl" } else { "five.jsonl" });
    let done = export(&s, None, !bare, Target::File(&file), at(NOW), &Never, &mut Silent).unwrap();
    assert!(matches!(done, Exported::Done(_)));
    (s, file)
}

/// The import's message: its error, or the problem its report names.
fn refusal(file: &Path, store_dir: &Path) -> String {
    let mut build = fake;
    match import(file, 500, opener(store_dir), &mut build, &mut Silent) {
        Err(e) => e.to_string(),
        Ok(report) => report.problem().expect("a problem"),
    }
}

#[test]
fn a_file_that_is_no_export_is_refused_before_any_store_is_opened() {
    let dir = tempfile::tempdir().unwrap();
    let (_s, good) = five(dir.path(), false);
    let good = lines(&good);
    assert_eq!(good.len(), 7);
    let fresh = dir.path().join("fresh");
    let file = |name: &str, lines: &[String]| {
        let p = dir.path().join(name);
        write_lines(&p, lines);
        p
    };
    let cases: Vec<(PathBuf, &[&str])> = vec![
        (dir.path().join("nope.jsonl"), &["opening", "nope.jsonl"]),
        (file("empty.jsonl", &[]), &["is empty", "spine export"]),
        (
            file("garbage.jsonl", &["id,content".into(), "1,hello".into()]),
            &["line 1:", "not a line of a spine export"],
        ),
        (file("headless.jsonl", &good[1..]), &["line 1:", "not the header"]),
        (
            file(
                "future.jsonl",
                &[&[good[0].replace(r#""version":2"#, r#""version":3"#)][..], &good[1..]].concat(),
            ),
            &["newer spine", "format 3"],
        ),
    ];
    for (path, needles) in cases {
        let e = refusal(&path, &fresh);
        for n in needles {
            assert!(e.contains(n), "{n:?} not in the refusal of {}: {e}", path.display());
        }
    }
    assert!(!fresh.exists(), "a file that is no export creates no store");

    // Past the header: a line after the end line, an end line miscounting the records.
    let trailing = file("trailing.jsonl", &[&good[..], &[good[1].clone()]].concat());
    let e = refusal(&trailing, &dir.path().join("t"));
    assert!(e.contains("line 8:") && e.contains("after the end line"), "{e}");
    let mut miscounted = good.clone();
    miscounted[6] = r#"{"end":{"records":9}}"#.into();
    let e = refusal(&file("miscounted.jsonl", &miscounted), &dir.path().join("m"));
    assert!(e.contains("counts 9 records but the file holds 5"), "{e}");
}

#[test]
fn a_version_1_file_still_imports_and_a_miscounted_log_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let (_s, good) = five(dir.path(), false);
    let good = lines(&good);
    assert_eq!(good[6], r#"{"end":{"records":5,"audit_events":0}}"#);
    let mut v1 = good.clone();
    v1[0] = v1[0].replace(r#""version":2"#, r#""version":1"#);
    v1[6] = r#"{"end":{"records":5}}"#.into();
    let path = dir.path().join("v1.jsonl");
    write_lines(&path, &v1);
    let mut build = fake;
    let report =
        import(&path, 500, opener(&dir.path().join("copy")), &mut build, &mut Silent).unwrap();
    assert_eq!((report.imported, report.problem()), (5, None));
    let mut miscounted = good.clone();
    miscounted[6] = r#"{"end":{"records":5,"audit_events":3}}"#.into();
    let path = dir.path().join("miscounted.jsonl");
    write_lines(&path, &miscounted);
    let e = refusal(&path, &dir.path().join("other"));
    assert!(e.contains("counts 3 audit events but the file holds 0"), "{e}");
}

#[test]
fn record_and_vector_lines_are_checked_strictly_and_the_fixed_file_resumes() {
    let dir = tempfile::tempdir().unwrap();
    let (_s, good_file) = five(dir.path(), false);
    let good = lines(&good_file);
    let (d, b) = store();
    // Line 5 (the fourth record) is damaged; batches of 2 are lines 2–3, 4–5, 6.
    let mut bad = good.clone();
    bad[4] = bad[4].replace(r#""source":"user-said""#, r#""source":"hearsay""#);
    let bad_file = dir.path().join("bad.jsonl");
    write_lines(&bad_file, &bad);
    let mut build = fake;
    let e =
        import(&bad_file, 2, opener(d.path()), &mut build, &mut Silent).unwrap_err().to_string();
    for n in [
        "line 5:",
        "not a valid Spine record",
        "nothing from line 4 on was imported",
        "2 records imported before it",
    ] {
        assert!(e.contains(n), "{n:?} not in {e}");
    }
    assert_eq!(b.count_records(None).unwrap(), 2);

    // Vectors are checked as strictly: 3 floats are 12 bytes, not 2 dims' 8.
    let mut bad_vector = good.clone();
    let mut v: Value = serde_json::from_str(&bad_vector[5]).unwrap();
    v["vector"]["dims"] = json!(2);
    bad_vector[5] = v.to_string();
    write_lines(&bad_file, &bad_vector);
    let e =
        import(&bad_file, 500, opener(d.path()), &mut build, &mut Silent).unwrap_err().to_string();
    assert!(e.contains("line 6:") && e.contains("2 dims need 8"), "{e}");
    assert_eq!(b.count_records(None).unwrap(), 2, "nothing of that batch");

    // The fixed file: the import continues, skipping what is there, in the same order.
    let done = import(&good_file, 500, opener(d.path()), &mut build, &mut Silent).unwrap();
    assert_eq!((done.imported, done.already_present), (3, 2));
    let out = dir.path().join("out.jsonl");
    export(&b, None, true, Target::File(&out), at(NOW), &Never, &mut Silent).unwrap();
    assert_eq!(lines(&out)[1..], good[1..], "the same record lines, in the same order");
}

#[test]
fn records_exported_without_vectors_are_embedded_on_import() {
    let dir = tempfile::tempdir().unwrap();
    let (_s, bare) = five(dir.path(), true);
    let bare_lines = lines(&bare);
    assert!(bare_lines[0].contains(r#""vectors":false"#));
    assert!(bare_lines.iter().all(|l| !l.contains(r#""vector""#)));
    let (d, c) = store();
    let mut build = fake;
    let s = import(&bare, 500, opener(d.path()), &mut build, &mut Silent).unwrap();
    assert_eq!((s.imported, s.embedded), (5, 5));
    assert_eq!(s.embedders.get("fake"), Some(&5));
    for line in &bare_lines[1..6] {
        let v: Value = serde_json::from_str(line).unwrap();
        let id = spine_core::RecordId::parse(v["record"]["id"].as_str().unwrap()).unwrap();
        let content = v["record"]["content"].as_str().unwrap();
        assert_eq!(c.vector(&id, "fake").unwrap(), Some(fake_vector(content)));
    }
    // The records themselves are exact.
    let again = dir.path().join("again.jsonl");
    export(&c, None, false, Target::File(&again), at(NOW), &Never, &mut Silent).unwrap();
    assert_eq!(lines(&again)[1..], bare_lines[1..]);
}

/// A record line with a hand-built payload: `edit` changes the record's JSON.
fn crafted(
    content: &str,
    edit: impl FnOnce(&mut serde_json::Map<String, Value>),
) -> (String, String) {
    spine_testkit::records::export_line(SCOPE, content, edit)
}

fn header() -> String {
    spine_testkit::records::export_header()
}

/// Each record line of `s`'s export (no vectors), by id.
fn exported(s: &SqliteStore, dir: &Path, name: &str) -> BTreeMap<String, String> {
    let path = dir.join(name);
    export(s, None, false, Target::File(&path), at(NOW), &Never, &mut Silent).unwrap();
    lines(&path)
        .into_iter()
        .filter(|l| l.starts_with(r#"{"record""#))
        .map(|l| {
            let v: Value = serde_json::from_str(&l).unwrap();
            (v["record"]["id"].as_str().unwrap().to_owned(), l)
        })
        .collect()
}

#[test]
fn migrate_stamps_older_records_leaves_newer_ones_and_keeps_what_it_cannot_carry() {
    let dir = tempfile::tempdir().unwrap();
    let (old_id, old) = crafted("Written before schema versions.", |o| {
        o.remove("schema_version");
    });
    let newer_version = SCHEMA_VERSION + 98;
    let (newer_id, newer) = crafted("Written by a newer spine.", |o| {
        o.insert("schema_version".into(), json!(newer_version));
        o.insert("ranking_hint".into(), json!({"weight": 3}));
    });
    let (_, current) = crafted("Written by this spine.", |_| {});
    let file = dir.path().join("mixed.jsonl");
    write_lines(&file, &[header(), old, newer.clone(), current, r#"{"end":{"records":3}}"#.into()]);
    let (d, s) = store();
    let mut build = fake;
    let imported = import(&file, 500, opener(d.path()), &mut build, &mut Silent).unwrap();
    assert_eq!((imported.imported, imported.embedded), (3, 3));

    let report = serde_json::to_value(migrate::migrate(&s, 2, &mut Silent).unwrap()).unwrap();
    assert_eq!(report["schema_version"], SCHEMA_VERSION);
    assert_eq!(
        (report["migrated"].as_u64(), report["already_current"].as_u64()),
        (Some(1), Some(1))
    );
    assert_eq!(report["newer"], 1);
    assert_eq!(report["kept"], json!([]));
    let (v, nv) = (SCHEMA_VERSION.to_string(), newer_version.to_string());
    assert_eq!(report["versions_before"], json!({"0": 1, v.clone(): 1, nv.clone(): 1}));
    assert_eq!(report["versions_after"], json!({v.clone(): 2, nv.clone(): 1}));

    // The newer record is untouched, byte for byte; the old one gained only its stamp.
    let by_id = exported(&s, dir.path(), "after.jsonl");
    assert_eq!(by_id[&newer_id], newer);
    let migrated: Value = serde_json::from_str(&by_id[&old_id]).unwrap();
    assert_eq!(migrated["record"]["schema_version"], SCHEMA_VERSION);
    assert_eq!(migrated["record"]["content"], "Written before schema versions.");
    let got = s.get_many(&[spine_core::RecordId::parse(&newer_id).unwrap()]).unwrap();
    assert_eq!(got[0].schema_version, newer_version, "never lowered");

    // Idempotent: the second run changes nothing.
    let second = migrate::migrate(&s, 10, &mut Silent).unwrap();
    assert_eq!((second.migrated, second.already_current, second.newer), (0, 2, 1));
    assert_eq!(exported(&s, dir.path(), "again.jsonl"), by_id);

    // An old record carrying a key this spine does not know is kept, never stripped.
    let (odd_id, odd) = crafted("Old, with an unknown key.", |o| {
        o.remove("schema_version");
        o.insert("mystery".into(), json!("keep me"));
    });
    write_lines(&file, &[header(), odd.clone(), r#"{"end":{"records":1}}"#.into()]);
    let (d2, s2) = store();
    import(&file, 500, opener(d2.path()), &mut build, &mut Silent).unwrap();
    let kept = migrate::migrate(&s2, 10, &mut Silent).unwrap();
    assert_eq!(kept.kept.len(), 1);
    assert_eq!(kept.kept[0].id, odd_id);
    assert!(kept.kept[0].reason.contains("mystery"), "{}", kept.kept[0].reason);
    assert_eq!(exported(&s2, dir.path(), "odd.jsonl")[&odd_id], odd);
}
