//! Server-wide settings that every command takes as a flag or its `SPINE_*` variable: the
//! record bounds (SPEC Limits) and search reranking. clap parses and range-checks each value
//! and names the flag and the variable when one is wrong.

use std::time::Duration;

use anyhow::{Result, bail};
use clap::{Args, ValueEnum};
use spine_core::Limits;
use spine_core::secrets::SecretsPolicy;
use spine_service::rerank::RerankConfig;

/// A whole number above zero.
fn positive(s: &str) -> Result<usize, String> {
    s.trim()
        .parse::<usize>()
        .ok()
        .filter(|n| *n > 0)
        .ok_or_else(|| format!("must be a whole number above 0, got {s:?}"))
}

/// The record bounds (SPEC Limits; docs/records.md, "Limits").
#[derive(Debug, Clone, Args)]
pub struct LimitArgs {
    /// Most bytes of a memory's content.
    #[arg(long, global = true, env = "SPINE_MEMORY_MAX_CONTENT_BYTES", default_value = "65536", value_parser = positive)]
    pub memory_max_content_bytes: usize,
    /// Most tags per record.
    #[arg(long, global = true, env = "SPINE_MEMORY_MAX_TAGS", default_value = "128", value_parser = positive)]
    pub memory_max_tags: usize,
    /// Most bytes per tag.
    #[arg(long, global = true, env = "SPINE_MEMORY_MAX_TAG_BYTES", default_value = "128", value_parser = positive)]
    pub memory_max_tag_bytes: usize,
    /// Most bytes of a summary the client writes.
    #[arg(long, global = true, env = "SPINE_MEMORY_MAX_SUMMARY_BYTES", default_value = "512", value_parser = positive)]
    pub memory_max_summary_bytes: usize,
    /// Writes report live records of the same scope at this cosine or above as `similar`
    /// (near-duplicates; the write still happens); `off` turns the check off.
    #[arg(long, global = true, env = "SPINE_SIMILAR_THRESHOLD", default_value = "0.92", value_parser = similar_threshold)]
    pub similar_threshold: SimilarThreshold,
    /// Written text holding what looks like a credential (private key, access token,
    /// password assignment…): `reject` refuses the write (hint `secret_detected`), `redact`
    /// stores it with each credential replaced by `[REDACTED:<kind>]`, `allow` stores it.
    #[arg(long, global = true, env = "SPINE_SECRETS", default_value = "reject", value_parser = secrets_policy)]
    pub secrets: SecretsPolicy,
}

fn secrets_policy(s: &str) -> Result<SecretsPolicy, String> {
    SecretsPolicy::parse(s.trim())
        .ok_or_else(|| format!("must be reject, redact or allow; got {s:?}"))
}

/// `--similar-threshold`: a cosine in (0, 1], or off.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SimilarThreshold(pub Option<f32>);

fn similar_threshold(s: &str) -> Result<SimilarThreshold, String> {
    match s.trim() {
        "off" => Ok(SimilarThreshold(None)),
        t => t
            .parse::<f32>()
            .ok()
            .filter(|x| *x > 0.0 && *x <= 1.0)
            .map(|x| SimilarThreshold(Some(x)))
            .ok_or_else(|| format!("must be a cosine above 0 and at most 1, or off; got {s:?}")),
    }
}

impl LimitArgs {
    /// The bounds the service enforces.
    pub fn limits(&self) -> Limits {
        Limits {
            max_content_bytes: self.memory_max_content_bytes,
            max_tags: self.memory_max_tags,
            max_tag_bytes: self.memory_max_tag_bytes,
            max_summary_bytes: self.memory_max_summary_bytes,
        }
    }
}

/// Which ranker reorders search results.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Ranker {
    /// The default order (dense + lexical).
    Off,
    /// Reorder by a rerank provider's probability that each hit answers the query.
    Jev,
}

/// Search reranking (docs/records.md, "Reranking").
#[derive(Debug, Clone, Args)]
pub struct RerankArgs {
    /// `jev` reorders search_memory and search_discovery results with the rerank provider
    /// at --rerank-url; `off` keeps the default order.
    #[arg(long, global = true, env = "SPINE_SEARCH_RANKER", value_enum, default_value = "off")]
    pub search_ranker: Ranker,
    /// Base URL of the rerank provider (http or https; requests go to <url>/rerank).
    #[arg(long, global = true, env = "SPINE_RERANK_URL")]
    pub rerank_url: Option<String>,
    /// Model name sent to the rerank provider (omit for a provider serving one model).
    #[arg(long, global = true, env = "SPINE_RERANK_MODEL")]
    pub rerank_model: Option<String>,
    /// Bearer key for the rerank provider.
    #[arg(long, global = true, env = "SPINE_RERANK_API_KEY", hide_env_values = true)]
    pub rerank_api_key: Option<String>,
    /// Longest a rerank request may take, in milliseconds, before search keeps its default
    /// order.
    #[arg(long, global = true, env = "SPINE_RERANK_TIMEOUT_MS", default_value = "5000", value_parser = clap::value_parser!(u64).range(1..))]
    pub rerank_timeout_ms: u64,
}

impl RerankArgs {
    /// The reranker's settings, or `None` when reranking is off.
    pub fn config(&self) -> Result<Option<RerankConfig>> {
        if self.search_ranker == Ranker::Off {
            return Ok(None);
        }
        fn set(v: &Option<String>) -> Option<&str> {
            v.as_deref().map(str::trim).filter(|v| !v.is_empty())
        }
        let Some(url) = set(&self.rerank_url) else {
            bail!(
                "--search-ranker jev needs --rerank-url (SPINE_RERANK_URL), the base URL of the \
                 rerank provider (requests go to <url>/rerank)"
            );
        };
        let config = RerankConfig {
            model: set(&self.rerank_model).map(str::to_owned),
            api_key: set(&self.rerank_api_key).and_then(spine_embed::http::ApiKey::new),
            timeout: Duration::from_millis(self.rerank_timeout_ms),
            ..RerankConfig::new(url.trim_end_matches('/'))
        };
        config.check().map_err(|e| anyhow::anyhow!("--rerank-url (SPINE_RERANK_URL): {e}"))?;
        Ok(Some(config))
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        limits: LimitArgs,
        #[command(flatten)]
        rerank: RerankArgs,
    }

    fn parse(args: &[&str]) -> Result<Cli, clap::Error> {
        Cli::try_parse_from(std::iter::once("spine").chain(args.iter().copied()))
    }

    #[test]
    fn limits_default_to_the_spec_and_take_flags() {
        assert_eq!(parse(&[]).unwrap().limits.limits(), Limits::default());
        let l = parse(&["--memory-max-tags", "3", "--memory-max-content-bytes", "10"])
            .unwrap()
            .limits
            .limits();
        assert_eq!((l.max_tags, l.max_content_bytes, l.max_tag_bytes), (3, 10, 128));
        for bad in ["0", "-1", "x", ""] {
            let arg = format!("--memory-max-tag-bytes={bad}");
            let e = parse(&[&arg]).err().expect(bad).to_string();
            assert!(e.contains("--memory-max-tag-bytes"), "{e}");
        }
    }

    #[test]
    fn reranking_is_off_by_default_and_jev_needs_a_url() {
        assert!(parse(&[]).unwrap().rerank.config().unwrap().is_none());
        assert!(parse(&["--rerank-url", "ftp://x"]).unwrap().rerank.config().unwrap().is_none());
        assert!(parse(&["--search-ranker", "cohere"]).is_err());
        let e = parse(&["--search-ranker", "jev"]).unwrap().rerank.config().unwrap_err();
        assert!(e.to_string().contains("SPINE_RERANK_URL"), "{e}");
        let e = parse(&["--search-ranker", "jev", "--rerank-url", "ftp://h"])
            .unwrap()
            .rerank
            .config()
            .unwrap_err();
        assert!(e.to_string().contains("--rerank-url"), "{e}");
        assert!(parse(&["--search-ranker", "jev", "--rerank-timeout-ms", "0"]).is_err());
        let c = parse(&[
            "--search-ranker",
            "jev",
            "--rerank-url",
            "https://rerank.example.com/v1/",
            "--rerank-model",
            "m",
            "--rerank-api-key",
            "",
            "--rerank-timeout-ms",
            "1500",
        ])
        .unwrap()
        .rerank
        .config()
        .unwrap()
        .unwrap();
        assert_eq!(c.url, "https://rerank.example.com/v1");
        assert_eq!((c.model.as_deref(), c.api_key.as_ref().map(|k| k.expose())), (Some("m"), None));
        assert_eq!(c.timeout, Duration::from_millis(1500));
    }
}
