//! `spine-bench soak` for two minutes against the workspace's `spine`: the CI run of the soak
//! (the hour-long one's table is in docs/reliability.md). Mix sessions over a store held at
//! 100 records, a store-and-delete storm and `spine export` every half minute beside them:
//! no call and no export may fail.
//! Memory and p99 growth are not judged in two minutes (their rules are the soak's unit
//! tests'): the caches are still filling.

use std::path::PathBuf;
use std::process::Command;

/// `target/debug/spine`, built by the same `cargo test` (the `spine` crate's own tests need
/// it): beside this test's `deps/` directory.
fn spine() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let dir = exe.parent().and_then(|deps| deps.parent()).unwrap();
    dir.join(format!("spine{}", std::env::consts::EXE_SUFFIX))
}

#[test]
fn two_minutes_of_load_with_exports_beside_it_fail_nothing() {
    let spine = spine();
    assert!(spine.is_file(), "{} is built by `cargo test --workspace`", spine.display());
    let run = Command::new(env!("CARGO_BIN_EXE_spine-bench"))
        .args(["soak", "--minutes", "2", "--window", "30", "--sessions", "16", "--writers", "4"])
        .args(["--records", "100", "--export-every", "0.5", "--json", "--binary"])
        .arg(&spine)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&run.stdout);
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(run.status.success(), "{stdout}\n{stderr}");
    let windows: Vec<serde_json::Value> =
        stdout.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert!(windows.len() >= 4, "{stdout}");
    let sum = |k: &str| windows.iter().map(|w| w[k].as_u64().unwrap()).sum::<u64>();
    assert_eq!((sum("failed"), sum("exports_failed")), (0, 0), "{stdout}");
    assert!(sum("exports") >= 2, "exports ran beside the load: {stdout}");
    // The mix's store fills to 100 records and stays there: each store past it is matched by
    // a delete of the oldest (at a window's end, up to one store per session awaits its own).
    let last = windows.last().unwrap()["records"].as_u64().unwrap();
    assert!((100..=116).contains(&last), "{stdout}");
    for w in &windows {
        assert!(w["calls_per_s"].as_f64().unwrap() > 1.0, "{w}");
        assert!(w["tools"]["delete_memory"].is_array(), "the storm deletes: {w}");
        assert!(w["anon_mib"].as_f64().is_some() && w["threads"].as_u64().is_some(), "{w}");
    }
}
