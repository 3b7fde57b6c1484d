//! The binary's composition root: which store a command works on (the embedded one in a
//! data directory, or PostgreSQL at a URL), how it is opened for each kind of caller, and
//! which model directory the built-in embedder reads — each decided here once, for the
//! server, the hooks, the operator commands and `spine doctor`.

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::{Context, Result, bail};
use spine_store::{DB_FILE, PgStore, ReviewStore, SqliteStore, Store};

use crate::cli::Common;

/// The data directory without `--data-dir`: `$XDG_DATA_HOME/spine`, else
/// `~/.local/share/spine`.
pub(crate) fn default_data_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("XDG_DATA_HOME").filter(|d| !d.is_empty()) {
        return PathBuf::from(d).join("spine");
    }
    let home = std::env::var_os("HOME").map(PathBuf::from).unwrap_or_else(|| PathBuf::from("."));
    home.join(".local/share/spine")
}

/// The store an operator command works on: PostgreSQL with `--database-url`, else the
/// embedded one; `existing`: refuse to create an embedded one (a mistyped --data-dir would
/// otherwise look like an empty store).
pub(crate) fn operator_store(
    common: &Common,
    existing: bool,
) -> Result<Box<dyn spine_ops::OperatorStore>> {
    operator_store_at(common, existing).map(|(store, _)| store)
}

/// [`operator_store`] and where it is (`spine doctor` names it).
pub(crate) fn operator_store_at(
    common: &Common,
    existing: bool,
) -> Result<(Box<dyn spine_ops::OperatorStore>, Place)> {
    if let Some(url) = database_url(common) {
        let store = open_postgres(url)?;
        let place = Place::postgres(&store);
        return Ok((Box::new(store), place));
    }
    let data_dir = data_dir(common, existing)?;
    let store = open_embedded(&data_dir)?;
    Ok((Box::new(store), Place::embedded(&data_dir)))
}

/// Connects to PostgreSQL at `url`: every command's one way in.
fn open_postgres(url: &str) -> Result<PgStore> {
    PgStore::connect(url).context("cannot open the PostgreSQL store")
}

/// Opens (creating it when there is none) the embedded store in `data_dir`: every command's
/// one way in.
fn open_embedded(data_dir: &std::path::Path) -> Result<SqliteStore> {
    SqliteStore::open(data_dir)
        .with_context(|| format!("cannot open the store in {}", data_dir.display()))
}

/// Where a store is, as messages name it (`the store in {name}`), and the flag that selects
/// it (`spine reindex {flag}`).
#[derive(Debug, Clone)]
pub(crate) struct Place {
    pub(crate) name: String,
    pub(crate) flag: String,
}

impl Place {
    fn postgres(store: &PgStore) -> Self {
        Place {
            name: format!("PostgreSQL at {}", store.target()),
            flag: "--database-url <url>".into(),
        }
    }

    fn embedded(data_dir: &std::path::Path) -> Self {
        Place {
            name: data_dir.display().to_string(),
            flag: format!("--data-dir {}", data_dir.display()),
        }
    }
}

/// The built-in model's directory `common` selects: `--model-dir`, else the default cache
/// ([`spine_embed::default_model_dir`]).
pub(crate) fn model_dir(common: &Common) -> PathBuf {
    common.model_dir.clone().unwrap_or_else(spine_embed::default_model_dir)
}

/// The PostgreSQL URL `common` selects, when it selects PostgreSQL (`--database-url`, not
/// empty); otherwise the embedded store in [`data_dir`].
pub(crate) fn database_url(common: &Common) -> Option<&str> {
    common.database_url.as_deref().filter(|u| !u.is_empty())
}

/// The store the command line selects for the service: the embedded one in `--data-dir`,
/// or PostgreSQL at `--database-url`.
pub(crate) struct ServiceStore {
    pub(crate) store: Arc<dyn Store>,
    /// Where it is, for messages.
    place: Place,
    /// Records by state for `/metrics`.
    pub(crate) counts: crate::metrics::StateCounter,
}

impl ServiceStore {
    /// Refuses a store holding vectors of another embedder than `embedder`, the one
    /// `common` configures ([`crate::embedder::check_identity`]).
    pub(crate) fn check_embedder(
        &self,
        embedder: &dyn spine_embed::Embedder,
        common: &Common,
    ) -> Result<()> {
        let models =
            self.store.embedder_models().context("reading the embedder stamps of the store")?;
        crate::embedder::check_identity(
            &models,
            embedder,
            &common.embedder,
            &self.place.name,
            &self.place.flag,
        )
    }
}

/// The embedded store's directory `common` selects; `existing`: refuse one holding no
/// store (a mistyped --data-dir would otherwise look like an empty store).
pub(crate) fn data_dir(common: &Common, existing: bool) -> Result<PathBuf> {
    let data_dir = common.data_dir.clone().unwrap_or_else(default_data_dir);
    if existing && !data_dir.join(DB_FILE).is_file() {
        bail!("no Spine store in {} (no {DB_FILE} there): check --data-dir", data_dir.display());
    }
    Ok(data_dir)
}

/// Who opens a store ([`service_store`]).
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Opener {
    /// A server: creates the embedded store if there is none, and loads its search index in
    /// the background at once (it will serve many searches).
    Server,
    /// A hook: opens only an existing store (never creates one) and never loads its search
    /// index (a search scans its scope in SQL, [`SqliteStore::search_without_loading`]).
    Hook,
}

/// Opens the store `common` selects, as `opener` needs it.
pub(crate) fn service_store(common: &Common, opener: Opener) -> Result<ServiceStore> {
    if let Some(url) = database_url(common) {
        let store = Arc::new(open_postgres(url)?);
        tracing::info!(database = %store.target(), "store open");
        let place = Place::postgres(&store);
        let counted = store.clone();
        return Ok(ServiceStore {
            store,
            place,
            counts: Arc::new(move |now| counted.state_counts(None, now)),
        });
    }
    let data_dir = data_dir(common, opener == Opener::Hook)?;
    let store = Arc::new(open_embedded(&data_dir)?);
    tracing::info!(db = %store.path().display(), "store open");
    let counted = store.clone();
    Ok(ServiceStore {
        place: Place::embedded(&data_dir),
        counts: Arc::new(move |now| counted.state_counts(None, now)),
        store: {
            if opener == Opener::Server {
                let warm = store.clone();
                std::thread::Builder::new().name("index-load".into()).spawn(move || {
                    if let Err(e) = warm.warm_index() {
                        tracing::warn!(error = %e, "loading the search index failed; the first search retries");
                    }
                })?;
            } else {
                store.search_without_loading();
            }
            store
        },
    })
}
