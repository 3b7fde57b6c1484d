//! Keeping the in-memory search index as current as the database.

use std::sync::{PoisonError, RwLock, RwLockReadGuard};

use rusqlite::{OptionalExtension, Transaction};

use super::index::{Index, Row};
use super::rows::*;
use crate::Result;

/// The index, at least as current as the database state `tx` sees, under a read lock:
/// searches read it side by side, and only one that finds it behind takes the write lock
/// to bring it up. It may be ahead of `tx` (another search synced to a later snapshot in
/// between): its proposals are then re-read in `tx` (a record `tx` does not have has no
/// vector there and drops out), and its filters see the newer state.
///
/// A few changed rows ([`PRE_READ_ROWS`]) are read from SQLite before the write lock is
/// taken: the searches waiting on the lock (every search of the process, once a writer
/// waits) wait only for the in-memory update, not for the reads. Rows read at `tx`'s
/// snapshot are the current state for an index anywhere between the state they were read
/// after and that snapshot (its version only grows), so they apply whoever brought the
/// index up meanwhile.
pub(super) fn read_synced<'a>(
    lock: &'a RwLock<Index>,
    tx: &Transaction<'_>,
) -> Result<RwLockReadGuard<'a, Index>> {
    let last = last_change(tx)?;
    let (synced, len) = {
        let index = lock.read().unwrap_or_else(PoisonError::into_inner);
        if index.synced.is_some_and(|s| s >= last) {
            return Ok(index);
        }
        (index.synced, index.len())
    };
    // Many searches may find it behind at once and each read the rows: only a few.
    let changes = match synced {
        Some(synced) => changes_since(tx, synced, row_by_row(len).min(PRE_READ_ROWS))?,
        None => None,
    };
    {
        let mut index = lock.write().unwrap_or_else(PoisonError::into_inner);
        match (index.synced, changes) {
            (Some(now), _) if now >= last => {}
            (Some(_), Some(changes)) => apply(&mut index, changes, last),
            _ => bring_up(tx, &mut index, last)?,
        }
    }
    Ok(lock.read().unwrap_or_else(PoisonError::into_inner))
}

/// The most changed records a search reads before taking the write lock ([`read_synced`]);
/// a larger change is read under the lock, once, as before.
const PRE_READ_ROWS: usize = 256;

/// The most changed records applied row by row to an index of `len` records; beyond it
/// the index loads in full.
fn row_by_row(len: usize) -> usize {
    len / 4 + 1000
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
        if let Some(changes) = changes_since(tx, synced, row_by_row(index.len()))? {
            apply(index, changes, last);
            return Ok(());
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

/// A record changed in the log, as a snapshot holds it: its rowid, and its row (with its
/// tags and vector) unless the snapshot no longer has it.
type Change = (i64, Option<Row>);

/// Every record changed after `synced` as `tx` sees it; `None` when the log was pruned past
/// `synced` or more than `most` records changed.
fn changes_since(tx: &Transaction<'_>, synced: i64, most: usize) -> Result<Option<Vec<Change>>> {
    let first: i64 = tx
        .prepare_cached("SELECT coalesce(min(seq), 0) FROM changes")?
        .query_row([], |r| r.get(0))?;
    if first > synced + 1 {
        return Ok(None);
    }
    let rowids: Vec<i64> = tx
        .prepare_cached("SELECT DISTINCT memory FROM changes WHERE seq > ?1")?
        .query_map([synced], |r| r.get(0))?
        .collect::<Result<_, _>>()?;
    if rowids.len() > most {
        return Ok(None);
    }
    let mut select = tx.prepare_cached(&format!("{ROW_SELECT} WHERE m.rowid = ?1"))?;
    let mut tags = tx.prepare_cached("SELECT tag FROM memory_tags WHERE memory = ?1")?;
    let mut vector = tx.prepare_cached("SELECT model, vec FROM vectors WHERE memory = ?1")?;
    let mut changes = Vec::with_capacity(rowids.len());
    for rowid in rowids {
        let t: Vec<String> = tags.query_map([rowid], |r| r.get(0))?.collect::<Result<_, _>>()?;
        let v: Option<(String, Vec<u8>)> =
            vector.query_row([rowid], |r| Ok((r.get(0)?, r.get(1)?))).optional()?;
        let v = v.map(|(model, blob)| (model, blob_to_vec(&blob)));
        let mut rows = select.query([rowid])?;
        let row = match rows.next()? {
            Some(r) => Some(read_row(r, t, v)?),
            None => None,
        };
        changes.push((rowid, row));
    }
    Ok(Some(changes))
}

/// Applies `changes`, read at the snapshot whose newest change is `last`.
fn apply(index: &mut Index, changes: Vec<Change>, last: i64) {
    for (rowid, row) in changes {
        match row {
            Some(row) => index.upsert(row),
            None => index.remove(rowid),
        }
    }
    index.synced = Some(last);
    metrics::gauge!("spine_index_records").set(index.len() as f64);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sqlite::SqliteStore;
    use crate::sqlite::tests::note;
    use crate::{Access, Embedding, Filter, NearestQuery, ScopeFilter, Store};
    use spine_core::{Caller, EpochSeconds, Memory, Timestamp};

    /// What a search of every record proposes: (rowid, id, archived), by rowid.
    fn proposed(index: &Index) -> Vec<(i64, spine_core::RecordId, bool)> {
        let (access, filter) = (Access::operator(), Filter::new(ScopeFilter::All));
        let q = NearestQuery {
            access: &access,
            filter: &filter,
            model: "m",
            vector: &[1.0, 0.0],
            now: Timestamp::from_micros(1_900_000_000_000_000),
            any: 10,
            active: 10,
            exclude: None,
        };
        let mut out: Vec<_> =
            index.propose(&q).iter().map(|p| (p.rowid, p.id, p.markers.archived)).collect();
        out.sort();
        out
    }

    /// The rows a search read before taking the write lock still apply when another search
    /// brought the index part of the way up in between: the result is the index a full load
    /// of the newer snapshot gives.
    #[test]
    fn changes_read_before_the_lock_apply_over_a_sync_made_meanwhile() {
        let dir = tempfile::tempdir().unwrap();
        let store = SqliteStore::open(dir.path()).unwrap();
        let insert = |m: &Memory| {
            store
                .insert(
                    &crate::Access::operator(),
                    m,
                    Embedding { model: "m", vector: &[1.0, 0.0] },
                )
                .unwrap();
        };
        let (a, b, c) = (note("a"), note("b"), note("c"));
        insert(&a);
        let synced = {
            let mut conn = store.read().unwrap();
            let tx = conn.transaction().unwrap();
            read_synced(&store.index, &tx).unwrap().synced.unwrap()
        };
        insert(&b);
        let mut mid = store.read().unwrap();
        let mid_tx = mid.transaction().unwrap();
        let mid_last = last_change(&mid_tx).unwrap();
        let owner = Access::owned(&Caller::anonymous());
        store.set_archived(&owner, &[b.id], Some(EpochSeconds::from_secs(1_800_000_001))).unwrap();
        insert(&c);
        let mut new = store.read().unwrap();
        let new_tx = new.transaction().unwrap();
        let last = last_change(&new_tx).unwrap();
        assert!(synced < mid_last && mid_last < last);

        // Read at the newer snapshot, as of the index's state when the search looked.
        assert!(changes_since(&new_tx, synced, 1).unwrap().is_none(), "more than one");
        let changes = changes_since(&new_tx, synced, PRE_READ_ROWS).unwrap().expect("two");
        assert_eq!(changes.len(), 2, "b (archived) and c");
        // Another search brings the index up to the older snapshot meanwhile: b, active.
        drop(read_synced(&store.index, &mid_tx).unwrap());
        let before: Vec<bool> =
            proposed(&store.index.read().unwrap()).iter().map(|p| p.2).collect();
        assert_eq!(before, vec![false, false]);
        apply(&mut store.index.write().unwrap(), changes, last);

        let index = store.index.read().unwrap();
        assert_eq!(index.synced, Some(last));
        let mut fresh = Index::default();
        bring_up(&new_tx, &mut fresh, last).unwrap();
        assert_eq!(proposed(&index), proposed(&fresh));
        let ids: Vec<_> = proposed(&index).iter().map(|p| (p.1, p.2)).collect();
        assert_eq!(ids, vec![(a.id, false), (b.id, true), (c.id, false)]);
    }
}
