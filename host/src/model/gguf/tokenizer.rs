//! A `tokenizers::Tokenizer` rebuilt from the vocabulary, merges (or scores)
//! and special tokens embedded in a GGUF file (`tokenizer.ggml.*`).

use tokenizers::decoders::byte_level::ByteLevel as ByteLevelDecoder;
use tokenizers::models::bpe::{Vocab, BPE};
use tokenizers::normalizers::unicode::NFC;
use tokenizers::pre_tokenizers::byte_level::ByteLevel;
use tokenizers::pre_tokenizers::digits::Digits;
use tokenizers::pre_tokenizers::sequence::Sequence;
use tokenizers::pre_tokenizers::split::{Split, SplitPattern};
use tokenizers::pre_tokenizers::PreTokenizerWrapper;
use tokenizers::processors::template::TemplateProcessing;
use tokenizers::processors::PostProcessorWrapper;
use tokenizers::{AddedToken, SplitDelimiterBehavior, Tokenizer};

use super::config::Meta;
use super::error::GgufError;
use super::reader::GgufFile;
use super::spm::spm_tokenizer;

/// llama.cpp's `token_type` values that matter here.
const TOKEN_CONTROL: i64 = 3;
const TOKEN_USER_DEFINED: i64 = 4;

/// The split regexes of the BPE pre-tokenizers llama.cpp names in
/// `tokenizer.ggml.pre` (the published patterns of those tokenizers).
const LLAMA3_REGEX: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
const QWEN2_REGEX: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

/// Pre-tokenizer names this loader knows (for the error message).
const KNOWN_PRE: &str = "default, gpt2, gpt-2, smollm, llama-bpe, llama3, llama-v3, smaug-bpe, falcon3, pixtral, dbrx, qwen2, deepseek-r1-qwen";

/// What the rest of the loader needs besides the tokenizer itself.
pub struct GgufTokenizer {
    pub tokenizer: Tokenizer,
    pub vocab_len: usize,
    pub bos_token: Option<String>,
    pub eos_token: Option<String>,
}

fn tok_err(e: impl std::fmt::Display) -> GgufError {
    GgufError::Tokenizer(e.to_string())
}

/// Builds the tokenizer described by the file's `tokenizer.ggml.*` keys.
pub fn build_tokenizer(file: &GgufFile) -> Result<GgufTokenizer, GgufError> {
    let m = Meta(file);
    let model = m.str("tokenizer.ggml.model")?;
    let tokens: Vec<&str> = m.array("tokenizer.ggml.tokens", "an array of strings", |v| {
        v.as_str()
    })?;
    let types: Vec<i64> = if m.has("tokenizer.ggml.token_type") {
        m.array("tokenizer.ggml.token_type", "an array of integers", |v| {
            v.as_i64()
        })?
    } else {
        vec![1; tokens.len()]
    };
    if types.len() != tokens.len() {
        return Err(GgufError::BadValue {
            key: "tokenizer.ggml.token_type".into(),
            value: format!("[{} entries]", types.len()),
            detail: format!("expected one per token ({})", tokens.len()),
        });
    }

    let token_at = |key: &str| -> Result<Option<(u32, String)>, GgufError> {
        match m.u64_opt(key)? {
            None => Ok(None),
            Some(id) => match tokens.get(id as usize) {
                Some(t) => Ok(Some((id as u32, t.to_string()))),
                None => Err(GgufError::BadValue {
                    key: key.into(),
                    value: id.to_string(),
                    detail: format!("token id out of range (vocabulary has {})", tokens.len()),
                }),
            },
        }
    };
    let bos = token_at("tokenizer.ggml.bos_token_id")?;
    let eos = token_at("tokenizer.ggml.eos_token_id")?;
    let unk = token_at("tokenizer.ggml.unknown_token_id")?;
    let pad = token_at("tokenizer.ggml.padding_token_id")?;

    let (mut tokenizer, byte_level, default_add_bos) = match model {
        "gpt2" => (byte_level_bpe(&m, &tokens)?, true, false),
        "llama" => {
            let scores: Vec<f32> = m.array("tokenizer.ggml.scores", "an array of floats", |v| {
                v.as_f64().map(|f| f as f32)
            })?;
            if scores.len() != tokens.len() {
                return Err(GgufError::BadValue {
                    key: "tokenizer.ggml.scores".into(),
                    value: format!("[{} entries]", scores.len()),
                    detail: format!("expected one per token ({})", tokens.len()),
                });
            }
            let prefix = m
                .bool_opt("tokenizer.ggml.add_space_prefix")?
                .unwrap_or(true);
            let unk_str = unk.as_ref().map(|(_, t)| t.as_str());
            // llama.cpp adds BOS to SentencePiece vocabularies unless told not to.
            (
                spm_tokenizer(&tokens, &scores, unk_str, prefix)?,
                false,
                true,
            )
        }
        other => {
            return Err(GgufError::BadValue {
                key: "tokenizer.ggml.model".into(),
                value: format!("{other:?}"),
                detail: "supported: \"gpt2\" (byte-level BPE), \"llama\" (SentencePiece BPE)"
                    .into(),
            })
        }
    };

    // Control tokens (and the declared special ids) are matched whole and
    // skipped when decoding with skip_special_tokens; user-defined tokens are
    // matched whole but decoded as text.
    let mut special: Vec<AddedToken> = Vec::new();
    let mut user: Vec<AddedToken> = Vec::new();
    for (id, (&t, &ty)) in tokens.iter().zip(&types).enumerate() {
        let declared = [&bos, &eos, &unk, &pad]
            .iter()
            .any(|s| s.as_ref().is_some_and(|(i, _)| *i as usize == id));
        if ty == TOKEN_CONTROL || declared {
            special.push(AddedToken::from(t, true));
        } else if ty == TOKEN_USER_DEFINED {
            user.push(AddedToken::from(t, false).normalized(false));
        }
    }
    tokenizer.add_special_tokens(&special);
    tokenizer.add_tokens(&user);

    let add_bos = m
        .bool_opt("tokenizer.ggml.add_bos_token")?
        .unwrap_or(default_add_bos);
    let add_eos = m.bool_opt("tokenizer.ggml.add_eos_token")?.unwrap_or(false);
    let processor: Option<PostProcessorWrapper> = if add_bos || add_eos {
        Some(template(add_bos.then_some(&bos), add_eos.then_some(&eos))?.into())
    } else if byte_level {
        Some(ByteLevel::new(true, false, true).into())
    } else {
        None
    };
    tokenizer.with_post_processor(processor);

    Ok(GgufTokenizer {
        tokenizer,
        vocab_len: tokens.len(),
        bos_token: bos.map(|(_, t)| t),
        eos_token: eos.map(|(_, t)| t),
    })
}

/// `BOS $A EOS` (each part only when asked for).
fn template(
    bos: Option<&Option<(u32, String)>>,
    eos: Option<&Option<(u32, String)>>,
) -> Result<TemplateProcessing, GgufError> {
    let need = |t: &Option<(u32, String)>, key: &str| {
        t.clone()
            .ok_or_else(|| GgufError::MissingKey { key: key.into() })
    };
    let mut single = String::new();
    let mut specials = Vec::new();
    if let Some(b) = bos {
        let (id, t) = need(b, "tokenizer.ggml.bos_token_id")?;
        single.push_str(&format!("{t}:0 "));
        specials.push((t, id));
    }
    single.push_str("$A:0");
    if let Some(e) = eos {
        let (id, t) = need(e, "tokenizer.ggml.eos_token_id")?;
        single.push_str(&format!(" {t}:0"));
        if !specials.iter().any(|(s, _)| *s == t) {
            specials.push((t, id));
        }
    }
    let pair = format!(
        "{single} {}",
        single.replace("$A:0", "$B:1").replace(":0", ":1")
    );
    TemplateProcessing::builder()
        .try_single(single)
        .map_err(tok_err)?
        .try_pair(pair)
        .map_err(tok_err)?
        .special_tokens(specials)
        .build()
        .map_err(tok_err)
}

/// Byte-level BPE (GPT-2 style) from the file's tokens and merges, with the
/// pre-tokenizer `tokenizer.ggml.pre` names.
fn byte_level_bpe(m: &Meta, tokens: &[&str]) -> Result<Tokenizer, GgufError> {
    let merges_raw: Vec<&str> = m.array("tokenizer.ggml.merges", "an array of strings", |v| {
        v.as_str()
    })?;
    let mut merges = Vec::with_capacity(merges_raw.len());
    for (i, mg) in merges_raw.iter().enumerate() {
        let (a, b) = mg.split_once(' ').ok_or_else(|| GgufError::BadValue {
            key: "tokenizer.ggml.merges".into(),
            value: format!("{mg:?} (entry {i})"),
            detail: "a merge is two tokens separated by a space".into(),
        })?;
        merges.push((a.to_string(), b.to_string()));
    }
    let mut vocab = Vocab::default();
    vocab.reserve(tokens.len());
    for (id, t) in tokens.iter().enumerate() {
        // Keep the first id of a duplicated string, as llama.cpp's lookup does.
        vocab.entry(t.to_string()).or_insert(id as u32);
    }

    let pre = m.str_opt("tokenizer.ggml.pre")?.unwrap_or("default");
    let byte_level = |use_regex| ByteLevel::new(false, true, use_regex);
    let split = |re: &str| -> Result<PreTokenizerWrapper, GgufError> {
        Ok(Split::new(
            SplitPattern::Regex(re.into()),
            SplitDelimiterBehavior::Isolated,
            false,
        )
        .map_err(tok_err)?
        .into())
    };
    let (pre_tokenizer, ignore_merges, nfc): (PreTokenizerWrapper, bool, bool) = match pre {
        "default" | "gpt2" | "gpt-2" => (byte_level(true).into(), false, false),
        // SmolLM splits every digit, then applies GPT-2's split.
        "smollm" => (
            Sequence::new(vec![Digits::new(true).into(), byte_level(true).into()]).into(),
            false,
            false,
        ),
        "llama-bpe" | "llama3" | "llama-v3" | "smaug-bpe" | "falcon3" | "pixtral" | "dbrx" => (
            Sequence::new(vec![split(LLAMA3_REGEX)?, byte_level(false).into()]).into(),
            true,
            false,
        ),
        "qwen2" | "deepseek-r1-qwen" => (
            Sequence::new(vec![split(QWEN2_REGEX)?, byte_level(false).into()]).into(),
            false,
            true,
        ),
        other => {
            return Err(GgufError::BadValue {
                key: "tokenizer.ggml.pre".into(),
                value: format!("{other:?}"),
                detail: format!("unknown pre-tokenizer (known: {KNOWN_PRE})"),
            })
        }
    };

    let bpe = BPE::builder()
        .vocab_and_merges(vocab, merges)
        .ignore_merges(ignore_merges)
        .build()
        .map_err(tok_err)?;
    let mut tokenizer = Tokenizer::new(bpe);
    tokenizer.with_pre_tokenizer(Some(pre_tokenizer));
    tokenizer.with_decoder(Some(ByteLevelDecoder::default()));
    if nfc {
        tokenizer.with_normalizer(Some(NFC));
    }
    Ok(tokenizer)
}
