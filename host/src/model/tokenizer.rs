//! Text ↔ token ids: a wrapper over the `tokenizers` crate that adds what
//! transformers layers on top of `tokenizer.json` (BOS policy from
//! `tokenizer_config.json`, the set of end-of-sequence ids, the chat template),
//! plus an incremental decoder for streaming.

use std::collections::BTreeSet;
use std::path::Path;

use serde_json::Value;

use super::chat_template::ChatTemplate;
use super::ModelError;

/// A loaded tokenizer with its special-token policy and chat template.
pub struct Tokenizer {
    inner: tokenizers::Tokenizer,
    bos_token: Option<String>,
    eos_token: Option<String>,
    pad_token: Option<String>,
    unk_token: Option<String>,
    bos_id: Option<u32>,
    /// `Some(b)`: `add_bos_token` was set explicitly in `tokenizer_config.json`.
    add_bos: Option<bool>,
    eos_ids: BTreeSet<u32>,
    template: Option<ChatTemplate>,
}

fn read_json(path: &Path) -> Result<Option<Value>, ModelError> {
    if !path.exists() {
        return Ok(None);
    }
    let text = std::fs::read_to_string(path).map_err(|e| ModelError::io(path, e))?;
    serde_json::from_str(&text)
        .map(Some)
        .map_err(|e| ModelError::Tokenizer(format!("{}: invalid JSON: {e}", path.display())))
}

/// `"<s>"` or `{"content": "<s>", ...}` (AddedToken form).
fn token_str(v: Option<&Value>) -> Option<String> {
    match v? {
        Value::String(s) => Some(s.clone()),
        Value::Object(o) => o.get("content").and_then(Value::as_str).map(str::to_string),
        _ => None,
    }
}

fn ids_of(v: Option<&Value>) -> Vec<u32> {
    match v {
        Some(Value::Number(n)) => n.as_u64().map(|x| vec![x as u32]).unwrap_or_default(),
        Some(Value::Array(a)) => a
            .iter()
            .filter_map(|x| x.as_u64().map(|x| x as u32))
            .collect(),
        _ => vec![],
    }
}

/// Special tokens and template found next to a tokenizer (or in a GGUF file).
#[derive(Clone, Debug, Default)]
pub struct TokenizerExtras {
    pub bos_token: Option<String>,
    pub eos_token: Option<String>,
    pub pad_token: Option<String>,
    pub unk_token: Option<String>,
    pub add_bos_token: Option<bool>,
    pub chat_template: Option<String>,
    /// Extra end-of-sequence ids (config.json / generation_config.json).
    pub eos_ids: Vec<u32>,
}

impl Tokenizer {
    /// Load `tokenizer.json` from an HF directory, with `tokenizer_config.json`,
    /// `generation_config.json` and `chat_template.jinja` when present.
    /// `config_eos` are the ids from `config.json`'s `eos_token_id`.
    pub fn from_dir(dir: &Path, config_eos: &[u32]) -> Result<Self, ModelError> {
        let tj = dir.join("tokenizer.json");
        if !tj.exists() {
            return Err(ModelError::io(&tj, "file not found"));
        }
        let inner = tokenizers::Tokenizer::from_file(&tj)
            .map_err(|e| ModelError::Tokenizer(format!("{}: cannot parse: {e}", tj.display())))?;
        let tc = read_json(&dir.join("tokenizer_config.json"))?.unwrap_or(Value::Null);
        let gc = read_json(&dir.join("generation_config.json"))?.unwrap_or(Value::Null);
        let jinja = dir.join("chat_template.jinja");
        let chat_template = if jinja.exists() {
            Some(std::fs::read_to_string(&jinja).map_err(|e| ModelError::io(&jinja, e))?)
        } else {
            match tc.get("chat_template") {
                Some(Value::String(s)) => Some(s.clone()),
                // A list of named templates: use "default".
                Some(Value::Array(a)) => a
                    .iter()
                    .find(|t| t.get("name").and_then(Value::as_str) == Some("default"))
                    .and_then(|t| t.get("template"))
                    .and_then(Value::as_str)
                    .map(str::to_string),
                _ => None,
            }
        };
        let mut eos_ids = config_eos.to_vec();
        eos_ids.extend(ids_of(gc.get("eos_token_id")));
        let extras = TokenizerExtras {
            bos_token: token_str(tc.get("bos_token")),
            eos_token: token_str(tc.get("eos_token")),
            pad_token: token_str(tc.get("pad_token")),
            unk_token: token_str(tc.get("unk_token")),
            add_bos_token: tc.get("add_bos_token").and_then(Value::as_bool),
            chat_template,
            eos_ids,
        };
        Self::from_parts(inner, extras)
    }

    /// Build from an in-memory tokenizer (e.g. one rebuilt from a GGUF file).
    pub fn from_parts(
        inner: tokenizers::Tokenizer,
        extras: TokenizerExtras,
    ) -> Result<Self, ModelError> {
        let bos_id = extras
            .bos_token
            .as_deref()
            .and_then(|t| inner.token_to_id(t));
        let mut eos_ids: BTreeSet<u32> = extras.eos_ids.iter().copied().collect();
        if let Some(id) = extras
            .eos_token
            .as_deref()
            .and_then(|t| inner.token_to_id(t))
        {
            eos_ids.insert(id);
        }
        let template = match extras.chat_template {
            Some(src) => Some(ChatTemplate::new(&src)?),
            None => None,
        };
        Ok(Tokenizer {
            inner,
            bos_token: extras.bos_token,
            eos_token: extras.eos_token,
            pad_token: extras.pad_token,
            unk_token: extras.unk_token,
            bos_id,
            add_bos: extras.add_bos_token,
            eos_ids,
            template,
        })
    }

    /// Encode like transformers' `tokenizer(text, add_special_tokens=...)`:
    /// the `tokenizer.json` post-processor adds special tokens, and an explicit
    /// `add_bos_token` in `tokenizer_config.json` overrides its BOS choice.
    /// Chat prompts rendered by [`Tokenizer::apply_chat_template`] already carry
    /// their special tokens: encode them with `add_special_tokens = false`.
    pub fn encode(&self, text: &str, add_special_tokens: bool) -> Result<Vec<u32>, ModelError> {
        let enc = self
            .inner
            .encode(text, add_special_tokens)
            .map_err(|e| ModelError::Tokenizer(format!("encode failed: {e}")))?;
        let mut ids = enc.get_ids().to_vec();
        if add_special_tokens {
            if let (Some(add), Some(bos)) = (self.add_bos, self.bos_id) {
                let has = ids.first() == Some(&bos);
                if add && !has {
                    ids.insert(0, bos);
                } else if !add && has {
                    let plain = self
                        .inner
                        .encode(text, false)
                        .map_err(|e| ModelError::Tokenizer(format!("encode failed: {e}")))?;
                    if plain.get_ids().first() != Some(&bos) {
                        ids.remove(0);
                    }
                }
            }
        }
        Ok(ids)
    }

    /// Decode ids to text.
    pub fn decode(&self, ids: &[u32], skip_special_tokens: bool) -> Result<String, ModelError> {
        self.inner
            .decode(ids, skip_special_tokens)
            .map_err(|e| ModelError::Tokenizer(format!("decode failed: {e}")))
    }

    /// Whether `id` ends generation.
    pub fn is_eos(&self, id: u32) -> bool {
        self.eos_ids.contains(&id)
    }

    /// All end-of-sequence ids, ascending.
    pub fn eos_ids(&self) -> Vec<u32> {
        self.eos_ids.iter().copied().collect()
    }

    /// BOS token id, if the tokenizer has one.
    pub fn bos_id(&self) -> Option<u32> {
        self.bos_id
    }

    /// Vocabulary size including added tokens.
    pub fn vocab_size(&self) -> usize {
        self.inner.get_vocab_size(true)
    }

    /// Id of a token string.
    pub fn token_to_id(&self, token: &str) -> Option<u32> {
        self.inner.token_to_id(token)
    }

    /// The underlying `tokenizers` object.
    pub fn inner(&self) -> &tokenizers::Tokenizer {
        &self.inner
    }

    /// Whether a chat template is available.
    pub fn has_chat_template(&self) -> bool {
        self.template.is_some()
    }

    /// Render a conversation (`messages`: a JSON list of `{role, content}`)
    /// with the model's chat template, like transformers'
    /// `apply_chat_template(messages, tokenize=False, add_generation_prompt=...)`.
    pub fn apply_chat_template(
        &self,
        messages: &Value,
        add_generation_prompt: bool,
    ) -> Result<String, ModelError> {
        let t = self
            .template
            .as_ref()
            .ok_or_else(|| ModelError::Template("the model has no chat template".into()))?;
        t.render(
            messages,
            add_generation_prompt,
            &[
                ("bos_token", self.bos_token.as_deref()),
                ("eos_token", self.eos_token.as_deref()),
                ("pad_token", self.pad_token.as_deref()),
                ("unk_token", self.unk_token.as_deref()),
            ],
        )
    }
}

/// Streaming detokenizer: feed ids one at a time, get the text they add,
/// never splitting a multi-byte character across pieces.
///
/// It re-decodes a short window (`prefix..`) and emits only what extends the
/// previous decode of the same window, so tokenizer context effects (leading
/// spaces, byte fallback) come out exactly as a full decode would.
#[derive(Clone, Debug)]
pub struct IncrementalDecoder {
    ids: Vec<u32>,
    prefix_offset: usize,
    read_offset: usize,
    skip_special_tokens: bool,
}

impl IncrementalDecoder {
    /// Start after `context` (e.g. the prompt, whose text is not emitted).
    pub fn new(context: &[u32], skip_special_tokens: bool) -> Self {
        // A few context tokens suffice for leading-space decisions.
        let keep = context.len().saturating_sub(5);
        let ids = context[keep..].to_vec();
        let n = ids.len();
        IncrementalDecoder {
            ids,
            prefix_offset: 0,
            read_offset: n,
            skip_special_tokens,
        }
    }

    /// Add one id; returns the new text (possibly empty while a character is
    /// incomplete).
    pub fn push(&mut self, tok: &Tokenizer, id: u32) -> Result<String, ModelError> {
        self.ids.push(id);
        let prefix = tok.decode(
            &self.ids[self.prefix_offset..self.read_offset],
            self.skip_special_tokens,
        )?;
        let full = tok.decode(&self.ids[self.prefix_offset..], self.skip_special_tokens)?;
        // A window that starts with an incomplete character (context cut
        // mid-character) decodes with a trailing U+FFFD that the longer decode
        // completes: compare without it.
        // Such a window must not become the next window's start either.
        let clean = !prefix.ends_with('\u{FFFD}');
        let prefix = prefix.trim_end_matches('\u{FFFD}');
        if full.len() > prefix.len() && !full.ends_with('\u{FFFD}') && full.starts_with(prefix) {
            let new = full[prefix.len()..].to_string();
            if clean {
                self.prefix_offset = self.read_offset;
            }
            self.read_offset = self.ids.len();
            Ok(new)
        } else {
            Ok(String::new())
        }
    }

    /// Text still held back (an incomplete character at the end), decoded as is.
    pub fn flush(&mut self, tok: &Tokenizer) -> Result<String, ModelError> {
        if self.read_offset == self.ids.len() {
            return Ok(String::new());
        }
        let prefix = tok.decode(
            &self.ids[self.prefix_offset..self.read_offset],
            self.skip_special_tokens,
        )?;
        let full = tok.decode(&self.ids[self.prefix_offset..], self.skip_special_tokens)?;
        self.prefix_offset = self.read_offset;
        self.read_offset = self.ids.len();
        Ok(full.get(prefix.len()..).unwrap_or("").to_string())
    }
}
