//! SentencePiece-style vocabularies (`tokenizer.ggml.model = "llama"`, as in
//! Llama-2 and Mistral GGUFs) as a byte-fallback BPE: the file stores tokens
//! and scores but no merges, so the merges are recovered from the vocabulary
//! (every token that is the concatenation of two other tokens is a merge,
//! ranked by the score of the merged token).

use std::cmp::Ordering;

use tokenizers::decoders::byte_fallback::ByteFallback;
use tokenizers::decoders::fuse::Fuse;
use tokenizers::decoders::sequence::Sequence as DecoderSequence;
use tokenizers::decoders::strip::Strip;
use tokenizers::decoders::DecoderWrapper;
use tokenizers::models::bpe::{Vocab, BPE};
use tokenizers::normalizers::replace::Replace;
use tokenizers::pre_tokenizers::metaspace::{Metaspace, PrependScheme};
use tokenizers::Tokenizer;

use super::error::GgufError;

/// The word-boundary marker SentencePiece writes for a space.
const SPACE: char = '\u{2581}';

fn tok_err(e: impl std::fmt::Display) -> GgufError {
    GgufError::Tokenizer(e.to_string())
}

/// Merges implied by `tokens` and their `scores`: for each token, every split
/// into two tokens of the vocabulary, best merged-token score first (ties: the
/// longer left part, then the longer right part, then file order).
pub fn merges_from_scores(tokens: &[&str], scores: &[f32], vocab: &Vocab) -> Vec<(String, String)> {
    struct Cand<'a> {
        left: &'a str,
        right: &'a str,
        score: f32,
        order: (usize, u32, u32),
        lens: (usize, usize),
    }
    let mut cands: Vec<Cand> = Vec::new();
    for (i, (&t, &score)) in tokens.iter().zip(scores).enumerate() {
        for (k, _) in t.char_indices().skip(1) {
            let (left, right) = t.split_at(k);
            if let (Some(&l), Some(&r)) = (vocab.get(left), vocab.get(right)) {
                cands.push(Cand {
                    left,
                    right,
                    score,
                    order: (i, l, r),
                    lens: (left.chars().count(), right.chars().count()),
                });
            }
        }
    }
    cands.sort_by(|a, b| {
        b.score
            .partial_cmp(&a.score)
            .unwrap_or(Ordering::Equal)
            .then(b.lens.0.cmp(&a.lens.0))
            .then(b.lens.1.cmp(&a.lens.1))
            .then(a.order.cmp(&b.order))
    });
    cands
        .into_iter()
        .map(|c| (c.left.to_string(), c.right.to_string()))
        .collect()
}

/// A byte-fallback BPE tokenizer over a SentencePiece vocabulary. Spaces
/// become `▁`, and one is prepended to the text when `add_space_prefix`.
pub fn spm_tokenizer(
    tokens: &[&str],
    scores: &[f32],
    unk: Option<&str>,
    add_space_prefix: bool,
) -> Result<Tokenizer, GgufError> {
    let mut vocab = Vocab::default();
    vocab.reserve(tokens.len());
    for (id, t) in tokens.iter().enumerate() {
        vocab.entry(t.to_string()).or_insert(id as u32);
    }
    let merges = merges_from_scores(tokens, scores, &vocab);
    let mut builder = BPE::builder()
        .vocab_and_merges(vocab, merges)
        .byte_fallback(true)
        .fuse_unk(true);
    if let Some(u) = unk {
        builder = builder.unk_token(u.to_string());
    }
    let bpe = builder.build().map_err(tok_err)?;
    let mut tokenizer = Tokenizer::new(bpe);
    let scheme = if add_space_prefix {
        PrependScheme::First
    } else {
        PrependScheme::Never
    };
    tokenizer.with_pre_tokenizer(Some(Metaspace::new(SPACE, scheme, false)));
    let mut decoders: Vec<DecoderWrapper> = vec![
        Replace::new(SPACE.to_string(), " ")
            .map_err(tok_err)?
            .into(),
        ByteFallback::new().into(),
        Fuse::new().into(),
    ];
    if add_space_prefix {
        decoders.push(Strip::new(' ', 1, 0).into());
    }
    tokenizer.with_decoder(Some(DecoderSequence::new(decoders)));
    Ok(tokenizer)
}
