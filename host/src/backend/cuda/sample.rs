//! Device sampling following the CPU reference recipe (`backend/cpu/sampling.rs`):
//! process logits in place, one `row_select` pass (argmax, log-sum-exp, truncation
//! threshold, Gumbel-max draw), then top-K extraction only when asked. Only the
//! per-row results (O(rows × K)) come back.

use std::collections::HashMap;

use cudarc::driver::{CudaEvent, PinnedHostSlice};

use super::{cfg, g, Arg, Buf, CudaBackend, CudaTensor};
use crate::backend::{BackendError, Sampled};
use crate::batch::{ResolvedSampling, SampleMode, SampleSpec, TokenLogprob};

/// Largest top-K (candidates or top_logprobs) the device kernel extracts.
pub const MAX_TOPK: usize = 256;

/// How many chunks `row_partials` cuts each of `rows` logits rows of `vocab` values
/// into before `row_select` merges them; 0: no split, `row_select` reads the rows
/// itself (a block a row). A step of fewer rows than SMs leaves most SMs idle while
/// each block streams its whole row (Qwen3's 151,936 f32 logits: 15.6-16.6 µs at batch
/// 1 under Nsight Compute on the H200, 2026-12-04), so such steps get one wave of
/// 1,024-thread blocks (two an SM), at most 64 chunks a row of at least 2,048 values (a
/// multiple of 8, so chunks keep 16-byte alignment in f32 and bf16). Returns (chunks,
/// values a chunk).
pub(crate) fn logit_chunks(rows: usize, vocab: usize, num_sms: usize) -> (usize, usize) {
    const MIN_CHUNK: usize = 2048;
    if rows == 0 || rows >= num_sms {
        return (0, 0);
    }
    let want = (2 * num_sms / rows).min(64).min(vocab / MIN_CHUNK);
    if want < 2 {
        return (0, 0);
    }
    let chunk = vocab.div_ceil(want).next_multiple_of(8);
    (vocab.div_ceil(chunk), chunk)
}

#[derive(Default)]
struct RowParams {
    pen_start: Vec<i32>,
    pen_tok: Vec<i32>,
    pen_cnt: Vec<i32>,
    rep: Vec<f32>,
    presence: Vec<f32>,
    frequency: Vec<f32>,
    bias_start: Vec<i32>,
    bias_tok: Vec<i32>,
    bias_val: Vec<f32>,
    allowed_start: Vec<i32>,
    allowed_tok: Vec<i32>,
    temperature: Vec<f32>,
    truncate: Vec<i32>,
    top_k: Vec<i32>,
    top_p: Vec<f32>,
    min_p: Vec<f32>,
    seed_on: Vec<i32>,
    seed: Vec<u64>,
}

impl RowParams {
    fn push_processing(&mut self, r: &ResolvedSampling, vocab: usize, temperature: f32) {
        if let Some(allowed) = &r.allowed_tokens {
            // Ids >= vocab are dropped. (A list with no valid id at all acts as no
            // list here, where the CPU masks every token; the host rejects such lists.)
            let mut a: Vec<i32> = allowed
                .iter()
                .filter(|&&t| (t as usize) < vocab)
                .map(|&t| t as i32)
                .collect();
            a.sort_unstable();
            a.dedup();
            self.allowed_tok.extend(a);
        }
        // Biases with the same id add up in order, as the CPU loop does.
        let mut bias: Vec<(i32, f32)> = Vec::new();
        let mut at: HashMap<u32, usize> = HashMap::new();
        for b in &r.logit_bias {
            if (b.token as usize) < vocab {
                if let Some(&i) = at.get(&b.token) {
                    bias[i].1 += b.bias;
                } else {
                    at.insert(b.token, bias.len());
                    bias.push((b.token as i32, b.bias));
                }
            }
        }
        for (t, v) in bias {
            self.bias_tok.push(t);
            self.bias_val.push(v);
        }
        let p = &r.params;
        let rep_on = p.repetition_penalty != 1.0 && p.repetition_penalty > 0.0;
        let freq_on = p.frequency_penalty != 0.0 || p.presence_penalty != 0.0;
        let mut counts: HashMap<u32, i32> = HashMap::new();
        let mut order: Vec<u32> = Vec::new();
        if rep_on {
            for &t in r.prompt_tokens.iter().chain(&r.output_tokens) {
                if (t as usize) < vocab && !counts.contains_key(&t) {
                    counts.insert(t, 0);
                    order.push(t);
                }
            }
        }
        if freq_on {
            for &t in &r.output_tokens {
                if (t as usize) < vocab {
                    let c = counts.entry(t).or_insert_with(|| {
                        order.push(t);
                        0
                    });
                    *c += 1;
                }
            }
        }
        for t in order {
            self.pen_tok.push(t as i32);
            self.pen_cnt.push(if freq_on { counts[&t] } else { 0 });
        }
        self.rep
            .push(if rep_on { p.repetition_penalty } else { 1.0 });
        self.presence
            .push(if freq_on { p.presence_penalty } else { 0.0 });
        self.frequency
            .push(if freq_on { p.frequency_penalty } else { 0.0 });
        self.temperature.push(temperature);
        self.top_k.push(p.top_k);
        self.top_p.push(p.top_p);
        self.min_p.push(p.min_p);
        self.seed.push(r.seed);
    }

    fn push_identity(&mut self) {
        self.rep.push(1.0);
        self.presence.push(0.0);
        self.frequency.push(0.0);
        self.temperature.push(1.0);
        self.top_k.push(0);
        self.top_p.push(1.0);
        self.min_p.push(0.0);
        self.seed.push(0);
    }

    fn close_row(&mut self) {
        self.pen_start.push(self.pen_tok.len() as i32);
        self.bias_start.push(self.bias_tok.len() as i32);
        self.allowed_start.push(self.allowed_tok.len() as i32);
    }
}

/// A sampling setting's place in [`settings`]: the per-row selection settings
/// (row_select's and chosen_tokens' inputs) first, then with processing
/// process_logits' inputs in its argument order.
#[derive(Clone, Copy)]
enum Field {
    Seed,
    Truncate,
    TopK,
    TopP,
    MinP,
    SeedOn,
    PenStart,
    PenTok,
    PenCnt,
    Rep,
    Presence,
    Frequency,
    BiasStart,
    BiasTok,
    BiasVal,
    AllowedStart,
    AllowedTok,
    Temperature,
}

/// A step's sampling settings in [`Field`] order, each as the 32-bit words the device
/// reads (a seed is two, low first: the host is little-endian, as the device is): the
/// per-row selection settings, then with `processing` process_logits' inputs. The one
/// place that order is written. The words are the vectors' own bytes, not a copy.
fn settings(p: &RowParams, processing: bool) -> Vec<&[u32]> {
    use bytemuck::cast_slice as words;
    let mut v = vec![
        words(&p.seed),
        words(&p.truncate),
        words(&p.top_k),
        words(&p.top_p),
        words(&p.min_p),
        words(&p.seed_on),
    ];
    if processing {
        v.extend([
            words(&p.pen_start),
            words(&p.pen_tok),
            words(&p.pen_cnt),
            words(&p.rep),
            words(&p.presence),
            words(&p.frequency),
            words(&p.bias_start),
            words(&p.bias_tok),
            words(&p.bias_val),
            words(&p.allowed_start),
            words(&p.allowed_tok),
            words(&p.temperature),
        ]);
    }
    v
}

/// Sampling in flight: every result of the step sits in one device buffer that
/// is copied into `pinned` (one transfer); `done` marks its arrival.
pub struct CudaSampling {
    specs: Vec<SampleSpec>,
    cand_k: usize,
    top_n: usize,
    pinned: PinnedHostSlice<u32>,
    done: CudaEvent,
}

impl CudaBackend {
    pub(crate) fn sample_launch_impl(
        &self,
        logits: &CudaTensor,
        specs: &[SampleSpec],
    ) -> Result<CudaSampling, BackendError> {
        let (rows, vocab) = logits.rows_cols("sample")?;
        if rows < specs.len() {
            return Err(BackendError::Shape {
                op: "sample",
                detail: format!("{rows} rows for {} specs", specs.len()),
            });
        }
        // Rows past the specs are padding (a replayed graph's batch).
        let rows = specs.len();
        let st = &self.dev.stream;
        // Only process_logits writes the logits (penalties, bias, temperature), in f32.
        // Where no row takes it, the kernels read the logits where they are, f32 or bf16:
        // the copy below moved rows x vocab x 8 bytes a step, 311 MB at Qwen3-0.6B batch
        // 256 (~0.1 ms on an H100), in no timeline, since it is a copy and not a launch.
        let processing = specs.iter().any(|s| !matches!(s.mode, SampleMode::Greedy));
        if !processing && !self.sample_copy {
            let (p, bf16) = match &logits.buf {
                Buf::F32(s) => (self.ptr(s), false),
                Buf::Bf16(s) => (self.ptr(s), true),
            };
            return self.sample_rows(p, bf16, rows, vocab, specs);
        }
        // Processed logits live in a fresh f32 buffer (the input stays intact).
        let mut lg = self.alloc_f32((rows * vocab).max(1))?;
        if rows > 0 {
            match &logits.buf {
                Buf::F32(s) => {
                    st.memcpy_dtod(
                        &s.slice(0..rows * vocab),
                        &mut lg.slice_mut(0..rows * vocab),
                    )?;
                }
                Buf::Bf16(s) => {
                    let n = (rows * vocab) as i64;
                    self.launch(
                        "bf16_to_f32",
                        cfg((((n + 255) / 256) as u32, 1, 1), 256),
                        &[Arg::U64(self.ptr(s)), Arg::U64(self.ptr(&lg)), Arg::I64(n)],
                    )?;
                }
            }
        }
        // lg is dropped after the kernels are enqueued: freed in stream order.
        self.sample_rows(self.ptr(&lg), false, rows, vocab, specs)
    }

    /// Whether the results of `s` have reached the host.
    pub(crate) fn sample_ready_impl(&self, s: &CudaSampling) -> bool {
        s.done.is_complete()
    }

    fn take_pinned(&self, n: usize) -> Result<PinnedHostSlice<u32>, BackendError> {
        let mut pool = self.pinned_pool.borrow_mut();
        if let Some(i) = pool.iter().position(|p| p.len() >= n) {
            return Ok(pool.swap_remove(i));
        }
        // Plain (not write-combined) pinned memory: the host reads it.
        // SAFETY: the buffer is only read after a device copy filled the part read.
        Ok(unsafe {
            self.dev
                .ctx
                .alloc_pinned_with_flags::<u32>(n.max(1 << 14), 0)
        }?)
    }

    /// Enqueues the sampling of `rows` rows of `vocab` logits at `lgp`: f32, which
    /// process_logits may rewrite in place, or bf16 (`bf16`) where no row processes them.
    fn sample_rows(
        &self,
        lgp: u64,
        bf16: bool,
        rows: usize,
        vocab: usize,
        specs: &[SampleSpec],
    ) -> Result<CudaSampling, BackendError> {
        let st = &self.dev.stream;
        let mut p = RowParams::default();
        p.pen_start.push(0);
        p.bias_start.push(0);
        p.allowed_start.push(0);
        let mut any_processing = false;
        let mut cand_k = 0usize;
        let mut top_n = 0usize;
        for spec in specs {
            match &spec.mode {
                SampleMode::Greedy => {
                    p.push_identity();
                    p.truncate.push(0);
                    p.seed_on.push(0);
                }
                SampleMode::Sample(r) => {
                    any_processing = true;
                    let t = r.params.temperature;
                    p.push_processing(r, vocab, if t > 0.0 { t } else { 1.0 });
                    p.truncate.push((t > 0.0) as i32);
                    p.seed_on.push((t > 0.0) as i32);
                }
                SampleMode::Candidates { k, processing: r } => {
                    any_processing = true;
                    let t = r.params.temperature;
                    p.push_processing(r, vocab, if t > 0.0 { t } else { 1.0 });
                    p.truncate.push(1);
                    p.seed_on.push(0);
                    cand_k = cand_k.max((*k).max(1) as usize);
                }
            }
            if let Some(n) = spec.logprobs {
                top_n = top_n.max(n as usize);
            }
            p.close_row();
        }
        if bf16 && any_processing {
            return Err(BackendError::Unsupported(
                "sampling: bf16 logits with processed rows (widen them to f32 first)".into(),
            ));
        }
        // The kernels that read the logits, in the logits' type.
        let (partials, select, topk) = if bf16 {
            ("row_partials_bf16", "row_select_bf16", "topk_rows_bf16")
        } else {
            ("row_partials", "row_select", "topk_rows")
        };
        if cand_k > MAX_TOPK || top_n > MAX_TOPK {
            return Err(BackendError::Unsupported(format!(
                "top-K of {} exceeds the device limit {MAX_TOPK}",
                cand_k.max(top_n)
            )));
        }
        cand_k = cand_k.min(vocab);
        top_n = top_n.min(vocab);
        // Every result in one buffer: row_select's six outputs, then candidate
        // tokens and values, then top-logprob tokens and values.
        let n_res = rows * (6 + 2 * cand_k + 2 * top_n);
        let pinned = self.take_pinned(n_res)?;
        if rows == 0 {
            *self.last_chosen.borrow_mut() = None;
            let done = st.record_event(None)?;
            return Ok(CudaSampling {
                specs: Vec::new(),
                cand_k,
                top_n,
                pinned,
                done,
            });
        }
        // One upload a setting. Packing them into one copy (six or eighteen fewer
        // stream operations a step) measured no faster on an H200 (2026-12-05,
        // gpu-2026-12-05-h200d.md), so the simpler form stays. The buffers live to
        // the end of this function and are freed in stream order, after the kernels
        // have read them.
        let mut keep = Vec::new();
        let mut addr = Vec::new();
        for w in settings(&p, any_processing) {
            // An empty list still gets a one-word buffer: a zero-size allocation has
            // no address to pass.
            keep.push(st.clone_htod(if w.is_empty() { &[0][..] } else { w })?);
            addr.push(self.ptr(keep.last().expect("just pushed")));
        }
        let f = |x: Field| Arg::U64(addr[x as usize]);
        let r = rows as u32;
        if any_processing {
            let words = vocab.div_ceil(32);
            // SAFETY: process_logits zeroes each masked row's words before use.
            let mask = unsafe { st.alloc::<u32>((rows * words).max(1)) }?;
            self.launch(
                "process_logits",
                cfg((r, 1, 1), 1024),
                &[
                    Arg::U64(lgp),
                    Arg::I32(vocab as i32),
                    Arg::I32(vocab as i32),
                    f(Field::PenStart),
                    f(Field::PenTok),
                    f(Field::PenCnt),
                    f(Field::Rep),
                    f(Field::Presence),
                    f(Field::Frequency),
                    f(Field::BiasStart),
                    f(Field::BiasTok),
                    f(Field::BiasVal),
                    f(Field::AllowedStart),
                    f(Field::AllowedTok),
                    Arg::U64(self.ptr(&mask)),
                    f(Field::Temperature),
                ],
            )?;
        }
        // SAFETY: row_select writes all 6 * rows entries, topk_rows all of its
        // rows * k tokens and values.
        let res = unsafe { st.alloc::<u32>(n_res) }?;
        let ob = self.ptr(&res);
        let at = |i: usize| ob + (i * rows * 4) as u64;
        let (chunks, chunk) = if self.sample_split.get() {
            logit_chunks(rows, vocab, self.dev.num_sms)
        } else {
            (0, 0)
        };
        // Each chunk's (max, its id, sum of exp(x - max)): f32, i32 and f32 sections
        // of one buffer.
        let parts = if chunks > 0 {
            // SAFETY: row_partials writes all 3 * rows * chunks entries before
            // row_select reads them (stream order).
            let buf = unsafe { st.alloc::<u32>(3 * rows * chunks) }?;
            let p = self.ptr(&buf);
            self.launch(
                partials,
                cfg((r, chunks as u32, 1), 1024),
                &[
                    Arg::U64(lgp),
                    Arg::I32(vocab as i32),
                    Arg::I32(vocab as i32),
                    Arg::I32(chunk as i32),
                    Arg::U64(p),
                    Arg::U64(p + (rows * chunks * 4) as u64),
                    Arg::U64(p + (2 * rows * chunks * 4) as u64),
                ],
            )?;
            Some((buf, p))
        } else {
            None
        };
        let part = |i: u64| {
            parts
                .as_ref()
                .map_or(0, |(_, p)| p + i * (rows * chunks * 4) as u64)
        };
        self.launch(
            select,
            cfg((r, 1, 1), 1024),
            &[
                Arg::U64(lgp),
                Arg::I32(vocab as i32),
                Arg::I32(vocab as i32),
                f(Field::Truncate),
                f(Field::TopK),
                f(Field::TopP),
                f(Field::MinP),
                f(Field::SeedOn),
                f(Field::Seed),
                Arg::U64(at(0)),
                Arg::U64(at(1)),
                Arg::U64(at(2)),
                Arg::U64(at(3)),
                Arg::U64(at(4)),
                Arg::U64(at(5)),
                Arg::U64(part(0)),
                Arg::U64(part(1)),
                Arg::U64(part(2)),
                Arg::I32(chunks as i32),
            ],
        )?;
        // The chosen tokens stay on the device for the next step (overlap).
        // SAFETY: chosen_tokens writes all `rows` entries.
        let chosen = unsafe { st.alloc::<u32>(rows) }?;
        self.launch(
            "chosen_tokens",
            cfg((g(rows.div_ceil(128)), 1, 1), 128),
            &[
                Arg::U64(at(0)),
                Arg::U64(at(4)),
                f(Field::SeedOn),
                Arg::I32(rows as i32),
                Arg::U64(self.ptr(&chosen)),
            ],
        )?;
        *self.last_chosen.borrow_mut() = Some((chosen, rows));
        let topk_launch = |k: usize, floor: u64, tok: u64, val: u64| {
            self.launch(
                topk,
                cfg((r, 1, 1), 1024),
                &[
                    Arg::U64(lgp),
                    Arg::I32(vocab as i32),
                    Arg::I32(vocab as i32),
                    Arg::I32(k as i32),
                    Arg::U64(floor),
                    Arg::U64(tok),
                    Arg::U64(val),
                ],
            )
        };
        let word = |i: usize| ob + (i * 4) as u64;
        let cand_at = 6 * rows;
        let top_at = cand_at + 2 * rows * cand_k;
        if cand_k > 0 {
            topk_launch(cand_k, at(2), word(cand_at), word(cand_at + rows * cand_k))?;
        }
        if top_n > 0 {
            topk_launch(top_n, 0, word(top_at), word(top_at + rows * top_n))?;
        }
        let mut pinned = pinned;
        {
            // Only the used prefix: a pooled buffer may be longer than `res`
            // (cudarc's memcpy_dtoh would copy the whole host slice's length).
            let dst = &mut pinned.as_mut_slice()?[..n_res];
            // SAFETY: `dst` is pinned host memory of exactly `res`'s length, read
            // only after `done` (recorded below) has completed.
            unsafe {
                cudarc::driver::result::memcpy_dtoh_async(dst, self.ptr(&res), st.cu_stream())
            }?;
        }
        let done = st.record_event(None)?;
        Ok(CudaSampling {
            specs: specs.to_vec(),
            cand_k,
            top_n,
            pinned,
            done,
        })
    }

    /// Wait for `s` and turn its buffer into per-row results.
    pub(crate) fn sample_finish_impl(&self, s: CudaSampling) -> Result<Vec<Sampled>, BackendError> {
        s.done.synchronize()?;
        let res = {
            let out = s.pinned.as_slice()?;
            parse(out, &s.specs, s.cand_k, s.top_n)
        };
        self.pinned_pool.borrow_mut().push(s.pinned);
        Ok(res)
    }
}

/// Per-row results from the packed buffer (layout: see `sample_rows`).
fn parse(out: &[u32], specs: &[SampleSpec], cand_k: usize, top_n: usize) -> Vec<Sampled> {
    let rows = specs.len();
    let f = |i: usize| f32::from_bits(out[i]);
    let cand_at = 6 * rows;
    let top_at = cand_at + 2 * rows * cand_k;
    let mut res = Vec::with_capacity(rows);
    for (i, spec) in specs.iter().enumerate() {
        let argmax = out[i];
        let lse = f(rows + i);
        let lkept = f(3 * rows + i);
        let drawn = out[4 * rows + i];
        let chosen_lp = f(5 * rows + i);
        let mut s = Sampled::default();
        match &spec.mode {
            SampleMode::Greedy => s.token = argmax,
            SampleMode::Sample(r) => {
                s.token = if r.params.temperature > 0.0 {
                    drawn
                } else {
                    argmax
                };
            }
            SampleMode::Candidates { k, .. } => {
                for j in 0..(*k as usize).min(cand_k) {
                    let t = out[cand_at + i * cand_k + j];
                    if t == u32::MAX {
                        break;
                    }
                    s.candidates.push(TokenLogprob {
                        token: t,
                        logprob: f(cand_at + rows * cand_k + i * cand_k + j) - lse - lkept,
                    });
                }
                s.token = s.candidates.first().map(|c| c.token).unwrap_or(argmax);
            }
        }
        if let Some(n) = spec.logprobs {
            for j in 0..(n as usize).min(top_n) {
                let t = out[top_at + i * top_n + j];
                if t == u32::MAX {
                    break;
                }
                s.top_logprobs.push(TokenLogprob {
                    token: t,
                    logprob: f(top_at + rows * top_n + i * top_n + j) - lse,
                });
            }
            // row_select's chosen token is the drawn one (Sample, T > 0) or the argmax
            // of the processed row, which is also the first candidate.
            s.logprob = Some(chosen_lp);
        }
        res.push(s);
    }
    res
}

#[cfg(test)]
mod tests {
    use super::logit_chunks;

    /// The kernels take each setting by its `Field`: the list must hold them in that
    /// order, with each value as the device reads it.
    #[test]
    fn settings_are_listed_in_field_order_as_the_device_reads_them() {
        use super::Field;
        let mut p = super::RowParams::default();
        p.pen_start.push(0);
        p.bias_start.push(0);
        p.allowed_start.push(0);
        let rows = [
            (0x1_0000_0002u64, 5, 0.9f32, 0.05f32, 1, 1.3f32, 0.7f32),
            (7, 0, 1.0, 0.0, 0, 1.0, 1.0),
        ];
        for (seed, k, top_p, min_p, on, rep, t) in rows {
            p.seed.push(seed);
            p.truncate.push(on);
            p.top_k.push(k);
            p.top_p.push(top_p);
            p.min_p.push(min_p);
            p.seed_on.push(on);
            p.rep.push(rep);
            p.presence.push(0.0);
            p.frequency.push(0.0);
            p.temperature.push(t);
            p.close_row();
        }
        // Row 0 penalises tokens 3 and 9; nobody has biases or an allowed list.
        p.pen_tok.extend([3, 9]);
        p.pen_cnt.extend([0, 0]);
        p.pen_start[1] = 2;
        p.pen_start[2] = 2;
        for processing in [false, true] {
            let list = super::settings(&p, processing);
            let w = |f: Field| list[f as usize].to_vec();
            let ints = |f: Field| w(f).into_iter().map(|x| x as i32).collect::<Vec<_>>();
            let floats = |f: Field| w(f).into_iter().map(f32::from_bits).collect::<Vec<_>>();
            // Seeds as the device reads a u64: little-endian word pairs.
            assert_eq!(w(Field::Seed), [2, 1, 7, 0]);
            assert_eq!(ints(Field::Truncate), p.truncate);
            assert_eq!(ints(Field::TopK), p.top_k);
            assert_eq!(floats(Field::TopP), p.top_p);
            assert_eq!(floats(Field::MinP), p.min_p);
            assert_eq!(ints(Field::SeedOn), p.seed_on);
            if !processing {
                assert_eq!(list.len(), 6);
                continue;
            }
            assert_eq!(list.len(), 18);
            assert_eq!(ints(Field::PenStart), [0, 2, 2]);
            assert_eq!(ints(Field::PenTok), [3, 9]);
            assert_eq!(ints(Field::PenCnt), [0, 0]);
            assert_eq!(floats(Field::Rep), p.rep);
            assert_eq!(floats(Field::Presence), [0.0, 0.0]);
            assert_eq!(floats(Field::Frequency), [0.0, 0.0]);
            assert_eq!(ints(Field::BiasStart), [0, 0, 0]);
            assert!(w(Field::BiasTok).is_empty() && w(Field::BiasVal).is_empty());
            assert_eq!(ints(Field::AllowedStart), [0, 0, 0]);
            assert!(w(Field::AllowedTok).is_empty());
            assert_eq!(floats(Field::Temperature), p.temperature);
        }
    }

    #[test]
    fn small_steps_split_their_logits_rows_and_large_ones_do_not() {
        let (sms, vocab) = (132, 151_936);
        // Batch 1: 64 chunks of a multiple of 8 values covering the row exactly once.
        let (n, c) = logit_chunks(1, vocab, sms);
        assert_eq!(n, 64);
        assert_eq!(c % 8, 0);
        assert!(c * (n - 1) < vocab && c * n >= vocab);
        // One wave of two blocks an SM while rows < SMs (at most 64 chunks a row).
        for rows in [2, 8, 40, 64, 100, 131] {
            let (n, c) = logit_chunks(rows, vocab, sms);
            let want = (2 * sms / rows).min(64);
            assert!(n >= 2 && n <= want && n + 1 >= want, "rows {rows}: {n}");
            assert!(rows * n <= 2 * sms);
            assert!(c * (n - 1) < vocab && c * n >= vocab && c >= 2048);
        }
        // A row per block already fills the GPU, and small vocabularies stay whole.
        assert_eq!(logit_chunks(132, vocab, sms), (0, 0));
        assert_eq!(logit_chunks(256, vocab, sms), (0, 0));
        assert_eq!(logit_chunks(1, 1000, sms), (0, 0));
        assert_eq!(logit_chunks(0, vocab, sms), (0, 0));
        // Never more than 64 chunks, never under 2,048 values.
        let (n, c) = logit_chunks(1, 10_000, sms);
        assert_eq!((n, c), (4, 2504));
    }
}
