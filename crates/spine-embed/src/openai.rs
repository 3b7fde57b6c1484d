//! An [`Embedder`] that calls an OpenAI-compatible `POST /v1/embeddings` endpoint.
//!
//! The wire protocol is the one OpenAI published and that Ollama, vLLM, Hugging Face TEI,
//! LM Studio, LocalAI and most gateways serve: the request is `{"model", "input": [texts]}`,
//! the answer `{"data": [{"index", "embedding": [floats]}]}`, in any order (the `index`
//! says which input a vector belongs to).
//!
//! Blocking on purpose: the service calls embedders from blocking threads (SQLite and
//! inference run off the async reactor), so a blocking client keeps the trait synchronous.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::http::{ApiKey, Failure, Retry, blocking_client, post_json, snippet, with_retries};
use crate::{EmbedError, Embedder};

/// Settings of an [`OpenAiEmbedder`]. `Debug` never shows the API key ([`ApiKey`]).
#[derive(Clone, Debug)]
pub struct OpenAiConfig {
    /// Server address, e.g. `http://localhost:11434` or `https://api.example.com/v1`: a
    /// trailing `/v1` (or `/v1/embeddings`) is accepted and not doubled.
    pub base_url: String,
    /// Model name sent with every request; the embedder's identity is `openai:<model>`.
    pub model: String,
    /// Sent as `Authorization: Bearer <key>` when set.
    pub api_key: Option<ApiKey>,
    /// Expected vector length. When set, any other length is an error; when not, the first
    /// answer fixes it for the life of the embedder. It is a check only: it is not sent to
    /// the server (not every server accepts OpenAI's `dimensions` parameter).
    pub dims: Option<usize>,
    /// Texts per request (at least 1).
    pub batch_size: usize,
    /// Limit on one request, connection included.
    pub timeout: Duration,
    /// Extra attempts after a transient failure: a connection error, a timeout, HTTP 429 or
    /// 5xx. Other 4xx answers are never retried: the same request would fail again.
    pub retries: u32,
    /// Wait before the first retry, doubled at each further retry. A `Retry-After` header
    /// (seconds) on a 429 or 5xx answer is honoured when longer; no wait exceeds 30 s.
    pub backoff: Duration,
}

impl OpenAiConfig {
    /// Settings with the defaults: no key, dims learned, 64 texts per request, 30 s
    /// timeout, 3 retries starting at 250 ms.
    pub fn new(base_url: impl Into<String>, model: impl Into<String>) -> Self {
        OpenAiConfig {
            base_url: base_url.into(),
            model: model.into(),
            api_key: None,
            dims: None,
            batch_size: 64,
            timeout: Duration::from_secs(30),
            retries: 3,
            backoff: Duration::from_millis(250),
        }
    }
}

/// An OpenAI-compatible embedding provider.
///
/// Invariant: every vector it returns has the same length (the configured `dims`, or the
/// length of the first vector it received) and unit L2 norm (a zero vector stays zero).
/// `Send + Sync`: share one behind an `Arc`.
pub struct OpenAiEmbedder {
    client: reqwest::blocking::Client,
    url: String,
    endpoint: reqwest::Url,
    config: OpenAiConfig,
    model_id: String,
    /// Vector length once known; 0 before the first answer when not configured.
    dims: AtomicUsize,
}

impl std::fmt::Debug for OpenAiEmbedder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OpenAiEmbedder")
            .field("url", &self.url)
            .field("model_id", &self.model_id)
            .field("dims", &self.dims.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}

#[derive(Serialize)]
struct Request<'a> {
    model: &'a str,
    input: &'a [&'a str],
}

#[derive(Deserialize)]
struct Response {
    data: Vec<Datum>,
}

#[derive(Deserialize)]
struct Datum {
    /// Which input this vector belongs to; a few servers omit it and answer in order.
    #[serde(default)]
    index: Option<usize>,
    embedding: Vec<f32>,
}

impl OpenAiEmbedder {
    /// Builds the embedder; no request is made until the first [`Embedder::embed`]. Safe to
    /// call from inside an async runtime (the blocking client is built on its own thread).
    pub fn new(config: OpenAiConfig) -> Result<Self, EmbedError> {
        if config.base_url.trim().is_empty() {
            return Err(EmbedError::Provider("the embedding server URL is empty".into()));
        }
        if config.model.trim().is_empty() {
            return Err(EmbedError::Provider("the embedding model name is empty".into()));
        }
        if config.dims == Some(0) {
            return Err(EmbedError::Provider("the configured dimensions must be above 0".into()));
        }
        let endpoint = crate::http::endpoint(&config.base_url, "v1", "embeddings")
            .map_err(|e| EmbedError::Provider(format!("the embedding server URL {e}")))?;
        let url = endpoint.to_string();
        let client = blocking_client(config.timeout).map_err(EmbedError::Provider)?;
        Ok(OpenAiEmbedder {
            client,
            url,
            endpoint,
            model_id: crate::Identity::OpenAi(&config.model).to_string(),
            dims: AtomicUsize::new(config.dims.unwrap_or(0)),
            config: OpenAiConfig { batch_size: config.batch_size.max(1), ..config },
        })
    }

    /// The full endpoint requests go to (`…/v1/embeddings`).
    pub fn endpoint(&self) -> &str {
        &self.url
    }

    /// One request with retries; the vectors in input order, checked and normalised.
    fn embed_chunk(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, EmbedError> {
        let policy = Retry { retries: self.config.retries, backoff: self.config.backoff };
        let vectors = with_retries("embedding", policy, || self.attempt(texts))
            .map_err(EmbedError::Provider)?;
        self.check(texts.len(), vectors)
    }

    /// One HTTP exchange: vectors in input order, not yet checked for length.
    fn attempt(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, Failure> {
        let request = Request { model: &self.config.model, input: texts };
        let answer =
            post_json(&self.client, self.endpoint.clone(), self.config.api_key.as_ref(), &request)
                .map_err(|e| Failure::of_transport(&self.url, self.config.timeout, &e))?;
        if !answer.status.is_success() {
            return Err(Failure::of_status(&self.url, &answer));
        }
        let parsed: Response = serde_json::from_slice(&answer.body).map_err(|e| {
            Failure::Permanent(format!(
                "{} answered with an unexpected body ({e}): {}",
                self.url,
                snippet(&String::from_utf8_lossy(&answer.body))
            ))
        })?;
        order(texts.len(), parsed.data)
            .map_err(|m| Failure::Permanent(format!("{} answered {m}", self.url)))
    }

    /// The contract of every embedder: all vectors of one length, finite, L2-normalised
    /// (one vector per text is already ensured by [`order`]).
    fn check(&self, n: usize, mut vectors: Vec<Vec<f32>>) -> Result<Vec<Vec<f32>>, EmbedError> {
        debug_assert_eq!(vectors.len(), n);
        for v in &mut vectors {
            if v.is_empty() {
                return Err(EmbedError::Provider(format!("{} returned an empty vector", self.url)));
            }
            let expected =
                match self.dims.compare_exchange(0, v.len(), Ordering::AcqRel, Ordering::Acquire) {
                    Ok(_) => v.len(),
                    Err(known) => known,
                };
            if v.len() != expected {
                let why = if self.config.dims.is_some() { "configured" } else { "established" };
                return Err(EmbedError::Provider(format!(
                    "{} returned a vector of {} dimensions for model {}, but {expected} were \
                     {why}; check the model name and --embed-dims",
                    self.url,
                    v.len(),
                    self.config.model
                )));
            }
            if v.iter().any(|x| !x.is_finite()) {
                return Err(EmbedError::Provider(format!(
                    "{} returned a vector with a non-finite value",
                    self.url
                )));
            }
            normalise(v);
        }
        Ok(vectors)
    }
}

/// Puts the answer's vectors in input order by their `index`; every input must be answered
/// exactly once.
fn order(n: usize, data: Vec<Datum>) -> Result<Vec<Vec<f32>>, String> {
    if data.len() != n {
        return Err(format!("{} vectors for {n} texts", data.len()));
    }
    let mut slots: Vec<Option<Vec<f32>>> = vec![None; n];
    for (position, d) in data.into_iter().enumerate() {
        let i = d.index.unwrap_or(position);
        match slots.get_mut(i) {
            Some(slot @ None) => *slot = Some(d.embedding),
            Some(Some(_)) => return Err(format!("index {i} twice")),
            None => return Err(format!("index {i} for {n} texts")),
        }
    }
    // Every slot is filled: n distinct in-range indexes for n slots.
    Ok(slots.into_iter().flatten().collect())
}

/// Scales `v` to unit length; a zero vector is left as it is (cosine treats it as 0).
fn normalise(v: &mut [f32]) {
    let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
    if norm > 0.0 {
        v.iter_mut().for_each(|x| *x /= norm);
    }
}

impl Embedder for OpenAiEmbedder {
    /// `openai:<model>`: the protocol and the model name, whatever server answers (the same
    /// model served by Ollama or vLLM gives the same vectors).
    fn model_id(&self) -> &str {
        &self.model_id
    }

    fn dims(&self) -> usize {
        self.dims.load(Ordering::Acquire)
    }

    fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, EmbedError> {
        let mut out = Vec::with_capacity(texts.len());
        for chunk in texts.chunks(self.config.batch_size) {
            out.extend(self.embed_chunk(chunk)?);
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn url_gets_v1_embeddings_once() {
        let at = |base: &str| OpenAiEmbedder::new(OpenAiConfig::new(base, "m")).map(|e| e.url);
        for base in ["http://h:1", "http://h:1/", "http://h:1/v1/", "http://h:1/v1/embeddings"] {
            assert_eq!(at(base).unwrap(), "http://h:1/v1/embeddings", "{base}");
        }
        assert_eq!(at("https://g/openai").unwrap(), "https://g/openai/v1/embeddings");
        let e = at("ftp://h").err().unwrap().to_string();
        assert!(e.contains("the embedding server URL must start with http://"), "{e}");
    }

    #[test]
    fn order_follows_index_and_rejects_gaps_and_repeats() {
        let d = |index: Option<usize>, x: f32| Datum { index, embedding: vec![x] };
        let v = order(3, vec![d(Some(2), 2.0), d(Some(0), 0.0), d(Some(1), 1.0)]).unwrap();
        assert_eq!(v, [[0.0], [1.0], [2.0]]);
        let v = order(2, vec![d(None, 0.0), d(None, 1.0)]).unwrap();
        assert_eq!(v, [[0.0], [1.0]]);
        assert!(order(2, vec![d(Some(0), 0.0), d(Some(0), 1.0)]).unwrap_err().contains("twice"));
        assert!(order(2, vec![d(Some(0), 0.0), d(Some(5), 1.0)]).unwrap_err().contains("index 5"));
        assert!(order(2, vec![d(Some(0), 0.0)]).unwrap_err().contains("1 vectors for 2"));
    }

    #[test]
    fn normalise_gives_unit_length_and_keeps_zero() {
        let mut v = vec![3.0, 4.0];
        normalise(&mut v);
        assert_eq!(v, [0.6, 0.8]);
        let mut z = vec![0.0, 0.0];
        normalise(&mut z);
        assert_eq!(z, [0.0, 0.0]);
    }

    #[test]
    fn debug_never_shows_the_key() {
        let mut c = OpenAiConfig::new("http://h", "m");
        c.api_key = ApiKey::new("sk-secret");
        let shown = format!("{c:?}");
        assert!(!shown.contains("sk-secret") && shown.contains("redacted"), "{shown}");
        let e = OpenAiEmbedder::new(c).unwrap();
        assert!(!format!("{e:?}").contains("sk-secret"));
        assert_eq!(e.model_id(), "openai:m");
        assert_eq!(e.dims(), 0);
    }

    #[test]
    fn bad_settings_are_rejected_up_front() {
        for (url, model, dims) in [
            ("", "m", None),
            ("http://h", " ", None),
            ("http://h", "m", Some(0)),
            ("h:1", "m", None),
        ] {
            let c = OpenAiConfig { dims, ..OpenAiConfig::new(url, model) };
            assert!(
                matches!(OpenAiEmbedder::new(c), Err(EmbedError::Provider(_))),
                "{url} {model}"
            );
        }
    }

    #[test]
    fn snippet_is_short_and_on_one_line() {
        assert_eq!(snippet(""), "(empty body)");
        assert_eq!(snippet("a\n  b"), "a b");
        let long = "x".repeat(1000);
        assert_eq!(snippet(&long).chars().count(), 301);
    }
}
