//! Choosing the embedder, checking it against the store, and re-embedding the store.
//!
//! - The built-in model loads on a background thread so the server answers `initialize`
//!   at once; the first call that needs a vector waits for the load to finish.
//! - An OpenAI-compatible server is used instead with `--embedder openai`.
//! - In a server either sits behind an LRU cache of query embeddings, and concurrent calls
//!   share forward passes (or HTTP requests) through a [`BatchingEmbedder`]; a hook, which
//!   embeds one text, uses the provider alone ([`build_for_one_text`]).
//! - A store holding vectors of another embedder is refused at start-up; `spine reindex`
//!   re-embeds it (`ops::reindex`, docs/embeddings.md).

use std::path::Path;
use std::sync::Arc;

use anyhow::{Result, bail};
use clap::{Args, ValueEnum};
use spine_embed::{
    BackgroundEmbedder, BatchingEmbedder, CachedEmbedder, Embedder, OpenAiConfig, OpenAiEmbedder,
    Precision,
};

/// Which embedder turns texts into vectors.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum EmbedderKind {
    /// The built-in all-MiniLM-L6-v2, on this machine's CPU (offline).
    Builtin,
    /// An OpenAI-compatible `/v1/embeddings` server (Ollama, vLLM, TEI, LM Studio, OpenAI…).
    Openai,
}

/// The embedder flags, shared by every command (docs/embeddings.md).
#[derive(Debug, Clone, Args)]
pub struct EmbedderArgs {
    /// Embedder: `builtin` (offline all-MiniLM-L6-v2) or `openai` (an OpenAI-compatible
    /// /v1/embeddings server, with --embed-url and --embed-model).
    #[arg(long, global = true, env = "SPINE_EMBEDDER", value_enum, default_value = "builtin")]
    pub embedder: EmbedderKind,
    /// Base URL of the OpenAI-compatible server, with or without the trailing /v1
    /// (e.g. http://localhost:11434 for Ollama).
    #[arg(long, global = true, env = "SPINE_EMBED_URL")]
    pub embed_url: Option<String>,
    /// Embedding model name on that server (e.g. nomic-embed-text); stamped on every vector
    /// as `openai:<model>`.
    #[arg(long, global = true, env = "SPINE_EMBED_MODEL")]
    pub embed_model: Option<String>,
    /// API key sent as a bearer token to the embedding server; never logged.
    #[arg(long, global = true, env = "SPINE_EMBED_API_KEY", hide_env_values = true)]
    pub embed_api_key: Option<String>,
    /// Vector length the embedding model must return; learned from the first answer when
    /// unset.
    #[arg(long, global = true, env = "SPINE_EMBED_DIMS")]
    pub embed_dims: Option<usize>,
    /// Precision of the built-in model's matrix products: `auto` (int8 on CPUs with AVX-512
    /// VNNI; elsewhere f32 arithmetic, with short texts' weights read in half precision on
    /// AVX2 CPUs without AVX-512), `f32` (the published weights as they are) or `int8`
    /// (README "Performance").
    #[arg(long, global = true, env = "SPINE_EMBED_PRECISION", value_enum, default_value = "auto")]
    pub embed_precision: PrecisionArg,
}

/// `--embed-precision`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum PrecisionArg {
    /// int8 where the CPU has AVX-512 VNNI (8-bit products, exact sums); elsewhere f32
    /// arithmetic, with texts of at most 32 tokens reading their weights in half precision
    /// on AVX2 CPUs without AVX-512 (docs/embeddings.md).
    Auto,
    /// The published weights as they are.
    F32,
    /// 8-bit products: with VNNI what `auto` picks; without, 7-bit weights and a slightly
    /// lower recall (docs/embeddings.md).
    Int8,
}

impl PrecisionArg {
    fn precision(self) -> Precision {
        match self {
            PrecisionArg::Auto => {
                let chosen = Precision::detect();
                let why = match chosen {
                    Precision::Int8 => "8-bit products on this CPU's VNNI instructions",
                    Precision::Mixed => {
                        "f32 arithmetic, short texts' weights in half precision (AVX2)"
                    }
                    Precision::F32 => "f32 arithmetic (int8 would lose recall without VNNI)",
                };
                tracing::info!(precision = ?chosen, "--embed-precision auto: {why}");
                chosen
            }
            PrecisionArg::F32 => Precision::F32,
            PrecisionArg::Int8 => {
                if !Precision::int8_is_fast() {
                    tracing::warn!(
                        "--embed-precision int8 without VNNI on this CPU: 7-bit weights on \
                         AVX2 kernels, faster than f32 but recall@10 on the code evaluation \
                         corpus 0.5 points lower (docs/embeddings.md)"
                    );
                }
                Precision::Int8
            }
        }
    }
}

impl EmbedderArgs {
    /// The same embedder for a process that embeds one text and exits (`spine hook prompt`):
    /// there `auto` never takes int8, whose weights take longer to prepare at load (~40 ms
    /// more on two cores) than they save on one text. Any other choice stays as given.
    pub fn for_one_text(&self) -> EmbedderArgs {
        let mut one = self.clone();
        if one.embed_precision == PrecisionArg::Auto && Precision::detect() == Precision::Int8 {
            one.embed_precision = PrecisionArg::F32;
        }
        one
    }

    /// The flags that select this embedder again, for messages (the key is never shown).
    fn flags(&self) -> String {
        match self.embedder {
            EmbedderKind::Builtin => "--embedder builtin".to_owned(),
            EmbedderKind::Openai => {
                let mut s = format!(
                    "--embedder openai --embed-url {} --embed-model {}",
                    self.embed_url.as_deref().unwrap_or("URL"),
                    self.embed_model.as_deref().unwrap_or("MODEL")
                );
                if let Some(d) = self.embed_dims {
                    s.push_str(&format!(" --embed-dims {d}"));
                }
                if self.embed_api_key.is_some() {
                    s.push_str(" (and the same SPINE_EMBED_API_KEY)");
                }
                s
            }
        }
    }
}

/// The configured embedder behind the batcher and the query-embedding cache. The built-in model loads in
/// the background; the HTTP provider makes no request until the first embedding.
pub fn build(args: &EmbedderArgs, model_dir: &Path) -> Result<Arc<dyn Embedder>> {
    let provider = provider(args, model_dir, Load::Background)?;
    Ok(Arc::new(CachedEmbedder::new(BatchingEmbedder::new(provider))))
}

/// The embedder of a process that embeds one text and exits (`spine hook prompt`), as
/// [`EmbedderArgs::for_one_text`] chooses it: the provider alone, without the batcher and
/// the query cache (one text shares no pass and repeats no query), and with the model
/// loading and its pass running at the process's own priority rather than the batcher's
/// lower ones. The process waits on nothing else, and beside a busy machine (a build on
/// every core) the lower priority left it a sliver of a core (docs/hooks.md). The built-in
/// model loads at once when `eager`, else on first use.
pub fn build_for_one_text(
    args: &EmbedderArgs,
    model_dir: &Path,
    eager: bool,
) -> Result<Arc<dyn Embedder>> {
    let load = if eager { Load::Now } else { Load::OnUse };
    Ok(Arc::from(provider(&args.for_one_text(), model_dir, load)?))
}

/// When the built-in model loads.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Load {
    /// Now, on a thread at the embedding workers' lower priority (a server).
    Background,
    /// Now, on a thread at the process's priority.
    Now,
    /// At the first embedding, on the caller's thread.
    OnUse,
}

/// The embedder `args` selects, unwrapped.
fn provider(args: &EmbedderArgs, model_dir: &Path, load: Load) -> Result<Box<dyn Embedder>> {
    Ok(match args.embedder {
        EmbedderKind::Builtin => {
            if args.embed_url.is_some() || args.embed_model.is_some() {
                tracing::warn!("--embed-url and --embed-model are ignored with --embedder builtin");
            }
            let precision = args.embed_precision.precision();
            match load {
                Load::Background => {
                    Box::new(BackgroundEmbedder::start(model_dir, precision, true)?)
                }
                Load::Now => Box::new(BackgroundEmbedder::start(model_dir, precision, false)?),
                Load::OnUse => Box::new(BackgroundEmbedder::lazy(model_dir, precision)),
            }
        }
        EmbedderKind::Openai => {
            let (Some(url), Some(model)) = (&args.embed_url, &args.embed_model) else {
                bail!(
                    "--embedder openai needs --embed-url (SPINE_EMBED_URL), the server's base URL, \
                     and --embed-model (SPINE_EMBED_MODEL), the embedding model's name"
                );
            };
            let config = OpenAiConfig {
                api_key: args.embed_api_key.clone().and_then(spine_embed::http::ApiKey::new),
                dims: args.embed_dims,
                ..OpenAiConfig::new(url.clone(), model.clone())
            };
            let embedder = OpenAiEmbedder::new(config)?;
            tracing::info!(
                endpoint = embedder.endpoint(),
                model = embedder.model_id(),
                authenticated = args.embed_api_key.is_some(),
                "embedding with an OpenAI-compatible server"
            );
            Box::new(embedder)
        }
    })
}

/// Refuses a store holding vectors of another embedder than `embedder`: their similarity
/// to this embedder's queries would be meaningless (docs/embeddings.md, "Identity").
pub fn check_identity(
    models: &[(String, u64)],
    embedder: &dyn Embedder,
    args: &EmbedderArgs,
    place: &str,
    store_flag: &str,
) -> Result<()> {
    let stamps = spine_embed::Stamps::of(models, embedder.model_id());
    if stamps.compatible() {
        return Ok(());
    }
    let old_flags: Vec<String> = stamps.others.iter().map(|(m, _)| flags_for(m)).collect();
    bail!(
        "the store in {place} holds vectors from another embedder than the configured one.\n  \
         configured embedder: {configured} ({mine} so far)\n  \
         in the store:        {listed}\n\
         Vectors of different embedders cannot be compared, so spine will not start. Either:\n  \
         - re-embed every record with the new embedder (batched, resumable, safe while an \
         old server runs):\n      spine reindex {store_flag} {flags}\n  \
         - or start spine with the embedder the data was written with: {old}",
        configured = stamps.configured,
        mine = stamps.mine_listed(),
        listed = stamps.listed(),
        flags = args.flags(),
        old = old_flags.join(" or "),
    );
}

/// The flags that select the embedder stamped `model_id`.
pub(crate) fn flags_for(model_id: &str) -> String {
    match spine_embed::Identity::parse(model_id) {
        spine_embed::Identity::Builtin => "--embedder builtin".to_owned(),
        spine_embed::Identity::OpenAi(model) => {
            format!("--embedder openai --embed-url <its server> --embed-model {model}")
        }
        spine_embed::Identity::Other(stamp) => format!("the embedder `{stamp}`"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use spine_embed::MODEL_ID;

    fn openai(key: Option<&str>) -> EmbedderArgs {
        EmbedderArgs {
            embedder: EmbedderKind::Openai,
            embed_url: Some("http://localhost:11434".into()),
            embed_model: Some("nomic-embed-text".into()),
            embed_api_key: key.map(String::from),
            embed_dims: Some(768),
            embed_precision: PrecisionArg::Auto,
        }
    }

    #[test]
    fn suggested_flags_reselect_the_embedder_without_the_key() {
        let shown = openai(Some("sk-secret")).flags();
        assert_eq!(
            shown,
            "--embedder openai --embed-url http://localhost:11434 --embed-model nomic-embed-text \
             --embed-dims 768 (and the same SPINE_EMBED_API_KEY)"
        );
        assert!(!shown.contains("sk-secret"));
        let builtin = EmbedderArgs { embedder: EmbedderKind::Builtin, ..openai(None) };
        assert_eq!(builtin.flags(), "--embedder builtin");
    }

    #[test]
    fn a_one_text_process_takes_int8_only_when_asked() {
        let builtin = |p| EmbedderArgs {
            embedder: EmbedderKind::Builtin,
            embed_precision: p,
            ..openai(None)
        };
        let auto = builtin(PrecisionArg::Auto).for_one_text().embed_precision;
        match Precision::detect() {
            // Where `auto` means int8 for a server, a hook's one prompt goes through f32.
            Precision::Int8 => assert_eq!(auto, PrecisionArg::F32),
            _ => assert_eq!(auto, PrecisionArg::Auto),
        }
        for asked in [PrecisionArg::F32, PrecisionArg::Int8] {
            assert_eq!(builtin(asked).for_one_text().embed_precision, asked);
        }
    }

    /// The nice value of this process's first thread named `name` that is running now.
    #[cfg(target_os = "linux")]
    fn nice_of(name: &str) -> Option<i64> {
        for task in std::fs::read_dir("/proc/self/task").ok()?.flatten() {
            let comm = std::fs::read_to_string(task.path().join("comm")).unwrap_or_default();
            if comm.trim_end() != name {
                continue;
            }
            // After the command's closing parenthesis: the state (field 3) … the nice (19).
            let stat = std::fs::read_to_string(task.path().join("stat")).ok()?;
            return stat[stat.rfind(')')? + 2..].split(' ').nth(16)?.parse().ok();
        }
        None
    }

    /// A one-text process (a hook) loads the model at its own priority; a server at the
    /// embedding workers' lower one. Each builds the real model and watches its loading
    /// thread until the first embedding, which waits for the load, returns.
    #[cfg(target_os = "linux")]
    #[test]
    fn a_one_text_process_loads_the_model_at_its_own_priority() {
        // SAFETY: a plain system call about the calling thread.
        let own = i64::from(unsafe { libc::getpriority(libc::PRIO_PROCESS, 0) });
        let args = EmbedderArgs { embedder: EmbedderKind::Builtin, ..openai(None) };
        let dir = spine_embed::default_model_dir();
        // The nice of the loading thread of an embedder `make` builds; a load too quick to be
        // seen running (a busy machine's scheduler) is tried again.
        let loading_nice = |make: &dyn Fn() -> Arc<dyn Embedder>| {
            (0..5).find_map(|_| {
                let e = make();
                let done = std::sync::atomic::AtomicBool::new(false);
                std::thread::scope(|s| {
                    s.spawn(|| {
                        e.embed(&["a first text"]).expect("the model loads");
                        done.store(true, std::sync::atomic::Ordering::Release);
                    });
                    let mut seen = None;
                    while !done.load(std::sync::atomic::Ordering::Acquire) {
                        seen = seen.or_else(|| nice_of("model-load"));
                        std::thread::yield_now();
                    }
                    seen
                })
            })
        };
        let hook = loading_nice(&|| build_for_one_text(&args, &dir, true).unwrap());
        assert_eq!(hook, Some(own), "a hook's model loads at the process's priority");
        let server = loading_nice(&|| build(&args, &dir).unwrap());
        let lowered = own.max(i64::from(spine_embed::WORKER_NICE));
        assert_eq!(server, Some(lowered), "a server's loads below its calls");
    }

    #[test]
    fn old_identities_map_back_to_flags() {
        assert_eq!(flags_for(MODEL_ID), "--embedder builtin");
        assert_eq!(
            flags_for("openai:bge-m3"),
            "--embedder openai --embed-url <its server> --embed-model bge-m3"
        );
        assert_eq!(flags_for("future:x"), "the embedder `future:x`");
    }

    #[test]
    fn openai_needs_url_and_model() {
        let args = EmbedderArgs { embed_url: None, ..openai(None) };
        let e = build(&args, Path::new("/nonexistent")).err().expect("refused").to_string();
        assert!(e.contains("--embed-url") && e.contains("--embed-model"), "{e}");
        let ok = build(&openai(None), Path::new("/nonexistent")).expect("no model files needed");
        assert_eq!((ok.model_id(), ok.dims()), ("openai:nomic-embed-text", 768));
    }
}
