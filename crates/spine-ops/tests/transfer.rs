//! Export and import in-process: the round trip byte for byte, the stopped export, the
//! stream target, the malformed line and the resume.

use std::path::Path;
use std::sync::Arc;

use spine_embed::Embedder;
use spine_ops::stop::{Never, Stopped};
use spine_ops::transfer::{ExportReport, Exported, Target, export, import};
use spine_ops::{Error, Silent};
use spine_store::{OperatorStore, SqliteStore, Store, TransferStore};

use super::{NOW, at, put, record, store};

fn no_embedder() -> Result<Arc<dyn Embedder>, Error> {
    Err(Error::Embed("no embedder in this test".into()))
}

/// Opens the store in `dir` when the import asks for it.
fn opener(dir: &Path) -> impl FnOnce() -> Result<Box<dyn OperatorStore>, Error> + '_ {
    move || Ok(Box::new(SqliteStore::open(dir)?))
}

fn export_to(s: &SqliteStore, path: &Path) -> ExportReport {
    match export(s, None, true, Target::File(path), at(NOW), &Never, &mut Silent).unwrap() {
        Exported::Done(report) => report,
        Exported::Stopped(why) => panic!("stopped: {why:?}"),
    }
}

/// The lines of an export without its header (which carries the export time).
fn body_lines(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path).unwrap().lines().skip(1).map(str::to_owned).collect()
}

#[test]
fn export_then_import_reproduces_every_record_line_and_vector() {
    let (dir, s) = store();
    let mut a = record("Use rustls for TLS.", 1);
    a.tags = vec!["tls".into()];
    let b = record("Tabs, not spaces.", 2);
    put(&s, &a, &[0.25, -3.5, f32::MIN_POSITIVE]);
    put(&s, &b, &[1.0, 0.0, 0.0]);
    let first = dir.path().join("first.jsonl");
    let report = export_to(&s, &first);
    assert_eq!((report.records, report.with_vectors, report.marked_exported), (2, 2, 2));
    assert_eq!(s.exported_unchanged(&[a.id, b.id]).unwrap(), vec![true, true]);

    let (d2, fresh) = store();
    let mut build = no_embedder;
    let imported = import(&first, 1, opener(d2.path()), &mut build, &mut Silent).unwrap();
    assert_eq!((imported.records, imported.imported, imported.embedded), (2, 2, 0));
    assert!(imported.complete && imported.problem().is_none(), "{:?}", imported.problem());
    assert_eq!(imported.embedders.get("m"), Some(&2));
    let second = dir.path().join("second.jsonl");
    export_to(&fresh, &second);
    assert_eq!(body_lines(&first), body_lines(&second), "byte for byte, vectors included");

    // Importing again changes nothing.
    let again = import(&first, 500, opener(d2.path()), &mut build, &mut Silent).unwrap();
    assert_eq!((again.imported, again.already_present), (0, 2));
    // An existing file is never overwritten.
    let refused = export(&s, None, true, Target::File(&first), at(NOW), &Never, &mut Silent);
    assert!(matches!(refused, Err(Error::Invalid(m)) if m.contains("exists already")));
}

#[test]
fn a_stopped_export_leaves_no_file_and_marks_nothing() {
    let (dir, s) = store();
    let m = record("kept", 1);
    put(&s, &m, &[1.0]);
    let out = dir.path().join("out.jsonl");
    let stop = Stopped::Signal(2);
    let ended = export(&s, None, true, Target::File(&out), at(NOW), &stop, &mut Silent).unwrap();
    assert!(matches!(ended, Exported::Stopped(Stopped::Signal(2))));
    let left: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.contains("out"))
        .collect();
    assert!(left.is_empty(), "no output, no partial file: {left:?}");
    assert_eq!(s.exported_unchanged(&[m.id]).unwrap(), vec![false]);
}

#[test]
fn a_stream_export_marks_what_it_wrote_under_its_label() {
    let (_d, s) = store();
    let m = record("to stdout", 1);
    put(&s, &m, &[1.0]);
    let mut out = Vec::new();
    let target = Target::Stream { w: &mut out, label: "(stdout)" };
    let Exported::Done(report) =
        export(&s, None, false, target, at(NOW), &Never, &mut Silent).unwrap()
    else {
        panic!("stopped")
    };
    assert_eq!((report.output, report.records, report.with_vectors), (None, 1, 0));
    let text = String::from_utf8(out).unwrap();
    assert_eq!(text.lines().count(), 3, "header, record, end");
    assert!(!text.contains("\"vector\""), "vectors left out");
    assert_eq!(s.exported_unchanged(&[m.id]).unwrap(), vec![true]);
}

#[test]
fn a_malformed_line_stops_the_import_with_nothing_of_its_batch_written() {
    let (dir, s) = store();
    for (i, content) in ["one", "two", "three", "four"].iter().enumerate() {
        put(&s, &record(content, i as i64 + 1), &[1.0]);
    }
    let good = dir.path().join("good.jsonl");
    export_to(&s, &good);
    let text = std::fs::read_to_string(&good).unwrap();
    let mut lines: Vec<&str> = text.lines().collect();
    lines[4] = "{\"record\":{\"content\":\"no id\"}}";
    let bad = dir.path().join("bad.jsonl");
    std::fs::write(&bad, lines.join("\n") + "\n").unwrap();

    let (d2, fresh) = store();
    let mut build = no_embedder;
    let e = import(&bad, 2, opener(d2.path()), &mut build, &mut Silent).unwrap_err().to_string();
    assert!(e.contains("line 5") && e.contains("nothing from line 4 on"), "{e}");
    assert_eq!(fresh.count_records(None).unwrap(), 2, "the first batch of two stays");
    // The fixed file resumes: the two present are skipped.
    let done = import(&good, 2, opener(d2.path()), &mut build, &mut Silent).unwrap();
    assert_eq!((done.imported, done.already_present), (2, 2));

    // A file cut short imports what it holds and says so.
    let cut = dir.path().join("cut.jsonl");
    std::fs::write(&cut, text.lines().take(3).collect::<Vec<_>>().join("\n")).unwrap();
    let (d3, _third) = store();
    let partial = import(&cut, 500, opener(d3.path()), &mut build, &mut Silent).unwrap();
    assert_eq!(partial.imported, 2);
    assert!(partial.problem().unwrap().contains("cut short"));
}

#[test]
fn a_line_beyond_64_mib_is_refused_without_reading_it_whole() {
    let (dir, s) = store();
    put(&s, &record("one", 1), &[1.0]);
    let good = dir.path().join("good.jsonl");
    export_to(&s, &good);
    let text = std::fs::read_to_string(&good).unwrap();
    let header = text.lines().next().unwrap();
    let huge = dir.path().join("huge.jsonl");
    let mut bytes = format!("{header}\n").into_bytes();
    bytes.resize(bytes.len() + (64 << 20) + 10, b' ');
    std::fs::write(&huge, bytes).unwrap();
    let (d2, _fresh) = store();
    let mut build = no_embedder;
    let e = import(&huge, 2, opener(d2.path()), &mut build, &mut Silent).unwrap_err().to_string();
    assert!(e.contains("line 2: longer than 67108864 bytes"), "{e}");
}

#[test]
fn a_record_without_a_vector_needs_the_embedder_and_its_failure_says_how_to_resume() {
    let (dir, s) = store();
    put(&s, &record("needs a vector on import", 1), &[1.0]);
    let out = dir.path().join("novec.jsonl");
    let ended = export(&s, None, false, Target::File(&out), at(NOW), &Never, &mut Silent);
    assert!(matches!(ended, Ok(Exported::Done(_))));
    let (d2, fresh) = store();
    let mut build = no_embedder;
    let e = import(&out, 500, opener(d2.path()), &mut build, &mut Silent).unwrap_err().to_string();
    assert!(e.contains("no vector and embedding it failed") && e.contains("again"), "{e}");
    assert_eq!(fresh.count_records(None).unwrap(), 0);
    assert!(fresh.embedder_models().unwrap().is_empty());
}
