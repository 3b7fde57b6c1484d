//! The issuer's discovery document and key set (JWKS): fetched over HTTP, and each usable
//! signing key tagged with the one algorithm its key type allows (the key decides the
//! algorithm, never the token).

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use jsonwebtoken::{Algorithm, DecodingKey};
use serde::Deserialize;
use serde_json::Value;

use super::AuthError;

/// The part of an OIDC discovery document Spine reads.
#[derive(Deserialize)]
pub(super) struct DiscoveryDocument {
    pub(super) issuer: String,
    pub(super) jwks_uri: String,
}

pub(super) async fn get_json<T: serde::de::DeserializeOwned>(
    http: &reqwest::Client,
    url: &str,
) -> Result<T, AuthError> {
    let fail = |e: reqwest::Error| {
        // reqwest's own message is terse ("error sending request"); the causes say why.
        let e = e.without_url();
        let mut message = format!("GET {url}: {e}");
        let mut source = std::error::Error::source(&e);
        while let Some(cause) = source {
            message.push_str(&format!(": {cause}"));
            source = cause.source();
        }
        AuthError::Discovery(message)
    };
    http.get(url)
        .send()
        .await
        .and_then(reqwest::Response::error_for_status)
        .map_err(fail)?
        .json()
        .await
        .map_err(fail)
}

pub(super) async fn fetch_key_set(
    http: &reqwest::Client,
    jwks_uri: &str,
) -> Result<KeySet, AuthError> {
    let document: JwkSetDocument = get_json(http, jwks_uri).await?;
    let keys = KeySet::from_jwks(document.keys);
    if keys.keys.is_empty() {
        return Err(AuthError::Discovery(format!(
            "{jwks_uri} holds no RS256, ES256 or EdDSA signing key"
        )));
    }
    Ok(keys)
}

#[derive(Deserialize)]
struct JwkSetDocument {
    keys: Vec<Value>,
}

/// One JWKS entry, as far as Spine reads it (RFC 7517, RFC 7518 §6, RFC 8037).
#[derive(Deserialize)]
struct Jwk {
    kty: String,
    kid: Option<String>,
    alg: Option<String>,
    #[serde(rename = "use")]
    usage: Option<String>,
    crv: Option<String>,
    n: Option<String>,
    e: Option<String>,
    x: Option<String>,
    y: Option<String>,
}

/// A key from the issuer's key set, tagged with the one algorithm it verifies.
#[derive(Clone)]
pub(super) struct VerificationKey {
    pub(super) kid: Option<String>,
    pub(super) alg: Algorithm,
    key: DecodingKey,
}

/// The usable keys of one fetched JWKS.
pub(super) struct KeySet {
    pub(super) keys: Vec<VerificationKey>,
}

impl KeySet {
    /// Keeps the entries usable for signature verification; others (encryption keys, HMAC
    /// secrets, other curves, malformed entries) are skipped, since a provider may publish them.
    pub(super) fn from_jwks(entries: Vec<Value>) -> Self {
        let keys = entries
            .into_iter()
            .filter_map(|entry| serde_json::from_value::<Jwk>(entry).ok())
            .filter_map(verification_key)
            .collect();
        KeySet { keys }
    }

    /// The key for a token with this `kid` and (accepted) `alg`.
    ///
    /// Without a `kid`, the key set must hold exactly one key of the token's algorithm.
    pub(super) fn select(
        &self,
        kid: Option<&str>,
        alg: Algorithm,
    ) -> Result<DecodingKey, AuthError> {
        let found = match kid {
            Some(kid) => {
                let mut named =
                    self.keys.iter().filter(|k| k.kid.as_deref() == Some(kid)).peekable();
                if named.peek().is_none() {
                    return Err(AuthError::UnknownKey);
                }
                named.find(|k| k.alg == alg).ok_or(AuthError::AlgorithmMismatch)?
            }
            None => {
                let mut same_alg = self.keys.iter().filter(|k| k.alg == alg);
                match (same_alg.next(), same_alg.next()) {
                    (Some(only), None) => only,
                    _ => return Err(AuthError::UnknownKey),
                }
            }
        };
        Ok(found.key.clone())
    }
}

/// Maps a JWK to the single algorithm its key type allows, or `None` when Spine cannot or
/// must not verify with it.
fn verification_key(jwk: Jwk) -> Option<VerificationKey> {
    if jwk.usage.as_deref().is_some_and(|usage| usage != "sig") {
        return None;
    }
    let (alg, key) = match (jwk.kty.as_str(), jwk.crv.as_deref()) {
        ("RSA", _) => {
            let (n, e) = (jwk.n.as_deref()?, jwk.e.as_deref()?);
            if decoded_len(n)? == 0 || decoded_len(e)? == 0 {
                return None;
            }
            (Algorithm::RS256, DecodingKey::from_rsa_components(n, e).ok()?)
        }
        ("EC", Some("P-256")) => {
            let (x, y) = (jwk.x.as_deref()?, jwk.y.as_deref()?);
            if decoded_len(x)? != 32 || decoded_len(y)? != 32 {
                return None;
            }
            (Algorithm::ES256, DecodingKey::from_ec_components(x, y).ok()?)
        }
        ("OKP", Some("Ed25519")) => {
            let x = jwk.x.as_deref()?;
            if decoded_len(x)? != 32 {
                return None;
            }
            (Algorithm::EdDSA, DecodingKey::from_ed_components(x).ok()?)
        }
        _ => return None,
    };
    // A key that declares an algorithm may be used with that algorithm only (RFC 7517 §4.4).
    if jwk.alg.is_some_and(|declared| declared.parse::<Algorithm>().ok() != Some(alg)) {
        return None;
    }
    Some(VerificationKey { kid: jwk.kid, alg, key })
}

fn decoded_len(base64url: &str) -> Option<usize> {
    URL_SAFE_NO_PAD.decode(base64url).ok().map(|bytes| bytes.len())
}
