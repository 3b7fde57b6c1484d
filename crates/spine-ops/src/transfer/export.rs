//! Writing an export.
//!
//! Records are read in rowid order, a page at a time (bounded memory, and a server may keep
//! writing meanwhile). A file is written under a temporary name, fsynced and renamed, so the
//! target either is complete or does not exist; an existing file is never overwritten. Only
//! after the last byte is durable (file) or written (a stream such as stdout) are the
//! records marked as exported for the purge gate — from the written lines themselves, read
//! back.

use std::fs::File;
use std::io::{BufRead, BufReader, BufWriter, Write};
use std::path::{Path, PathBuf};

use serde::Serialize;
use spine_core::{EpochSeconds, Memory, SCHEMA_VERSION, Scope, Timestamp};
use spine_store::{AuditEvent, OperatorStore, RowidPage, StoredRecord};

use super::format::{
    End, EndLine, FORMAT, FORMAT_VERSION, Header, HeaderLine, Line, parse_line, write_audit,
    write_json_line, write_record,
};
use crate::stop::{Interrupt, Stopped};
use crate::{Error, Progress, Result};

/// Records read per page.
const PAGE: usize = 500;
/// Records marked as exported per transaction.
const MARK_BATCH: usize = 500;

/// Where an export goes.
pub enum Target<'a> {
    /// A new file: written under a temporary name beside it, then renamed.
    File(&'a Path),
    /// A stream (stdout); `label` names it in the export marks.
    Stream {
        /// The stream.
        w: &'a mut dyn Write,
        /// How the marks name it, e.g. `(stdout)`.
        label: &'a str,
    },
}

/// What an export did.
#[derive(Debug, Clone, Serialize)]
pub struct ExportReport {
    /// The file written (its canonical path); `null` for a stream.
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
    /// Audit events written (every event; with a scope, the events of that scope).
    pub audit_events: u64,
}

/// How an export ended.
#[derive(Debug)]
pub enum Exported {
    /// Complete, durable, and marked.
    Done(ExportReport),
    /// Stopped before the end: no file is left and nothing was marked.
    Stopped(Stopped),
}

fn io(context: impl Into<String>) -> impl FnOnce(std::io::Error) -> Error {
    let context = context.into();
    move |source| Error::Io { context, source }
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
        .map_err(io(format!("creating {}", path.display())))
}

/// The open output: a new file (written under a temporary name first), or a stream with a
/// scratch copy of the record lines to mark from afterwards.
enum Sink<'a> {
    File {
        target: PathBuf,
        partial: Scratch,
        w: BufWriter<File>,
    },
    Stream {
        w: BufWriter<&'a mut dyn Write>,
        label: &'a str,
        spool: Scratch,
        spool_w: BufWriter<File>,
    },
}

impl<'a> Sink<'a> {
    fn open(target: Target<'a>, now: Timestamp) -> Result<Sink<'a>> {
        let unique =
            format!("{}-{}", std::process::id(), now.as_micros().rem_euclid(1_000_000_000));
        match target {
            Target::File(target) => {
                let name = target.file_name().ok_or_else(|| {
                    Error::Invalid(format!("--output {} names no file", target.display()))
                })?;
                let partial =
                    target.with_file_name(format!(".{}.partial-{unique}", name.to_string_lossy()));
                let file = create_new(&partial).map_err(|e| {
                    Error::Invalid(format!(
                        "cannot write {} (written as {} until complete): {e}",
                        target.display(),
                        partial.display()
                    ))
                })?;
                Ok(Sink::File {
                    target: target.to_path_buf(),
                    partial: Scratch { path: partial, keep: false },
                    w: BufWriter::new(file),
                })
            }
            Target::Stream { w, label } => {
                let path = std::env::temp_dir().join(format!("spine-export-{unique}.jsonl"));
                let file = create_new(&path)?;
                Ok(Sink::Stream {
                    w: BufWriter::new(w),
                    label,
                    spool: Scratch { path, keep: false },
                    spool_w: BufWriter::new(file),
                })
            }
        }
    }

    /// What a failed write was doing.
    fn writing(&self) -> String {
        match self {
            Sink::File { target, .. } => format!("writing {}", target.display()),
            Sink::Stream { label, .. } => format!("writing the export to {label}"),
        }
    }

    /// Writes the header or end line (the scratch copy needs neither).
    fn write_json(&mut self, value: &impl Serialize) -> Result<()> {
        let written = match self {
            Sink::File { w, .. } => write_json_line(w, value),
            Sink::Stream { w, .. } => write_json_line(w, value),
        };
        written.map_err(io(self.writing()))
    }

    fn write_audit(&mut self, e: &AuditEvent) -> Result<()> {
        let written = match self {
            Sink::File { w, .. } => write_audit(w, e),
            Sink::Stream { w, .. } => write_audit(w, e),
        };
        written.map_err(io(self.writing()))
    }

    fn write_record(&mut self, r: &StoredRecord) -> Result<()> {
        let written = match self {
            Sink::File { w, .. } => write_record(w, r),
            Sink::Stream { w, spool_w, .. } => write_record(w, r).and_then(|()| {
                // The scratch copy only needs what marking reads: the record.
                write_record(spool_w, &StoredRecord { vector: None, ..r.clone() })
            }),
        };
        written.map_err(io(self.writing()))
    }

    /// Makes the export durable (file: fsync, rename to the target, fsync the directory;
    /// stream: flush) and returns the file to read the record lines back from, the label
    /// the marks carry, whether it is the target file, and a guard that removes a scratch
    /// file when dropped.
    fn finish(self) -> Result<(PathBuf, String, bool, Option<Scratch>)> {
        match self {
            Sink::File { target, mut partial, w } => {
                let syncing = io(format!("syncing {}", partial.path.display()));
                let file = w.into_inner().map_err(|e| syncing(e.into_error()))?;
                file.sync_all().map_err(io(format!("syncing {}", partial.path.display())))?;
                drop(file);
                if target.exists() {
                    return Err(Error::Invalid(format!(
                        "{} appeared while exporting; not overwritten",
                        target.display()
                    )));
                }
                std::fs::rename(&partial.path, &target)
                    .map_err(io(format!("renaming the export to {}", target.display())))?;
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
                        .map_err(io(format!("syncing the directory {}", dir.display())))?;
                }
                let label = std::fs::canonicalize(&target).unwrap_or_else(|_| target.clone());
                Ok((target, label.display().to_string(), true, None))
            }
            Sink::Stream { mut w, label, spool, spool_w } => {
                w.flush().map_err(io(format!("writing the export to {label}")))?;
                let file = spool_w
                    .into_inner()
                    .map_err(|e| io("writing the scratch copy")(e.into_error()))?;
                drop(file);
                Ok((spool.path.clone(), label.to_owned(), false, Some(spool)))
            }
        }
    }
}

/// Exports the records of `scope` (every scope when `None`), with their vectors when
/// `vectors`, to `target`; `now` is stamped in the header and on the marks. Checks `stop`
/// between pages. Blocking.
pub fn export(
    store: &dyn OperatorStore,
    scope: Option<&Scope>,
    vectors: bool,
    target: Target<'_>,
    now: Timestamp,
    stop: &dyn Interrupt,
    progress: &mut dyn Progress,
) -> Result<Exported> {
    if let Target::File(path) = target
        && path.exists()
    {
        return Err(Error::Invalid(format!(
            "{} exists already; export never overwrites a file (records marked as exported \
             to it might no longer be in it): choose a new name",
            path.display()
        )));
    }
    let total = store.count_records(scope)?;
    let mut sink = Sink::open(target, now)?;
    let header = Header {
        format: FORMAT.into(),
        version: FORMAT_VERSION,
        exported_at: now.to_rfc3339(),
        schema_version: SCHEMA_VERSION,
        scope: scope.map(|s| s.as_str().to_owned()),
        vectors,
    };
    sink.write_json(&HeaderLine { header: &header })?;

    progress.start("exporting", total);
    let (mut records, mut with_vectors, mut after) = (0u64, 0u64, 0i64);
    loop {
        if let Some(why) = stop.check() {
            // Dropping the sink removes the unfinished file; nothing was marked exported.
            drop(sink);
            progress.finish();
            return Ok(Exported::Stopped(why));
        }
        let page = store.export_page(RowidPage { scope, after, limit: PAGE }, vectors)?;
        let Some(last) = page.last() else { break };
        after = last.rowid;
        for r in &page {
            // Only records this binary can read back are written: the file must import.
            if let Err(e) = serde_json::from_str::<Memory>(&r.body) {
                return Err(Error::Invalid(format!(
                    "record {} has a payload this spine cannot read ({e}); nothing was \
                     exported — run `spine spine-review verify`",
                    r.id
                )));
            }
            sink.write_record(r)?;
            records += 1;
            with_vectors += u64::from(r.vector.is_some());
        }
        progress.advance(page.len() as u64);
    }
    // The audit log follows, oldest first: every event, or a scope's own.
    let (mut audit_events, mut position) = (0u64, 0i64);
    loop {
        if let Some(why) = stop.check() {
            drop(sink);
            progress.finish();
            return Ok(Exported::Stopped(why));
        }
        let page = store.audit_page(scope, position, PAGE)?;
        let Some((last, _)) = page.last() else { break };
        position = *last;
        for (_, e) in &page {
            sink.write_audit(e)?;
            audit_events += 1;
        }
    }
    sink.write_json(&EndLine { end: End { records, audit_events } })?;
    let (written, label, is_file, _scratch) = sink.finish()?;
    progress.finish();

    let marked = mark_from(store, &written, &label, now.to_epoch_seconds())?;
    if marked != records {
        return Err(Error::Invalid(format!(
            "read back {marked} records from {} but wrote {records}",
            written.display()
        )));
    }
    Ok(Exported::Done(ExportReport {
        output: is_file.then_some(label),
        scope: header.scope,
        format_version: FORMAT_VERSION,
        records,
        with_vectors,
        marked_exported: marked,
        audit_events,
    }))
}

/// Marks every record line of `path` as exported to `label` at `at`, a batch per
/// transaction; returns how many. Reading the lines back marks exactly what was written.
fn mark_from(store: &dyn OperatorStore, path: &Path, label: &str, at: EpochSeconds) -> Result<u64> {
    let reading = || io(format!("reading back {}", path.display()));
    let reader = BufReader::new(File::open(path).map_err(reading())?);
    let mut batch = Vec::with_capacity(MARK_BATCH);
    let mut marked = 0u64;
    for (i, line) in reader.lines().enumerate() {
        let line = line.map_err(reading())?;
        match parse_line(&line) {
            Ok(Line::Record { memory, .. }) => batch.push(*memory),
            Ok(_) => {}
            Err(e) => {
                return Err(Error::Invalid(format!(
                    "{} line {} reads back wrong: {e}",
                    path.display(),
                    i + 1
                )));
            }
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
