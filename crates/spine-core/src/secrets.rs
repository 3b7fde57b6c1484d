//! Credentials in text a client writes: private-key blocks, well-known token shapes, URLs
//! with a password, `password = "…"`-style assignments, and high-entropy strings next to a
//! secret-like word. SPEC store_memory: memories are deliberate knowledge, never secrets.
//!
//! Each finding names its kind and where it is, never its text, so an error can say what was
//! found without echoing it. Rules are tuned for no false positives on prose and source code
//! (`spine-bench secrets` measures both) at the cost of missing secrets with no telling
//! shape: placeholders (`<password>`, `${TOKEN}`, `changeme`), type annotations
//! (`password: String`), expressions (`token = self.token()`) and pure-hex digests are not
//! findings.

use std::sync::LazyLock;

use regex::Regex;

/// What the server does with a write that holds a credential (`--secrets`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SecretsPolicy {
    /// Refuse the write: `invalid_argument`, hint `secret_detected` (the default).
    #[default]
    Reject,
    /// Store it with each credential replaced by `[REDACTED:<kind>]`.
    Redact,
    /// Store it as written.
    Allow,
}

impl SecretsPolicy {
    /// Parses `reject`, `redact` or `allow`.
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "reject" => Some(SecretsPolicy::Reject),
            "redact" => Some(SecretsPolicy::Redact),
            "allow" => Some(SecretsPolicy::Allow),
            _ => None,
        }
    }
}

/// One credential found: its kind (`"a GitHub token"`) and its byte span in the text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finding {
    /// What it looks like, as a phrase: "a private key block".
    pub kind: &'static str,
    /// A short slug for redaction marks: `private-key`.
    pub slug: &'static str,
    /// Byte range of the credential in the text.
    pub span: std::ops::Range<usize>,
}

struct Rule {
    kind: &'static str,
    slug: &'static str,
    re: Regex,
    /// The capture group holding the credential (0: the whole match).
    group: usize,
    /// Further check of the captured value.
    check: fn(&str) -> bool,
}

fn any(_: &str) -> bool {
    true
}

static RULES: LazyLock<Vec<Rule>> = LazyLock::new(|| {
    let rule = |kind, slug, re: &str, group, check| Rule {
        kind,
        slug,
        re: Regex::new(re).expect("the secret rules compile"),
        group,
        check,
    };
    vec![
        rule(
            "a private key block",
            "private-key",
            r"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----",
            0,
            any,
        ),
        rule("an AWS access key id", "aws-key", r"\b(?:AKIA|ASIA|ABIA|ACCA)[0-9A-Z]{16}\b", 0, any),
        rule(
            "a GitHub token",
            "github-token",
            r"\b(?:gh[pousr]_[A-Za-z0-9]{36,255}|github_pat_[A-Za-z0-9_]{60,255})\b",
            0,
            any,
        ),
        rule("a GitLab token", "gitlab-token", r"\bglpat-[A-Za-z0-9_-]{20,}", 0, any),
        rule("a Slack token", "slack-token", r"\bxox[abeoprs]-[A-Za-z0-9-]{10,}", 0, any),
        rule(
            "a Slack webhook URL",
            "slack-webhook",
            r"hooks\.slack\.com/services/T[A-Z0-9]+/B[A-Z0-9]+/[A-Za-z0-9]{16,}",
            0,
            any,
        ),
        rule("a Stripe key", "stripe-key", r"\b(?:sk|rk)_(?:live|test)_[A-Za-z0-9]{20,}\b", 0, any),
        rule("a Google API key", "google-key", r"\bAIza[0-9A-Za-z_-]{35}", 0, any),
        rule(
            "an OpenAI or Anthropic API key",
            "ai-key",
            r"\bsk-(?:ant-[a-z]+\d*-[A-Za-z0-9_-]{40,}|proj-[A-Za-z0-9_-]{40,}|[A-Za-z0-9]{20}T3BlbkFJ[A-Za-z0-9]{20})",
            0,
            any,
        ),
        rule("an npm token", "npm-token", r"\bnpm_[A-Za-z0-9]{36}\b", 0, any),
        rule(
            "a JSON Web Token",
            "jwt",
            r"\beyJ[A-Za-z0-9_-]{10,}\.eyJ[A-Za-z0-9_-]{10,}\.[A-Za-z0-9_-]{10,}",
            0,
            any,
        ),
        rule(
            "a URL with a password",
            "url-password",
            r"\b[a-zA-Z][a-zA-Z0-9+.-]{1,20}://[^\s/:@'\x22]{1,64}:([^\s/@'\x22]{3,128})@[A-Za-z0-9.\[-]",
            1,
            |v| !placeholder(v),
        ),
        rule(
            "a password or key assignment",
            "assignment",
            r#"(?i)(?:\b|_)(?:password|passwd|pwd|passphrase|secret|secret[_-]?key|api[_-]?key|apikey|access[_-]?key|access[_-]?token|auth[_-]?token|client[_-]?secret|private[_-]?key)\b["']?\s*(?::=|=|:)\s*(?:"([^"\s]{6,200})"|'([^'\s]{6,200})')"#,
            1,
            |v| !placeholder(v),
        ),
        rule(
            "a password or key assignment",
            "assignment",
            r#"(?i)(?:\b|_)(?:password|passwd|pwd|passphrase|secret|secret[_-]?key|api[_-]?key|apikey|access[_-]?key|access[_-]?token|auth[_-]?token|client[_-]?secret|private[_-]?key)\s*(?::=|=)\s*([A-Za-z0-9!@#$%^+/=_~-]{8,200})(?:[\s;,]|$)"#,
            1,
            |v| {
                !placeholder(v)
                    && v.bytes().any(|b| b.is_ascii_digit())
                    && v.bytes().any(|b| b.is_ascii_alphabetic())
            },
        ),
        rule("a bearer token", "bearer", r"(?i)\bbearer\s+([A-Za-z0-9._~+/-]{20,}=*)", 1, |v| {
            high_entropy(v, 3.5)
        }),
        rule(
            "a high-entropy string next to a secret-like word",
            "high-entropy",
            r"(?i)\b(?:token|secret|password|passwd|credential|credentials|api[_ -]?key|private[_ -]?key|auth)\b[^\n]{0,40}?[\s:=\x22'`]([A-Za-z0-9+/_=-]{24,200})",
            1,
            |v| high_entropy(v, 4.2),
        ),
    ]
});

/// A value standing for a secret rather than being one.
fn placeholder(v: &str) -> bool {
    let l = v.to_ascii_lowercase();
    let l = l.trim_matches(|c: char| !c.is_ascii_alphanumeric());
    const WORDS: &[&str] = &[
        "password",
        "passwd",
        "secret",
        "changeme",
        "change_me",
        "example",
        "redacted",
        "xxxxxx",
        "your_password",
        "yourpassword",
        "mypassword",
        "placeholder",
        "none",
        "null",
        "empty",
        "token",
        "hunter2",
        "pass",
        "dummy",
        "sample",
        "test",
        "testing",
        "foobar",
    ];
    v.starts_with(['$', '<', '{', '%', '*', '['])
        || v.contains("${")
        || v.contains("{{")
        || WORDS.contains(&l)
        || l.chars().all(|c| c == 'x' || c == '*')
        || (v.chars().all(|c| c.is_ascii_lowercase() || c == '_') && v.contains('_'))
        || v.contains("REDACTED")
        || v.ends_with("()")
}

/// Shannon entropy in bits per character at or above `bits`, letters and digits both present,
/// not hexadecimal only (commit ids and digests), not an identifier in snake or kebab case.
fn high_entropy(v: &str, bits: f64) -> bool {
    let has_digit = v.bytes().any(|b| b.is_ascii_digit());
    let has_upper = v.bytes().any(|b| b.is_ascii_uppercase());
    let has_lower = v.bytes().any(|b| b.is_ascii_lowercase());
    if !(has_digit && (has_upper || has_lower)) || v.bytes().all(|b| b.is_ascii_hexdigit()) {
        return false;
    }
    if !(has_upper && has_lower) && v.contains(['_', '-']) {
        return false;
    }
    let mut counts = [0u32; 256];
    for b in v.bytes() {
        counts[b as usize] += 1;
    }
    let n = v.len() as f64;
    let entropy: f64 = counts
        .iter()
        .filter(|&&c| c > 0)
        .map(|&c| {
            let p = f64::from(c) / n;
            -p * p.log2()
        })
        .sum();
    entropy >= bits
}

/// Every credential in `text`, in order, overlapping findings merged into the first.
pub fn find_secrets(text: &str) -> Vec<Finding> {
    let mut found: Vec<Finding> = Vec::new();
    for rule in RULES.iter() {
        for caps in rule.re.captures_iter(text) {
            let m = (rule.group..caps.len().max(rule.group + 1))
                .find_map(|g| caps.get(g))
                .or_else(|| caps.get(0));
            let Some(m) = m else { continue };
            if !(rule.check)(m.as_str()) {
                continue;
            }
            let span = m.range();
            if found.iter().any(|f| f.span.start < span.end && span.start < f.span.end) {
                continue;
            }
            found.push(Finding { kind: rule.kind, slug: rule.slug, span });
        }
    }
    found.sort_by_key(|f| f.span.start);
    found
}

/// `text` with each finding replaced by `[REDACTED:<slug>]`.
pub fn redact(text: &str, findings: &[Finding]) -> String {
    let mut out = String::with_capacity(text.len());
    let mut at = 0;
    for f in findings {
        out.push_str(&text[at..f.span.start]);
        out.push_str(&format!("[REDACTED:{}]", f.slug));
        at = f.span.end;
    }
    out.push_str(&text[at..]);
    out
}

/// Real-shaped fake credentials (none is valid anywhere) and the kind each must be found as:
/// the detection set of the tests and of `spine-bench secrets`.
pub const FAKE_CREDENTIALS: &[(&str, &str)] = &[
    (
        "-----BEGIN RSA PRIVATE KEY-----\nMIIEpAIBAAKCAQEA\n-----END RSA PRIVATE KEY-----",
        "private-key",
    ),
    ("-----BEGIN OPENSSH PRIVATE KEY-----", "private-key"),
    ("-----BEGIN PGP PRIVATE KEY BLOCK-----", "private-key"),
    ("the key is AKIAIOSFODNN7EXAMPLE for prod", "aws-key"),
    ("export GH=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", "github-token"),
    (
        "github_pat_11ABCDEFG0123456789_abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123",
        "github-token",
    ),
    ("glpat-xJ3kf9Dk2lqPz8Wm4RtY", "gitlab-token"),
    ("slack bot xoxb-2345678901-2345678901234-AbCdEfGhIjKlMnOpQrStUvWx", "slack-token"),
    (
        "https://hooks.slack.com/services/T0ABCDEF1/B0ABCDEF2/aBcDeFgHiJkLmNoPqRsTuVwX",
        "slack-webhook",
    ),
    ("stripe sk_live_4eC39HqLyjWDarjtT1zdp7dc", "stripe-key"),
    ("AIzaSyDaGmWKa4JsXZ-HjGw7ISLn_3namBGewQe", "google-key"),
    ("OPENAI_API_KEY=sk-proj-Ab3dEf6hIj9kLm2nOp5qRs8tUv1wXy4zAb7cDe0fGh3iJk6l", "ai-key"),
    ("sk-ant-api03-Ab3dEf6hIj9kLm2nOp5qRs8tUv1wXy4zAb7cDe0fGh3iJk6lMn9oPq2rSt5uVw8x", "ai-key"),
    ("token npm_abcdefghijklmnopqrstuvwxyz0123456789", "npm-token"),
    (
        "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U",
        "jwt",
    ),
    ("DATABASE_URL=postgres://app:s3cr3tP4ss@db.internal:5432/app", "url-password"),
    ("password = \"Tr0ub4dor&3\"", "assignment"),
    ("db_password: 'kq93Lmz!x'", "assignment"),
    ("PASSWORD=Xk29sLq0pWz", "assignment"),
    ("client_secret=9f8Kd2LmQ0xZ4vB7nT1yR6wE3", "assignment"),
    ("curl -H 'Authorization: Bearer a8Kf93LmZq0Xv7Bn2Tr5Yw1Ec4' https://api", "bearer"),
    ("the deploy token is Zk8sQ2mX9vL4pR7tW1yB6nC3dF5gH0jK", "high-entropy"),
];

#[cfg(test)]
mod tests {
    use super::*;

    fn kinds(text: &str) -> Vec<&'static str> {
        find_secrets(text).into_iter().map(|f| f.slug).collect()
    }

    #[test]
    fn every_fake_credential_is_found_as_its_kind() {
        for (text, slug) in FAKE_CREDENTIALS {
            assert_eq!(kinds(text).first().copied(), Some(*slug), "{text}");
        }
    }

    #[test]
    fn prose_code_and_placeholders_are_not_secrets() {
        for text in [
            "Run cargo fmt and clippy with -D warnings before every commit.",
            "fn connect(password: &str, token: Option<String>) -> Result<Client>",
            "let password = config.password.clone();",
            "password: String,",
            "api_key = os.environ[\"API_KEY\"]",
            "postgres://postgres@127.0.0.1:5432/spine",
            "postgres://user:password@localhost/db",
            "https://user:${PASSWORD}@example.com",
            "password=<your password>",
            "secret_key = \"changeme\"",
            "The fix is commit 3f2a9c1e7b4d8a6f0e5c2b1a9d8e7f6a5b4c3d2e (the token refresh race).",
            "Token refresh uses the session_id_required_response helper.",
            "Set SPINE_TOKEN to the access token your identity provider issued.",
            "key: 01a21166-7636-73f6-98e5-99b2e2d287a4",
            "Bearer tokens are checked against the issuer's JWKS.",
            "The auth layer maps MalformedCursor to invalid_argument in handleRequest2Async.",
        ] {
            assert_eq!(kinds(text), Vec::<&str>::new(), "{text}");
        }
    }

    #[test]
    fn redaction_replaces_only_the_credential() {
        let text = "prod: password = \"Tr0ub4dor&3\" and AKIAIOSFODNN7EXAMPLE.";
        let found = find_secrets(text);
        assert_eq!(
            redact(text, &found),
            "prod: password = \"[REDACTED:assignment]\" and [REDACTED:aws-key]."
        );
    }
}
