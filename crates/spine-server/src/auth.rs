//! OIDC bearer-token verification: a token becomes a [`Caller`] (SPEC "Authentication").
//!
//! [`Verifier::discover`] reads the issuer's discovery document and key set (JWKS) once;
//! [`Verifier::verify`] checks a token against the cached keys and derives `actor` and `owner`
//! from its claims. Transports call `verify` and never read identity from anywhere else.
//!
//! Key design decision: the signature algorithm is decided by the *key*, not by the token. Each
//! JWKS key is mapped to exactly one algorithm from its key type (RSA → RS256, P-256 → ES256,
//! Ed25519 → EdDSA) when the key set is loaded, and a token's header `alg` must equal its key's.
//! A token therefore cannot talk the verifier into `none` or into HMAC keyed with public key
//! bytes (the classic algorithm-confusion attack): neither is ever a key's algorithm. Token
//! headers that point elsewhere for keys (`jku`, `x5u`, `jwk`) are ignored, never fetched.

use std::sync::{Arc, PoisonError, RwLock};
use std::time::Duration;

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use jsonwebtoken::errors::ErrorKind;
use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use serde::Deserialize;
use serde_json::{Map, Value};
use spine_core::{Caller, Clock, SystemClock, Timestamp};

mod keys;

use keys::{DiscoveryDocument, KeySet, fetch_key_set, get_json};

/// The owner claim used when the operator names none (SPEC Authentication 2).
pub const DEFAULT_OWNER_CLAIM: &str = "email";

/// Clock skew tolerated on `exp` and `nbf`, in seconds, when the operator sets none.
pub const DEFAULT_LEEWAY_SECS: u64 = 60;

/// The shortest interval between two JWKS refreshes triggered by unknown key ids, so that
/// tokens with made-up `kid`s cannot turn the server into a request amplifier.
pub const DEFAULT_MIN_REFRESH: Duration = Duration::from_secs(30);

/// Time allowed for one discovery or JWKS request.
const HTTP_TIMEOUT: Duration = Duration::from_secs(10);

/// Claims naming the user, most specific first (SPEC Authentication 2: email, username, subject).
const ACTOR_CLAIMS: [&str; 4] = ["email", "preferred_username", "username", "sub"];

/// What the operator tells Spine about the identity provider.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OidcConfig {
    /// The issuer URL exactly as the provider states it in its discovery document and in the
    /// tokens' `iss` claim (a trailing slash matters).
    pub issuer: String,
    /// The value a token's `aud` claim (a string or an array) must contain.
    pub audience: String,
    /// The claim whose string value becomes the caller's `owner`; [`DEFAULT_OWNER_CLAIM`] by
    /// default.
    pub owner_claim: String,
    /// Clock skew tolerated on `exp` and `nbf`, in seconds; [`DEFAULT_LEEWAY_SECS`] by default.
    pub leeway_secs: u64,
    /// The web console's OAuth client id: tokens whose `aud` contains it (the ID tokens the
    /// console signs in with) are accepted beside [`OidcConfig::audience`].
    pub console_client_id: Option<String>,
}

impl OidcConfig {
    /// A configuration for `issuer` and `audience` with the default owner claim and leeway.
    pub fn new(issuer: impl Into<String>, audience: impl Into<String>) -> Self {
        OidcConfig {
            issuer: issuer.into(),
            audience: audience.into(),
            owner_claim: DEFAULT_OWNER_CLAIM.to_owned(),
            leeway_secs: DEFAULT_LEEWAY_SECS,
            console_client_id: None,
        }
    }
}

/// Why a token was refused, or why discovery failed.
///
/// Every message is safe to show the client: none echoes the token, its claims' values or a
/// key. [`AuthError::Discovery`] and [`AuthError::Config`] are operator-facing and only arise
/// from [`Verifier::discover`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AuthError {
    /// No bearer token accompanied the call.
    #[error("missing bearer token")]
    Missing,
    /// The credential is not a bearer token of the shape `header.payload.signature`.
    #[error("malformed bearer token")]
    Malformed,
    /// The token's `alg` is not one Spine accepts (RS256, ES256, EdDSA).
    #[error("token algorithm not accepted: only RS256, ES256 and EdDSA are")]
    UnsupportedAlgorithm,
    /// The token's `alg` differs from the algorithm of the key its `kid` names.
    #[error("token algorithm does not match its signing key")]
    AlgorithmMismatch,
    /// No key of the issuer's key set matches the token, even after refreshing the key set.
    #[error("token signed by an unknown key")]
    UnknownKey,
    /// The signature does not verify with the issuer's key.
    #[error("token signature is invalid")]
    BadSignature,
    /// `exp` lies in the past, beyond the leeway.
    #[error("token has expired")]
    Expired,
    /// `nbf` lies in the future, beyond the leeway.
    #[error("token is not valid yet")]
    NotYetValid,
    /// `iss` is missing or names another issuer.
    #[error("token was issued by an untrusted issuer")]
    WrongIssuer,
    /// `aud` does not contain this service's audience.
    #[error("token is not intended for this service")]
    WrongAudience,
    /// A claim Spine needs is absent, empty or not a string; the payload is the claim's name.
    #[error("token lacks the `{0}` claim")]
    MissingClaim(String),
    /// The discovery document or the key set could not be fetched or understood.
    #[error("OIDC discovery failed: {0}")]
    Discovery(String),
    /// The [`OidcConfig`] is unusable.
    #[error("invalid OIDC configuration: {0}")]
    Config(String),
}

impl AuthError {
    /// A short, stable name of the failure for metrics (`expired`, `unknown_key`, …); never
    /// anything from the token itself.
    pub fn reason(&self) -> &'static str {
        match self {
            AuthError::Missing => "missing_token",
            AuthError::Malformed => "malformed",
            AuthError::UnsupportedAlgorithm => "unsupported_algorithm",
            AuthError::AlgorithmMismatch => "algorithm_mismatch",
            AuthError::UnknownKey => "unknown_key",
            AuthError::BadSignature => "bad_signature",
            AuthError::Expired => "expired",
            AuthError::NotYetValid => "not_yet_valid",
            AuthError::WrongIssuer => "wrong_issuer",
            AuthError::WrongAudience => "wrong_audience",
            AuthError::MissingClaim(_) => "missing_claim",
            AuthError::Discovery(_) => "discovery",
            AuthError::Config(_) => "config",
        }
    }
}

/// Extracts the token from an `Authorization` header value (`Bearer <token>`, scheme
/// case-insensitive, RFC 6750 §2.1).
pub fn parse_bearer(authorization: Option<&str>) -> Result<&str, AuthError> {
    let value = authorization.ok_or(AuthError::Missing)?;
    let (scheme, token) = value.trim().split_once(' ').ok_or(AuthError::Malformed)?;
    let token = token.trim();
    if !scheme.eq_ignore_ascii_case("bearer") || token.is_empty() {
        return Err(AuthError::Malformed);
    }
    Ok(token)
}

/// Verifies bearer tokens issued by one OIDC provider.
///
/// Cheap to clone: clones share the cached key set and its refresh rate limit. Invariant: the
/// cached key set holds only keys usable with RS256, ES256 or EdDSA, each tagged with the one
/// algorithm it may verify.
#[derive(Clone)]
pub struct Verifier {
    shared: Arc<Shared>,
    min_refresh: Duration,
    /// Measures the refresh interval (injected by tests).
    clock: Arc<dyn Clock>,
}

struct Shared {
    config: OidcConfig,
    jwks_uri: String,
    http: reqwest::Client,
    keys: RwLock<Arc<KeySet>>,
    /// When an unknown `kid` last caused a refresh; the lock also makes concurrent refreshes
    /// wait for the one in flight instead of each fetching.
    last_refresh: tokio::sync::Mutex<Option<Timestamp>>,
}

impl std::fmt::Debug for Verifier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Verifier")
            .field("issuer", &self.shared.config.issuer)
            .field("audience", &self.shared.config.audience)
            .field("jwks_uri", &self.shared.jwks_uri)
            .finish_non_exhaustive()
    }
}

impl Verifier {
    /// Fetches `{issuer}/.well-known/openid-configuration`, checks its `issuer` equals the
    /// configured one, and fetches the key set at its `jwks_uri`.
    pub async fn discover(config: OidcConfig) -> Result<Self, AuthError> {
        check_config(&config)?;
        if !config.issuer.starts_with("https://") && !is_loopback_http(&config.issuer) {
            tracing::warn!(issuer = %config.issuer, "OIDC issuer is not served over HTTPS");
        }
        let http = reqwest::Client::builder()
            .timeout(HTTP_TIMEOUT)
            .build()
            .map_err(|e| AuthError::Discovery(format!("cannot build the HTTP client: {e}")))?;
        let url =
            format!("{}/.well-known/openid-configuration", config.issuer.trim_end_matches('/'));
        let document: DiscoveryDocument = get_json(&http, &url).await?;
        // OIDC Discovery §4.3: the document's issuer must be identical to the one configured.
        if document.issuer != config.issuer {
            return Err(AuthError::Discovery(format!(
                "{url} names issuer {:?}, but {:?} is configured",
                document.issuer, config.issuer
            )));
        }
        let keys = fetch_key_set(&http, &document.jwks_uri).await?;
        Ok(Verifier {
            shared: Arc::new(Shared {
                config,
                jwks_uri: document.jwks_uri,
                http,
                keys: RwLock::new(Arc::new(keys)),
                last_refresh: tokio::sync::Mutex::new(None),
            }),
            min_refresh: DEFAULT_MIN_REFRESH,
            clock: Arc::new(SystemClock),
        })
    }

    /// Sets the shortest interval between two key-set refreshes caused by unknown key ids
    /// ([`DEFAULT_MIN_REFRESH`] by default). Tests shorten it.
    pub fn with_min_refresh(mut self, interval: Duration) -> Self {
        self.min_refresh = interval;
        self
    }

    /// Measures the refresh interval with `clock` instead of the system clock (tests).
    pub fn with_clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = clock;
        self
    }

    /// The configured issuer.
    pub fn issuer(&self) -> &str {
        &self.shared.config.issuer
    }

    /// The audience tokens must carry.
    pub fn audience(&self) -> &str {
        &self.shared.config.audience
    }

    /// The web console's client id, when one is configured.
    pub fn console_client_id(&self) -> Option<&str> {
        self.shared.config.console_client_id.as_deref()
    }

    /// Validates a bearer token and returns the caller it identifies.
    ///
    /// Checks, in order: shape, algorithm, key, signature, then `exp`/`nbf` (with the
    /// leeway), `iss`, `aud`, and finally the identity claims. An unknown `kid` refreshes the
    /// key set once (rate-limited) before the token is refused.
    pub async fn verify(&self, token: &str) -> Result<Caller, AuthError> {
        if token.is_empty() {
            return Err(AuthError::Missing);
        }
        let header = parse_header(token)?;
        let alg = accepted_algorithm(&header.alg)?;
        let kid = header.kid.as_deref();
        let key = match self.current_keys().select(kid, alg) {
            Err(AuthError::UnknownKey) if kid.is_some() => {
                self.refresh_keys().await.select(kid, alg)?
            }
            other => other?,
        };
        let claims = self.check_signature_and_claims(token, &key, alg)?;
        caller_from_claims(&claims, &self.shared.config.owner_claim)
    }

    fn check_signature_and_claims(
        &self,
        token: &str,
        key: &DecodingKey,
        alg: Algorithm,
    ) -> Result<Map<String, Value>, AuthError> {
        let config = &self.shared.config;
        let mut validation = Validation::new(alg);
        validation.leeway = config.leeway_secs;
        validation.validate_exp = true;
        validation.validate_nbf = true;
        validation.set_required_spec_claims(&["exp", "iss", "aud"]);
        validation.set_issuer(&[&config.issuer]);
        match &config.console_client_id {
            Some(console) => validation.set_audience(&[&config.audience, console]),
            None => validation.set_audience(&[&config.audience]),
        }
        let data = jsonwebtoken::decode::<Map<String, Value>>(token, key, &validation)
            .map_err(|e| map_jwt_error(e.kind()))?;
        // jsonwebtoken also accepts an `iss` array containing the issuer; RFC 7519 says a string.
        if data.claims.get("iss").and_then(Value::as_str) != Some(config.issuer.as_str()) {
            return Err(AuthError::WrongIssuer);
        }
        Ok(data.claims)
    }

    fn current_keys(&self) -> Arc<KeySet> {
        Arc::clone(&self.shared.keys.read().unwrap_or_else(PoisonError::into_inner))
    }

    /// Refetches the key set unless a refresh happened within `min_refresh`; returns the key
    /// set to use either way. A failed fetch keeps the cached keys.
    async fn refresh_keys(&self) -> Arc<KeySet> {
        let mut last_refresh = self.shared.last_refresh.lock().await;
        let now = self.clock.now();
        let interval = i64::try_from(self.min_refresh.as_micros()).unwrap_or(i64::MAX);
        if last_refresh.is_some_and(|at| now.as_micros().saturating_sub(at.as_micros()) < interval)
        {
            return self.current_keys();
        }
        *last_refresh = Some(now);
        match fetch_key_set(&self.shared.http, &self.shared.jwks_uri).await {
            Ok(keys) => {
                let keys = Arc::new(keys);
                *self.shared.keys.write().unwrap_or_else(PoisonError::into_inner) =
                    Arc::clone(&keys);
                keys
            }
            Err(e) => {
                tracing::warn!(error = %e, "JWKS refresh failed; keeping the cached keys");
                self.current_keys()
            }
        }
    }
}

fn check_config(config: &OidcConfig) -> Result<(), AuthError> {
    for (name, value) in [
        ("issuer", &config.issuer),
        ("audience", &config.audience),
        ("owner claim", &config.owner_claim),
    ] {
        if value.trim().is_empty() {
            return Err(AuthError::Config(format!("the {name} must not be empty")));
        }
    }
    Ok(())
}

fn is_loopback_http(url: &str) -> bool {
    ["http://127.", "http://localhost:", "http://localhost/", "http://[::1]"]
        .iter()
        .any(|prefix| url.starts_with(prefix))
}

/// The JOSE header fields Spine reads. Parsed here rather than by `jsonwebtoken` so that `none`
/// and HMAC algorithms are refused by name instead of failing as unknown.
#[derive(Deserialize)]
struct JoseHeader {
    alg: String,
    kid: Option<String>,
    crit: Option<Value>,
}

fn parse_header(token: &str) -> Result<JoseHeader, AuthError> {
    let mut parts = token.split('.');
    let (Some(header), Some(_payload), Some(_signature), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(AuthError::Malformed);
    };
    let bytes = URL_SAFE_NO_PAD.decode(header).map_err(|_| AuthError::Malformed)?;
    let header: JoseHeader = serde_json::from_slice(&bytes).map_err(|_| AuthError::Malformed)?;
    // RFC 7515 §4.1.11: a token whose critical extensions we do not understand is invalid.
    if header.crit.is_some() {
        return Err(AuthError::Malformed);
    }
    Ok(header)
}

/// The three algorithms Spine accepts; everything else, `none` and HS* included, is refused.
fn accepted_algorithm(alg: &str) -> Result<Algorithm, AuthError> {
    match alg {
        "RS256" => Ok(Algorithm::RS256),
        "ES256" => Ok(Algorithm::ES256),
        "EdDSA" => Ok(Algorithm::EdDSA),
        _ => Err(AuthError::UnsupportedAlgorithm),
    }
}

fn map_jwt_error(kind: &ErrorKind) -> AuthError {
    match kind {
        ErrorKind::ExpiredSignature => AuthError::Expired,
        ErrorKind::ImmatureSignature => AuthError::NotYetValid,
        ErrorKind::InvalidIssuer => AuthError::WrongIssuer,
        ErrorKind::InvalidAudience => AuthError::WrongAudience,
        ErrorKind::MissingRequiredClaim(claim) => AuthError::MissingClaim(claim.clone()),
        ErrorKind::InvalidAlgorithm | ErrorKind::MissingAlgorithm => AuthError::AlgorithmMismatch,
        ErrorKind::InvalidToken
        | ErrorKind::InvalidClaimFormat(_)
        | ErrorKind::Base64(_)
        | ErrorKind::Json(_)
        | ErrorKind::Utf8(_) => AuthError::Malformed,
        // Signature mismatch, and key material the crypto backend rejects while verifying.
        _ => AuthError::BadSignature,
    }
}

/// SPEC Authentication 2: `actor` is the first non-empty of email, username, subject; `owner`
/// is the string value of the configured owner claim. Neither ever comes from the client.
fn caller_from_claims(claims: &Map<String, Value>, owner_claim: &str) -> Result<Caller, AuthError> {
    let string_claim =
        |name: &str| claims.get(name).and_then(Value::as_str).filter(|value| !value.is_empty());
    let actor = ACTOR_CLAIMS
        .iter()
        .find_map(|name| string_claim(name))
        .ok_or_else(|| AuthError::MissingClaim("sub".to_owned()))?;
    let owner =
        string_claim(owner_claim).ok_or_else(|| AuthError::MissingClaim(owner_claim.to_owned()))?;
    Ok(Caller::authenticated(actor, owner))
}

#[cfg(test)]
mod tests;
