//! Shared set-up for the service tests: the real model (loaded once per test binary), a
//! fresh SQLite store in a temporary directory, a ManualClock, and callers.
#![allow(dead_code)]

use std::sync::{Arc, OnceLock};

use serde_json::Value;
use spine_core::{Caller, Limits, ManualClock, Timestamp};
use spine_embed::BuiltinEmbedder;
use spine_service::Service;
use spine_service::args::parse_args;
use spine_store::SqliteStore;
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
    pub store: Arc<SqliteStore>,
    pub _dir: TempDir,
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
    let store = Arc::new(SqliteStore::open(dir.path()).unwrap());
    let clock = Arc::new(ManualClock::new(Timestamp::from_micros(T0 * 1_000_000)));
    let service = Service::new(store.clone(), embedder(), clock.clone(), limits);
    Env { service, clock, store, _dir: dir }
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
