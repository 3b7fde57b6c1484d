//! `spine import FILE`: reads a file written by `spine export` back into the store.
//!
//! Streaming: one line and one batch in memory at a time. Each batch is parsed completely
//! before anything of it is written, then written in one transaction, so a malformed line
//! stops the import with nothing of its batch written. Resumable: a record whose id is
//! present already is skipped, so running the same import again continues where it stopped
//! (and changes nothing once complete). Each record's payload is stored exactly as in the
//! file, its vector exactly as in the file; a record without a vector is embedded with the
//! configured embedder (the same flags as the server) before its batch is written, so no
//! record is ever stored without one.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{Context, Result, bail};
use clap::Args;
use serde::Serialize;
use spine_core::Memory;
use spine_embed::Embedder;
use spine_ops::Progress as _;
use spine_store::{Embedding, ImportOutcome, ImportRecord, SqliteStore, Store, TransferStore};

use super::export::{End, FORMAT, FORMAT_VERSION, Line, parse_line};
use super::{OutputArgs, Progress, count};
use crate::embedder::{self, EmbedderArgs};

/// Texts per embedding call.
const EMBED_CHUNK: usize = 32;

/// `spine import`.
#[derive(Debug, Clone, Args)]
pub struct ImportArgs {
    /// A file written by `spine export`.
    #[arg(value_name = "FILE")]
    pub file: PathBuf,
    /// Records written per transaction.
    #[arg(long, default_value_t = 500, value_parser = clap::value_parser!(u64).range(1..=100_000))]
    pub batch: u64,
    #[command(flatten)]
    pub out: OutputArgs,
}

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

/// What `spine import` did.
#[derive(Debug, Clone, Default, Serialize)]
pub struct ImportSummary {
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
    /// Vectors in the store by embedder afterwards.
    pub embedders: BTreeMap<String, u64>,
}

/// A parsed record waiting for its batch to be written.
struct Pending {
    line: u64,
    body: String,
    memory: Memory,
    vector: Option<(String, Vec<f32>)>,
    embedded: bool,
}

/// The configured embedder, built the first time a record needs a vector: an import whose
/// records all carry vectors needs no model and makes no request.
struct LazyEmbedder<'a> {
    args: &'a EmbedderArgs,
    model_dir: &'a Path,
    built: Option<Arc<dyn Embedder>>,
}

impl LazyEmbedder<'_> {
    fn get(&mut self) -> Result<Arc<dyn Embedder>> {
        if let Some(e) = &self.built {
            return Ok(e.clone());
        }
        let e = embedder::build(self.args, self.model_dir)?;
        self.built = Some(e.clone());
        Ok(e)
    }
}

/// How many lines `path` has (for the progress total).
fn count_lines(path: &Path) -> Result<u64> {
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

/// `spine import` into the store `open` opens (once the file's header has been read, so a
/// file that is no export creates no store), embedding vector-less records with the
/// embedder `embedder` selects (the built-in model's files in `model_dir`).
pub fn run(
    open: impl FnOnce() -> Result<SqliteStore>,
    embedder: &EmbedderArgs,
    model_dir: &Path,
    args: &ImportArgs,
) -> Result<()> {
    let path = &args.file;
    let shown = path.display();
    let file = File::open(path).with_context(|| format!("opening {shown}"))?;
    let lines = count_lines(path).with_context(|| format!("reading {shown}"))?;
    let mut reader = BufReader::new(file);
    let mut embedder = LazyEmbedder { args: embedder, model_dir, built: None };
    let mut summary = ImportSummary { file: shown.to_string(), ..ImportSummary::default() };
    let mut batch: Vec<Pending> = Vec::new();
    let mut progress: Option<Progress> = None;
    let mut open = Some(open);
    let mut store: Option<SqliteStore> = None;
    let (mut text, mut line_no, mut header_seen, mut end): (String, u64, bool, Option<End>) =
        (String::new(), 0, false, None);

    loop {
        text.clear();
        let read = reader.read_line(&mut text).with_context(|| {
            format!("{shown} line {}: cannot be read (is it a text file?)", line_no + 1)
        })?;
        if read == 0 {
            break;
        }
        line_no += 1;
        let line = text.trim_end_matches(['\n', '\r']);
        if line.trim().is_empty() {
            continue;
        }
        let malformed = |what: &str, batch: &[Pending], summary: &ImportSummary| {
            let first = batch.first().map_or(line_no, |p| p.line);
            anyhow::anyhow!(
                "{shown} line {line_no}: {what}\nnothing from line {first} on was imported \
                 ({} imported before it); fix the file and run `spine import` again: \
                 records already imported are skipped",
                count(summary.imported, "record")
            )
        };
        if let Some(end) = end {
            return Err(malformed(
                &format!(
                    "a line after the end line (which closed {})",
                    count(end.records, "record")
                ),
                &batch,
                &summary,
            ));
        }
        let parsed = parse_line(line).map_err(|e| malformed(&e, &batch, &summary))?;
        match parsed {
            Line::Header(h) => {
                if header_seen {
                    return Err(malformed("a second header line", &batch, &summary));
                }
                if h.format != FORMAT {
                    return Err(malformed(
                        &format!("the header names format {:?}, not {FORMAT:?}", h.format),
                        &batch,
                        &summary,
                    ));
                }
                if h.version > FORMAT_VERSION {
                    bail!(
                        "{shown} was written by a newer spine (export format {}; this spine \
                         reads up to {FORMAT_VERSION}): import it with that version",
                        h.version
                    );
                }
                header_seen = true;
                summary.exported_at = h.exported_at;
                if let Some(open) = open.take() {
                    store = Some(open()?);
                }
                progress = Some(Progress::new("importing", lines.saturating_sub(2)));
            }
            _ if !header_seen => {
                return Err(malformed(
                    "the first line is not the header of a spine export (a file written by \
                     `spine export`)",
                    &batch,
                    &summary,
                ));
            }
            Line::Record { body, memory, vector } => {
                summary.records += 1;
                batch.push(Pending {
                    line: line_no,
                    body: body.to_owned(),
                    memory: *memory,
                    vector,
                    embedded: false,
                });
                if batch.len() as u64 >= args.batch {
                    let store = store.as_ref().expect("the store opens with the header");
                    write_batch(store, &mut batch, &mut embedder, &mut summary, &shown)?;
                    if let Some(p) = progress.as_mut() {
                        p.advance(args.batch);
                    }
                }
            }
            Line::End(e) => end = Some(e),
        }
    }
    let Some(store) = store else {
        bail!("{shown} is empty: not a file written by `spine export`");
    };
    let store = &store;
    let tail = batch.len() as u64;
    write_batch(store, &mut batch, &mut embedder, &mut summary, &shown)?;
    if let Some(p) = progress {
        let mut p = p;
        p.advance(tail);
        p.finish();
    }
    summary.complete = end.is_some();
    summary.embedders = store.embedder_models()?.into_iter().collect();

    args.out.print(&summary, || print_human(&summary))?;
    if summary.embedders.len() > 1 {
        let stamps: Vec<String> =
            summary.embedders.iter().map(|(m, n)| format!("{m} ({n})")).collect();
        eprintln!(
            "warning: the store now holds vectors of several embedders: {}. A server starts \
             with one only: run `spine reindex` with the embedder it will serve with.",
            stamps.join(", ")
        );
    }
    match end {
        None => bail!(
            "{shown} ends without its end line: the export was cut short. The {} it holds \
             were imported; export again and import the new file to get the rest",
            count(summary.records, "record")
        ),
        Some(e) if e.records != summary.records => bail!(
            "{shown}: the end line counts {} but the file holds {}: it was edited or damaged",
            count(e.records, "record"),
            summary.records
        ),
        Some(_) => {}
    }
    if !summary.short_id_taken.is_empty() {
        bail!(
            "{} not imported: another record in this store holds its short_id (listed \
             above). A short_id is never changed: resolve the clash (for example export, then \
             delete the other record) and import again",
            count(summary.short_id_taken.len() as u64, "record")
        );
    }
    Ok(())
}

/// Embeds the batch's vector-less records that are not present yet, then writes the batch
/// in one transaction.
fn write_batch(
    store: &SqliteStore,
    batch: &mut Vec<Pending>,
    embedder: &mut LazyEmbedder<'_>,
    summary: &mut ImportSummary,
    shown: &impl std::fmt::Display,
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
        let resume = |line: u64, imported: u64| {
            format!(
                "{shown} line {line}: the record has no vector and embedding it failed; \
                 nothing from this batch was imported ({} before it). Fix the embedder \
                 settings and run `spine import` again: records already imported are skipped",
                count(imported, "record")
            )
        };
        if let Some(&first) = todo.first() {
            let e = embedder.get().with_context(|| resume(batch[first].line, summary.imported))?;
            for chunk in todo.chunks(EMBED_CHUNK) {
                let texts: Vec<&str> =
                    chunk.iter().map(|&i| batch[i].memory.content.as_str()).collect();
                let vectors = e
                    .embed(&texts)
                    .with_context(|| resume(batch[chunk[0]].line, summary.imported))?;
                if vectors.len() != chunk.len() {
                    bail!(
                        "the embedder returned {} vectors for {} texts",
                        vectors.len(),
                        chunk.len()
                    );
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
                summary.imported += 1;
                summary.embedded += u64::from(p.embedded);
            }
            ImportOutcome::Present => summary.already_present += 1,
            ImportOutcome::ShortIdTaken(holder) => summary.short_id_taken.push(ShortIdClash {
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

fn print_human(s: &ImportSummary) {
    println!(
        "imported {} from {} (exported {}){}",
        count(s.imported, "record"),
        s.file,
        s.exported_at,
        match s.embedded {
            0 => String::new(),
            n => format!("; embedded {} that had no vector", count(n, "record")),
        }
    );
    if s.already_present > 0 {
        println!("skipped {} already present (same id)", count(s.already_present, "record"));
    }
    for c in &s.short_id_taken {
        println!(
            "not imported: line {}, record {}: short_id {} is held by record {}",
            c.line, c.id, c.short_id, c.held_by
        );
    }
    let stamps: Vec<String> = s.embedders.iter().map(|(m, n)| format!("{m}: {n}")).collect();
    if !stamps.is_empty() {
        println!("vectors in the store by embedder: {}", stamps.join(", "));
    }
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
