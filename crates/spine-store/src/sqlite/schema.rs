//! The SQLite schema: migrations applied in order at open.

/// Schema migrations, applied in order; `PRAGMA user_version` records how many ran.
/// Append only: never edit a step that has shipped.
pub(super) const MIGRATIONS: &[&str] = &[
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
    // 8: shared records by scope, for the scope listing's probe of shared records
    // (`Where::scopes`), as PostgreSQL's `memories_shared_scope`.
    "CREATE INDEX memories_shared_scope ON memories(scope) WHERE visibility = 'shared';",
    // 9: deleting a record splices it out of its chain, whichever command deletes it
    // (delete_memory, delete_all, purge, prune): its predecessors name its successor as
    // theirs, or become live heads again when it had none, and the successor lists them in
    // its `supersedes` beside it (a deleted predecessor stays listed, as a purged one always
    // has: verify accepts it) (docs/records.md, "Deleting a record in a chain").
    // Before, a predecessor kept naming a record that no longer existed, and verify
    // reported `dangling_successor` on a store that only ever used the tools. A row-level
    // trigger runs as each row goes, so a chain deleted together splices link by link. The
    // links such deletes already left dangling are cut the same way (no successor known).
    // The trigger finds a record's predecessors by the partial index (superseded records
    // only): without it every delete scanned the table, and `delete_all` of a scope scanned
    // it once per record.
    "CREATE INDEX memories_superseded_by ON memories(superseded_by)
        WHERE superseded_by IS NOT NULL;
    CREATE TRIGGER memories_splice_deleted AFTER DELETE ON memories BEGIN
        UPDATE memories SET body = json_set(body, '$.supersedes', json((
            SELECT json_group_array(id) FROM (
                SELECT value AS id FROM json_each(memories.body, '$.supersedes')
                UNION
                SELECT p.id FROM memories p WHERE p.superseded_by = old.id
            )
        )))
        WHERE old.superseded_by IS NOT NULL AND id = old.superseded_by
            AND EXISTS (SELECT 1 FROM memories p WHERE p.superseded_by = old.id);
        UPDATE memories SET superseded_by = old.superseded_by,
            body = CASE WHEN old.superseded_by IS NULL
                THEN json_remove(body, '$.superseded_by')
                ELSE json_set(body, '$.superseded_by', old.superseded_by) END
        WHERE superseded_by = old.id;
    END;
    UPDATE memories SET superseded_by = NULL, body = json_remove(body, '$.superseded_by')
    WHERE superseded_by IS NOT NULL
        AND NOT EXISTS (SELECT 1 FROM memories s WHERE s.id = memories.superseded_by);",
    // 10: a record's export mark goes with the record, whichever command deletes it. Before,
    // `exported` kept a row for every record ever exported and later deleted: an hour's
    // soak left 74,088 of its 77,162 rows naming records that no longer existed
    // (docs/reliability.md, "Soak"). `mark_exported` marks only records still present. The
    // rows earlier deletes left behind go now.
    "CREATE TRIGGER memories_forget_exported AFTER DELETE ON memories BEGIN
        DELETE FROM exported WHERE id = old.id;
    END;
    DELETE FROM exported WHERE id NOT IN (SELECT id FROM memories);",
    // 11: the audit log (`crate::audit`): one event per call that may change records,
    // written in the change's transaction. Append-only: an update is refused; events go only
    // by `spine audit prune` (and `--audit-retention`), oldest first. `record_ids` is a JSON
    // array of ids; `at` is microseconds since the epoch.
    "CREATE TABLE audit_events (
        seq INTEGER PRIMARY KEY AUTOINCREMENT,
        at INTEGER NOT NULL,
        actor TEXT NOT NULL,
        owner TEXT NOT NULL,
        lane TEXT NOT NULL,
        client TEXT NOT NULL,
        action TEXT NOT NULL,
        scope TEXT NOT NULL,
        record_ids TEXT NOT NULL,
        outcome TEXT NOT NULL,
        trace_id TEXT NOT NULL
    );
    CREATE INDEX audit_events_at ON audit_events(at);
    CREATE TRIGGER audit_events_append_only BEFORE UPDATE ON audit_events BEGIN
        SELECT RAISE(ABORT, 'the audit log is append-only');
    END;",
];
