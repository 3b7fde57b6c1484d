//! The web console in a real browser (tests/typescript/console_browser.mjs): Debian's
//! Chromium driven by playwright-core against two `spine serve` processes, one local without
//! OIDC and one signing in through the test issuer's authorization-code + PKCE flow. Needs
//! what `scripts/test.sh` installs (node modules, `chromium`); the README's test command sets
//! SPINE_REQUIRE_NODE so it can never be skipped there. SPINE_CONSOLE_SCREENSHOTS=docs/console
//! saves the screenshots docs/console.md shows.

use spine_testkit::TestIssuer;

use crate::common::*;

const AUDIENCE: &str = "spine-tests";
const CONSOLE: &str = "spine-console";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_console_in_a_real_browser() {
    let root = crate::common::repo();
    let chromium = std::env::var("SPINE_CHROMIUM").unwrap_or_else(|_| "/usr/bin/chromium".into());
    let ready = root.join("tests/typescript/node_modules/playwright-core").exists()
        && std::path::Path::new(&chromium).exists();
    if !ready {
        assert!(
            std::env::var_os("SPINE_REQUIRE_NODE").is_none(),
            "playwright-core or {chromium} is missing: run scripts/test.sh"
        );
        eprintln!("skipped: no playwright-core or Chromium (scripts/test.sh installs them)");
        return;
    }
    let issuer = TestIssuer::start().await;
    let iss = issuer.issuer();
    let mut local = start_http().await;
    let mut oidc = start_http_with(&[
        "--oidc-issuer",
        &iss,
        "--oidc-audience",
        AUDIENCE,
        "--console-client-id",
        CONSOLE,
    ])
    .await;
    let token = |email: &str| issuer.mint(issuer.claims_for(email, AUDIENCE));
    let out = tokio::process::Command::new("node")
        .arg(root.join("tests/typescript/console_browser.mjs"))
        .env("SPINE_LOCAL", format!("http://{}", local.addr))
        .env("SPINE_OIDC", format!("http://{}", oidc.addr))
        .env("SPINE_ALICE_TOKEN", token("alice@example.com"))
        .env("SPINE_BOB_TOKEN", token("bob@example.com"))
        .env("SPINE_CHROMIUM", &chromium)
        .output()
        .await
        .expect("node runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.contains("console browser: all checks passed"), "{stdout}");
    // Three sign-ins (alice, bob, bob again after the session expired), each a code redeemed
    // with its PKCE verifier.
    assert_eq!(issuer.tokens_issued(), 3);
    local.child.kill().await.unwrap();
    oidc.child.kill().await.unwrap();
}
