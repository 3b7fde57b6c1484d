//! `spine export`: records, with their vectors, as JSON lines — and the export file format,
//! which `spine import` reads back.
//!
//! Format version 1, one JSON document per line:
//!
//! ```text
//! {"header":{"format":"spine-export","version":1,"exported_at":"…","schema_version":1,"scope":null,"vectors":true}}
//! {"record":{…the stored record…},"vector":{"model":"builtin:all-MiniLM-L6-v2","dims":384,"f32le":"…"}}
//! {"end":{"records":1}}
//! ```
//!
//! `record` is the stored payload byte for byte (the record's JSON with every SPEC key, and
//! any key a newer binary wrote), so export → import → export reproduces every record line
//! exactly. `vector` is absent with `--no-vectors` or when the record has none; `f32le` is
//! the standard base64 of the `dims` components as little-endian f32, the bytes the store
//! keeps. The `end` line tells a complete file from one cut short.
//!
//! Records are read in rowid order, a page at a time (bounded memory, and a server may keep
//! writing meanwhile). A file is written under a temporary name, fsynced and renamed, so
//! FILE either is complete or does not exist; an existing FILE is never overwritten. Only
//! after the last byte is durable (file) or written (stdout) are the records marked as
//! exported for the purge gate — from the written lines themselves, read back.

use std::borrow::Cow;
use std::fs::File;
use std::io::{BufRead, BufReader, BufWriter, Write};
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, anyhow, bail};
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use clap::Args;
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use spine_core::{Clock, Memory, SCHEMA_VERSION, Scope, SystemClock};
use spine_ops::Progress as _;
use spine_store::{SqliteStore, StoredRecord, StoredVector, TransferStore};

use super::stop::Stop;
use super::{OutputArgs, Progress, count};

/// The `format` of the header line.
pub const FORMAT: &str = "spine-export";
/// The format version this binary writes, and the newest it reads.
pub const FORMAT_VERSION: u32 = 1;
/// Records read per page.
const PAGE: usize = 500;
/// Records marked as exported per transaction.
const MARK_BATCH: usize = 500;
/// How `mark_exported` names stdout.
const STDOUT_LABEL: &str = "(stdout)";

/// First line of an export.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Header {
    /// Always [`FORMAT`].
    pub format: String,
    /// [`FORMAT_VERSION`] of the writer.
    pub version: u32,
    /// When the export started (RFC 3339).
    pub exported_at: String,
    /// The record schema version of the writing binary (records keep their own stamps).
    pub schema_version: u32,
    /// The exported scope; `null` for every scope.
    pub scope: Option<String>,
    /// Whether vectors were written.
    pub vectors: bool,
}

/// Last line of an export.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct End {
    /// How many record lines precede it.
    pub records: u64,
}

/// The header line, as written.
#[derive(Serialize)]
struct HeaderLine<'a> {
    header: &'a Header,
}

/// The end line, as written.
#[derive(Serialize)]
struct EndLine {
    end: End,
}

/// The `vector` of a record line.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct VectorLine {
    model: String,
    dims: usize,
    f32le: String,
}

/// One line of an export, parsed.
#[derive(Debug)]
pub enum Line<'a> {
    /// The header.
    Header(Header),
    /// A record: its payload as written, decoded, and its vector (embedder id, components).
    Record { body: &'a str, memory: Box<Memory>, vector: Option<(String, Vec<f32>)> },
    /// The end.
    End(End),
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawLine<'a> {
    #[serde(default)]
    header: Option<Header>,
    #[serde(borrow, default)]
    record: Option<&'a RawValue>,
    #[serde(default)]
    vector: Option<VectorLine>,
    #[serde(default)]
    end: Option<End>,
}

/// Parses one line of an export file; the error says what is wrong with it.
pub fn parse_line(line: &str) -> Result<Line<'_>, String> {
    let raw: RawLine<'_> =
        serde_json::from_str(line).map_err(|e| format!("not a line of a spine export ({e})"))?;
    match (raw.header, raw.record, raw.end, raw.vector) {
        (Some(h), None, None, None) => Ok(Line::Header(h)),
        (None, Some(record), None, vector) => {
            let body = record.get();
            let memory: Memory = serde_json::from_str(body)
                .map_err(|e| format!("the record is not a valid Spine record ({e})"))?;
            let vector = vector.map(decode_vector).transpose()?;
            Ok(Line::Record { body, memory: Box::new(memory), vector })
        }
        (None, None, Some(end), None) => Ok(Line::End(end)),
        _ => Err("a line holds exactly one of `header`, `record` (with an optional `vector`) \
                  or `end`"
            .into()),
    }
}

fn decode_vector(v: VectorLine) -> Result<(String, Vec<f32>), String> {
    if v.model.trim().is_empty() {
        return Err("vector.model is empty".into());
    }
    let bytes =
        STANDARD.decode(&v.f32le).map_err(|e| format!("vector.f32le is not base64 ({e})"))?;
    if v.dims == 0 || v.dims.checked_mul(4) != Some(bytes.len()) {
        return Err(format!(
            "vector.f32le holds {} bytes where {} dims need {}",
            bytes.len(),
            v.dims,
            v.dims.saturating_mul(4)
        ));
    }
    let vector = bytes.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]));
    Ok((v.model, vector.collect()))
}

/// Writes one record line.
fn write_record(w: &mut impl Write, r: &StoredRecord) -> std::io::Result<()> {
    // A stored payload is compact JSON (serde or SQLite's json functions). Were a raw line
    // break ever in one, it could only sit between tokens (JSON strings escape them), where
    // a space means the same.
    let body = match r.body.contains(['\n', '\r']) {
        true => Cow::Owned(r.body.replace(['\n', '\r'], " ")),
        false => Cow::Borrowed(r.body.as_str()),
    };
    w.write_all(b"{\"record\":")?;
    w.write_all(body.as_bytes())?;
    if let Some(StoredVector { model, dims, data }) = &r.vector {
        let v = VectorLine { model: model.clone(), dims: *dims, f32le: STANDARD.encode(data) };
        w.write_all(b",\"vector\":")?;
        serde_json::to_writer(&mut *w, &v)?;
    }
    w.write_all(b"}\n")
}

fn write_json_line(w: &mut impl Write, value: &impl Serialize) -> std::io::Result<()> {
    serde_json::to_writer(&mut *w, value)?;
    w.write_all(b"\n")
}

/// `spine export`.
#[derive(Debug, Clone, Args)]
pub struct ExportArgs {
    /// Only the records of this scope.
    #[arg(long)]
    pub scope: Option<String>,
    /// Every scope: what export does without --scope too (the flag is accepted for
    /// symmetry with the sweep commands).
    #[arg(long, conflicts_with = "scope")]
    pub all_scopes: bool,
    /// Write to this new file instead of stdout; an existing file is never overwritten.
    #[arg(long, short = 'o', value_name = "FILE")]
    pub output: Option<PathBuf>,
    /// Leave the vectors out (`spine import` embeds such records with the configured
    /// embedder).
    #[arg(long)]
    pub no_vectors: bool,
    #[command(flatten)]
    pub out: OutputArgs,
}

/// What `spine export` did.
#[derive(Debug, Clone, Serialize)]
pub struct ExportSummary {
    /// The file written; `null` for stdout.
    pub output: Option<String>,
    /// The scope exported; `null` for every scope.
    pub scope: Option<String>,
    /// [`FORMAT_VERSION`].
    pub format_version: u32,
    /// Record lines written.
    pub records: u64,
    /// Of which with a vector.
    pub with_vectors: u64,
    /// Records now marked as exported (they pass the purge gate until they change).
    pub marked_exported: u64,
}

/// A file removed when dropped, unless kept.
struct Scratch {
    path: PathBuf,
    keep: bool,
}

impl Drop for Scratch {
    fn drop(&mut self) {
        if !self.keep {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

fn create_new(path: &Path) -> Result<File> {
    File::options()
        .write(true)
        .create_new(true)
        .open(path)
        .with_context(|| format!("creating {}", path.display()))
}

/// Where the export goes: a new file (written under a temporary name first), or stdout
/// with a scratch copy of the record lines to mark from afterwards.
enum Sink {
    File { target: PathBuf, partial: Scratch, w: BufWriter<File> },
    Stdout { w: BufWriter<std::io::Stdout>, spool: Scratch, spool_w: BufWriter<File> },
}

impl Sink {
    fn open(output: Option<&Path>) -> Result<Sink> {
        let unique = format!(
            "{}-{}",
            std::process::id(),
            SystemClock.now().as_micros().rem_euclid(1_000_000_000)
        );
        match output {
            Some(target) => {
                let name = target
                    .file_name()
                    .ok_or_else(|| anyhow!("--output {} names no file", target.display()))?;
                let partial =
                    target.with_file_name(format!(".{}.partial-{unique}", name.to_string_lossy()));
                let file = create_new(&partial).with_context(|| {
                    format!(
                        "cannot write {} (written as {} until complete)",
                        target.display(),
                        partial.display()
                    )
                })?;
                Ok(Sink::File {
                    target: target.to_path_buf(),
                    partial: Scratch { path: partial, keep: false },
                    w: BufWriter::new(file),
                })
            }
            None => {
                let path = std::env::temp_dir().join(format!("spine-export-{unique}.jsonl"));
                let file = create_new(&path)?;
                Ok(Sink::Stdout {
                    w: BufWriter::new(std::io::stdout()),
                    spool: Scratch { path, keep: false },
                    spool_w: BufWriter::new(file),
                })
            }
        }
    }

    /// Writes the header or end line (the scratch copy needs neither).
    fn write_json(&mut self, value: &impl Serialize) -> std::io::Result<()> {
        match self {
            Sink::File { w, .. } => write_json_line(w, value),
            Sink::Stdout { w, .. } => write_json_line(w, value),
        }
    }

    fn write_record(&mut self, r: &StoredRecord) -> std::io::Result<()> {
        match self {
            Sink::File { w, .. } => write_record(w, r),
            Sink::Stdout { w, spool_w, .. } => {
                write_record(w, r)?;
                // The scratch copy only needs what marking reads: the record.
                write_record(spool_w, &StoredRecord { vector: None, ..r.clone() })
            }
        }
    }

    /// Makes the export durable (file: fsync, rename to the target, fsync the directory;
    /// stdout: flush) and returns the file to read the record lines back from, with the
    /// label the marks carry. The returned guard removes a scratch file when dropped.
    fn finish(self) -> Result<(PathBuf, String, Option<Scratch>)> {
        match self {
            Sink::File { target, mut partial, w } => {
                let file = w.into_inner().map_err(|e| e.into_error())?;
                file.sync_all().with_context(|| format!("syncing {}", partial.path.display()))?;
                drop(file);
                if target.exists() {
                    bail!("{} appeared while exporting; not overwritten", target.display());
                }
                std::fs::rename(&partial.path, &target)
                    .with_context(|| format!("renaming the export to {}", target.display()))?;
                partial.keep = true;
                // The rename is durable once the directory entry is (POSIX).
                #[cfg(unix)]
                {
                    let dir = match target.parent() {
                        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
                        _ => PathBuf::from("."),
                    };
                    File::open(&dir)
                        .and_then(|d| d.sync_all())
                        .with_context(|| format!("syncing the directory {}", dir.display()))?;
                }
                let label = std::fs::canonicalize(&target).unwrap_or_else(|_| target.clone());
                Ok((target, label.display().to_string(), None))
            }
            Sink::Stdout { mut w, spool, spool_w } => {
                w.flush().context("writing the export to stdout")?;
                let file = spool_w.into_inner().map_err(|e| e.into_error())?;
                drop(file);
                Ok((spool.path.clone(), STDOUT_LABEL.to_owned(), Some(spool)))
            }
        }
    }
}

/// `spine export` on `store`.
pub fn run(store: &SqliteStore, args: &ExportArgs, stop: &Stop) -> Result<i32> {
    if args.out.json && args.output.is_none() {
        bail!("--json needs --output FILE: without it, stdout carries the export itself");
    }
    let scope = args
        .scope
        .as_deref()
        .map(|s| Scope::parse("--scope", s).map_err(|e| anyhow!("{}", e.message)))
        .transpose()?;
    if let Some(target) = args.output.as_ref().filter(|t| t.exists()) {
        bail!(
            "{} exists already; export never overwrites a file (records marked as exported \
             to it might no longer be in it): choose a new name",
            target.display()
        );
    }
    let vectors = !args.no_vectors;
    let started_at = SystemClock.now();
    let total = store.count_records(scope.as_ref())?;
    let mut sink = Sink::open(args.output.as_deref())?;
    let header = Header {
        format: FORMAT.into(),
        version: FORMAT_VERSION,
        exported_at: started_at.to_rfc3339(),
        schema_version: SCHEMA_VERSION,
        scope: scope.as_ref().map(|s| s.as_str().to_owned()),
        vectors,
    };
    let write_failed = || match &args.output {
        Some(p) => format!("writing {}", p.display()),
        None => "writing the export to stdout".to_owned(),
    };
    sink.write_json(&HeaderLine { header: &header }).with_context(write_failed)?;

    let mut progress = Progress::new("exporting", total);
    let (mut records, mut with_vectors, mut after) = (0u64, 0u64, 0i64);
    loop {
        if let Some(why) = stop.check() {
            // Dropping the sink removes the unfinished file; nothing was marked exported.
            drop(sink);
            progress.finish();
            eprintln!("export {}: nothing was exported", why.as_str());
            return Ok(why.exit_code());
        }
        let page = store.export_page(scope.as_ref(), after, PAGE, vectors)?;
        let Some(last) = page.last() else { break };
        after = last.rowid;
        for r in &page {
            // Only records this binary can read back are written: the file must import.
            if let Err(e) = serde_json::from_str::<Memory>(&r.body) {
                bail!(
                    "record {} has a payload this spine cannot read ({e}); nothing was \
                     exported — run `spine spine-review verify`",
                    r.id
                );
            }
            sink.write_record(r).with_context(write_failed)?;
            records += 1;
            with_vectors += u64::from(r.vector.is_some());
        }
        progress.advance(page.len() as u64);
    }
    sink.write_json(&EndLine { end: End { records } }).with_context(write_failed)?;
    let (written, label, _scratch) = sink.finish()?;
    progress.finish();

    let marked = mark_from(store, &written, &label, started_at.to_epoch_seconds())?;
    if marked != records {
        bail!("read back {marked} records from {} but wrote {records}", written.display());
    }
    let summary = ExportSummary {
        output: args.output.as_ref().map(|_| label.clone()),
        scope: header.scope,
        format_version: FORMAT_VERSION,
        records,
        with_vectors,
        marked_exported: marked,
    };
    args.out.print(&summary, || {
        let to = summary.output.as_deref().unwrap_or("stdout");
        let text = format!(
            "exported {} ({with_vectors} with vectors) to {to}\n\
             {} now pass the purge gate of `spine spine-review purge` until they change",
            count(records, "record"),
            count(marked, "record"),
        );
        // With stdout carrying the export, the summary goes to stderr.
        match args.output {
            Some(_) => println!("{text}"),
            None => eprintln!("{text}"),
        }
    })?;
    Ok(0)
}

/// Marks every record line of `path` as exported to `label` at `at`, a batch per
/// transaction; returns how many. Reading the lines back marks exactly what was written.
fn mark_from(
    store: &SqliteStore,
    path: &Path,
    label: &str,
    at: spine_core::EpochSeconds,
) -> Result<u64> {
    let reader = BufReader::new(
        File::open(path).with_context(|| format!("reading back {}", path.display()))?,
    );
    let mut batch = Vec::with_capacity(MARK_BATCH);
    let mut marked = 0u64;
    for (i, line) in reader.lines().enumerate() {
        let line = line.with_context(|| format!("reading back {}", path.display()))?;
        match parse_line(&line) {
            Ok(Line::Record { memory, .. }) => batch.push(*memory),
            Ok(_) => {}
            Err(e) => bail!("{} line {} reads back wrong: {e}", path.display(), i + 1),
        }
        if batch.len() == MARK_BATCH {
            store.mark_exported(&batch, label, at)?;
            marked += batch.len() as u64;
            batch.clear();
        }
    }
    store.mark_exported(&batch, label, at)?;
    marked += batch.len() as u64;
    Ok(marked)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stopped_export_leaves_no_file_and_marks_nothing() {
        use spine_core::{Caller, Category, Memory, ShortId, Source};
        use spine_store::{Embedding, Store};
        let dir = tempfile::tempdir().unwrap();
        let store = SqliteStore::open(&dir.path().join("data")).unwrap();
        let m = Memory::new(
            ShortId::mint(),
            "kept".into(),
            Scope::parse("scope", "a:project:x").unwrap(),
            Source::UserSaid,
            Category::Decision,
            &Caller::anonymous(),
            SystemClock.now(),
        );
        store.insert(&m, Embedding { model: "m", vector: &[1.0] }).unwrap();
        let out = dir.path().join("out.jsonl");
        let args = ExportArgs {
            scope: None,
            all_scopes: false,
            output: Some(out.clone()),
            no_vectors: false,
            out: OutputArgs::default(),
        };
        let code = run(&store, &args, &Stop::after(std::time::Duration::ZERO)).unwrap();
        assert_eq!(code, 124);
        let left: Vec<_> =
            std::fs::read_dir(dir.path()).unwrap().flatten().map(|e| e.file_name()).collect();
        assert_eq!(left, vec![std::ffi::OsString::from("data")], "no output, no partial file");
        assert_eq!(store.exported_unchanged(&[m.id]).unwrap(), vec![false]);
    }

    fn stored(body: &str, vector: Option<StoredVector>) -> StoredRecord {
        StoredRecord { rowid: 1, id: "x".into(), body: body.into(), vector }
    }

    const BODY: &str = r#"{"id":"0190f5a0-0000-7000-8000-000000000001","short_id":"ABCDEFGHJK","content":"c","scope":"a:project:x","source":"user-said","category":"decision","tags":[],"summary_source":"","actor":"","owner":"","visibility":"","created_at":"2027-01-15T08:00:00Z","access_count":0,"schema_version":1,"later_key":[1,2]}"#;

    #[test]
    fn a_record_line_carries_the_payload_byte_for_byte_and_the_vector_bytes() {
        let v = [0.25f32, -3.5, f32::MIN_POSITIVE];
        let data: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
        let vector = StoredVector { model: "m:1".into(), dims: 3, data };
        let mut out = Vec::new();
        write_record(&mut out, &stored(BODY, Some(vector))).unwrap();
        let line = String::from_utf8(out).unwrap();
        assert!(line.ends_with("}\n") && line.matches('\n').count() == 1);
        let Line::Record { body, memory, vector } = parse_line(line.trim_end()).unwrap() else {
            panic!("a record line")
        };
        assert_eq!(body, BODY, "unknown keys and key order survive");
        assert_eq!(memory.content, "c");
        assert_eq!(vector, Some(("m:1".to_owned(), v.to_vec())));
    }

    #[test]
    fn a_payload_with_a_line_break_still_makes_one_line() {
        let body = BODY.replace(",\"content\"", ",\n\"content\"");
        let mut out = Vec::new();
        write_record(&mut out, &stored(&body, None)).unwrap();
        let line = String::from_utf8(out).unwrap();
        assert_eq!(line.matches('\n').count(), 1);
        assert!(matches!(parse_line(line.trim_end()), Ok(Line::Record { vector: None, .. })));
    }

    #[test]
    fn malformed_lines_say_what_is_wrong() {
        let cases = [
            ("{", "not a line of a spine export"),
            (r#"{"record":{"content":"no id"}}"#, "not a valid Spine record"),
            (r#"{"recrod":{}}"#, "unknown field"),
            ("{}", "exactly one of"),
            (r#"{"end":{"records":1},"record":{}}"#, "exactly one of"),
            (
                r#"{"end":{"records":1},"vector":{"model":"m","dims":1,"f32le":"AAAAAA=="}}"#,
                "exactly one of",
            ),
        ];
        for (line, needle) in cases {
            let e = parse_line(line).unwrap_err();
            assert!(e.contains(needle), "{line}: {e}");
        }
        let with = |v: &str| format!(r#"{{"record":{BODY},"vector":{v}}}"#);
        for (v, needle) in [
            (r#"{"model":"m","dims":2,"f32le":"AAAAAA=="}"#, "holds 4 bytes where 2 dims need 8"),
            (r#"{"model":"m","dims":0,"f32le":""}"#, "0 dims"),
            (r#"{"model":"m","dims":1,"f32le":"***"}"#, "not base64"),
            (r#"{"model":"","dims":1,"f32le":"AAAAAA=="}"#, "model is empty"),
        ] {
            let e = parse_line(&with(v)).unwrap_err();
            assert!(e.contains(needle), "{v}: {e}");
        }
    }

    #[test]
    fn header_and_end_round_trip() {
        let header = Header {
            format: FORMAT.into(),
            version: FORMAT_VERSION,
            exported_at: "2027-01-15T08:00:00Z".into(),
            schema_version: SCHEMA_VERSION,
            scope: None,
            vectors: true,
        };
        let line = serde_json::to_string(&HeaderLine { header: &header }).unwrap();
        assert!(matches!(parse_line(&line), Ok(Line::Header(h)) if h == header));
        let line = serde_json::to_string(&EndLine { end: End { records: 7 } }).unwrap();
        assert!(matches!(parse_line(&line), Ok(Line::End(End { records: 7 }))));
    }
}
