//! Bearer parsing, key selection, header checks and claims: the verifier's rules.

use super::*;
use serde_json::json;

fn b64(bytes: &[u8]) -> String {
    URL_SAFE_NO_PAD.encode(bytes)
}

fn token_with_header(header: Value) -> String {
    format!("{}.{}.{}", b64(header.to_string().as_bytes()), b64(b"{}"), b64(b"sig"))
}

fn rsa_jwk(extra: Value) -> Value {
    let mut jwk = json!({"kty": "RSA", "kid": "r", "n": b64(&[0xab; 256]), "e": "AQAB"});
    jwk.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
    jwk
}

fn keys(entries: Vec<Value>) -> KeySet {
    KeySet::from_jwks(entries)
}

#[test]
fn verifier_is_cheap_to_share_across_tasks() {
    fn shareable<T: Clone + Send + Sync + 'static>() {}
    shareable::<Verifier>();
}

#[test]
fn bearer_header_parses_case_insensitively() {
    assert_eq!(parse_bearer(Some("Bearer abc")), Ok("abc"));
    assert_eq!(parse_bearer(Some("bearer  abc ")), Ok("abc"));
    assert_eq!(parse_bearer(None), Err(AuthError::Missing));
    assert_eq!(parse_bearer(Some("Basic abc")), Err(AuthError::Malformed));
    assert_eq!(parse_bearer(Some("Bearer")), Err(AuthError::Malformed));
    assert_eq!(parse_bearer(Some("Bearer ")), Err(AuthError::Malformed));
}

#[test]
fn token_without_three_parts_is_malformed() {
    for token in ["abc", "a.b", "a.b.c.d", "!!!.e30.c2ln"] {
        assert!(matches!(parse_header(token), Err(AuthError::Malformed)), "{token}");
    }
}

#[test]
fn critical_header_extensions_are_refused() {
    let token = token_with_header(json!({"alg": "RS256", "crit": ["exp"]}));
    assert!(matches!(parse_header(&token), Err(AuthError::Malformed)));
}

#[test]
fn only_rs256_es256_and_eddsa_are_accepted() {
    for alg in ["RS256", "ES256", "EdDSA"] {
        assert!(accepted_algorithm(alg).is_ok(), "{alg}");
    }
    for alg in ["none", "None", "HS256", "HS512", "RS512", "PS256", "ES384", ""] {
        assert_eq!(accepted_algorithm(alg), Err(AuthError::UnsupportedAlgorithm), "{alg}");
    }
}

#[test]
fn algorithm_is_decided_by_key_type() {
    let set = keys(vec![
        rsa_jwk(json!({})),
        json!({"kty": "EC", "kid": "e", "crv": "P-256", "x": b64(&[1; 32]), "y": b64(&[2; 32])}),
        json!({"kty": "OKP", "kid": "d", "crv": "Ed25519", "x": b64(&[3; 32])}),
    ]);
    let algs: Vec<_> = set.keys.iter().map(|k| (k.kid.clone().unwrap(), k.alg)).collect();
    assert_eq!(
        algs,
        [
            ("r".to_owned(), Algorithm::RS256),
            ("e".to_owned(), Algorithm::ES256),
            ("d".to_owned(), Algorithm::EdDSA)
        ]
    );
}

#[test]
fn unusable_keys_are_skipped() {
    let set = keys(vec![
        json!({"kty": "oct", "kid": "h", "k": b64(b"secret")}),
        rsa_jwk(json!({"alg": "RS512"})),
        rsa_jwk(json!({"alg": "HS256"})),
        rsa_jwk(json!({"use": "enc"})),
        json!({"kty": "RSA", "kid": "no-modulus", "e": "AQAB"}),
        json!({"kty": "EC", "crv": "P-384", "x": b64(&[1; 48]), "y": b64(&[2; 48])}),
        json!({"kty": "EC", "crv": "P-256", "x": b64(&[1; 31]), "y": b64(&[2; 32])}),
        json!({"kty": "OKP", "crv": "X25519", "x": b64(&[3; 32])}),
        json!({"kty": "OKP", "crv": "Ed25519", "x": "not base64!"}),
        json!("not an object"),
    ]);
    assert!(set.keys.is_empty());
}

#[test]
fn key_declaring_its_own_algorithm_is_kept() {
    let set = keys(vec![rsa_jwk(json!({"alg": "RS256", "use": "sig"}))]);
    assert_eq!(set.keys.len(), 1);
}

#[test]
fn kid_naming_a_key_of_another_type_is_an_algorithm_mismatch() {
    let set = keys(vec![rsa_jwk(json!({}))]);
    assert!(matches!(set.select(Some("r"), Algorithm::ES256), Err(AuthError::AlgorithmMismatch)));
    assert!(matches!(set.select(Some("other"), Algorithm::RS256), Err(AuthError::UnknownKey)));
    assert!(set.select(Some("r"), Algorithm::RS256).is_ok());
}

#[test]
fn token_without_kid_needs_exactly_one_key_of_its_type() {
    let one = keys(vec![rsa_jwk(json!({}))]);
    assert!(one.select(None, Algorithm::RS256).is_ok());
    assert!(matches!(one.select(None, Algorithm::EdDSA), Err(AuthError::UnknownKey)));
    let two = keys(vec![rsa_jwk(json!({})), rsa_jwk(json!({"kid": "r2"}))]);
    assert!(matches!(two.select(None, Algorithm::RS256), Err(AuthError::UnknownKey)));
}

#[test]
fn actor_follows_email_username_subject_priority() {
    let claims = |v: Value| v.as_object().unwrap().clone();
    let caller = caller_from_claims(
        &claims(json!({"sub": "s", "username": "u", "preferred_username": "p", "email": ""})),
        "sub",
    )
    .unwrap();
    assert_eq!((caller.actor(), caller.owner()), ("p", "s"));
    let err = caller_from_claims(&claims(json!({"sub": "s", "email": 7})), "email");
    assert_eq!(err, Err(AuthError::MissingClaim("email".to_owned())));
    let err = caller_from_claims(&claims(json!({"email": "a@b"})), "tenant");
    assert_eq!(err, Err(AuthError::MissingClaim("tenant".to_owned())));
}

#[test]
fn empty_configuration_values_are_refused() {
    let mut config = OidcConfig::new("https://issuer.example", "spine");
    assert!(check_config(&config).is_ok());
    config.owner_claim = " ".to_owned();
    assert!(matches!(check_config(&config), Err(AuthError::Config(_))));
}
