//! Incremental detokenisation: turns generated token ids into text deltas.
//!
//! Decoding token by token breaks multi-byte characters split across tokens
//! and word-boundary spaces that depend on the previous token. We decode a
//! short window (the last emitted tokens plus the new ones) and only emit
//! once the window decodes to complete characters.

/// Decodes token ids to text (skipping special tokens).
pub trait Decode {
    fn decode(&self, ids: &[u32]) -> String;
}

impl<F: Fn(&[u32]) -> String> Decode for F {
    fn decode(&self, ids: &[u32]) -> String {
        self(ids)
    }
}

/// Per-sequence incremental detokeniser.
#[derive(Debug, Clone)]
pub struct IncrementalDetok {
    ids: Vec<u32>,
    /// Start of the window already turned into text (context for spacing).
    prefix: usize,
    /// End of the tokens already emitted.
    read: usize,
}

/// Prompt tokens kept as context so the first generated token decodes with
/// the spacing it has after the prompt.
const CONTEXT: usize = 4;

impl IncrementalDetok {
    /// Starts after `prompt` (only its last few tokens are kept).
    pub fn new(prompt: &[u32]) -> Self {
        let ctx = &prompt[prompt.len().saturating_sub(CONTEXT)..];
        IncrementalDetok {
            ids: ctx.to_vec(),
            prefix: 0,
            read: ctx.len(),
        }
    }

    /// Adds one token; returns the new text (empty while a character is
    /// incomplete).
    pub fn push(&mut self, d: &impl Decode, token: u32) -> String {
        self.ids.push(token);
        let before = d.decode(&self.ids[self.prefix..self.read]);
        let after = d.decode(&self.ids[self.prefix..]);
        // Wait while the window ends in an incomplete character or has not
        // produced text yet (e.g. a skipped special token).
        if after.len() <= before.len() || after.ends_with('\u{FFFD}') {
            return String::new();
        }
        let delta = match after.get(before.len()..) {
            Some(tail) if after.starts_with(&before) => tail.to_string(),
            // The new token changed how earlier text decodes (rare with
            // byte-level BPE); send from the first differing character.
            _ => {
                let common = after
                    .char_indices()
                    .zip(before.chars())
                    .find(|((_, a), b)| a != b)
                    .map_or(before.len().min(after.len()), |((i, _), _)| i);
                after.get(common..).unwrap_or("").to_string()
            }
        };
        self.prefix = self.read;
        self.read = self.ids.len();
        delta
    }

    /// Text of tokens still held (an incomplete character at the end).
    pub fn finish(&mut self, d: &impl Decode) -> String {
        if self.read >= self.ids.len() {
            return String::new();
        }
        let before = d.decode(&self.ids[self.prefix..self.read]);
        let after = d.decode(&self.ids[self.prefix..]);
        self.prefix = self.read;
        self.read = self.ids.len();
        after.get(before.len()..).unwrap_or("").to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A toy byte tokenizer: token t < 256 is byte t; lossy UTF-8 decoding
    /// like real byte-level BPE tokenizers.
    fn bytes(ids: &[u32]) -> String {
        let b: Vec<u8> = ids.iter().map(|&t| t as u8).collect();
        String::from_utf8_lossy(&b).into_owned()
    }

    #[test]
    fn multibyte_chars_wait_until_complete() {
        let text = "aé€😀b";
        let ids: Vec<u32> = text.bytes().map(u32::from).collect();
        let mut d = IncrementalDetok::new(&[b'x' as u32]);
        let mut out = String::new();
        let mut pieces = 0;
        for &t in &ids {
            let s = d.push(&bytes, t);
            if !s.is_empty() {
                pieces += 1;
            }
            assert!(!s.contains('\u{FFFD}'));
            out.push_str(&s);
        }
        out.push_str(&d.finish(&bytes));
        assert_eq!(out, text);
        assert_eq!(pieces, 5);
    }
}
