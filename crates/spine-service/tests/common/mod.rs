//! Shared set-up for the service tests: the real model (loaded once per test binary), a
//! fresh store, a ManualClock, and callers.
//!
//! The store is SQLite in a temporary directory, or, with `SPINE_TEST_BACKEND=postgres`, a
//! fresh database on the PostgreSQL server `SPINE_TEST_DATABASE_URL` names: every test here
//! is the store contract's conformance suite on both backends (`scripts/test.sh` runs it
//! twice when a server is there).
#![allow(dead_code)]

use std::sync::{Arc, OnceLock};

use serde_json::Value;
use spine_core::{Caller, Limits, ManualClock, Timestamp};
use spine_embed::BuiltinEmbedder;
use spine_service::Service;
use spine_service::args::parse_args;
use spine_store::{PgStore, SqliteStore, Store};
use spine_testkit::postgres::FreshDatabase;
use tempfile::TempDir;

pub const T0: i64 = 1_800_000_000; // 2027-01-15T08:00:00Z

pub fn embedder() -> Arc<BuiltinEmbedder> {
    static MODEL: OnceLock<Arc<BuiltinEmbedder>> = OnceLock::new();
    MODEL
        .get_or_init(|| {
            Arc::new(
                BuiltinEmbedder::load(&spine_embed::default_model_dir())
                    .expect("model present (run scripts/fetch-model.sh)"),
            )
        })
        .clone()
}

pub struct Env {
    pub service: Service,
    pub clock: Arc<ManualClock>,
    pub store: Arc<dyn Store>,
    pub _dir: TempDir,
    /// Dropped last: the service's connections close before the database goes.
    pub _db: Option<FreshDatabase>,
}

impl Env {
    /// Sets the clock to `secs` seconds after the epoch.
    pub fn at(&self, secs: i64) {
        self.clock.set(Timestamp::from_micros(secs * 1_000_000));
    }
}

pub fn env() -> Env {
    env_with(Limits::default())
}

pub fn env_with(limits: Limits) -> Env {
    let dir = tempfile::tempdir().unwrap();
    let (store, db) = store(&dir);
    let clock = Arc::new(ManualClock::new(Timestamp::from_micros(T0 * 1_000_000)));
    let service = Service::new(store.clone(), embedder(), clock.clone(), limits);
    Env { service, clock, store, _dir: dir, _db: db }
}

/// Whether these tests run on PostgreSQL (`SPINE_TEST_BACKEND=postgres`).
pub fn postgres() -> bool {
    std::env::var("SPINE_TEST_BACKEND").as_deref() == Ok("postgres")
}

/// The backend `SPINE_TEST_BACKEND` selects (`sqlite`, the default, or `postgres`), fresh.
pub fn store(dir: &TempDir) -> (Arc<dyn Store>, Option<FreshDatabase>) {
    match postgres() {
        true => {
            let db = spine_testkit::postgres::fresh_database()
                .expect("SPINE_TEST_BACKEND=postgres needs SPINE_TEST_DATABASE_URL");
            let store = PgStore::connect(&db.url).expect("connecting to the test database");
            (Arc::new(store), Some(db))
        }
        false => (Arc::new(SqliteStore::open(dir.path()).unwrap()), None),
    }
}

pub fn args<T: serde::de::DeserializeOwned + schemars::JsonSchema>(v: Value) -> T {
    try_args(v).unwrap()
}

/// The arguments parsed as the tool layer parses them: a malformed scope, time or id is
/// refused here, at the edge, with the envelope the operation would give.
pub fn try_args<T: serde::de::DeserializeOwned + schemars::JsonSchema>(
    v: Value,
) -> Result<T, spine_core::Error> {
    parse_args(v.as_object().cloned().unwrap())
}

pub fn anon() -> Caller {
    Caller::anonymous()
}

pub fn alice() -> Caller {
    Caller::authenticated("alice@example.com", "alice@example.com")
}

pub fn bob() -> Caller {
    Caller::authenticated("bob@example.com", "bob@example.com")
}
