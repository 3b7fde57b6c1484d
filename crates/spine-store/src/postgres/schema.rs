//! The PostgreSQL schema: migrations applied in order at connect, under an advisory lock;
//! `spine_migrations` records which ran. Append only: never edit a step that has shipped.

pub(super) const MIGRATIONS: &[&str] = &[
    // 1: records (payload, filter columns, tags, vector in one row), supersede_memory
    // idempotency keys, the extract-before-delete gate of `spine-review purge`.
    //
    // Text columns compared or ordered by the store use the "C" collation: ids, scopes and
    // tags then sort bytewise, as on SQLite, whatever the database's locale. `short_id` is
    // unique: two nodes minting the same one cannot both commit it. Times: created_at in
    // microseconds, the window and archived_at in seconds (as the payload has them). `rowid`
    // numbers records in insertion order, as SQLite's rowid does, for the operator
    // commands' paging (verify, migrate).
    r#"CREATE EXTENSION IF NOT EXISTS vector;
    CREATE TABLE memories (
        rowid bigint GENERATED ALWAYS AS IDENTITY UNIQUE,
        id text COLLATE "C" PRIMARY KEY,
        short_id text COLLATE "C" NOT NULL UNIQUE,
        owner text COLLATE "C",
        visibility text NOT NULL,
        scope text COLLATE "C" NOT NULL,
        category text NOT NULL,
        kind text,
        created_at bigint NOT NULL,
        not_before bigint,
        not_after bigint,
        archived_at bigint,
        superseded_by text COLLATE "C",
        tags text[] COLLATE "C" NOT NULL DEFAULT '{}',
        body jsonb NOT NULL,
        model text,
        dims integer,
        vec vector
    );
    CREATE INDEX memories_scope_recent ON memories (scope, created_at DESC, id DESC);
    CREATE INDEX memories_recent ON memories (created_at DESC, id DESC);
    CREATE INDEX memories_owner_scope ON memories (owner, scope);
    CREATE INDEX memories_tags ON memories USING gin (tags);
    CREATE INDEX memories_model ON memories (model);
    CREATE TABLE idempotency (
        owner text NOT NULL,
        key text NOT NULL,
        fingerprint text NOT NULL,
        id text NOT NULL,
        short_id text NOT NULL,
        PRIMARY KEY (owner, key)
    );
    CREATE TABLE exported (
        id text COLLATE "C" PRIMARY KEY,
        digest text NOT NULL,
        exported_at bigint NOT NULL,
        file text NOT NULL
    );"#,
    // 2: the payload as `json`, which keeps the text it was given: a record no one changed
    // exports byte for byte as it was imported or written (jsonb reorders keys and spaces
    // them). Updates still compute on jsonb (`body::jsonb`) and store the result.
    "ALTER TABLE memories ALTER COLUMN body TYPE json USING body::json;",
    // 3: shared records by scope, so listing the scopes a caller reads answers "does this
    // scope hold a shared record" with one index lookup.
    "CREATE INDEX memories_shared_scope ON memories (scope) WHERE visibility = 'shared';",
    // 4: vectors kept in the row. pgvector stores them out of line by default (`external`),
    // and a 384-dimension vector (1.5 KiB) beside a payload takes a row past the 2 KiB at
    // which PostgreSQL moves a value out: an exact scan then fetched each vector from the
    // TOAST table, a cost on every row (docs/performance.md, "PostgreSQL: round trips and
    // the scan's reads"). `main` keeps it in the row (floats do not compress) and
    // moves the payload out instead, which a scan reads only for the rows it returns. A
    // catalog change: rows written before keep their layout until they are rewritten.
    "ALTER TABLE memories ALTER COLUMN vec SET STORAGE MAIN;",
    // 5: room in each page for a row's next version. Reading a record (`touch`) rewrites its
    // access count, an archive its state: PostgreSQL writes a new version of the whole row
    // (its vector included), and when that version fits in the same page and no
    // indexed column changed, no index gets a new entry (a HOT update). Filled to the brim,
    // a page had no room: many touches put a new entry in every index, pgvector's HNSW
    // graph among them, and a touch took several times as long in the database as with room
    // kept (docs/performance.md, "PostgreSQL: room for the next version of a row"). At 70% a
    // page keeps room for one more version, and pruning reclaims it once the old one is
    // dead. A storage parameter: pages written before keep their fill until rewritten.
    "ALTER TABLE memories SET (fillfactor = 70);",
    // 6: deleting a record splices it out of its chain, whichever command deletes it, as
    // SQLite's step 9 does (docs/records.md, "Deleting a record in a chain"). A row trigger
    // here fires after the whole statement, when every deleted row is gone: one statement
    // trigger reads them all (the transition table) and follows each survivor's successor
    // through the deleted ones to the first that survives (none: a live head again); each
    // surviving successor then lists the records that name it now beside what it listed.
    // The links earlier deletes left dangling are cut the same way. Predecessors are found
    // by a partial index (superseded records only), not by scanning the table.
    r#"CREATE INDEX memories_superseded_by ON memories (superseded_by)
        WHERE superseded_by IS NOT NULL;
    CREATE FUNCTION spine_splice_deleted() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        -- Survivors that named a deleted record name its first surviving successor (NULL:
        -- none, a live head again).
        WITH RECURSIVE walk(start, at, depth) AS (
            SELECT g.id, g.superseded_by, 0 FROM gone g
            UNION ALL
            SELECT w.start, g.superseded_by, w.depth + 1
            FROM walk w JOIN gone g ON g.id = w.at
            WHERE w.depth < 1000
        ), heads AS (
            SELECT start, at AS head FROM walk
            WHERE at IS NULL OR NOT EXISTS (SELECT 1 FROM gone g WHERE g.id = walk.at)
        )
        UPDATE memories p SET superseded_by = h.head,
            body = CASE WHEN h.head IS NULL THEN p.body::jsonb - 'superseded_by'
                ELSE jsonb_set(p.body::jsonb, '{superseded_by}', to_jsonb(h.head)) END::json
        FROM heads h WHERE p.superseded_by = h.start;
        -- Those successors list who names them now, beside what they listed (a deleted
        -- predecessor stays listed, as a purged one always has).
        WITH RECURSIVE walk(start, at, depth) AS (
            SELECT g.id, g.superseded_by, 0 FROM gone g
            UNION ALL
            SELECT w.start, g.superseded_by, w.depth + 1
            FROM walk w JOIN gone g ON g.id = w.at
            WHERE w.depth < 1000
        ), heads AS (
            SELECT start, at AS head FROM walk
            WHERE at IS NULL OR NOT EXISTS (SELECT 1 FROM gone g WHERE g.id = walk.at)
        )
        UPDATE memories s SET body = jsonb_set(s.body::jsonb, '{supersedes}', (
            SELECT jsonb_agg(id ORDER BY id) FROM (
                SELECT v #>> '{}' AS id
                FROM jsonb_array_elements(coalesce(s.body::jsonb -> 'supersedes', '[]')) v
                UNION
                SELECT p.id FROM memories p WHERE p.superseded_by = s.id
            ) kept
        ))::json
        WHERE s.id IN (SELECT head FROM heads WHERE head IS NOT NULL);
        RETURN NULL;
    END $$;
    CREATE TRIGGER memories_splice_deleted AFTER DELETE ON memories
        REFERENCING OLD TABLE AS gone FOR EACH STATEMENT EXECUTE FUNCTION spine_splice_deleted();
    UPDATE memories SET superseded_by = NULL, body = (body::jsonb - 'superseded_by')::json
    WHERE superseded_by IS NOT NULL
        AND NOT EXISTS (SELECT 1 FROM memories s WHERE s.id = memories.superseded_by);"#,
    // 7: a record's export mark goes with the record, as SQLite's step 10 does: one statement
    // trigger reads the deleted rows (the transition table) and drops their marks. The rows
    // earlier deletes left behind go now.
    r#"CREATE FUNCTION spine_forget_exported() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        DELETE FROM exported e USING gone g WHERE e.id = g.id;
        RETURN NULL;
    END $$;
    CREATE TRIGGER memories_forget_exported AFTER DELETE ON memories
        REFERENCING OLD TABLE AS gone FOR EACH STATEMENT EXECUTE FUNCTION spine_forget_exported();
    DELETE FROM exported e WHERE NOT EXISTS (SELECT 1 FROM memories m WHERE m.id = e.id);"#,
    // 8: the audit log (`crate::audit`), as SQLite's step 11: one event per call that may
    // change records, written in the change's statement or transaction. Append-only: a
    // trigger refuses updates; events go only by `spine audit prune`. `at` is microseconds
    // since the epoch.
    r#"CREATE TABLE audit_events (
        seq BIGSERIAL PRIMARY KEY,
        at BIGINT NOT NULL,
        actor TEXT NOT NULL,
        owner TEXT NOT NULL,
        lane TEXT NOT NULL,
        client TEXT NOT NULL,
        action TEXT NOT NULL,
        scope TEXT NOT NULL,
        record_ids TEXT[] NOT NULL,
        outcome TEXT NOT NULL,
        trace_id TEXT NOT NULL
    );
    CREATE INDEX audit_events_at ON audit_events (at);
    CREATE FUNCTION spine_audit_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        RAISE EXCEPTION 'the audit log is append-only';
    END $$;
    CREATE TRIGGER audit_events_append_only BEFORE UPDATE ON audit_events
        FOR EACH ROW EXECUTE FUNCTION spine_audit_append_only();"#,
];
