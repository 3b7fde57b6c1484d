//! The built-in model, loaded on a background thread so the server answers `initialize`
//! at once; the first call that needs a vector waits for the load to finish.

use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use anyhow::Result;
use spine_embed::{BuiltinEmbedder, DIMS, EmbedError, Embedder, MODEL_ID};

type Loaded = Result<BuiltinEmbedder, String>;

/// An [`Embedder`] whose weights load in the background.
pub struct BackgroundEmbedder {
    cell: Arc<OnceLock<Loaded>>,
    dir: PathBuf,
}

fn load(dir: &Path) -> Loaded {
    let started = std::time::Instant::now();
    let loaded = BuiltinEmbedder::load(dir).map_err(|e| e.to_string());
    match &loaded {
        Ok(_) => tracing::info!(ms = started.elapsed().as_millis() as u64, "model loaded"),
        Err(e) => tracing::error!(error = %e, "model failed to load"),
    }
    loaded
}

impl BackgroundEmbedder {
    /// Checks that the weights exist (so a missing model stops the server with instructions
    /// instead of failing later), then starts loading them.
    pub fn start(dir: &Path) -> Result<Self> {
        let missing: Vec<String> = ["config.json", "tokenizer.json", "model.safetensors"]
            .iter()
            .filter(|f| !dir.join(f).is_file())
            .map(|f| f.to_string())
            .collect();
        if !missing.is_empty() {
            return Err(EmbedError::ModelMissing { dir: dir.to_path_buf(), missing }.into());
        }
        let cell: Arc<OnceLock<Loaded>> = Arc::new(OnceLock::new());
        let (bg, bg_dir) = (cell.clone(), dir.to_path_buf());
        std::thread::Builder::new().name("model-load".into()).spawn(move || {
            bg.get_or_init(|| load(&bg_dir));
        })?;
        Ok(BackgroundEmbedder { cell, dir: dir.to_path_buf() })
    }
}

impl Embedder for BackgroundEmbedder {
    fn model_id(&self) -> &str {
        MODEL_ID
    }

    fn dims(&self) -> usize {
        DIMS
    }

    fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, EmbedError> {
        match self.cell.get_or_init(|| load(&self.dir)) {
            Ok(model) => model.embed(texts),
            Err(e) => Err(EmbedError::Load(e.clone())),
        }
    }
}
