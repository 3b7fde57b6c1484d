//! Bearer-token verification against a real OIDC issuer on loopback (SPEC "Authentication").

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use spine_core::{ManualClock, Timestamp};
use spine_server::auth::{AuthError, OidcConfig, Verifier};
use spine_testkit::{Alg, TestIssuer, now};

const AUDIENCE: &str = "spine";
const EMAIL: &str = "ada@example.com";

async fn issuer_and_verifier() -> (TestIssuer, Verifier) {
    let issuer = TestIssuer::start().await;
    let verifier = verifier_for(&issuer, |_| {}).await;
    (issuer, verifier)
}

async fn verifier_for(issuer: &TestIssuer, configure: impl FnOnce(&mut OidcConfig)) -> Verifier {
    let mut config = OidcConfig::new(issuer.issuer(), AUDIENCE);
    configure(&mut config);
    Verifier::discover(config).await.expect("discovery against the test issuer succeeds")
}

/// `claims` with each field of `changes` set, or removed where the change is `null`.
fn with(mut claims: Value, changes: Value) -> Value {
    let fields = claims.as_object_mut().expect("claims are an object");
    for (name, value) in changes.as_object().expect("changes are an object") {
        if value.is_null() {
            fields.remove(name);
        } else {
            fields.insert(name.clone(), value.clone());
        }
    }
    claims
}

async fn assert_accepted(verifier: &Verifier, token: &str) {
    let caller = verifier.verify(token).await.expect("token is accepted");
    assert!(caller.is_authenticated());
}

async fn assert_rejected(verifier: &Verifier, token: &str, expected: AuthError) {
    assert_eq!(verifier.verify(token).await, Err(expected));
}

// Accepted tokens

#[tokio::test]
async fn rs256_token_is_accepted_and_names_the_caller() {
    let (issuer, verifier) = issuer_and_verifier().await;
    let caller = verifier.verify(&issuer.mint(issuer.claims_for(EMAIL, AUDIENCE))).await.unwrap();
    assert!(caller.is_authenticated());
    assert_eq!((caller.actor(), caller.owner()), (EMAIL, EMAIL));
    assert_eq!(verifier.issuer(), issuer.issuer());
}

#[tokio::test]
async fn es256_token_is_accepted() {
    let (issuer, verifier) = issuer_and_verifier().await;
    let token = issuer.mint_with(Alg::ES256, issuer.claims_for(EMAIL, AUDIENCE));
    assert_accepted(&verifier, &token).await;
}

#[tokio::test]
async fn eddsa_token_is_accepted() {
    let (issuer, verifier) = issuer_and_verifier().await;
    let token = issuer.mint_with(Alg::EdDSA, issuer.claims_for(EMAIL, AUDIENCE));
    assert_accepted(&verifier, &token).await;
}

#[tokio::test]
async fn audience_array_containing_ours_is_accepted() {
    let (issuer, verifier) = issuer_and_verifier().await;
    let claims = with(issuer.claims_for(EMAIL, AUDIENCE), json!({"aud": ["other", AUDIENCE]}));
    assert_accepted(&verifier, &issuer.mint(claims)).await;
}

#[tokio::test]
async fn token_without_kid_is_accepted_when_one_key_has_its_type() {
    let (issuer, verifier) = issuer_and_verifier().await;
    for alg in [Alg::RS256, Alg::ES256, Alg::EdDSA] {
        let token = issuer.mint_without_kid(alg, issuer.claims_for(EMAIL, AUDIENCE));
        assert_accepted(&verifier, &token).await;
    }
}

#[tokio::test]
async fn token_without_kid_is_rejected_when_several_keys_have_its_type() {
    let issuer = TestIssuer::start().await;
    issuer.add_key(Alg::ES256);
    let verifier = verifier_for(&issuer, |_| {}).await;
    let token = issuer.mint_without_kid(Alg::ES256, issuer.claims_for(EMAIL, AUDIENCE));
    assert_rejected(&verifier, &token, AuthError::UnknownKey).await;
    // The RSA key is still the only one of its type.
    let token = issuer.mint_without_kid(Alg::RS256, issuer.claims_for(EMAIL, AUDIENCE));
    assert_accepted(&verifier, &token).await;
}

// Identity: SPEC Authentication 2

#[tokio::test]
async fn actor_is_email_then_preferred_username_then_username_then_sub() {
    let issuer = TestIssuer::start().await;
    let verifier = verifier_for(&issuer, |config| config.owner_claim = "sub".to_owned()).await;
    let full = with(
        issuer.claims_for(EMAIL, AUDIENCE),
        json!({"preferred_username": "ada", "username": "lovelace", "sub": "u-1"}),
    );
    let cases = [
        (json!({}), EMAIL),
        (json!({"email": null}), "ada"),
        (json!({"email": ""}), "ada"),
        (json!({"email": null, "preferred_username": null}), "lovelace"),
        (json!({"email": null, "preferred_username": "", "username": null}), "u-1"),
    ];
    for (changes, actor) in cases {
        let token = issuer.mint(with(full.clone(), changes.clone()));
        let caller = verifier.verify(&token).await.expect("token is accepted");
        assert_eq!(caller.actor(), actor, "claims changed by {changes}");
        assert_eq!(caller.owner(), "u-1", "owner is the sub claim whatever the actor");
    }
}

#[tokio::test]
async fn owner_comes_from_the_configured_claim() {
    let issuer = TestIssuer::start().await;
    let verifier = verifier_for(&issuer, |config| config.owner_claim = "sub".to_owned()).await;
    let caller = verifier.verify(&issuer.mint(issuer.claims_for(EMAIL, AUDIENCE))).await.unwrap();
    assert_eq!(caller.actor(), EMAIL);
    assert_eq!(caller.owner(), format!("sub-{EMAIL}"));
}

#[tokio::test]
async fn missing_empty_or_non_string_owner_claim_is_rejected() {
    let (issuer, verifier) = issuer_and_verifier().await;
    for email in [Value::Null, json!(""), json!(42), json!([EMAIL])] {
        let token = issuer.mint(with(issuer.claims_for(EMAIL, AUDIENCE), json!({"email": email})));
        assert_rejected(&verifier, &token, AuthError::MissingClaim("email".to_owned())).await;
    }
}

#[tokio::test]
async fn custom_owner_claim_missing_is_named_in_the_error() {
    let issuer = TestIssuer::start().await;
    let verifier = verifier_for(&issuer, |config| config.owner_claim = "tenant".to_owned()).await;
    let token = issuer.mint(issuer.claims_for(EMAIL, AUDIENCE));
    assert_rejected(&verifier, &token, AuthError::MissingClaim("tenant".to_owned())).await;
    let token = issuer.mint(with(issuer.claims_for(EMAIL, AUDIENCE), json!({"tenant": "acme"})));
    assert_eq!(verifier.verify(&token).await.unwrap().owner(), "acme");
}

// Rejected tokens

#[tokio::test]
async fn empty_token_is_missing() {
    let (_issuer, verifier) = issuer_and_verifier().await;
    assert_rejected(&verifier, "", AuthError::Missing).await;
}

#[tokio::test]
async fn token_that_is_not_a_jwt_is_malformed() {
    let (issuer, verifier) = issuer_and_verifier().await;
    let valid = issuer.mint(issuer.claims_for(EMAIL, AUDIENCE));
    let (message, _) = valid.rsplit_once('.').unwrap();
    for token in [
        "not-a-jwt".to_owned(),
        "a.b.c".to_owned(),
        format!("{valid}.extra"),
        format!("{message}.not*base64"),
        format!("bm90IGpzb24.{}", valid.split_once('.').unwrap().1),
    ] {
        assert_rejected(&verifier, &token, AuthError::Malformed).await;
    }
}

#[tokio::test]
async fn flipped_signature_byte_is_a_bad_signature() {
    let (issuer, verifier) = issuer_and_verifier().await;
    let token = issuer.mint_bad_signature(issuer.claims_for(EMAIL, AUDIENCE));
    assert_rejected(&verifier, &token, AuthError::BadSignature).await;
}

#[tokio::test]
async fn payload_swapped_under_a_valid_signature_is_a_bad_signature() {
    let (issuer, verifier) = issuer_and_verifier().await;
    let mine = issuer.mint(issuer.claims_for(EMAIL, AUDIENCE));
    let theirs = issuer.mint(issuer.claims_for("eve@example.com", AUDIENCE));
    let [header, _, signature]: [&str; 3] = mine.split('.').collect::<Vec<_>>().try_into().unwrap();
    let payload = theirs.split('.').nth(1).unwrap();
    let forged = format!("{header}.{payload}.{signature}");
    assert_rejected(&verifier, &forged, AuthError::BadSignature).await;
}

#[tokio::test]
async fn expired_beyond_leeway_is_rejected() {
    let (issuer, verifier) = issuer_and_verifier().await;
    let claims = with(issuer.claims_for(EMAIL, AUDIENCE), json!({"exp": now() - 120}));
    assert_rejected(&verifier, &issuer.mint(claims), AuthError::Expired).await;
}

#[tokio::test]
async fn expired_within_leeway_is_accepted() {
    let (issuer, verifier) = issuer_and_verifier().await;
    let claims = with(issuer.claims_for(EMAIL, AUDIENCE), json!({"exp": now() - 30}));
    assert_accepted(&verifier, &issuer.mint(claims)).await;
}

#[tokio::test]
async fn leeway_is_configurable() {
    let issuer = TestIssuer::start().await;
    let verifier = verifier_for(&issuer, |config| config.leeway_secs = 0).await;
    let claims = with(issuer.claims_for(EMAIL, AUDIENCE), json!({"exp": now() - 30}));
    assert_rejected(&verifier, &issuer.mint(claims), AuthError::Expired).await;
}

#[tokio::test]
async fn token_without_exp_is_rejected() {
    let (issuer, verifier) = issuer_and_verifier().await;
    let claims = with(issuer.claims_for(EMAIL, AUDIENCE), json!({"exp": null}));
    assert_rejected(&verifier, &issuer.mint(claims), AuthError::MissingClaim("exp".to_owned()))
        .await;
}

#[tokio::test]
async fn not_before_beyond_leeway_is_not_yet_valid() {
    let (issuer, verifier) = issuer_and_verifier().await;
    let claims = with(issuer.claims_for(EMAIL, AUDIENCE), json!({"nbf": now() + 120}));
    assert_rejected(&verifier, &issuer.mint(claims), AuthError::NotYetValid).await;
    let claims = with(issuer.claims_for(EMAIL, AUDIENCE), json!({"nbf": now() + 30}));
    assert_accepted(&verifier, &issuer.mint(claims)).await;
}

#[tokio::test]
async fn other_issuer_is_rejected() {
    let (issuer, verifier) = issuer_and_verifier().await;
    let elsewhere = format!("{}/", issuer.issuer());
    for iss in [json!("https://evil.example"), json!(elsewhere), json!([issuer.issuer()])] {
        let claims = with(issuer.claims_for(EMAIL, AUDIENCE), json!({"iss": iss}));
        assert_rejected(&verifier, &issuer.mint(claims), AuthError::WrongIssuer).await;
    }
    let claims = with(issuer.claims_for(EMAIL, AUDIENCE), json!({"iss": null}));
    assert_rejected(&verifier, &issuer.mint(claims), AuthError::MissingClaim("iss".to_owned()))
        .await;
}

#[tokio::test]
async fn other_audience_is_rejected_as_string_or_array() {
    let (issuer, verifier) = issuer_and_verifier().await;
    for aud in [json!("other"), json!(["other", "another"]), json!([])] {
        let claims = with(issuer.claims_for(EMAIL, AUDIENCE), json!({"aud": aud}));
        assert_rejected(&verifier, &issuer.mint(claims), AuthError::WrongAudience).await;
    }
    let claims = with(issuer.claims_for(EMAIL, AUDIENCE), json!({"aud": null}));
    assert_rejected(&verifier, &issuer.mint(claims), AuthError::MissingClaim("aud".to_owned()))
        .await;
}

#[tokio::test]
async fn unsigned_alg_none_token_is_rejected() {
    let (issuer, verifier) = issuer_and_verifier().await;
    let token = issuer.mint_none(issuer.claims_for(EMAIL, AUDIENCE));
    assert_rejected(&verifier, &token, AuthError::UnsupportedAlgorithm).await;
}

#[tokio::test]
async fn hs256_keyed_with_the_rsa_public_key_is_rejected() {
    let (issuer, verifier) = issuer_and_verifier().await;
    let token = issuer.mint_hs256_with_public_key(issuer.claims_for(EMAIL, AUDIENCE));
    assert_rejected(&verifier, &token, AuthError::UnsupportedAlgorithm).await;
    assert_eq!(issuer.jwks_fetches(), 1, "a refused algorithm never reaches key lookup");
}

// Keys: caching, refresh, rotation

#[tokio::test]
async fn key_set_is_fetched_once_for_many_tokens() {
    let (issuer, verifier) = issuer_and_verifier().await;
    for round in 0..10 {
        for alg in [Alg::RS256, Alg::ES256, Alg::EdDSA] {
            let email = format!("user{round}@example.com");
            let token = issuer.mint_with(alg, issuer.claims_for(&email, AUDIENCE));
            assert_accepted(&verifier, &token).await;
        }
    }
    assert_eq!(issuer.jwks_fetches(), 1);
}

#[tokio::test]
async fn unknown_kid_is_rejected_after_one_refresh() {
    let (issuer, verifier) = issuer_and_verifier().await;
    assert_eq!(issuer.jwks_fetches(), 1);
    let token = issuer.mint_unknown_kid(issuer.claims_for(EMAIL, AUDIENCE));
    assert_rejected(&verifier, &token, AuthError::UnknownKey).await;
    assert_eq!(issuer.jwks_fetches(), 2, "an unknown kid refreshes the key set once");
}

#[tokio::test]
async fn repeated_unknown_kids_within_the_refresh_interval_do_not_refetch() {
    let (issuer, verifier) = issuer_and_verifier().await;
    let token = issuer.mint_unknown_kid(issuer.claims_for(EMAIL, AUDIENCE));
    for _ in 0..5 {
        assert_rejected(&verifier, &token, AuthError::UnknownKey).await;
    }
    assert_eq!(issuer.jwks_fetches(), 2, "one refresh, then rate-limited");
    // Clones share the cache and the rate limit.
    assert_rejected(&verifier.clone(), &token, AuthError::UnknownKey).await;
    assert_eq!(issuer.jwks_fetches(), 2);
}

#[tokio::test]
async fn rotated_in_key_is_accepted_after_refresh() {
    let (issuer, verifier) = issuer_and_verifier().await;
    let verifier = verifier.with_min_refresh(Duration::ZERO);
    let before = issuer.mint(issuer.claims_for(EMAIL, AUDIENCE));
    assert_accepted(&verifier, &before).await;

    issuer.rotate();
    let after = issuer.mint(issuer.claims_for(EMAIL, AUDIENCE));
    assert_accepted(&verifier, &after).await;
    assert_eq!(issuer.jwks_fetches(), 2, "the new kid caused one refresh");
    assert_accepted(&verifier, &after).await;
    assert_eq!(issuer.jwks_fetches(), 2, "the refreshed key set is cached");

    // The rotated-out key is gone from the refreshed key set.
    assert_rejected(&verifier, &before, AuthError::UnknownKey).await;
}

#[tokio::test]
async fn rotation_within_the_refresh_interval_waits_for_the_interval() {
    let (issuer, verifier) = issuer_and_verifier().await;
    let clock = Arc::new(ManualClock::new(Timestamp::from_micros(1_000_000)));
    let verifier = verifier.with_min_refresh(Duration::from_secs(3)).with_clock(clock.clone());
    let stranger = issuer.mint_unknown_kid(issuer.claims_for(EMAIL, AUDIENCE));
    assert_rejected(&verifier, &stranger, AuthError::UnknownKey).await;
    assert_eq!(issuer.jwks_fetches(), 2);

    issuer.rotate();
    let rotated = issuer.mint(issuer.claims_for(EMAIL, AUDIENCE));
    assert_rejected(&verifier, &rotated, AuthError::UnknownKey).await;
    assert_eq!(issuer.jwks_fetches(), 2, "no refresh within the interval");

    clock.advance_micros(2_999_999);
    assert_rejected(&verifier, &rotated, AuthError::UnknownKey).await;
    assert_eq!(issuer.jwks_fetches(), 2, "still within the interval");
    clock.advance_micros(1);
    assert_accepted(&verifier, &rotated).await;
    assert_eq!(issuer.jwks_fetches(), 3);
}

// Discovery

#[tokio::test]
async fn discovery_requires_the_exact_issuer() {
    let issuer = TestIssuer::start().await;
    let config = OidcConfig::new(format!("{}/", issuer.issuer()), AUDIENCE);
    let err = Verifier::discover(config).await.unwrap_err();
    assert!(matches!(err, AuthError::Discovery(_)), "{err:?}");
}

#[tokio::test]
async fn discovery_fails_when_the_issuer_is_unreachable() {
    let issuer = TestIssuer::start().await;
    let url = issuer.issuer();
    drop(issuer);
    tokio::task::yield_now().await;
    let err = Verifier::discover(OidcConfig::new(url.clone(), AUDIENCE)).await.unwrap_err();
    let AuthError::Discovery(message) = err else { panic!("{err:?}") };
    assert!(message.contains(&url), "the operator is told which URL failed: {message}");
}

#[tokio::test]
async fn discovery_refuses_an_empty_audience() {
    let issuer = TestIssuer::start().await;
    let err = Verifier::discover(OidcConfig::new(issuer.issuer(), "")).await.unwrap_err();
    assert!(matches!(err, AuthError::Config(_)), "{err:?}");
}
