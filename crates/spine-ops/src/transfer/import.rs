//! Reading an export back into a store.
//!
//! Streaming: one line and one batch in memory at a time. Each batch is parsed completely
//! before anything of it is written, then written in one transaction, so a malformed line
//! stops the import with nothing of its batch written. Resumable: a record whose id is
//! present already is skipped, so running the same import again continues where it stopped
//! (and changes nothing once complete). Each record's payload is stored exactly as in the
//! file, its vector exactly as in the file; a record without a vector is embedded with the
//! configured embedder before its batch is written, so no record is ever stored without one.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{BufRead, BufReader, Read};
use std::path::Path;
use std::sync::Arc;

use serde::Serialize;
use spine_core::Memory;
use spine_embed::Embedder;
use spine_store::{AuditEvent, Embedding, ImportOutcome, ImportRecord, OperatorStore};

use super::count;
use super::format::{End, FORMAT, FORMAT_VERSION, Line, parse_line};
use crate::{Error, Progress, Result};

/// The longest line read: far above any record an export holds (content, 50 citations with
/// 16 KiB excerpts, a vector), far below what would strain memory.
const MAX_LINE_BYTES: u64 = 64 * 1024 * 1024;

/// Texts per embedding call.
const EMBED_CHUNK: usize = 32;

/// A record whose short id another record holds already.
#[derive(Debug, Clone, Serialize)]
pub struct ShortIdClash {
    /// Line of the file.
    pub line: u64,
    /// The record that was not imported.
    pub id: String,
    /// Its short id.
    pub short_id: String,
    /// The record holding that short id.
    pub held_by: String,
}

/// What an import did.
#[derive(Debug, Clone, Default, Serialize)]
pub struct ImportReport {
    /// The file read.
    pub file: String,
    /// When the file was exported (its header).
    pub exported_at: String,
    /// Record lines read.
    pub records: u64,
    /// Records written.
    pub imported: u64,
    /// Records skipped because their id was present already.
    pub already_present: u64,
    /// Of the records written, those embedded by this import (they had no vector).
    pub embedded: u64,
    /// Records not written because another record holds their short id.
    pub short_id_taken: Vec<ShortIdClash>,
    /// Whether the file ended with its end line (false: the export was cut short).
    pub complete: bool,
    /// The record count the end line gives, when there is one.
    #[serde(skip)]
    pub end_records: Option<u64>,
    /// Vectors in the store by embedder afterwards.
    pub embedders: BTreeMap<String, u64>,
    /// Audit lines read.
    pub audit_events: u64,
    /// Audit events appended to the log.
    pub audit_imported: u64,
    /// Audit events skipped because the log held them already.
    pub audit_already_present: u64,
    /// The audit event count the end line gives, when there is one.
    #[serde(skip)]
    pub end_audit_events: Option<u64>,
}

impl ImportReport {
    /// Why the import is not a success although every readable line was handled: a file cut
    /// short or edited, or records whose short id is taken. `None` when it is one.
    pub fn problem(&self) -> Option<String> {
        let file = &self.file;
        match self.end_records {
            None => {
                return Some(format!(
                    "{file} ends without its end line: the export was cut short. The {} it \
                     holds were imported; export again and import the new file to get the rest",
                    count(self.records, "record")
                ));
            }
            Some(n) if n != self.records => {
                return Some(format!(
                    "{file}: the end line counts {} but the file holds {}: it was edited or \
                     damaged",
                    count(n, "record"),
                    self.records
                ));
            }
            Some(_) => {}
        }
        if let Some(n) = self.end_audit_events.filter(|&n| n != self.audit_events) {
            return Some(format!(
                "{file}: the end line counts {} but the file holds {}: it was edited or \
                 damaged",
                count(n, "audit event"),
                self.audit_events
            ));
        }
        (!self.short_id_taken.is_empty()).then(|| {
            format!(
                "{} not imported: another record in this store holds its short_id (listed \
                 above). A short_id is never changed: resolve the clash (for example export, \
                 then delete the other record) and import again",
                count(self.short_id_taken.len() as u64, "record")
            )
        })
    }
}

/// A parsed record waiting for its batch to be written.
struct Pending {
    line: u64,
    body: String,
    memory: Memory,
    vector: Option<(String, Vec<f32>)>,
    embedded: bool,
}

/// The embedder, built the first time a record needs a vector: an import whose records all
/// carry vectors needs no model and makes no request.
struct Lazy<'a> {
    build: &'a mut dyn FnMut() -> Result<Arc<dyn Embedder>>,
    built: Option<Arc<dyn Embedder>>,
}

impl Lazy<'_> {
    fn get(&mut self) -> Result<Arc<dyn Embedder>> {
        if let Some(e) = &self.built {
            return Ok(e.clone());
        }
        let e = (self.build)()?;
        self.built = Some(e.clone());
        Ok(e)
    }
}

/// How many lines `path` has (for the progress total).
fn count_lines(path: &Path) -> std::io::Result<u64> {
    let mut file = File::open(path)?;
    let (mut buf, mut n, mut last) = (vec![0u8; 1 << 16], 0u64, b'\n');
    loop {
        let read = file.read(&mut buf)?;
        if read == 0 {
            break;
        }
        n += buf[..read].iter().filter(|b| **b == b'\n').count() as u64;
        last = buf[read - 1];
    }
    Ok(n + u64::from(last != b'\n'))
}

/// Imports `path` into the store `open` opens (once the file's header has been read, so a
/// file that is no export creates no store), `batch` records per transaction, embedding
/// vector-less records with the embedder `embedder` builds (called at most once, and only
/// when needed). Blocking.
///
/// The store is told a bulk load runs ([`spine_store::TransferStore::begin_bulk_load`]) and
/// that it ended, whether the import finished or stopped at an error.
pub fn import(
    path: &Path,
    batch_size: u64,
    open: impl FnOnce() -> Result<Box<dyn OperatorStore>>,
    embedder: &mut dyn FnMut() -> Result<Arc<dyn Embedder>>,
    progress: &mut dyn Progress,
) -> Result<ImportReport> {
    let mut store = None;
    let imported = import_into(path, batch_size, open, embedder, progress, &mut store);
    let finished = match &store {
        Some(store) => store.finish_bulk_load().map_err(Error::from),
        None => Ok(()),
    };
    let report = imported?;
    finished?;
    Ok(report)
}

fn import_into(
    path: &Path,
    batch_size: u64,
    open: impl FnOnce() -> Result<Box<dyn OperatorStore>>,
    embedder: &mut dyn FnMut() -> Result<Arc<dyn Embedder>>,
    progress: &mut dyn Progress,
    store: &mut Option<Box<dyn OperatorStore>>,
) -> Result<ImportReport> {
    let shown = path.display();
    let reading = |context: String| move |source| Error::Io { context, source };
    let file = File::open(path).map_err(reading(format!("opening {shown}")))?;
    let lines = count_lines(path).map_err(reading(format!("reading {shown}")))?;
    let mut reader = BufReader::new(file);
    let mut embedder = Lazy { build: embedder, built: None };
    let mut report = ImportReport { file: shown.to_string(), ..ImportReport::default() };
    let mut batch: Vec<Pending> = Vec::new();
    let mut events: Vec<AuditEvent> = Vec::new();
    let mut open = Some(open);
    let (mut text, mut line_no, mut header_seen, mut end): (String, u64, bool, Option<End>) =
        (String::new(), 0, false, None);

    loop {
        text.clear();
        // At most one line over the limit is ever held: a file that is not an export (or is
        // corrupt) cannot make the import allocate without bound.
        let read = (&mut reader).take(MAX_LINE_BYTES + 1).read_line(&mut text).map_err(reading(
            format!("{shown} line {}: cannot be read (is it a text file?)", line_no + 1),
        ))?;
        if read == 0 {
            break;
        }
        line_no += 1;
        if read as u64 > MAX_LINE_BYTES {
            return Err(Error::Invalid(format!(
                "{shown} line {line_no}: longer than {MAX_LINE_BYTES} bytes, so not a line of a \
                 spine export; nothing from this line on was imported"
            )));
        }
        let line = text.trim_end_matches(['\n', '\r']);
        if line.trim().is_empty() {
            continue;
        }
        let malformed = |what: &str, batch: &[Pending], report: &ImportReport| {
            let first = batch.first().map_or(line_no, |p| p.line);
            Error::Invalid(format!(
                "{shown} line {line_no}: {what}\nnothing from line {first} on was imported \
                 ({} imported before it); fix the file and run `spine import` again: \
                 records already imported are skipped",
                count(report.imported, "record")
            ))
        };
        if let Some(end) = end {
            let what = format!(
                "a line after the end line (which closed {})",
                count(end.records, "record")
            );
            return Err(malformed(&what, &batch, &report));
        }
        match parse_line(line).map_err(|e| malformed(&e, &batch, &report))? {
            Line::Header(h) => {
                if header_seen {
                    return Err(malformed("a second header line", &batch, &report));
                }
                if h.format != FORMAT {
                    let what = format!("the header names format {:?}, not {FORMAT:?}", h.format);
                    return Err(malformed(&what, &batch, &report));
                }
                if h.version > FORMAT_VERSION {
                    return Err(Error::Invalid(format!(
                        "{shown} was written by a newer spine (export format {}; this spine \
                         reads up to {FORMAT_VERSION}): import it with that version",
                        h.version
                    )));
                }
                header_seen = true;
                report.exported_at = h.exported_at;
                if let Some(open) = open.take() {
                    let opened = store.insert(open()?);
                    opened.begin_bulk_load()?;
                }
                progress.start("importing", lines.saturating_sub(2));
            }
            _ if !header_seen => {
                return Err(malformed(
                    "the first line is not the header of a spine export (a file written by \
                     `spine export`)",
                    &batch,
                    &report,
                ));
            }
            Line::Record { body, memory, vector } => {
                report.records += 1;
                batch.push(Pending {
                    line: line_no,
                    body: body.to_owned(),
                    memory: *memory,
                    vector,
                    embedded: false,
                });
                if batch.len() as u64 >= batch_size {
                    let store = store.as_deref().expect("the store opens with the header");
                    write_batch(store, &mut batch, &mut embedder, &mut report)?;
                    progress.advance(batch_size);
                }
            }
            Line::Audit(e) => {
                report.audit_events += 1;
                events.push(*e);
                if events.len() as u64 >= batch_size {
                    let store = store.as_deref().expect("the store opens with the header");
                    write_events(store, &mut events, &mut report)?;
                    progress.advance(batch_size);
                }
            }
            Line::End(e) => end = Some(e),
        }
    }
    let Some(store) = store.as_deref() else {
        return Err(Error::Invalid(format!(
            "{shown} is empty: not a file written by `spine export`"
        )));
    };
    let tail = (batch.len() + events.len()) as u64;
    write_batch(store, &mut batch, &mut embedder, &mut report)?;
    write_events(store, &mut events, &mut report)?;
    progress.advance(tail);
    progress.finish();
    report.complete = end.is_some();
    report.end_records = end.map(|e| e.records);
    report.end_audit_events = end.map(|e| e.audit_events);
    report.embedders = store.embedder_models()?.into_iter().collect();
    Ok(report)
}

/// Appends the batch's audit events that the log does not hold yet, in one transaction.
fn write_events(
    store: &dyn OperatorStore,
    events: &mut Vec<AuditEvent>,
    report: &mut ImportReport,
) -> Result<()> {
    if events.is_empty() {
        return Ok(());
    }
    let appended = store.import_audit(events)?;
    report.audit_imported += appended;
    report.audit_already_present += events.len() as u64 - appended;
    events.clear();
    Ok(())
}

/// Embeds the batch's vector-less records that are not present yet, then writes the batch
/// in one transaction.
fn write_batch(
    store: &dyn OperatorStore,
    batch: &mut Vec<Pending>,
    embedder: &mut Lazy<'_>,
    report: &mut ImportReport,
) -> Result<()> {
    if batch.is_empty() {
        return Ok(());
    }
    let missing: Vec<usize> = (0..batch.len()).filter(|&i| batch[i].vector.is_none()).collect();
    if !missing.is_empty() {
        let ids: Vec<_> = missing.iter().map(|&i| batch[i].memory.id).collect();
        let present = store.ids_present(&ids)?;
        let todo: Vec<usize> =
            missing.iter().zip(present).filter(|(_, p)| !p).map(|(&i, _)| i).collect();
        let failed = |line: u64, imported: u64, e: &dyn std::fmt::Display| {
            Error::Embed(format!(
                "{} line {line}: the record has no vector and embedding it failed ({e}); \
                 nothing from this batch was imported ({} before it). Fix the embedder \
                 settings and run `spine import` again: records already imported are skipped",
                report.file,
                count(imported, "record")
            ))
        };
        if let Some(&first) = todo.first() {
            let e = embedder.get().map_err(|e| failed(batch[first].line, report.imported, &e))?;
            for chunk in todo.chunks(EMBED_CHUNK) {
                let texts: Vec<&str> =
                    chunk.iter().map(|&i| batch[i].memory.content.as_str()).collect();
                let vectors = e
                    .embed(&texts)
                    .map_err(|err| failed(batch[chunk[0]].line, report.imported, &err))?;
                if vectors.len() != chunk.len() {
                    return Err(Error::Embed(format!(
                        "the embedder returned {} vectors for {} texts",
                        vectors.len(),
                        chunk.len()
                    )));
                }
                for (&i, v) in chunk.iter().zip(vectors) {
                    batch[i].vector = Some((e.model_id().to_owned(), v));
                    batch[i].embedded = true;
                }
            }
        }
    }
    let items: Vec<ImportRecord<'_>> = batch
        .iter()
        .map(|p| ImportRecord {
            memory: p.memory.clone(),
            body: &p.body,
            vector: p.vector.as_ref().map(|(model, vector)| Embedding { model, vector }),
        })
        .collect();
    let outcomes = store.import_batch(&items)?;
    for (p, outcome) in batch.iter().zip(outcomes) {
        match outcome {
            ImportOutcome::Imported => {
                report.imported += 1;
                report.embedded += u64::from(p.embedded);
            }
            ImportOutcome::Present => report.already_present += 1,
            ImportOutcome::ShortIdTaken(holder) => report.short_id_taken.push(ShortIdClash {
                line: p.line,
                id: p.memory.id.to_string(),
                short_id: p.memory.short_id.to_string(),
                held_by: holder.to_string(),
            }),
        }
    }
    batch.clear();
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_are_counted_with_or_without_a_final_newline() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("f");
        for (text, n) in [("", 0), ("a\n", 1), ("a\nb", 2), ("a\nb\n", 2)] {
            std::fs::write(&p, text).unwrap();
            assert_eq!(count_lines(&p).unwrap(), n, "{text:?}");
        }
    }
}
