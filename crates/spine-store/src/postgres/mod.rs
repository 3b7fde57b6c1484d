//! The scale-out backend: PostgreSQL with pgvector, shared by many stateless Spine nodes.
//!
//! - **Same contract.** [`PgStore`] implements [`crate::Store`] with the semantics of the
//!   SQLite backend: the owner predicate inside every read query, the recall gate as SQL,
//!   supersession and archiving in one transaction each.
//! - **One row per record.** The payload (`body`, `json`: its text as written) is the source of truth; the columns
//!   queries filter on, the tags (`text[]`, GIN-indexed) and the vector (`vector`, with the
//!   embedder's id and dimension count) sit beside it in the same row, rewritten with it.
//! - **Vector search on the database.** An HNSW index per dimension count
//!   (`(vec::vector(D)) vector_cosine_ops WHERE dims = D`), created when the first vector of
//!   that size arrives; `hnsw.iterative_scan` is set per transaction (`SET LOCAL`), never on a
//!   pooled connection, so filters stay exact without leaking settings between callers.
//! - **Few round trips.** A statement whose plan depends on its values goes unprepared
//!   with its parameters' types (`query_typed`: parsed, bound and run in one round trip,
//!   planned for those values); one that finds its row by a key is prepared once per
//!   connection. A search is one statement (two with the neighbour step; through the HNSW
//!   index a transaction of its own follows), an edit one.
//! - **Nothing a node keeps matters to another.** Every read goes to the database; the only
//!   per-node state is the connection pool and which HNSW indexes it has already ensured.
//! - **Synchronous callers.** The store trait is synchronous (the service runs on blocking
//!   threads); the async client runs on a small runtime the store owns, and each call blocks
//!   on it.
//! - **Migrations** are numbered in code and applied at open inside one transaction that
//!   holds an advisory lock, so nodes starting at once apply each step exactly once.
//! - **Operator review** ([`crate::ReviewStore`], `review.rs` and `verify.rs`): the SQLite
//!   backend's semantics; snapshot reads in one read-only REPEATABLE READ transaction,
//!   writes lock their rows `FOR UPDATE` (in id order) and re-check them before changing.

mod audit;
mod nearest;
mod query;
mod review;
mod rows;
mod schema;
mod store;
mod summaries;
mod transfer;
mod verify;

use std::collections::HashSet;
use std::future::Future;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod};
use tokio_postgres::types::ToSql;
use tokio_postgres::{NoTls, Row};

use crate::{Result, StoreError};

/// The advisory lock key that serialises migrations and index creation across nodes
/// ("spine" in ASCII).
const LOCK_KEY: i64 = 0x0073_7069_6e65;

/// `maintenance_work_mem` while an HNSW index is built.
const BUILD_MEMORY: &str = "2GB";

/// How long a call waits for a connection (and a new connection for the server) before it
/// fails as unavailable, unless the URL sets `connect_timeout` ([`config`]).
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// The longest a store call may take before it fails as unavailable.
const CALL_TIMEOUT: Duration = Duration::from_secs(30);

/// Connections per node.
const POOL_SIZE: usize = 16;

/// The connection settings of `url` (a `postgres://` URL or libpq's `key=value` form), with
/// Spine's defaults where it sets none: [`CONNECT_TIMEOUT`] (a URL's `connect_timeout`, in
/// seconds as libpq reads it, wins: a database across a slow link may need longer) and
/// `application_name` `spine` (a URL's own wins: several deployments on one database can
/// tell their sessions apart in `pg_stat_activity`).
fn config(url: &str) -> Result<tokio_postgres::Config> {
    let mut config: tokio_postgres::Config = url
        .parse()
        .map_err(|e| StoreError::Io(format!("--database-url is not a PostgreSQL URL: {e}")))?;
    if config.get_connect_timeout().is_none() {
        config.connect_timeout(CONNECT_TIMEOUT);
    }
    if config.get_application_name().is_none() {
        config.application_name("spine");
    }
    Ok(config)
}

impl From<tokio_postgres::Error> for StoreError {
    fn from(e: tokio_postgres::Error) -> Self {
        match e.as_db_error() {
            // Class 57P (operator intervention: the server is shutting down, crashed, or
            // starting up and recovering) and 08 (connection exceptions) are the server's state,
            // not the request's: retry once it is back.
            Some(db)
                if db.code().code().starts_with("57P") || db.code().code().starts_with("08") =>
            {
                StoreError::Unavailable(format!(
                    "the database server is not accepting work: {} ({})",
                    db.message(),
                    db.code().code()
                ))
            }
            Some(db) => StoreError::Postgres {
                message: db.message().to_owned(),
                sqlstate: db.code().code().to_owned(),
            },
            // No server error: the connection failed or closed; say why.
            None => {
                let mut cause = e.to_string();
                let mut source = std::error::Error::source(&e);
                while let Some(s) = source {
                    cause.push_str(&format!(": {s}"));
                    source = s.source();
                }
                StoreError::Unavailable(format!("the database connection failed: {cause}"))
            }
        }
    }
}

impl From<deadpool_postgres::PoolError> for StoreError {
    fn from(e: deadpool_postgres::PoolError) -> Self {
        match e {
            deadpool_postgres::PoolError::Backend(e) => e.into(),
            e => StoreError::Unavailable(format!("no database connection: {e}")),
        }
    }
}

/// PostgreSQL-backed [`crate::Store`].
pub struct PgStore {
    /// `None` only while dropping (the runtime is shut down in the background).
    rt: Option<tokio::runtime::Runtime>,
    pool: Pool,
    /// Where the database is, for messages (no password).
    target: String,
    /// The dimension counts whose HNSW index this node has made sure of.
    vector_indexes: Mutex<HashSet<usize>>,
    /// A bulk load into an empty table runs: missing HNSW indexes are built when it ends
    /// ([`crate::TransferStore::finish_bulk_load`]), not row by row.
    deferring_indexes: AtomicBool,
    /// The filters whose searches go straight to the HNSW index for now.
    large_scans: nearest::LargeScans,
    /// The attribution of the operator command this handle serves, if any
    /// ([`crate::TransferStore::audit_as`]).
    operator_audit: std::sync::OnceLock<crate::Access>,
}

impl Drop for PgStore {
    fn drop(&mut self) {
        if let Some(rt) = self.rt.take() {
            rt.shutdown_background();
        }
    }
}

impl PgStore {
    /// Connects to the database at `url` (`postgres://user[:password]@host[:port]/db`),
    /// checks it answers, and applies pending migrations. Fails within seconds, naming the
    /// host and the cause, when the database cannot be reached.
    pub fn connect(url: &str) -> Result<Self> {
        let config = config(url)?;
        let connect_timeout = config.get_connect_timeout().copied().unwrap_or(CONNECT_TIMEOUT);
        let target = describe(&config);
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("spine-postgres")
            .enable_all()
            .build()
            .map_err(|e| StoreError::Io(format!("starting the database runtime: {e}")))?;
        let manager = Manager::from_config(
            config,
            NoTls,
            ManagerConfig { recycling_method: RecyclingMethod::Fast },
        );
        let pool = Pool::builder(manager)
            .max_size(POOL_SIZE)
            .runtime(deadpool_postgres::Runtime::Tokio1)
            .wait_timeout(Some(connect_timeout))
            .create_timeout(Some(connect_timeout))
            .recycle_timeout(Some(connect_timeout))
            .build()
            .map_err(|e| StoreError::Io(format!("setting up the connection pool: {e}")))?;
        let store = PgStore {
            rt: Some(rt),
            pool,
            target,
            vector_indexes: Mutex::new(HashSet::new()),
            deferring_indexes: AtomicBool::new(false),
            large_scans: nearest::LargeScans::default(),
            operator_audit: std::sync::OnceLock::new(),
        };
        store.migrate().map_err(|e| match e {
            StoreError::Unavailable(m) => {
                StoreError::Unavailable(format!("cannot reach PostgreSQL at {}: {m}", store.target))
            }
            e => e,
        })?;
        Ok(store)
    }

    /// Refreshes the planner's statistics (`ANALYZE memories`): after a bulk load, so that
    /// filtered searches choose between the HNSW index and an exact scan well.
    fn analyze(&self) -> Result<()> {
        self.block_untimed(async {
            self.pool.get().await?.batch_execute("ANALYZE memories").await?;
            Ok(())
        })
    }

    /// Where the database is (`host:port/db`), without credentials.
    pub fn target(&self) -> &str {
        &self.target
    }

    /// Runs one store call on the store's runtime, from any thread that may block; a call
    /// that has not finished after [`CALL_TIMEOUT`] (a database that stopped answering
    /// without closing the connection) fails as unavailable and its transaction rolls back.
    pub(crate) fn block<T: Send, F: Future<Output = Result<T>> + Send>(&self, f: F) -> Result<T> {
        self.block_untimed(async {
            match tokio::time::timeout(CALL_TIMEOUT, f).await {
                Ok(done) => done,
                Err(_) => Err(StoreError::Unavailable(format!(
                    "the database at {} did not answer within {} s",
                    self.target,
                    CALL_TIMEOUT.as_secs()
                ))),
            }
        })
    }

    /// One statement on a pooled connection, outside any transaction: its rows.
    pub(crate) fn query(&self, sql: &str, params: &[&(dyn ToSql + Sync)]) -> Result<Vec<Row>> {
        self.block(async { Ok(self.pool.get().await?.query(sql, params).await?) })
    }

    /// How many records `w` matches.
    fn count_where(&self, w: &query::Where) -> Result<u64> {
        let sql = format!("SELECT count(*) FROM memories m WHERE {}", w.sql);
        let row = self
            .block(async { Ok(self.pool.get().await?.query_typed_one(&sql, &w.typed()).await?) })?;
        Ok(u64::try_from(crate::fields::Fields::int(&row, 0)?).unwrap_or(0))
    }

    /// One statement over `w`'s parameters, outside any transaction: its rows, in one round
    /// trip. The statement goes unprepared, its parameters' types given ([`query::PgType`]),
    /// so the server parses, plans and runs it for these values at once; a statement given
    /// as text to [`PgStore::query`] is prepared first, a round trip of its own.
    fn query_where(&self, sql: &str, w: &query::Where) -> Result<Vec<Row>> {
        self.block(async {
            let client = self.pool.get().await?;
            know_vectors(&client).await?;
            Ok(client.query_typed(sql, &w.typed()).await?)
        })
    }

    /// [`PgStore::query_where`] of a statement that writes: how many rows it changed.
    fn execute_where(&self, sql: &str, w: &query::Where) -> Result<u64> {
        self.block(async { Ok(self.pool.get().await?.execute_typed(sql, &w.typed()).await?) })
    }

    /// [`PgStore::query`] of a statement that returns one row.
    pub(crate) fn query_one(&self, sql: &str, params: &[&(dyn ToSql + Sync)]) -> Result<Row> {
        self.block(async { Ok(self.pool.get().await?.query_one(sql, params).await?) })
    }

    /// [`PgStore::query`] of a statement that returns at most one row.
    pub(crate) fn query_opt(
        &self,
        sql: &str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Option<Row>> {
        self.block(async { Ok(self.pool.get().await?.query_opt(sql, params).await?) })
    }

    /// [`PgStore::query`] of a statement that finds its rows by a key (`id`, `short_id`, the
    /// idempotency key): prepared once per pooled connection and reused, where a statement
    /// given as text is prepared on every call, a round trip to the server before the one
    /// that runs it. Only for such statements: whatever the values, the plan is the key's
    /// index, so a plan the server keeps for the prepared statement is the one it would
    /// choose for each call (a statement whose best plan depends on its values, a filter
    /// on a scope or an owner, stays on [`PgStore::query`], planned for each call's values).
    pub(crate) fn query_by_key(
        &self,
        sql: &str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Vec<Row>> {
        self.block(async {
            let client = self.pool.get().await?;
            let stmt = client.prepare_cached(sql).await?;
            Ok(client.query(&stmt, params).await?)
        })
    }

    /// [`PgStore::execute`] of a statement that writes the row of one key (see
    /// [`PgStore::query_by_key`]).
    pub(crate) fn execute_by_key(&self, sql: &str, params: &[&(dyn ToSql + Sync)]) -> Result<u64> {
        self.block(async {
            let client = self.pool.get().await?;
            let stmt = client.prepare_cached(sql).await?;
            Ok(client.execute(&stmt, params).await?)
        })
    }

    /// [`PgStore::block`] without the time limit: migrations and index builds, which may
    /// take minutes on a large table.
    fn block_untimed<F: Future + Send>(&self, f: F) -> F::Output
    where
        F::Output: Send,
    {
        let rt = self.rt.as_ref().expect("the runtime lives as long as the store");
        match tokio::runtime::Handle::try_current() {
            // On a worker thread of a multi-threaded runtime (or one of its blocking
            // threads): hand the worker's other tasks elsewhere while this one waits.
            Ok(h) if h.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread => {
                tokio::task::block_in_place(|| rt.block_on(f))
            }
            // Inside a single-threaded runtime, which cannot block in place: wait on a
            // thread outside it.
            Ok(_) => std::thread::scope(|s| {
                s.spawn(|| rt.block_on(f)).join().unwrap_or_else(|p| std::panic::resume_unwind(p))
            }),
            Err(_) => rt.block_on(f),
        }
    }

    fn migrate(&self) -> Result<()> {
        self.block_untimed(async {
            let mut client = self.pool.get().await?;
            let tx = client.transaction().await?;
            tx.execute("SELECT pg_advisory_xact_lock($1)", &[&LOCK_KEY]).await?;
            tx.batch_execute(
                "CREATE TABLE IF NOT EXISTS spine_migrations (
                    step integer PRIMARY KEY,
                    applied_at timestamptz NOT NULL DEFAULT now()
                )",
            )
            .await?;
            let applied: i32 =
                tx.query_one("SELECT coalesce(max(step), 0) FROM spine_migrations", &[]).await?.get(0);
            let applied = usize::try_from(applied).unwrap_or(0);
            if applied > schema::MIGRATIONS.len() {
                return Err(StoreError::Io(format!(
                    "the database at {} was written by a newer spine (schema {applied}, this binary knows {}); upgrade spine",
                    self.target,
                    schema::MIGRATIONS.len()
                )));
            }
            for (i, step) in schema::MIGRATIONS.iter().enumerate().skip(applied) {
                tx.batch_execute(step).await?;
                tx.execute("INSERT INTO spine_migrations (step) VALUES ($1)", &[&((i + 1) as i32)])
                    .await?;
                tracing::info!(step = i + 1, "applied store migration");
            }
            tx.commit().await?;
            Ok(())
        })
    }

    /// Makes sure the HNSW index for vectors of `dims` dimensions exists (built once, by
    /// whichever node first stores or searches such a vector; during a bulk load into an
    /// empty table, when the load ends).
    pub(crate) fn ensure_vector_index(&self, dims: usize) -> Result<()> {
        if self.deferring_indexes.load(Ordering::Relaxed)
            || self.vector_indexes.lock().unwrap_or_else(|p| p.into_inner()).contains(&dims)
        {
            return Ok(());
        }
        self.block_untimed(async {
            let mut client = self.pool.get().await?;
            let tx = client.transaction().await?;
            tx.execute("SELECT pg_advisory_xact_lock($1)", &[&LOCK_KEY]).await?;
            // Building over many rows (after a bulk load) is fastest when the graph fits in
            // memory, which grows with the vectors it holds (docs/performance.md, "PostgreSQL
            // 15 + pgvector 0.8.0"). An upper bound, used as needed.
            tx.batch_execute(&format!("SET LOCAL maintenance_work_mem = '{BUILD_MEMORY}'")).await?;
            tx.batch_execute(&format!(
                "CREATE INDEX IF NOT EXISTS memories_vec_hnsw_{dims} ON memories
                 USING hnsw ((vec::vector({dims})) vector_cosine_ops) WHERE dims = {dims}"
            ))
            .await?;
            tx.commit().await?;
            Ok::<_, StoreError>(())
        })?;
        self.vector_indexes.lock().unwrap_or_else(|p| p.into_inner()).insert(dims);
        Ok(())
    }
}

/// Makes `client` know pgvector's `vector` type before it runs an unprepared statement
/// (`query_typed`) whose rows may hold vectors: prepared once per connection, which looks
/// the type up before any row arrives. tokio-postgres looks up a result column's unknown
/// type in the middle of an unprepared statement's response, on the same connection, where
/// the lookup's answer waits behind the statement's rows; rows enough to fill the
/// connection's buffer (a search's hundred candidates) then wait for it forever
/// (rust-postgres pull requests 1348 and 1349, unmerged).
async fn know_vectors(client: &deadpool_postgres::Client) -> Result<()> {
    client.prepare_cached("SELECT NULL::vector").await?;
    Ok(())
}

/// A read-only transaction that sees one snapshot throughout (REPEATABLE READ): reads that
/// must agree with each other (a search's scans, a verify page, a purge plan).
pub(crate) async fn snapshot(
    client: &mut deadpool_postgres::Object,
) -> Result<deadpool_postgres::Transaction<'_>> {
    Ok(client
        .build_transaction()
        .isolation_level(tokio_postgres::IsolationLevel::RepeatableRead)
        .read_only(true)
        .start()
        .await?)
}

/// `host:port/db` of a connection config, for messages.
fn describe(config: &tokio_postgres::Config) -> String {
    let host = config
        .get_hosts()
        .first()
        .map(|h| match h {
            tokio_postgres::config::Host::Tcp(h) => h.clone(),
            #[cfg(unix)]
            tokio_postgres::config::Host::Unix(p) => p.display().to_string(),
        })
        .unwrap_or_else(|| "localhost".into());
    let port = config.get_ports().first().copied().unwrap_or(5432);
    format!("{host}:{port}/{}", config.get_dbname().unwrap_or("postgres"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_url_keeps_its_own_timeout_and_name_and_gets_spines_defaults_otherwise() {
        let plain = config("postgres://spine@db.internal:6432/memories").unwrap();
        assert_eq!(plain.get_connect_timeout(), Some(&CONNECT_TIMEOUT));
        assert_eq!(plain.get_application_name(), Some("spine"));
        assert_eq!(describe(&plain), "db.internal:6432/memories");

        let own = config(
            "postgres://spine@db.internal/memories?connect_timeout=12&application_name=spine-eu",
        )
        .unwrap();
        assert_eq!(own.get_connect_timeout(), Some(&Duration::from_secs(12)));
        assert_eq!(own.get_application_name(), Some("spine-eu"));

        let libpq = config("host=db.internal dbname=memories connect_timeout=2").unwrap();
        assert_eq!(libpq.get_connect_timeout(), Some(&Duration::from_secs(2)));

        let e = config("postgres://spine@db/memories?connect_timeout=soon").unwrap_err();
        assert!(e.to_string().contains("not a PostgreSQL URL"), "{e}");
    }
}
