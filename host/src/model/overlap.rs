//! Two-batch overlap for decode steps: a step's sequences cut into two halves
//! that run on two lanes of the backend ([`Backend::lanes`]), so that one
//! half's attention runs beside the other half's products
//! ([`super::llama::Model::forward_halves_into`]).
//!
//! Why it pays where it does: a decode step of a small model at a large batch
//! is mostly attention, which streams the KV cache at copy bandwidth, and
//! between attentions a layer runs a few products and norms that are far too
//! short to fill the device (Qwen3-0.6B at 256 sequences: ~1.5 ms of a ~6 ms
//! step, measured in docs/results/gpu-2026-12-03-kvwarps.md). Halving the batch
//! costs one more read of the weights per step: little for a small model, but a
//! whole step's worth of bytes for a large one, whose products are already
//! bandwidth- or FLOP-bound at these batches. Hence the rule in
//! [`OverlapRule::resolve`].

use crate::backend::StepMeta;

/// Weights above this many bytes never overlap by default: their second read
/// per step costs more than the products' idle time it could hide.
pub const AUTO_MAX_WEIGHT_BYTES: usize = 4 << 30;

/// Fewest sequences of an overlapped decode step by default.
pub const AUTO_MIN_BATCH: usize = 64;

/// When decode steps overlap two halves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OverlapRule {
    /// Decode steps of at least this many sequences (always at least 2).
    pub min_batch: usize,
}

impl OverlapRule {
    /// The rule for a runner: `setting` is the user's choice (`Some(0)`: never;
    /// `Some(n)`: from `n` sequences; `None`: the default, from
    /// [`AUTO_MIN_BATCH`] sequences when the backend runs two lanes at once,
    /// the model is whole on one device and its weights are at most
    /// [`AUTO_MAX_WEIGHT_BYTES`]). A setting of 1 means 2: a half is never empty.
    pub fn resolve(
        setting: Option<usize>,
        lanes: usize,
        weight_bytes: usize,
        split_model: bool,
    ) -> Option<OverlapRule> {
        match setting {
            Some(0) => None,
            Some(n) => Some(OverlapRule {
                min_batch: n.max(2),
            }),
            None if lanes >= 2 && !split_model && weight_bytes <= AUTO_MAX_WEIGHT_BYTES => {
                Some(OverlapRule {
                    min_batch: AUTO_MIN_BATCH,
                })
            }
            None => None,
        }
    }

    /// Whether a decode step (or a recorded graph) of `seqs` sequences overlaps.
    pub fn applies(&self, seqs: usize) -> bool {
        seqs >= self.min_batch.max(2)
    }
}

/// Sequences in each half of a step of `seqs`: the first half takes the odd one.
pub fn half_sizes(seqs: usize) -> [usize; 2] {
    [seqs - seqs / 2, seqs / 2]
}

/// Whether `meta` is a decode step: one new token per sequence, each sampled,
/// in order (what both a recorded graph and an overlapped step require).
pub fn is_decode(meta: &StepMeta) -> bool {
    let s = meta.num_seqs();
    s > 0
        && meta.num_tokens() == s
        && meta.sample_rows.len() == s
        && meta
            .sample_rows
            .iter()
            .enumerate()
            .all(|(i, &r)| r as usize == i)
}

/// `meta` cut before sequence `at` into two steps over the same cache: token
/// rows, sample rows and `from_last` rows renumbered from 0 in each half,
/// page-table offsets rebased. `from_last`'s sample rows refer to the previous
/// step's sampling, which covered both halves, so they are kept. `at` may be 0
/// or `num_seqs` (an empty half).
pub fn split(meta: &StepMeta, at: usize) -> [StepMeta; 2] {
    let s = meta.num_seqs();
    let at = at.min(s);
    let part = |s0: usize, s1: usize| -> StepMeta {
        let (t0, t1) = (meta.q_indptr[s0] as usize, meta.q_indptr[s1] as usize);
        let (p0, p1) = (meta.page_indptr[s0] as usize, meta.page_indptr[s1] as usize);
        let rows = t0 as u32..t1 as u32;
        StepMeta {
            tokens: meta.tokens[t0..t1].to_vec(),
            positions: meta.positions[t0..t1].to_vec(),
            slots: meta.slots[t0..t1].to_vec(),
            q_indptr: meta.q_indptr[s0..=s1]
                .iter()
                .map(|&q| q - t0 as u32)
                .collect(),
            kv_lens: meta.kv_lens[s0..s1].to_vec(),
            page_table: meta.page_table[p0..p1].to_vec(),
            page_indptr: meta.page_indptr[s0..=s1]
                .iter()
                .map(|&p| p - p0 as u32)
                .collect(),
            sample_rows: meta
                .sample_rows
                .iter()
                .filter(|r| rows.contains(r))
                .map(|&r| r - t0 as u32)
                .collect(),
            page_size: meta.page_size,
            from_last: meta
                .from_last
                .iter()
                .filter(|p| rows.contains(&p[0]))
                .map(|&[r, src]| [r - t0 as u32, src])
                .collect(),
        }
    };
    [part(0, at), part(at, s)]
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Seeded xorshift: the tests' only source of variety.
    fn rng(seed: &mut u64) -> u64 {
        *seed ^= *seed << 13;
        *seed ^= *seed >> 7;
        *seed ^= *seed << 17;
        *seed
    }

    /// A valid step of `n` sequences with random prompt lengths and pages.
    fn step(n: usize, decode: bool, seed: &mut u64) -> StepMeta {
        let ps = 4u32;
        let mut m = StepMeta {
            page_size: ps,
            q_indptr: vec![0],
            page_indptr: vec![0],
            ..Default::default()
        };
        let mut next_page = 0u32;
        for i in 0..n {
            let q = if decode { 1 } else { 1 + rng(seed) as u32 % 5 };
            let kv = q + rng(seed) as u32 % 20;
            let pages: Vec<u32> = (0..kv.div_ceil(ps))
                .map(|_| {
                    next_page += 1;
                    next_page
                })
                .collect();
            for p in kv - q..kv {
                m.tokens.push(rng(seed) as u32 % 1000);
                m.positions.push(p);
                m.slots.push(pages[(p / ps) as usize] * ps + p % ps);
            }
            if rng(seed).is_multiple_of(3) {
                m.from_last.push([m.tokens.len() as u32 - q, i as u32]);
            }
            m.q_indptr.push(m.tokens.len() as u32);
            m.kv_lens.push(kv);
            m.page_table.extend(&pages);
            m.page_indptr.push(m.page_table.len() as u32);
            if decode || rng(seed).is_multiple_of(2) {
                m.sample_rows.push(m.tokens.len() as u32 - 1);
            }
        }
        m
    }

    /// Halves glued back together (rows and offsets shifted back).
    fn glue(a: &StepMeta, b: &StepMeta) -> StepMeta {
        let (t, p) = (a.tokens.len() as u32, a.page_table.len() as u32);
        let mut m = a.clone();
        m.tokens.extend(&b.tokens);
        m.positions.extend(&b.positions);
        m.slots.extend(&b.slots);
        m.q_indptr.extend(b.q_indptr[1..].iter().map(|&q| q + t));
        m.kv_lens.extend(&b.kv_lens);
        m.page_table.extend(&b.page_table);
        m.page_indptr
            .extend(b.page_indptr[1..].iter().map(|&x| x + p));
        m.sample_rows.extend(b.sample_rows.iter().map(|&r| r + t));
        m.from_last
            .extend(b.from_last.iter().map(|&[r, s]| [r + t, s]));
        m
    }

    #[test]
    fn halves_are_valid_steps_that_glue_back_to_the_original() {
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        for case in 0..300 {
            let n = 1 + case % 23;
            let m = step(n, case % 2 == 0, &mut seed);
            m.validate(10_000).unwrap();
            for at in [0, n / 2, n - n / 2, n, rng(&mut seed) as usize % (n + 1)] {
                let [a, b] = split(&m, at);
                assert_eq!((a.num_seqs(), b.num_seqs()), (at, n - at));
                a.validate(10_000).unwrap();
                b.validate(10_000).unwrap();
                assert_eq!(glue(&a, &b), m, "case {case}, cut at {at}");
            }
        }
    }

    #[test]
    fn decode_halves_stay_decode_steps() {
        let mut seed = 7u64;
        let m = step(9, true, &mut seed);
        assert!(is_decode(&m));
        let [a, b] = split(&m, half_sizes(9)[0]);
        assert!(is_decode(&a) && is_decode(&b));
        assert_eq!((a.num_seqs(), b.num_seqs()), (5, 4));
        let mut p = step(3, false, &mut seed);
        p.tokens.push(1);
        p.positions.push(0);
        p.slots.push(0);
        *p.q_indptr.last_mut().unwrap() += 1;
        assert!(!is_decode(&p));
    }

    #[test]
    fn the_default_rule_overlaps_small_whole_models_only() {
        let small = 1 << 30;
        let big = 28 << 30;
        let r = OverlapRule::resolve(None, 2, small, false).unwrap();
        assert!(r.applies(AUTO_MIN_BATCH) && !r.applies(AUTO_MIN_BATCH - 1));
        assert_eq!(OverlapRule::resolve(None, 2, big, false), None);
        assert_eq!(OverlapRule::resolve(None, 1, small, false), None);
        assert_eq!(OverlapRule::resolve(None, 2, small, true), None);
        assert_eq!(OverlapRule::resolve(Some(0), 2, small, false), None);
        // Asked for explicitly: any backend (one lane runs the halves in turn).
        let forced = OverlapRule::resolve(Some(1), 1, big, true).unwrap();
        assert_eq!(forced.min_batch, 2);
        assert!(!forced.applies(1) && forced.applies(2));
    }
}
