//! Keeping the in-memory search index as current as the database.

use std::sync::{PoisonError, RwLock, RwLockReadGuard};

use rusqlite::{OptionalExtension, Transaction};

use super::index::Index;
use super::rows::*;
use crate::Result;

/// The index, at least as current as the database state `tx` sees, under a read lock:
/// searches read it side by side, and only one that finds it behind takes the write lock
/// to bring it up. It may be ahead of `tx` (another search synced to a later snapshot in
/// between): its proposals are then re-read in `tx` (a record `tx` does not have has no
/// vector there and drops out), and its filters see the newer state.
pub(super) fn read_synced<'a>(
    lock: &'a RwLock<Index>,
    tx: &Transaction<'_>,
) -> Result<RwLockReadGuard<'a, Index>> {
    let last = last_change(tx)?;
    {
        let index = lock.read().unwrap_or_else(PoisonError::into_inner);
        if index.synced.is_some_and(|s| s >= last) {
            return Ok(index);
        }
    }
    bring_up(tx, &mut lock.write().unwrap_or_else(PoisonError::into_inner), last)?;
    Ok(lock.read().unwrap_or_else(PoisonError::into_inner))
}

/// The newest change `tx` sees. The log's sequence never goes back (AUTOINCREMENT, and its
/// pruning keeps the newest rows).
fn last_change(tx: &Transaction<'_>) -> Result<i64> {
    let mut stmt = tx.prepare_cached("SELECT coalesce(max(seq), 0) FROM changes")?;
    Ok(stmt.query_row([], |r| r.get(0))?)
}

/// Brings `index` up to the database state `tx` sees: the changed rows since it last
/// looked, or everything when it never loaded, fell behind the change log, or too much
/// changed for row-by-row updates to pay. An index already at or past that state is left
/// as it is (a search with an older snapshot never takes it back).
pub(super) fn sync_index(tx: &Transaction<'_>, index: &mut Index) -> Result<()> {
    bring_up(tx, index, last_change(tx)?)
}

/// [`sync_index`], with the newest change `tx` sees already read.
fn bring_up(tx: &Transaction<'_>, index: &mut Index, last: i64) -> Result<()> {
    if let Some(synced) = index.synced {
        if synced >= last {
            return Ok(());
        }
        let first: i64 =
            tx.query_row("SELECT coalesce(min(seq), 0) FROM changes", [], |r| r.get(0))?;
        if synced < last && first <= synced + 1 {
            let rowids: Vec<i64> = tx
                .prepare_cached("SELECT DISTINCT memory FROM changes WHERE seq > ?1")?
                .query_map([synced], |r| r.get(0))?
                .collect::<Result<_, _>>()?;
            if rowids.len() <= index.len() / 4 + 1000 {
                let mut select = tx.prepare_cached(&format!("{ROW_SELECT} WHERE m.rowid = ?1"))?;
                let mut tags =
                    tx.prepare_cached("SELECT tag FROM memory_tags WHERE memory = ?1")?;
                let mut vector =
                    tx.prepare_cached("SELECT model, vec FROM vectors WHERE memory = ?1")?;
                for rowid in rowids {
                    let t: Vec<String> =
                        tags.query_map([rowid], |r| r.get(0))?.collect::<Result<_, _>>()?;
                    let v: Option<(String, Vec<u8>)> =
                        vector.query_row([rowid], |r| Ok((r.get(0)?, r.get(1)?))).optional()?;
                    let v = v.map(|(model, blob)| (model, blob_to_vec(&blob)));
                    let mut rows = select.query([rowid])?;
                    match rows.next()? {
                        Some(r) => index.upsert(read_row(r, t, v)?),
                        None => index.remove(rowid),
                    }
                }
                index.synced = Some(last);
                metrics::gauge!("spine_index_records").set(index.len() as f64);
                return Ok(());
            }
        }
    }
    // A full load reads the three tables in rowid order side by side (a merge join): each
    // is one sequential scan, where a join would seek the vectors' B-tree once per record.
    let started = std::time::Instant::now();
    let mut fresh = Index::default();
    fresh.bulk_loading = true;
    let mut tag_stmt = tx.prepare("SELECT memory, tag FROM memory_tags ORDER BY memory")?;
    let mut tag_rows = tag_stmt.query([])?;
    let mut next_tag: Option<(i64, String)> = match tag_rows.next()? {
        Some(r) => Some((r.get(0)?, r.get(1)?)),
        None => None,
    };
    let mut vec_stmt = tx.prepare("SELECT memory, model, vec FROM vectors ORDER BY memory")?;
    let mut vec_rows = vec_stmt.query([])?;
    let mut next_vec: Option<(i64, String, Vec<f32>)> = match vec_rows.next()? {
        Some(r) => Some((r.get(0)?, r.get(1)?, blob_to_vec(&r.get::<_, Vec<u8>>(2)?))),
        None => None,
    };
    let mut stmt = tx.prepare(&format!("{ROW_SELECT} ORDER BY m.rowid"))?;
    let mut rows = stmt.query([])?;
    while let Some(r) = rows.next()? {
        let rowid: i64 = r.get(0)?;
        let mut tags = Vec::new();
        while let Some((memory, tag)) = next_tag.take() {
            if memory > rowid {
                next_tag = Some((memory, tag));
                break;
            }
            if memory == rowid {
                tags.push(tag);
            }
            next_tag = match tag_rows.next()? {
                Some(t) => Some((t.get(0)?, t.get(1)?)),
                None => None,
            };
        }
        let mut vector = None;
        while let Some((memory, model, v)) = next_vec.take() {
            if memory > rowid {
                next_vec = Some((memory, model, v));
                break;
            }
            if memory == rowid {
                vector = Some((model, v));
            }
            next_vec = match vec_rows.next()? {
                Some(t) => Some((t.get(0)?, t.get(1)?, blob_to_vec(&t.get::<_, Vec<u8>>(2)?))),
                None => None,
            };
        }
        fresh.upsert(read_row(r, tags, vector)?);
    }
    fresh.bulk_loading = false;
    fresh.recentre_all();
    fresh.synced = Some(last);
    tracing::debug!(
        records = fresh.len(),
        ms = started.elapsed().as_millis() as u64,
        "search index loaded"
    );
    metrics::gauge!("spine_index_load_seconds").set(started.elapsed().as_secs_f64());
    metrics::gauge!("spine_index_records").set(fresh.len() as f64);
    *index = fresh;
    Ok(())
}
