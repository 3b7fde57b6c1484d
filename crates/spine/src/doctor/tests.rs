use super::*;

#[test]
fn the_model_sums_are_the_ones_the_fetch_script_verifies() {
    let script = include_str!("../../../../scripts/fetch-model.sh");
    for (file, sum) in MODEL_SHA256 {
        assert!(script.contains(&format!("[{file}]={sum}")), "{file}: {sum} not in fetch-model.sh");
    }
}
