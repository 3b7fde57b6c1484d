//! Test fixtures for Spine: an OIDC identity provider on loopback, scripted model providers
//! ([`provider::FakeProvider`]) for the outbound HTTP clients, and record fixtures
//! ([`records::record`]), and fresh PostgreSQL databases ([`postgres::fresh_database`]).
//!
//! [`TestIssuer`] serves a discovery document and a JWKS from `127.0.0.1`, with one RSA-2048
//! (RS256), one P-256 (ES256) and one Ed25519 (EdDSA) key generated per run, and mints tokens
//! with them — including the forged and broken tokens a verifier must refuse. It also signs
//! browsers in: the authorization-code flow with PKCE (`/authorize` asks for an email, no
//! password; `/token` checks the verifier), with CORS open for single-page clients.
//!
//! Key design decision: the issuer is a real HTTP server rather than a stub behind a trait, so
//! tests exercise the verifier's discovery, key fetching and refresh exactly as production
//! does, and [`TestIssuer::jwks_fetches`] can observe its caching. Only tests and
//! `spine-bench` (fresh PostgreSQL databases for its runs) depend on it; nothing in it is fit
//! for production use.
#![deny(missing_docs)]

pub mod postgres;
pub mod provider;
pub mod records;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{SystemTime, UNIX_EPOCH};

use axum::extract::{Form, Query, State};
use axum::http::header::LOCATION;
use axum::http::{HeaderValue, StatusCode};
use axum::response::{Html, IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use ed25519_dalek::pkcs8::EncodePrivateKey as _;
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use rand_core::OsRng;
use rsa::pkcs1::EncodeRsaPrivateKey as _;
use rsa::pkcs8::{EncodePublicKey as _, LineEnding};
use rsa::traits::PublicKeyParts as _;
use serde_json::{Value, json};
use sha2::{Digest as _, Sha256};
use tokio::task::JoinHandle;

/// A signing algorithm the test issuer has a key for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Alg {
    /// RSASSA-PKCS1-v1_5 with SHA-256, RSA-2048 key.
    RS256,
    /// ECDSA on P-256 with SHA-256.
    ES256,
    /// Ed25519.
    EdDSA,
}

impl Alg {
    fn algorithm(self) -> Algorithm {
        match self {
            Alg::RS256 => Algorithm::RS256,
            Alg::ES256 => Algorithm::ES256,
            Alg::EdDSA => Algorithm::EdDSA,
        }
    }
}

/// A private key the issuer signs with and the public JWK it publishes for it.
#[derive(Clone)]
struct SigningKey {
    kid: String,
    alg: Alg,
    encoding: EncodingKey,
    jwk: Value,
    /// SPKI PEM of the public key; kept for RSA keys to forge HS256 confusion tokens.
    public_pem: Option<String>,
}

/// The issuer's key set. Invariant: `published` holds exactly the keys in the JWKS, and the
/// first key of each algorithm in it is the one `mint_with` signs with.
struct Keys {
    published: Vec<SigningKey>,
    next_kid: usize,
}

impl Keys {
    fn default_for(&self, alg: Alg) -> &SigningKey {
        self.published
            .iter()
            .find(|key| key.alg == alg)
            .expect("the issuer publishes a key of every algorithm")
    }

    fn fresh_kid(&mut self, alg: Alg) -> String {
        self.next_kid += 1;
        format!("{alg:?}-{}", self.next_kid).to_lowercase()
    }
}

struct Shared {
    issuer: String,
    keys: Mutex<Keys>,
    jwks_fetches: AtomicUsize,
    /// Authorization codes issued by the sign-in page and not yet redeemed.
    codes: Mutex<HashMap<String, Grant>>,
    /// Codes redeemed at the token endpoint.
    tokens_issued: AtomicUsize,
}

/// What a sign-in at `/authorize` granted, kept until its code is redeemed at `/token`.
struct Grant {
    client_id: String,
    redirect_uri: String,
    /// The PKCE S256 challenge the client sent.
    challenge: String,
    nonce: Option<String>,
    audience: Option<String>,
    email: String,
}

/// An OIDC identity provider on `127.0.0.1`, serving `/.well-known/openid-configuration` and
/// `/jwks`, that mints tokens for tests. The server stops when the value is dropped.
pub struct TestIssuer {
    shared: Arc<Shared>,
    server: JoinHandle<()>,
}

impl Drop for TestIssuer {
    fn drop(&mut self) {
        self.server.abort();
    }
}

impl TestIssuer {
    /// Generates the keys and starts serving on an ephemeral loopback port.
    ///
    /// Panics if the port cannot be bound: this is a test fixture.
    pub async fn start() -> Self {
        let listener = tokio::net::TcpListener::bind(SocketAddr::from(([127, 0, 0, 1], 0)))
            .await
            .expect("binding a loopback port for the test issuer");
        let port = listener.local_addr().expect("a bound listener has an address").port();
        let mut keys = Keys { published: Vec::new(), next_kid: 0 };
        for alg in [Alg::RS256, Alg::ES256, Alg::EdDSA] {
            let kid = keys.fresh_kid(alg);
            keys.published.push(generate_key(alg, kid));
        }
        let shared = Arc::new(Shared {
            issuer: format!("http://127.0.0.1:{port}"),
            keys: Mutex::new(keys),
            jwks_fetches: AtomicUsize::new(0),
            codes: Mutex::new(HashMap::new()),
            tokens_issued: AtomicUsize::new(0),
        });
        let app = Router::new()
            .route("/.well-known/openid-configuration", get(discovery_document))
            .route("/jwks", get(jwks))
            .route("/authorize", get(authorize_page).post(authorize))
            .route("/token", post(token_endpoint))
            // Browsers fetch discovery and the token endpoint from the console's origin.
            .layer(axum::middleware::map_response(allow_any_origin))
            .with_state(Arc::clone(&shared));
        let server = tokio::spawn(async move {
            // The server runs until the fixture is dropped; an I/O error ends the test's issuer.
            let _ = axum::serve(listener, app).await;
        });
        TestIssuer { shared, server }
    }

    /// The issuer URL, `http://127.0.0.1:PORT` (no trailing slash), as tokens' `iss` state it.
    pub fn issuer(&self) -> String {
        self.shared.issuer.clone()
    }

    /// How many authorization codes `/token` has exchanged for tokens.
    pub fn tokens_issued(&self) -> usize {
        self.shared.tokens_issued.load(Ordering::SeqCst)
    }

    /// How many times `/jwks` has been requested.
    pub fn jwks_fetches(&self) -> usize {
        self.shared.jwks_fetches.load(Ordering::SeqCst)
    }

    /// A token with these claims, signed RS256 with the current RSA key, `kid` set.
    pub fn mint(&self, claims: Value) -> String {
        self.mint_with(Alg::RS256, claims)
    }

    /// A token with these claims, signed with the issuer's key for `alg`, `kid` set.
    pub fn mint_with(&self, alg: Alg, claims: Value) -> String {
        let key = self.key(alg);
        sign(&header(alg, Some(&key.kid)), &claims, &key.encoding)
    }

    /// A token signed with the issuer's key for `alg` but with no `kid` in its header.
    pub fn mint_without_kid(&self, alg: Alg, claims: Value) -> String {
        let key = self.key(alg);
        sign(&header(alg, None), &claims, &key.encoding)
    }

    /// An unsigned token: header `{"alg":"none"}` carrying the RSA key's `kid`, empty signature.
    pub fn mint_none(&self, claims: Value) -> String {
        let header = json!({"alg": "none", "typ": "JWT", "kid": self.key(Alg::RS256).kid});
        format!("{}.{}.", encode_part(&header), encode_part(&claims))
    }

    /// The algorithm-confusion forgery: HS256 keyed with the RSA public key's PEM bytes, under
    /// the RSA key's `kid`.
    pub fn mint_hs256_with_public_key(&self, claims: Value) -> String {
        let key = self.key(Alg::RS256);
        let pem = key.public_pem.expect("RSA keys keep their public PEM");
        let mut header = Header::new(Algorithm::HS256);
        header.kid = Some(key.kid);
        sign(&header, &claims, &EncodingKey::from_secret(pem.as_bytes()))
    }

    /// A well-formed RS256 token whose `kid` is not in the JWKS, signed by a key that is not
    /// either (a fresh RSA key each call).
    pub fn mint_unknown_kid(&self, claims: Value) -> String {
        let stranger = generate_key(Alg::RS256, "not-published".to_owned());
        sign(&header(Alg::RS256, Some(&stranger.kid)), &claims, &stranger.encoding)
    }

    /// A valid RS256 token with one byte of its signature flipped.
    pub fn mint_bad_signature(&self, claims: Value) -> String {
        let token = self.mint(claims);
        let (message, signature) = token.rsplit_once('.').expect("a JWT has three parts");
        let mut bytes = URL_SAFE_NO_PAD.decode(signature).expect("the signature is base64url");
        bytes[0] ^= 0x01;
        format!("{message}.{}", URL_SAFE_NO_PAD.encode(bytes))
    }

    /// Replaces the RSA key: a new RS256 key under a new `kid` is published, the old one is
    /// removed from the JWKS, and [`TestIssuer::mint`] signs with the new one. Returns the new
    /// `kid`.
    pub fn rotate(&self) -> String {
        let mut keys = self.keys();
        let kid = keys.fresh_kid(Alg::RS256);
        let key = generate_key(Alg::RS256, kid.clone());
        keys.published.retain(|key| key.alg != Alg::RS256);
        keys.published.insert(0, key);
        kid
    }

    /// Publishes one more key of `alg` alongside the existing ones (which stay the ones
    /// `mint_with` uses). Returns its `kid`.
    pub fn add_key(&self, alg: Alg) -> String {
        let mut keys = self.keys();
        let kid = keys.fresh_kid(alg);
        keys.published.push(generate_key(alg, kid.clone()));
        kid
    }

    /// Claims a typical provider issues for `email`: `iss` (this issuer), `aud`, `sub`
    /// (`"sub-" + email`), `email`, `iat` = now and `exp` = now + 3600.
    pub fn claims_for(&self, email: &str, audience: &str) -> Value {
        let now = now();
        json!({
            "iss": self.shared.issuer,
            "aud": audience,
            "sub": format!("sub-{email}"),
            "email": email,
            "iat": now,
            "exp": now + 3600,
        })
    }

    fn key(&self, alg: Alg) -> SigningKey {
        self.keys().default_for(alg).clone()
    }

    fn keys(&self) -> std::sync::MutexGuard<'_, Keys> {
        self.shared.keys.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Seconds since the Unix epoch, as JWT time claims count them.
pub fn now() -> i64 {
    let since_epoch =
        SystemTime::now().duration_since(UNIX_EPOCH).expect("the clock is after 1970");
    i64::try_from(since_epoch.as_secs()).expect("the time fits in an i64")
}

async fn discovery_document(State(shared): State<Arc<Shared>>) -> Json<Value> {
    Json(json!({
        "issuer": shared.issuer,
        "jwks_uri": format!("{}/jwks", shared.issuer),
        "authorization_endpoint": format!("{}/authorize", shared.issuer),
        "token_endpoint": format!("{}/token", shared.issuer),
        "code_challenge_methods_supported": ["S256"],
        "grant_types_supported": ["authorization_code"],
        "response_types_supported": ["code"],
        "subject_types_supported": ["public"],
        "id_token_signing_alg_values_supported": ["RS256", "ES256", "EdDSA"],
    }))
}

async fn jwks(State(shared): State<Arc<Shared>>) -> Json<Value> {
    shared.jwks_fetches.fetch_add(1, Ordering::SeqCst);
    let keys = shared.keys.lock().unwrap_or_else(PoisonError::into_inner);
    Json(json!({ "keys": keys.published.iter().map(|key| key.jwk.clone()).collect::<Vec<_>>() }))
}

async fn allow_any_origin(mut response: Response) -> Response {
    response.headers_mut().insert("access-control-allow-origin", HeaderValue::from_static("*"));
    response
}

/// The sign-in page of the authorization-code flow: a form asking for the email to sign in
/// as (no password: this is a test fixture), carrying the request's parameters. Refuses a
/// request without a PKCE S256 challenge, as public clients must send one.
async fn authorize_page(Query(q): Query<HashMap<String, String>>) -> Response {
    let param = |k: &str| q.get(k).map(String::as_str).unwrap_or_default();
    if param("response_type") != "code"
        || param("code_challenge_method") != "S256"
        || param("code_challenge").is_empty()
        || param("client_id").is_empty()
        || param("redirect_uri").is_empty()
    {
        return (StatusCode::BAD_REQUEST, "invalid_request: code flow with PKCE S256 only")
            .into_response();
    }
    let mut hidden = String::new();
    for k in ["client_id", "redirect_uri", "state", "nonce", "code_challenge", "audience"] {
        if let Some(v) = q.get(k) {
            hidden.push_str(&format!(
                "<input type=\"hidden\" name=\"{k}\" value=\"{}\">",
                escape_html(v)
            ));
        }
    }
    Html(format!(
        "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>Test issuer \
         sign-in</title></head><body><h1>Test issuer</h1><form method=\"post\" \
         action=\"/authorize\">{hidden}<label>Email <input name=\"email\" type=\"email\" \
         required autofocus></label> <button type=\"submit\">Sign in</button></form></body></html>"
    ))
    .into_response()
}

/// The sign-in form's answer: an authorization code bound to the client, the redirect URI
/// and the PKCE challenge, sent back to the client's redirect URI with its `state`.
async fn authorize(
    State(shared): State<Arc<Shared>>,
    Form(f): Form<HashMap<String, String>>,
) -> Response {
    let take = |k: &str| f.get(k).cloned().unwrap_or_default();
    let (email, redirect_uri) = (take("email"), take("redirect_uri"));
    if email.is_empty() || redirect_uri.is_empty() {
        return (StatusCode::BAD_REQUEST, "invalid_request").into_response();
    }
    let code = URL_SAFE_NO_PAD.encode(rand::random::<[u8; 24]>());
    let grant = Grant {
        client_id: take("client_id"),
        redirect_uri: redirect_uri.clone(),
        challenge: take("code_challenge"),
        nonce: f.get("nonce").cloned(),
        audience: f.get("audience").cloned().filter(|a| !a.is_empty()),
        email,
    };
    shared.codes.lock().unwrap_or_else(PoisonError::into_inner).insert(code.clone(), grant);
    let sep = if redirect_uri.contains('?') { '&' } else { '?' };
    let location =
        format!("{redirect_uri}{sep}code={code}&state={}", percent_encode(&take("state")));
    (StatusCode::SEE_OTHER, [(LOCATION, location)]).into_response()
}

/// The token endpoint: redeems a code once, checking the client, the redirect URI and the
/// PKCE verifier; answers an RS256 access token for the requested audience (the client id
/// when none) and an ID token for the client carrying the nonce.
async fn token_endpoint(
    State(shared): State<Arc<Shared>>,
    Form(f): Form<HashMap<String, String>>,
) -> Response {
    let field = |k: &str| f.get(k).map(String::as_str).unwrap_or_default();
    let refuse = |error: &str, description: &str| {
        (StatusCode::BAD_REQUEST, Json(json!({"error": error, "error_description": description})))
            .into_response()
    };
    if field("grant_type") != "authorization_code" {
        return refuse("unsupported_grant_type", "authorization_code only");
    }
    let grant = shared.codes.lock().unwrap_or_else(PoisonError::into_inner).remove(field("code"));
    let Some(grant) = grant else {
        return refuse("invalid_grant", "unknown or already used code");
    };
    if grant.client_id != field("client_id") || grant.redirect_uri != field("redirect_uri") {
        return refuse("invalid_grant", "client or redirect_uri differs from the authorization");
    }
    let computed = URL_SAFE_NO_PAD.encode(Sha256::digest(field("code_verifier").as_bytes()));
    if computed != grant.challenge {
        return refuse("invalid_grant", "PKCE verification failed");
    }
    let key = {
        let keys = shared.keys.lock().unwrap_or_else(PoisonError::into_inner);
        keys.default_for(Alg::RS256).clone()
    };
    let now = now();
    let claims = |aud: &str| {
        json!({"iss": shared.issuer, "aud": aud, "sub": format!("sub-{}", grant.email),
               "email": grant.email, "iat": now, "exp": now + 3600})
    };
    let access = claims(grant.audience.as_deref().unwrap_or(&grant.client_id));
    let mut id = claims(&grant.client_id);
    if let Some(nonce) = &grant.nonce {
        id["nonce"] = json!(nonce);
    }
    let header = header(Alg::RS256, Some(&key.kid));
    shared.tokens_issued.fetch_add(1, Ordering::SeqCst);
    Json(json!({
        "access_token": sign(&header, &access, &key.encoding),
        "id_token": sign(&header, &id, &key.encoding),
        "token_type": "Bearer",
        "expires_in": 3600,
    }))
    .into_response()
}

fn escape_html(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;")
}

fn percent_encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

fn header(alg: Alg, kid: Option<&str>) -> Header {
    let mut header = Header::new(alg.algorithm());
    header.kid = kid.map(str::to_owned);
    header
}

fn sign(header: &Header, claims: &Value, key: &EncodingKey) -> String {
    jsonwebtoken::encode(header, claims, key).expect("signing with a freshly generated key")
}

fn encode_part(value: &Value) -> String {
    URL_SAFE_NO_PAD.encode(value.to_string())
}

fn generate_key(alg: Alg, kid: String) -> SigningKey {
    let b64 = |bytes: &[u8]| URL_SAFE_NO_PAD.encode(bytes);
    match alg {
        Alg::RS256 => {
            let private =
                rsa::RsaPrivateKey::new(&mut OsRng, 2048).expect("generating an RSA-2048 key");
            let public = private.to_public_key();
            let der = private.to_pkcs1_der().expect("encoding the RSA key as PKCS#1");
            let jwk = json!({
                "kty": "RSA", "use": "sig", "alg": "RS256", "kid": kid,
                "n": b64(&public.n().to_bytes_be()),
                "e": b64(&public.e().to_bytes_be()),
            });
            let pem = public.to_public_key_pem(LineEnding::LF).expect("encoding the RSA PEM");
            SigningKey {
                kid,
                alg,
                encoding: EncodingKey::from_rsa_der(der.as_bytes()),
                jwk,
                public_pem: Some(pem),
            }
        }
        Alg::ES256 => {
            let private = p256::ecdsa::SigningKey::random(&mut OsRng);
            let point = private.verifying_key().to_encoded_point(false);
            let (x, y) = (point.x().expect("uncompressed"), point.y().expect("uncompressed"));
            let der = p256::pkcs8::EncodePrivateKey::to_pkcs8_der(&private)
                .expect("encoding the P-256 key as PKCS#8");
            let jwk = json!({
                "kty": "EC", "use": "sig", "alg": "ES256", "kid": kid, "crv": "P-256",
                "x": b64(x), "y": b64(y),
            });
            SigningKey {
                kid,
                alg,
                encoding: EncodingKey::from_ec_der(der.as_bytes()),
                jwk,
                public_pem: None,
            }
        }
        Alg::EdDSA => {
            let private = ed25519_dalek::SigningKey::generate(&mut OsRng);
            let der = private.to_pkcs8_der().expect("encoding the Ed25519 key as PKCS#8");
            let jwk = json!({
                "kty": "OKP", "use": "sig", "alg": "EdDSA", "kid": kid, "crv": "Ed25519",
                "x": b64(private.verifying_key().as_bytes()),
            });
            SigningKey {
                kid,
                alg,
                encoding: EncodingKey::from_ed_der(der.as_bytes()),
                jwk,
                public_pem: None,
            }
        }
    }
}
