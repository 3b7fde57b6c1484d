//! Loading `tokenizer.json` quickly.
//!
//! `Tokenizer::from_file` reads the model section through `serde_json::Value` (the tokenizers
//! crate tries its model formats one after the other), which for a WordPiece vocabulary of
//! 30,522 entries builds and drops a `BTreeMap` of them: a large share of a cold start whose
//! target is 100 ms (docs/performance.md, "Start-up"). [`load`] reads that section straight
//! into the map the model keeps and builds the tokenizer from it, with every other part
//! (normalizer, pre-tokenizer, post-processor, decoder, added tokens) deserialised by the
//! tokenizers crate itself from the file's own settings. A file that is not a WordPiece
//! model, or whose added tokens disagree with its vocabulary, loads through
//! `Tokenizer::from_file` as before.
//! `tests::fast_load_matches_from_file` checks that both give the same encodings.

use std::path::Path;

use ahash::AHashMap;
use serde::Deserialize;
use tokenizers::decoders::DecoderWrapper;
use tokenizers::models::wordpiece::WordPiece;
use tokenizers::normalizers::NormalizerWrapper;
use tokenizers::pre_tokenizers::PreTokenizerWrapper;
use tokenizers::processors::PostProcessorWrapper;
use tokenizers::{AddedToken, Tokenizer};

/// The parts of `tokenizer.json` a WordPiece tokenizer is made of. `truncation` and
/// `padding` are left out: the embedder sets both itself.
#[derive(Deserialize)]
struct File {
    #[serde(default)]
    added_tokens: Vec<Added>,
    normalizer: Option<NormalizerWrapper>,
    pre_tokenizer: Option<PreTokenizerWrapper>,
    post_processor: Option<PostProcessorWrapper>,
    decoder: Option<DecoderWrapper>,
    model: Model,
}

#[derive(Deserialize)]
struct Added {
    id: u32,
    content: String,
    single_word: bool,
    lstrip: bool,
    rstrip: bool,
    normalized: bool,
    special: bool,
}

/// A WordPiece model section (`"type": "WordPiece"`).
#[derive(Deserialize)]
struct Model {
    #[serde(rename = "type")]
    kind: String,
    unk_token: String,
    continuing_subword_prefix: String,
    max_input_chars_per_word: usize,
    vocab: AHashMap<String, u32>,
}

/// The tokenizer of `path`: [`fast`]'s when the file is a WordPiece model it can build,
/// `Tokenizer::from_file`'s otherwise.
pub fn load(path: &Path) -> tokenizers::Result<Tokenizer> {
    let bytes = std::fs::read(path)?;
    match fast(&bytes) {
        Some(tokenizer) => Ok(tokenizer),
        None => Tokenizer::from_bytes(&bytes),
    }
}

/// The tokenizer `bytes` describe, built from its parts; `None` when they are not those of
/// a WordPiece model with added tokens that are in its vocabulary under their ids.
fn fast(bytes: &[u8]) -> Option<Tokenizer> {
    let file: File = serde_json::from_slice(bytes).ok()?;
    let model = file.model;
    if model.kind != "WordPiece"
        || !file.added_tokens.iter().all(|a| model.vocab.get(&a.content) == Some(&a.id))
    {
        return None;
    }
    let wordpiece = WordPiece::builder()
        .vocab(model.vocab)
        .unk_token(model.unk_token)
        .continuing_subword_prefix(model.continuing_subword_prefix)
        .max_input_chars_per_word(model.max_input_chars_per_word)
        .build()
        .ok()?;
    let mut tokenizer = Tokenizer::new(wordpiece);
    tokenizer
        .with_normalizer(file.normalizer)
        .ok()?
        .with_pre_tokenizer(file.pre_tokenizer)
        .with_post_processor(file.post_processor)
        .with_decoder(file.decoder);
    let token = |a: &Added| {
        AddedToken::from(a.content.clone(), a.special)
            .single_word(a.single_word)
            .lstrip(a.lstrip)
            .rstrip(a.rstrip)
            .normalized(a.normalized)
    };
    let (special, plain): (Vec<&Added>, Vec<&Added>) =
        file.added_tokens.iter().partition(|a| a.special);
    tokenizer.add_special_tokens(special.into_iter().map(token)).ok()?;
    tokenizer.add_tokens(plain.into_iter().map(token)).ok()?;
    Some(tokenizer)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::default_model_dir;

    /// The real tokenizer.json (CI fetches the model first), loaded both ways, encodes texts
    /// that exercise each part alike: accents and case (normalizer), CJK and punctuation
    /// (pre-tokenizer), unknown and over-long words (model), literal special tokens (added
    /// tokens), `[CLS]`/`[SEP]` (post-processor), control characters and empty text.
    #[test]
    fn fast_load_matches_from_file() {
        let path = default_model_dir().join("tokenizer.json");
        let bytes = std::fs::read(&path).expect("the model is fetched before the tests");
        assert!(fast(&bytes).is_some(), "all-MiniLM-L6-v2's tokenizer is built here");
        // As the embedder uses them: its truncation, no padding.
        let fast = crate::load_tokenizer(&path).expect("tokenizer.json loads");
        let reference = Tokenizer::from_file(&path).expect("tokenizer.json loads");
        let reference = crate::for_embedding(reference).expect("settings apply");
        let long_word = "x".repeat(150);
        let long_text = "many words in a long text ".repeat(100);
        let texts = [
            "",
            "Hello, World!",
            "Ünïcödé Çafé naïve — ÀÉÎÕÜ résumé",
            "日本語のテキスト 中文字符 한국어 🙂🚀",
            "fn main() { println!(\"{}\", x.unwrap_or_default()); } // TODO: #42",
            "[CLS] literal [SEP] tokens [MASK] and [PAD] and [UNK] inside",
            "tabs\tand\nnew lines\r\n and \u{0}nul \u{200b}zero-width",
            "supercalifragilisticexpialidocious antidisestablishmentarianism",
            long_word.as_str(),
            long_text.as_str(),
            "snake_case_identifier CamelCaseIdentifier kebab-case-id 3.14159 0xDEADBEEF",
        ];
        for text in texts {
            let a = fast.encode(text, true).expect("encodes");
            let b = reference.encode(text, true).expect("encodes");
            assert_eq!(a.get_ids(), b.get_ids(), "{text:?}");
            assert_eq!(a.get_type_ids(), b.get_type_ids(), "{text:?}");
            assert_eq!(a.get_attention_mask(), b.get_attention_mask(), "{text:?}");
            assert_eq!(a.get_offsets(), b.get_offsets(), "{text:?}");
        }
        let long = fast.encode(long_text.as_str(), true).expect("encodes");
        assert_eq!(long.get_ids().len(), crate::MAX_TOKENS, "truncated as the embedder needs");
        assert_eq!(fast.get_vocab_size(true), reference.get_vocab_size(true));
        let ids = [101, 7592, 1010, 2088, 999, 102];
        assert_eq!(fast.decode(&ids, true).ok(), reference.decode(&ids, true).ok());
    }

    /// A file that is not WordPiece, or whose added tokens disagree with the vocabulary, is
    /// left to `Tokenizer::from_file`.
    #[test]
    fn other_files_are_not_built_here() {
        let wordpiece = serde_json::json!({
            "added_tokens": [{"id": 0, "content": "[UNK]", "single_word": false, "lstrip": false,
                "rstrip": false, "normalized": false, "special": true}],
            "normalizer": null, "pre_tokenizer": null, "post_processor": null, "decoder": null,
            "model": {"type": "WordPiece", "unk_token": "[UNK]", "continuing_subword_prefix": "##",
                "max_input_chars_per_word": 100, "vocab": {"[UNK]": 0, "a": 1}}
        })
        .to_string();
        assert!(fast(wordpiece.as_bytes()).is_some());
        assert!(fast(wordpiece.replace("\"[UNK]\":0", "\"[UNK]\":2").as_bytes()).is_none());
        assert!(fast(wordpiece.replace("\"WordPiece\"", "\"BPE\"").as_bytes()).is_none());
        assert!(fast(b"{}").is_none());
    }
}
