//! [`BackgroundEmbedder`]: the built-in model, its weights loading on a thread of their own,
//! so that a server answers `initialize` at once; the first call that needs a vector waits for
//! the load to finish.

use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use crate::{BuiltinEmbedder, DIMS, EmbedError, Embedder, MODEL_FILES, MODEL_ID, Precision};

type Loaded = Result<BuiltinEmbedder, String>;

/// An [`Embedder`] whose weights load in the background.
pub struct BackgroundEmbedder {
    cell: Arc<OnceLock<Loaded>>,
    dir: PathBuf,
    precision: Precision,
}

fn load(dir: &Path, precision: Precision) -> Loaded {
    let started = std::time::Instant::now();
    let loaded = BuiltinEmbedder::load_with(dir, precision).map_err(|e| e.to_string());
    match &loaded {
        Ok(_) => tracing::info!(
            ms = started.elapsed().as_millis() as u64,
            precision = ?precision,
            "model loaded"
        ),
        Err(e) => tracing::error!(error = %e, "model failed to load"),
    }
    loaded
}

impl BackgroundEmbedder {
    /// Checks that the weights exist (so a missing model stops the server with instructions
    /// instead of failing later), then starts loading them; `lower`: at the note lane's
    /// lower priority (a server, whose calls come first), else at the process's own (a
    /// process that waits on nothing but the model: a hook).
    pub fn start(dir: &Path, precision: Precision, lower: bool) -> Result<Self, EmbedError> {
        let missing: Vec<String> =
            MODEL_FILES.iter().filter(|f| !dir.join(f).is_file()).map(|f| f.to_string()).collect();
        if !missing.is_empty() {
            return Err(EmbedError::ModelMissing { dir: dir.to_path_buf(), missing });
        }
        let cell: Arc<OnceLock<Loaded>> = Arc::new(OnceLock::new());
        let (bg, bg_dir) = (cell.clone(), dir.to_path_buf());
        std::thread::Builder::new()
            .name("model-load".into())
            .spawn(move || {
                // A server loads at the note lane's lower priority (crate::BatchingEmbedder);
                // rayon's global pool, which runs the large requests that bypass the lanes
                // (imports, reindexing), may start here and inherit it.
                if lower {
                    crate::lower_priority();
                }
                bg.get_or_init(|| load(&bg_dir, precision));
            })
            .map_err(|e| EmbedError::Load(format!("starting the model's loading thread: {e}")))?;
        Ok(BackgroundEmbedder { cell, dir: dir.to_path_buf(), precision })
    }

    /// Loads nothing until the first embedding (and checks nothing before it): for a command
    /// that may not need a vector at all (`spine hook session-start`).
    pub fn lazy(dir: &Path, precision: Precision) -> Self {
        BackgroundEmbedder { cell: Arc::new(OnceLock::new()), dir: dir.to_path_buf(), precision }
    }
}

impl Embedder for BackgroundEmbedder {
    fn model_id(&self) -> &str {
        MODEL_ID
    }

    fn dims(&self) -> usize {
        DIMS
    }

    fn ready(&self) -> Result<(), String> {
        match self.cell.get() {
            None => Err("the embedding model is still loading".into()),
            Some(Ok(_)) => Ok(()),
            Some(Err(e)) => Err(format!("the embedding model failed to load: {e}")),
        }
    }

    fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, EmbedError> {
        match self.cell.get_or_init(|| load(&self.dir, self.precision)) {
            Ok(model) => model.embed(texts),
            Err(e) => Err(EmbedError::Load(e.clone())),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ready_says_loading_then_why_the_load_failed() {
        let dir = tempfile::tempdir().unwrap();
        for f in MODEL_FILES {
            std::fs::write(dir.path().join(f), b"not a model").unwrap();
        }
        let lazy = BackgroundEmbedder::lazy(dir.path(), Precision::F32);
        assert_eq!(lazy.ready(), Err("the embedding model is still loading".into()));
        let started = BackgroundEmbedder::start(dir.path(), Precision::F32, false).unwrap();
        // Waits for the load (the one initialiser), which fails on these files.
        assert!(started.embed(&["x"]).is_err());
        let why = started.ready().unwrap_err();
        assert!(why.starts_with("the embedding model failed to load: "), "{why}");
    }
}
