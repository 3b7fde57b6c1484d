//! The embedded backend: one SQLite file in the data directory.
//!
//! Durability: WAL with `synchronous = FULL`, so a write acknowledged to the caller has been
//! fsynced to the log and survives the process (or the machine) dying right after. Every
//! write that touches several tables runs in one transaction, so a crash leaves either the
//! old or the new state, never a half-written record.

use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard};

use rusqlite::types::Value;
use rusqlite::{Connection, OptionalExtension, Transaction, params, params_from_iter};
use spine_core::{
    Category, Citation, EpochSeconds, IdRef, Memory, RecordId, SCHEMA_VERSION, Scope, ShortId,
    StateMarkers, Timestamp,
};

use crate::index::{Index, Row};
use crate::{
    Access, Cursor, Embedding, Filter, Gate, IdempotencyEntry, NearestQuery, Neighbour, Result,
    ScopeFilter, Store, StoreError, SupersedeRejection, TagCount,
};

/// SQL that stamps the current schema version on a payload edited in place, never lowering
/// it (SPEC Versioning 2 and 4). `body` is the column being updated.
pub(crate) const STAMP_VERSION: &str =
    "'$.schema_version', max(coalesce(json_extract(body, '$.schema_version'), 0), ?)";

/// The database file name inside the data directory.
pub const DB_FILE: &str = "spine.db";

/// Schema migrations, applied in order; `PRAGMA user_version` records how many ran.
/// Append only: never edit a step that has shipped.
const MIGRATIONS: &[&str] = &[
    // 1: records, tags, vectors.
    "CREATE TABLE memories (
        rowid INTEGER PRIMARY KEY,
        id TEXT NOT NULL UNIQUE,
        short_id TEXT NOT NULL,
        owner TEXT,
        visibility TEXT NOT NULL,
        scope TEXT NOT NULL,
        category TEXT NOT NULL,
        created_at INTEGER NOT NULL,
        not_before INTEGER,
        not_after INTEGER,
        archived_at INTEGER,
        superseded_by TEXT,
        body TEXT NOT NULL
    );
    CREATE INDEX memories_short_id ON memories(short_id);
    CREATE INDEX memories_scope_recent ON memories(scope, created_at DESC, id DESC);
    CREATE INDEX memories_recent ON memories(created_at DESC, id DESC);
    CREATE INDEX memories_owner_scope ON memories(owner, scope);
    CREATE TABLE memory_tags (
        memory INTEGER NOT NULL REFERENCES memories(rowid) ON DELETE CASCADE,
        tag TEXT NOT NULL,
        PRIMARY KEY (memory, tag)
    ) WITHOUT ROWID;
    CREATE INDEX memory_tags_tag ON memory_tags(tag, memory);
    CREATE TABLE vectors (
        memory INTEGER PRIMARY KEY REFERENCES memories(rowid) ON DELETE CASCADE,
        model TEXT NOT NULL,
        dims INTEGER NOT NULL,
        vec BLOB NOT NULL
    );",
    // 2: supersede_memory idempotency keys, per owner.
    "CREATE TABLE idempotency (
        owner TEXT NOT NULL,
        key TEXT NOT NULL,
        fingerprint TEXT NOT NULL,
        id TEXT NOT NULL,
        short_id TEXT NOT NULL,
        PRIMARY KEY (owner, key)
    ) WITHOUT ROWID;",
    // 3: the lexical index: one row per record (same rowid) holding its
    // `spine_core::lexical` terms, separated by spaces. A term holds only alphanumerics and
    // `lexical::JOINERS`; the `ascii` tokenizer with every joiner as a token character keeps
    // each term one FTS5 token, so FTS5 matches exactly the terms the tokenizer produced.
    // Contentless (the terms are derived from the payload); a trigger follows deletes.
    // Superseded by pool-local BM25 in the service and dropped by step 6.
    r#"CREATE VIRTUAL TABLE memory_fts USING fts5(
        terms,
        content = '',
        contentless_delete = 1,
        tokenize = "ascii tokenchars '_-./\:'"
    );
    CREATE TRIGGER memories_fts_delete AFTER DELETE ON memories BEGIN
        DELETE FROM memory_fts WHERE rowid = old.rowid;
    END;"#,
    // 4: the start-up embedder check reads the distinct vector models without a scan.
    "CREATE INDEX vectors_model ON vectors(model);",
    // 5: the change log the in-memory index follows (`SqliteStore::sync_index`): the rowid
    // of every record written, deleted or re-embedded, in commit order. Updates that touch
    // only the payload (touch: access counts) are not logged; every indexed field has its
    // own column, so a change to one names a column below. The log keeps the last
    // 100 000 entries; an index further behind reloads in full.
    "CREATE TABLE changes (seq INTEGER PRIMARY KEY AUTOINCREMENT, memory INTEGER NOT NULL);
    CREATE TRIGGER changes_prune AFTER INSERT ON changes BEGIN
        DELETE FROM changes WHERE seq <= new.seq - 100000;
    END;
    CREATE TRIGGER changes_memory_insert AFTER INSERT ON memories BEGIN
        INSERT INTO changes (memory) VALUES (new.rowid);
    END;
    CREATE TRIGGER changes_memory_update AFTER UPDATE OF id, owner, visibility, scope, category,
        created_at, not_before, not_after, archived_at, superseded_by ON memories BEGIN
        INSERT INTO changes (memory) VALUES (new.rowid);
    END;
    CREATE TRIGGER changes_memory_delete AFTER DELETE ON memories BEGIN
        INSERT INTO changes (memory) VALUES (old.rowid);
    END;
    CREATE TRIGGER changes_vector_insert AFTER INSERT ON vectors BEGIN
        INSERT INTO changes (memory) VALUES (new.memory);
    END;
    CREATE TRIGGER changes_vector_update AFTER UPDATE ON vectors BEGIN
        INSERT INTO changes (memory) VALUES (new.memory);
    END;",
    // 6: lexical scoring moved to the service (BM25 over the search pool, see
    // `spine_service::rank::bm25`); the FTS5 index of step 3 is no longer read.
    "DROP TRIGGER memories_fts_delete;
    DROP TABLE memory_fts;",
    // 7: the extract-before-delete gate of `spine-review purge`: which records `spine export`
    // wrote out, and a digest of each as written (`SqliteStore::record_digest`); a record
    // changed since its export no longer passes the gate.
    "CREATE TABLE exported (
        id TEXT PRIMARY KEY,
        digest TEXT NOT NULL,
        exported_at INTEGER NOT NULL,
        file TEXT NOT NULL
    ) WITHOUT ROWID;",
];

/// The indexed fields of a record, for `Row`; append `WHERE ...` or `ORDER BY ...`.
const ROW_SELECT: &str = "SELECT m.rowid, m.id, m.owner, m.visibility = 'shared', m.scope,
        m.category, CASE WHEN m.category = 'discovery' THEN json_extract(m.body, '$.kind') END,
        m.created_at, m.archived_at IS NOT NULL, m.superseded_by IS NOT NULL, m.not_before,
        m.not_after
     FROM memories m";

fn read_row(
    r: &rusqlite::Row<'_>,
    tags: Vec<String>,
    vector: Option<(String, Vec<f32>)>,
) -> Result<Row> {
    let id: String = r.get(1)?;
    Ok(Row {
        rowid: r.get(0)?,
        id: RecordId::parse(&id).ok_or_else(|| StoreError::Corrupt(format!("bad id {id}")))?,
        owner: r.get(2)?,
        shared: r.get(3)?,
        scope: r.get(4)?,
        category: r.get(5)?,
        kind: r.get(6)?,
        created_at: r.get(7)?,
        markers: StateMarkers {
            archived: r.get(8)?,
            superseded: r.get(9)?,
            not_before: r.get::<_, Option<i64>>(10)?.map(EpochSeconds::from_secs),
            not_after: r.get::<_, Option<i64>>(11)?.map(EpochSeconds::from_secs),
        },
        tags,
        vector,
    })
}

/// SQLite-backed [`Store`].
///
/// One connection behind a mutex: SQLite serialises writers anyway. Vector search goes
/// through the in-memory [`Index`], which follows the `changes` log: before each search the
/// index applies whatever was committed since it last looked — by this process or any other
/// on the same data directory — so it is always as current as the database.
pub struct SqliteStore {
    conn: Mutex<Connection>,
    path: PathBuf,
    index: Mutex<Index>,
}

impl SqliteStore {
    /// Opens (creating if needed) the store in `data_dir`, applying pending migrations.
    pub fn open(data_dir: &Path) -> Result<Self> {
        std::fs::create_dir_all(data_dir).map_err(|e| {
            StoreError::Io(format!("cannot create data directory {}: {e}", data_dir.display()))
        })?;
        let path = data_dir.join(DB_FILE);
        let conn = Connection::open(&path)?;
        conn.busy_timeout(std::time::Duration::from_secs(10))?;
        conn.pragma_update(None, "journal_mode", "WAL")?;
        conn.pragma_update(None, "synchronous", "FULL")?;
        conn.pragma_update(None, "foreign_keys", "ON")?;
        let store = SqliteStore { conn: Mutex::new(conn), path, index: Mutex::default() };
        store.migrate()?;
        Ok(store)
    }

    /// Loads the search index now rather than on the first search (a server calls this on a
    /// background thread at start-up; at a million records the load takes seconds).
    pub fn warm_index(&self) -> Result<()> {
        let mut conn = self.lock();
        let tx = conn.transaction()?;
        let mut index = self.index.lock().unwrap_or_else(|p| p.into_inner());
        sync_index(&tx, &mut index)
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    pub(crate) fn lock(&self) -> MutexGuard<'_, Connection> {
        // A panic while holding the lock cannot leave SQLite half-written (transactions
        // roll back on drop), so a poisoned lock is safe to reuse.
        self.conn.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn migrate(&self) -> Result<()> {
        let mut conn = self.lock();
        let tx = conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
        let applied: i64 = tx.pragma_query_value(None, "user_version", |r| r.get(0))?;
        let applied = usize::try_from(applied).unwrap_or(usize::MAX);
        if applied > MIGRATIONS.len() {
            return Err(StoreError::Io(format!(
                "the database at {} was written by a newer spine (schema {applied}, this binary knows {}); upgrade spine",
                self.path.display(),
                MIGRATIONS.len()
            )));
        }
        for (i, step) in MIGRATIONS.iter().enumerate().skip(applied) {
            tx.execute_batch(step)?;
            tx.pragma_update(None, "user_version", (i + 1) as i64)?;
            tracing::info!(step = i + 1, "applied store migration");
        }
        tx.commit()?;
        Ok(())
    }
}

pub(crate) fn decode(body: &str) -> Result<Memory> {
    serde_json::from_str(body).map_err(|e| StoreError::Corrupt(e.to_string()))
}

pub(crate) fn encode(m: &Memory) -> Result<String> {
    serde_json::to_string(m).map_err(|e| StoreError::Corrupt(e.to_string()))
}

pub(crate) fn vec_to_blob(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

pub(crate) fn blob_to_vec(b: &[u8]) -> Vec<f32> {
    b.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect()
}

fn secs(v: Option<EpochSeconds>) -> Option<i64> {
    v.map(EpochSeconds::as_secs)
}

/// Writes the indexed columns and tags of `m` at `rowid` (payload already encoded).
pub(crate) fn write_row(tx: &Transaction<'_>, m: &Memory, body: &str) -> Result<i64> {
    tx.execute(
        "INSERT INTO memories (id, short_id, owner, visibility, scope, category, created_at,
            not_before, not_after, archived_at, superseded_by, body)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12)
         ON CONFLICT(id) DO UPDATE SET short_id = excluded.short_id, owner = excluded.owner,
            visibility = excluded.visibility, scope = excluded.scope,
            category = excluded.category, created_at = excluded.created_at,
            not_before = excluded.not_before, not_after = excluded.not_after,
            archived_at = excluded.archived_at, superseded_by = excluded.superseded_by,
            body = excluded.body",
        params![
            m.id.to_string(),
            m.short_id.as_str(),
            m.owner,
            m.visibility.as_str(),
            m.scope.as_str(),
            m.category.as_str(),
            m.created_at.as_micros(),
            secs(m.not_before),
            secs(m.not_after),
            secs(m.archived_at),
            m.superseded_by.map(|s| s.to_string()),
            body,
        ],
    )?;
    let rowid: i64 =
        tx.query_row("SELECT rowid FROM memories WHERE id = ?1", [m.id.to_string()], |r| r.get(0))?;
    tx.execute("DELETE FROM memory_tags WHERE memory = ?1", [rowid])?;
    let mut ins =
        tx.prepare_cached("INSERT OR IGNORE INTO memory_tags (memory, tag) VALUES (?1, ?2)")?;
    for tag in &m.tags {
        ins.execute(params![rowid, tag])?;
    }
    Ok(rowid)
}

pub(crate) fn write_vector(tx: &Transaction<'_>, rowid: i64, e: Embedding<'_>) -> Result<()> {
    tx.execute(
        "INSERT INTO vectors (memory, model, dims, vec) VALUES (?1, ?2, ?3, ?4)
         ON CONFLICT(memory) DO UPDATE SET model = excluded.model, dims = excluded.dims,
            vec = excluded.vec",
        params![rowid, e.model, e.vector.len() as i64, vec_to_blob(e.vector)],
    )?;
    Ok(())
}

/// A WHERE clause under construction with its positional parameters.
pub(crate) struct Where {
    pub(crate) sql: String,
    pub(crate) params: Vec<Value>,
}

impl Where {
    pub(crate) fn new() -> Self {
        Where { sql: String::from("1 = 1"), params: Vec::new() }
    }

    pub(crate) fn and(&mut self, clause: &str, params: impl IntoIterator<Item = Value>) {
        self.sql.push_str(" AND (");
        self.sql.push_str(clause);
        self.sql.push(')');
        self.params.extend(params);
    }

    /// SPEC Authentication 4: own + shared when authenticated, own (ownerless) when
    /// anonymous; a NULL owner (legacy record, no owner key) never matches.
    pub(crate) fn access(&mut self, a: &Access) {
        if a.include_shared {
            self.and(
                "m.owner IS NOT NULL AND (m.owner = ? OR m.visibility = 'shared')",
                [Value::Text(a.owner.clone())],
            );
        } else {
            self.and("m.owner IS NOT NULL AND m.owner = ?", [Value::Text(a.owner.clone())]);
        }
    }

    pub(crate) fn filter(&mut self, f: &Filter) {
        if let ScopeFilter::One(scope) = &f.scope {
            self.and("m.scope = ?", [Value::Text(scope.as_str().to_owned())]);
        }
        let mut tags: Vec<&String> = f.tags_all.iter().collect();
        tags.sort();
        tags.dedup();
        if !tags.is_empty() {
            let marks = vec!["?"; tags.len()].join(", ");
            let mut p: Vec<Value> = tags.iter().map(|t| Value::Text((*t).clone())).collect();
            p.push(Value::Integer(tags.len() as i64));
            self.and(
                &format!(
                    "(SELECT COUNT(*) FROM memory_tags t WHERE t.memory = m.rowid AND t.tag IN ({marks})) = ?"
                ),
                p,
            );
        }
        if !f.categories_any.is_empty() {
            let marks = vec!["?"; f.categories_any.len()].join(", ");
            self.and(
                &format!("m.category IN ({marks})"),
                f.categories_any.iter().map(|c| Value::Text(c.clone())),
            );
        }
        if !f.categories_none.is_empty() {
            let marks = vec!["?"; f.categories_none.len()].join(", ");
            self.and(
                &format!("m.category NOT IN ({marks})"),
                f.categories_none.iter().map(|c| Value::Text(c.as_str().into())),
            );
        }
        if let Some(t) = f.created_after {
            self.and("m.created_at >= ?", [Value::Integer(t.as_micros())]);
        }
        if let Some(t) = f.created_before {
            self.and("m.created_at < ?", [Value::Integer(t.as_micros())]);
        }
        if f.windowed_only {
            self.and("m.not_before IS NOT NULL OR m.not_after IS NOT NULL", []);
        }
        if f.exclude_archived_superseded {
            self.and("m.archived_at IS NULL AND m.superseded_by IS NULL", []);
        }
        if let Some(kind) = &f.kind {
            self.and("json_extract(m.body, '$.kind') = ?", [Value::Text(kind.clone())]);
        }
    }

    /// The recall gate in SQL; mirrors `spine_core::derive_states` (half-open window in
    /// whole seconds, expired suppressing scheduled).
    pub(crate) fn gate(&mut self, g: Gate) {
        let now = |t: Timestamp| Value::Integer(t.to_epoch_seconds().as_secs());
        const NOT_EXPIRED: &str = "(m.not_after IS NULL OR m.not_after > ?)";
        match g {
            Gate::Off => {}
            Gate::ActiveAt(t) => self.and(
                &format!(
                    "m.archived_at IS NULL AND m.superseded_by IS NULL AND {NOT_EXPIRED} \
                     AND (m.not_before IS NULL OR m.not_before <= ?)"
                ),
                [now(t), now(t)],
            ),
            Gate::ScheduledAt(t) => self.and(
                &format!("{NOT_EXPIRED} AND m.not_before IS NOT NULL AND m.not_before > ?"),
                [now(t), now(t)],
            ),
            Gate::ExpiredAt(t) => {
                self.and("m.not_after IS NOT NULL AND m.not_after <= ?", [now(t)])
            }
            Gate::ScheduledOrExpiredAt(t) => self.and(
                &format!(
                    "(m.not_after IS NOT NULL AND m.not_after <= ?) OR \
                     ({NOT_EXPIRED} AND m.not_before IS NOT NULL AND m.not_before > ?)"
                ),
                [now(t), now(t), now(t)],
            ),
        }
    }
}

pub(crate) fn resolve_in(conn: &Connection, access: &Access, id: &IdRef) -> Result<Option<Memory>> {
    let mut w = Where::new();
    match id {
        IdRef::Id(id) => w.and("m.id = ?", [Value::Text(id.to_string())]),
        IdRef::Short(s) => w.and("m.short_id = ?", [Value::Text(s.as_str().to_owned())]),
    }
    w.access(access);
    let mut stmt =
        conn.prepare(&format!("SELECT m.body FROM memories m WHERE {} LIMIT 2", w.sql))?;
    let bodies: Vec<String> =
        stmt.query_map(params_from_iter(w.params), |r| r.get(0))?.collect::<Result<_, _>>()?;
    // SPEC Errors 2: an ambiguous short_id is indistinguishable from a missing record.
    match bodies.as_slice() {
        [one] => Ok(Some(decode(one)?)),
        _ => Ok(None),
    }
}

impl Store for SqliteStore {
    fn insert(&self, m: &Memory, embedding: Embedding<'_>) -> Result<()> {
        let body = encode(m)?;
        let mut conn = self.lock();
        let tx = conn.transaction()?;
        let rowid = write_row(&tx, m, &body)?;
        write_vector(&tx, rowid, embedding)?;
        tx.commit()?;
        Ok(())
    }

    fn insert_batch(&self, items: &[(Memory, Embedding<'_>)]) -> Result<()> {
        let mut conn = self.lock();
        let tx = conn.transaction()?;
        for (m, embedding) in items {
            let rowid = write_row(&tx, m, &encode(m)?)?;
            write_vector(&tx, rowid, *embedding)?;
        }
        tx.commit()?;
        Ok(())
    }

    fn short_id_taken(&self, short: &ShortId) -> Result<bool> {
        let conn = self.lock();
        Ok(conn
            .query_row(
                "SELECT 1 FROM memories WHERE short_id = ?1 LIMIT 1",
                [short.as_str()],
                |_| Ok(()),
            )
            .optional()?
            .is_some())
    }

    fn resolve(&self, access: &Access, id: &IdRef) -> Result<Option<Memory>> {
        resolve_in(&self.lock(), access, id)
    }

    fn replace(
        &self,
        access: &Access,
        m: &Memory,
        embedding: Option<Embedding<'_>>,
    ) -> Result<bool> {
        let body = encode(m)?;
        let mut conn = self.lock();
        let tx = conn.transaction()?;
        let owned: Option<i64> = tx
            .query_row(
                "SELECT rowid FROM memories WHERE id = ?1 AND owner IS NOT NULL AND owner = ?2",
                params![m.id.to_string(), access.owner],
                |r| r.get(0),
            )
            .optional()?;
        if owned.is_none() {
            return Ok(false);
        }
        let rowid = write_row(&tx, m, &body)?;
        if let Some(e) = embedding {
            write_vector(&tx, rowid, e)?;
        }
        tx.commit()?;
        Ok(true)
    }

    fn touch(&self, id: &RecordId, at: Timestamp) -> Result<()> {
        let conn = self.lock();
        conn.execute(
            "UPDATE memories SET body = json_set(body,
                '$.access_count', coalesce(json_extract(body, '$.access_count'), 0) + 1,
                '$.last_accessed_at', ?2)
             WHERE id = ?1",
            params![id.to_string(), at.to_rfc3339()],
        )?;
        Ok(())
    }

    fn delete(&self, access: &Access, id: &RecordId) -> Result<bool> {
        let conn = self.lock();
        let n = conn.execute(
            "DELETE FROM memories WHERE id = ?1 AND owner IS NOT NULL AND owner = ?2",
            params![id.to_string(), access.owner],
        )?;
        Ok(n > 0)
    }

    fn delete_scope(&self, access: &Access, scope: &Scope) -> Result<u64> {
        let conn = self.lock();
        let n = conn.execute(
            "DELETE FROM memories WHERE scope = ?1 AND owner IS NOT NULL AND owner = ?2",
            params![scope.as_str(), access.owner],
        )?;
        Ok(n as u64)
    }

    fn nearest(&self, q: &NearestQuery<'_>) -> Result<Vec<Neighbour>> {
        let mut conn = self.lock();
        // One read transaction: the index is synced to, and re-scored from, one snapshot.
        let tx = conn.transaction()?;
        let mut index = self.index.lock().unwrap_or_else(|p| p.into_inner());
        sync_index(&tx, &mut index)?;
        let proposals = index.propose(q);
        drop(index);
        let mut stmt = tx.prepare_cached("SELECT model, vec FROM vectors WHERE memory = ?1")?;
        let mut scored = Vec::with_capacity(proposals.len());
        for p in proposals {
            let row: Option<(String, Vec<u8>)> =
                stmt.query_row([p.rowid], |r| Ok((r.get(0)?, r.get(1)?))).optional()?;
            if let Some((model, blob)) = row.filter(|(m, _)| m == q.model) {
                debug_assert_eq!(model, q.model);
                scored.push((spine_core::cosine(q.vector, &blob_to_vec(&blob)), p));
            }
        }
        scored.sort_by(|a, b| b.0.total_cmp(&a.0).then_with(|| b.1.id.cmp(&a.1.id)));
        let (mut seen, mut seen_active) = (0, 0);
        let mut out = Vec::new();
        for (score, p) in scored {
            let states = p.markers.derive(q.now);
            let active = states.is_empty();
            let wanted = seen < q.any || (active && seen_active < q.active);
            seen += 1;
            seen_active += usize::from(active);
            if wanted {
                out.push(Neighbour { id: p.id, score, states });
            }
        }
        Ok(out)
    }

    fn get_many(&self, ids: &[RecordId]) -> Result<Vec<Memory>> {
        let conn = self.lock();
        let mut stmt = conn.prepare_cached("SELECT body FROM memories WHERE id = ?1")?;
        let mut out = Vec::with_capacity(ids.len());
        for id in ids {
            if let Some(body) =
                stmt.query_row([id.to_string()], |r| r.get::<_, String>(0)).optional()?
            {
                out.push(decode(&body)?);
            }
        }
        Ok(out)
    }

    fn list(
        &self,
        access: &Access,
        filter: &Filter,
        gate: Gate,
        cursor: Option<Cursor>,
        offset: usize,
        limit: usize,
    ) -> Result<Vec<Memory>> {
        let mut w = Where::new();
        w.access(access);
        w.filter(filter);
        w.gate(gate);
        if let Some(c) = cursor {
            w.and(
                "m.created_at < ? OR (m.created_at = ? AND m.id < ?)",
                [
                    Value::Integer(c.created_at.as_micros()),
                    Value::Integer(c.created_at.as_micros()),
                    Value::Text(c.id.to_string()),
                ],
            );
        }
        w.params.push(Value::Integer(limit as i64));
        w.params.push(Value::Integer(offset as i64));
        let conn = self.lock();
        let mut stmt = conn.prepare(&format!(
            "SELECT m.body FROM memories m WHERE {} ORDER BY m.created_at DESC, m.id DESC
             LIMIT ? OFFSET ?",
            w.sql
        ))?;
        let bodies: Vec<String> =
            stmt.query_map(params_from_iter(w.params), |r| r.get(0))?.collect::<Result<_, _>>()?;
        bodies.iter().map(|b| decode(b)).collect()
    }

    fn count(&self, access: &Access, filter: &Filter, gate: Gate) -> Result<u64> {
        let mut w = Where::new();
        w.access(access);
        w.filter(filter);
        w.gate(gate);
        let conn = self.lock();
        let n: i64 = conn.query_row(
            &format!("SELECT count(*) FROM memories m WHERE {}", w.sql),
            params_from_iter(w.params),
            |r| r.get(0),
        )?;
        Ok(u64::try_from(n).unwrap_or(0))
    }

    fn scopes(&self, access: &Access, filter: &Filter, limit: usize) -> Result<Vec<String>> {
        // From the search index: a scan of its columns takes milliseconds where SQL's
        // DISTINCT over the owner predicate reads every row (seconds at a million records).
        let mut conn = self.lock();
        let tx = conn.transaction()?;
        let mut index = self.index.lock().unwrap_or_else(|p| p.into_inner());
        sync_index(&tx, &mut index)?;
        let mut scopes = index.scopes(access, filter);
        scopes.truncate(limit);
        Ok(scopes)
    }

    fn tag_counts(
        &self,
        access: &Access,
        scope: Option<&Scope>,
        gate: Gate,
        limit: usize,
    ) -> Result<Vec<TagCount>> {
        let mut w = Where::new();
        w.access(access);
        if let Some(s) = scope {
            w.and("m.scope = ?", [Value::Text(s.as_str().to_owned())]);
        }
        w.gate(gate);
        w.params.push(Value::Integer(limit as i64));
        let conn = self.lock();
        let mut stmt = conn.prepare(&format!(
            "SELECT t.tag, COUNT(*) AS n FROM memory_tags t JOIN memories m ON m.rowid = t.memory
             WHERE {} GROUP BY t.tag ORDER BY n DESC, t.tag ASC LIMIT ?",
            w.sql
        ))?;
        let rows = stmt
            .query_map(params_from_iter(w.params), |r| {
                Ok(TagCount { tag: r.get(0)?, count: r.get::<_, i64>(1)? as u64 })
            })?
            .collect::<Result<_, _>>()?;
        Ok(rows)
    }

    fn supersede(
        &self,
        access: &Access,
        new: &Memory,
        embedding: Embedding<'_>,
        targets: &[RecordId],
        idempotency: Option<&IdempotencyEntry>,
    ) -> Result<std::result::Result<(), SupersedeRejection>> {
        let body = encode(new)?;
        let mut conn = self.lock();
        let tx = conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
        let mut rejection = SupersedeRejection::default();
        {
            let mut check = tx.prepare_cached(
                "SELECT category, superseded_by FROM memories
                 WHERE id = ?1 AND owner IS NOT NULL AND owner = ?2",
            )?;
            for t in targets {
                let row: Option<(String, Option<String>)> = check
                    .query_row(params![t.to_string(), access.owner], |r| Ok((r.get(0)?, r.get(1)?)))
                    .optional()?;
                match row {
                    None => rejection.not_found.push(*t),
                    Some((category, _)) if category == Category::Rule.as_str() => {
                        rejection.rules.push(*t)
                    }
                    Some((_, Some(_))) => rejection.already_superseded.push(*t),
                    Some(_) => {}
                }
            }
        }
        if !rejection.is_empty() {
            return Ok(Err(rejection));
        }
        let rowid = write_row(&tx, new, &body)?;
        write_vector(&tx, rowid, embedding)?;
        {
            let mut stamp = tx.prepare_cached(&format!(
                "UPDATE memories SET superseded_by = ?1,
                    body = json_set(body, '$.superseded_by', ?1, {STAMP_VERSION})
                 WHERE id = ?3"
            ))?;
            for t in targets {
                stamp.execute(params![new.id.to_string(), SCHEMA_VERSION, t.to_string()])?;
            }
        }
        if let Some(e) = idempotency {
            tx.execute(
                "INSERT INTO idempotency (owner, key, fingerprint, id, short_id)
                 VALUES (?1, ?2, ?3, ?4, ?5)",
                params![access.owner, e.key, e.fingerprint, e.id.to_string(), e.short_id.as_str()],
            )?;
        }
        tx.commit()?;
        Ok(Ok(()))
    }

    fn idempotency(&self, access: &Access, key: &str) -> Result<Option<IdempotencyEntry>> {
        let conn = self.lock();
        let row: Option<(String, String, String)> = conn
            .query_row(
                "SELECT fingerprint, id, short_id FROM idempotency WHERE owner = ?1 AND key = ?2",
                params![access.owner, key],
                |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
            )
            .optional()?;
        row.map(|(fingerprint, id, short)| {
            Ok(IdempotencyEntry {
                key: key.to_owned(),
                fingerprint,
                id: RecordId::parse(&id)
                    .ok_or_else(|| StoreError::Corrupt(format!("bad id {id}")))?,
                short_id: ShortId::parse(&short)
                    .ok_or_else(|| StoreError::Corrupt(format!("bad short id {short}")))?,
            })
        })
        .transpose()
    }

    fn set_archived(
        &self,
        access: &Access,
        ids: &[RecordId],
        at: Option<EpochSeconds>,
    ) -> Result<Vec<bool>> {
        let mut conn = self.lock();
        let tx = conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
        let mut out = Vec::with_capacity(ids.len());
        {
            let mut stmt = match at {
                Some(_) => tx.prepare_cached(&format!(
                    "UPDATE memories SET archived_at = ?1,
                        body = json_set(body, '$.archived_at', ?2, {STAMP_VERSION})
                     WHERE id = ?4 AND owner IS NOT NULL AND owner = ?5 AND archived_at IS NULL"
                ))?,
                None => tx.prepare_cached(&format!(
                    "UPDATE memories SET archived_at = NULL,
                        body = json_set(json_remove(body, '$.archived_at'), {STAMP_VERSION})
                     WHERE id = ?2 AND owner IS NOT NULL AND owner = ?3
                        AND archived_at IS NOT NULL"
                ))?,
            };
            for id in ids {
                let n = match at {
                    Some(t) => stmt.execute(params![
                        t.as_secs(),
                        t.to_rfc3339(),
                        SCHEMA_VERSION,
                        id.to_string(),
                        access.owner
                    ])?,
                    None => stmt.execute(params![SCHEMA_VERSION, id.to_string(), access.owner])?,
                };
                out.push(n > 0);
            }
        }
        tx.commit()?;
        Ok(out)
    }

    fn with_any_tag(
        &self,
        access: &Access,
        tags: &[String],
        gate: Gate,
        exclude: &RecordId,
        limit: usize,
    ) -> Result<Vec<Memory>> {
        if tags.is_empty() {
            return Ok(vec![]);
        }
        let mut w = Where::new();
        w.access(access);
        w.gate(gate);
        w.and("m.id <> ?", [Value::Text(exclude.to_string())]);
        let marks = vec!["?"; tags.len()].join(", ");
        w.and(
            &format!(
                "EXISTS (SELECT 1 FROM memory_tags t WHERE t.memory = m.rowid AND t.tag IN ({marks}))"
            ),
            tags.iter().map(|t| Value::Text(t.clone())),
        );
        self.select_recent(w, limit)
    }

    fn with_any_citation(
        &self,
        access: &Access,
        citations: &[Citation],
        gate: Gate,
        exclude: &RecordId,
        limit: usize,
    ) -> Result<Vec<Memory>> {
        if citations.is_empty() {
            return Ok(vec![]);
        }
        let mut w = Where::new();
        w.access(access);
        w.gate(gate);
        w.and("m.id <> ?", [Value::Text(exclude.to_string())]);
        let pairs = vec![
            "(json_extract(c.value, '$.kind') = ? AND json_extract(c.value, '$.ref') = ?)";
            citations.len()
        ]
        .join(" OR ");
        w.and(
            &format!("EXISTS (SELECT 1 FROM json_each(m.body, '$.citations') c WHERE {pairs})"),
            citations.iter().flat_map(|c| {
                [Value::Text(c.kind.as_str().to_owned()), Value::Text(c.reference.clone())]
            }),
        );
        self.select_recent(w, limit)
    }

    fn vector(&self, id: &RecordId, model: &str) -> Result<Option<Vec<f32>>> {
        let conn = self.lock();
        let blob: Option<Vec<u8>> = conn
            .query_row(
                "SELECT v.vec FROM vectors v JOIN memories m ON m.rowid = v.memory
                 WHERE m.id = ?1 AND v.model = ?2",
                params![id.to_string(), model],
                |r| r.get(0),
            )
            .optional()?;
        Ok(blob.map(|b| blob_to_vec(&b)))
    }

    fn list_oldest(
        &self,
        access: &Access,
        filter: &Filter,
        gate: Gate,
        limit: usize,
    ) -> Result<Vec<Memory>> {
        let mut w = Where::new();
        w.access(access);
        w.filter(filter);
        w.gate(gate);
        w.params.push(Value::Integer(limit as i64));
        let conn = self.lock();
        let mut stmt = conn.prepare(&format!(
            "SELECT m.body FROM memories m WHERE {} ORDER BY m.created_at ASC, m.id ASC LIMIT ?",
            w.sql
        ))?;
        let bodies: Vec<String> =
            stmt.query_map(params_from_iter(w.params), |r| r.get(0))?.collect::<Result<_, _>>()?;
        bodies.iter().map(|b| decode(b)).collect()
    }

    fn embedder_models(&self) -> Result<Vec<(String, u64)>> {
        let conn = self.lock();
        let mut stmt =
            conn.prepare("SELECT model, COUNT(*) FROM vectors GROUP BY model ORDER BY model")?;
        let rows = stmt
            .query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, i64>(1)? as u64)))?
            .collect::<Result<_, _>>()?;
        Ok(rows)
    }

    fn needing_embedding(
        &self,
        model: &str,
        after: Option<RecordId>,
        limit: usize,
    ) -> Result<Vec<(RecordId, String)>> {
        // Ids are lowercase hyphenated UUIDs, so text order is id order and '' precedes all.
        let after = after.map(|a| a.to_string()).unwrap_or_default();
        let conn = self.lock();
        let mut stmt = conn.prepare_cached(
            "SELECT m.id, coalesce(json_extract(m.body, '$.content'), '')
             FROM memories m LEFT JOIN vectors v ON v.memory = m.rowid
             WHERE (v.memory IS NULL OR v.model <> ?1) AND m.id > ?2
             ORDER BY m.id LIMIT ?3",
        )?;
        let rows = stmt.query_map(params![model, after, limit as i64], |r| {
            Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?))
        })?;
        let mut out = Vec::new();
        for row in rows {
            let (id, content) = row?;
            let id =
                RecordId::parse(&id).ok_or_else(|| StoreError::Corrupt(format!("bad id {id}")))?;
            out.push((id, content));
        }
        Ok(out)
    }

    fn set_vector(&self, id: &RecordId, embedding: Embedding<'_>) -> Result<bool> {
        let mut conn = self.lock();
        let tx = conn.transaction()?;
        let rowid: Option<i64> = tx
            .query_row("SELECT rowid FROM memories WHERE id = ?1", [id.to_string()], |r| r.get(0))
            .optional()?;
        let Some(rowid) = rowid else {
            return Ok(false);
        };
        write_vector(&tx, rowid, embedding)?;
        tx.commit()?;
        Ok(true)
    }
}

impl SqliteStore {
    /// Rows matching `w`, most recent first, at most `limit`.
    fn select_recent(&self, mut w: Where, limit: usize) -> Result<Vec<Memory>> {
        w.params.push(Value::Integer(limit as i64));
        let conn = self.lock();
        let mut stmt = conn.prepare(&format!(
            "SELECT m.body FROM memories m WHERE {} ORDER BY m.created_at DESC, m.id DESC LIMIT ?",
            w.sql
        ))?;
        let bodies: Vec<String> =
            stmt.query_map(params_from_iter(w.params), |r| r.get(0))?.collect::<Result<_, _>>()?;
        bodies.iter().map(|b| decode(b)).collect()
    }
}

/// Brings `index` up to the database state `tx` sees: the changed rows since it last
/// looked, or everything when it never loaded, fell behind the change log, or too much
/// changed for row-by-row updates to pay.
fn sync_index(tx: &Transaction<'_>, index: &mut Index) -> Result<()> {
    let last: i64 = tx.query_row("SELECT coalesce(max(seq), 0) FROM changes", [], |r| r.get(0))?;
    if let Some(synced) = index.synced {
        if synced == last {
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
    *index = fresh;
    Ok(())
}
