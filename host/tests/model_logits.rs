//! The CPU backend against Hugging Face transformers on the tiny fixture
//! models (tests/fixtures/models, made by scripts/make_fixtures.py): logits of
//! whole prompts, ragged batches, chunked prefill, prefixes reused from an
//! earlier request's KV pages, and greedy continuations.

#[path = "support/model/mod.rs"]
mod support;

use minisgl::backend::cpu::CpuBackend;
use minisgl::batch::StepInput;
use minisgl::model::placement::cpu_runner;
use minisgl::model::runner::{ModelRunner, Runner};
use support::*;

const PAGE_SIZE: u32 = 4;
const NUM_PAGES: u32 = 1024;

fn runner(name: &str) -> Runner<CpuBackend> {
    let m = minisgl::model::load(&fixture(name)).expect("fixture loads");
    cpu_runner(&m, NUM_PAGES, PAGE_SIZE).expect("runner")
}

fn pages_for(n: usize) -> usize {
    n.div_ceil(PAGE_SIZE as usize)
}

/// Every reference prompt as one ragged step, each on fresh pages, sampled.
fn every_prompt(r: &Reference) -> StepInput {
    let mut pages = Pages::new(NUM_PAGES);
    let seqs = r
        .prompts
        .iter()
        .enumerate()
        .map(|(i, p)| seq(i as u64, p, 0, &pages.take(pages_for(p.len())), true))
        .collect();
    step(seqs)
}

/// Check `got` against HF's `want` with the tolerance of the fixture's dtype.
fn check(name: &str, what: &str, got: &[f32], want: &[f32]) {
    // Printed for docs/results/model-correctness.md (`--nocapture`).
    eprintln!(
        "{name:18} {what:40} max_abs {:.2e} cosine {:.7}",
        max_abs(got, want),
        cosine(got, want)
    );
    if BF16_MODELS.contains(&name) {
        let c = cosine(got, want);
        assert!(c > 0.999, "{name} {what}: cosine {c} <= 0.999");
    } else {
        let d = max_abs(got, want);
        assert!(d <= 1e-3, "{name} {what}: max abs diff {d} > 1e-3");
    }
}

fn all_models() -> impl Iterator<Item = &'static str> {
    FP32_MODELS.iter().chain(BF16_MODELS).copied()
}

#[test]
fn whole_prompts_match_hf() {
    for name in all_models() {
        let r = reference(name);
        let mut run = runner(name);
        let mut pages = Pages::new(NUM_PAGES);
        for (i, p) in r.prompts.iter().enumerate() {
            let pt = pages.take(pages_for(p.len()));
            let got = run
                .logits(&step(vec![seq(i as u64, p, 0, &pt, true)]))
                .unwrap();
            assert_eq!(got.len(), 1);
            check(
                name,
                &format!("prompt {i} (len {})", p.len()),
                &got[0],
                &r.logits[i],
            );
        }
    }
}

#[test]
fn ragged_batch_matches_hf() {
    // Every prompt in one step: one forward pass over a ragged batch.
    for name in all_models() {
        let r = reference(name);
        let mut run = runner(name);
        let got = run.logits(&every_prompt(&r)).unwrap();
        assert_eq!(got.len(), r.prompts.len());
        for (i, g) in got.iter().enumerate() {
            check(name, &format!("batched prompt {i}"), g, &r.logits[i]);
        }
    }
}

#[test]
fn folded_norms_match_hf() {
    // The norms before qkv and gate_up folded into those weights at load, unit norms in
    // their place (what the CUDA backend does under MINISGL_FOLD_NORMS): every prompt in
    // one ragged step against HF. The fixtures' norm weights are not ones, so a fold along
    // the wrong axis (or one that skipped a norm) would miss HF; the logits must also move
    // off the unfolded run's bits, or no fold happened at all.
    for name in all_models() {
        let r = reference(name);
        let m = minisgl::model::load(&fixture(name)).expect("fixture loads");
        let mut folded =
            Runner::new(CpuBackend::with_folded_norms(), &m, NUM_PAGES, PAGE_SIZE).expect("runner");
        let mut plain = runner(name);
        let got = folded.logits(&every_prompt(&r)).unwrap();
        let unfolded = plain.logits(&every_prompt(&r)).unwrap();
        assert_eq!(got.len(), r.prompts.len());
        for (i, g) in got.iter().enumerate() {
            check(name, &format!("folded norms, prompt {i}"), g, &r.logits[i]);
        }
        assert_ne!(
            got, unfolded,
            "{name}: folded logits equal the unfolded ones bit for bit"
        );
    }
}

#[test]
fn deferred_norms_match_hf() {
    // The model leaves a residual add's norm to the product that reads it where the
    // backend says so (the CUDA gemv prologue at decode sizes), asked for qkv and gate_up
    // apart: only qkv, only gate_up (a layer whose other product is too large for the
    // prologue, as Qwen3-4B's gate_up is), and both. Every prompt in one ragged step
    // against HF; each rule must have deferred something, or the run checked nothing new.
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;
    for name in all_models() {
        let r = reference(name);
        let m = minisgl::model::load(&fixture(name)).expect("fixture loads");
        let c = &m.config;
        let gate_up_rows = 2 * c.intermediate_size();
        let qkv_rows = (c.num_heads() + 2 * c.num_kv_heads()) * c.head_dim();
        // The rule knows a weight by its shape: where qkv's and gate_up's are alike (the
        // Qwen3 fixtures), only the rule for both tells nothing apart.
        let rules: &[&str] = if qkv_rows == gate_up_rows {
            &["both"]
        } else {
            &["qkv", "gate_up", "both"]
        };
        for &which in rules {
            let deferred = Arc::new(AtomicUsize::new(0));
            let count = deferred.clone();
            let rule = move |shape: &[usize]| {
                let gate_up = shape.first() == Some(&gate_up_rows);
                let yes = match which {
                    "qkv" => !gate_up,
                    "gate_up" => gate_up,
                    _ => true,
                };
                if yes {
                    count.fetch_add(1, Ordering::Relaxed);
                }
                yes
            };
            let backend = CpuBackend::with_deferred_norms(rule);
            let mut run = Runner::new(backend, &m, NUM_PAGES, PAGE_SIZE).expect("runner");
            let got = run.logits(&every_prompt(&r)).unwrap();
            assert!(
                deferred.load(Ordering::Relaxed) > 0,
                "{name}: the {which} rule deferred no norm"
            );
            for (i, g) in got.iter().enumerate() {
                let what = format!("norms deferred to {which}, prompt {i}");
                check(name, &what, g, &r.logits[i]);
            }
        }
    }
}

#[test]
fn chunked_prefill_matches_hf() {
    for name in all_models() {
        let r = reference(name);
        let mut run = runner(name);
        for chunk in [1usize, 3, 16, 64] {
            let mut pages = Pages::new(NUM_PAGES);
            for (i, p) in r.prompts.iter().enumerate() {
                if chunk == 1 && p.len() > 40 {
                    continue; // one token per step is covered by the shorter prompts
                }
                let pt = pages.take(pages_for(p.len()));
                let mut start = 0;
                let mut last = None;
                while start < p.len() {
                    let end = (start + chunk).min(p.len());
                    let s = seq(
                        i as u64,
                        &p[start..end],
                        start as u32,
                        &pt[..pages_for(end)],
                        end == p.len(),
                    );
                    let out = run.logits(&step(vec![s])).unwrap();
                    if end == p.len() {
                        last = out.into_iter().next();
                    } else {
                        assert!(out.is_empty(), "a non-final chunk produced logits");
                    }
                    start = end;
                }
                check(
                    name,
                    &format!("prompt {i} in chunks of {chunk}"),
                    &last.unwrap(),
                    &r.logits[i],
                );
            }
        }
    }
}

#[test]
fn prefix_from_earlier_request_pages_matches_hf() {
    for name in all_models() {
        let r = reference(name);
        let mut run = runner(name);
        let mut pages = Pages::new(NUM_PAGES);
        // Request 1 prefills the longest random prompt entirely.
        let (i, p) = r
            .prompts
            .iter()
            .enumerate()
            .max_by_key(|(_, p)| p.len())
            .unwrap();
        let pt1 = pages.take(pages_for(p.len()));
        run.logits(&step(vec![seq(1, p, 0, &pt1, false)])).unwrap();
        // Request 2 reuses whole pages of that prefix (as the radix cache
        // does), with a prefix that is not a multiple of any chunk size.
        for shared_pages in [1usize, 13, pages_for(p.len()) - 1] {
            let k = shared_pages * PAGE_SIZE as usize;
            let mut pt2 = pt1[..shared_pages].to_vec();
            pt2.extend(pages.take(pages_for(p.len()) - shared_pages));
            // Reuse alongside an unrelated sequence in the same step.
            let other = &r.prompts[2];
            let pt3 = pages.take(pages_for(other.len()));
            let got = run
                .logits(&step(vec![
                    seq(3, other, 0, &pt3, true),
                    seq(2, &p[k..], k as u32, &pt2, true),
                ]))
                .unwrap();
            check(
                name,
                &format!("prompt {i} after {k} cached tokens"),
                &got[1],
                &r.logits[i],
            );
            check(name, "neighbour of a reused prefix", &got[0], &r.logits[2]);
        }
    }
}

#[test]
fn greedy_continuations_match_hf() {
    for name in FP32_MODELS {
        let r = reference(name);
        let mut run = runner(name);
        let mut pages = Pages::new(NUM_PAGES);
        for (gi, g) in r.json["greedy"].as_array().unwrap().iter().enumerate() {
            let pi = g["prompt_index"].as_u64().unwrap() as usize;
            let want: Vec<u32> = g["new_tokens"]
                .as_array()
                .unwrap()
                .iter()
                .map(|t| t.as_u64().unwrap() as u32)
                .collect();
            let prompt = &r.prompts[pi];
            let total = prompt.len() + want.len();
            let pt = pages.take(pages_for(total));
            let id = 100 + gi as u64;
            let out = run
                .step(&step(vec![seq(
                    id,
                    prompt,
                    0,
                    &pt[..pages_for(prompt.len())],
                    true,
                )]))
                .unwrap();
            let mut got = vec![out.outputs[0].token];
            while got.len() < want.len() {
                let pos = prompt.len() + got.len() - 1;
                // Overlap mode: the token is a placeholder the runner fills in
                // from its previous step.
                let mut s = seq(id, &[u32::MAX], pos as u32, &pt[..pages_for(pos + 1)], true);
                s.first_from_last_step = true;
                let out = run.step(&step(vec![s])).unwrap();
                assert_eq!(out.outputs.len(), 1);
                assert_eq!(out.outputs[0].id, id);
                got.push(out.outputs[0].token);
            }
            assert_eq!(got, want, "{name}: greedy continuation of prompt {pi}");
        }
    }
}

#[test]
fn bad_step_input_is_an_error_not_a_panic() {
    let mut run = runner("qwen3");
    let vocab = run.vocab_size();
    let e = run
        .step(&step(vec![seq(1, &[vocab], 0, &[0], true)]))
        .unwrap_err();
    assert!(e.to_string().contains("out of range"), "{e}");
    let e = run
        .step(&step(vec![seq(1, &[1, 2, 3, 4, 5], 0, &[0], true)]))
        .unwrap_err();
    assert!(e.to_string().contains("cannot hold"), "{e}");
    let e = run
        .step(&step(vec![seq(1, &[1], 0, &[NUM_PAGES], true)]))
        .unwrap_err();
    assert!(e.to_string().contains("page id"), "{e}");
    let mut s = seq(7, &[0], 3, &[0], true);
    s.first_from_last_step = true;
    let e = run.step(&step(vec![s])).unwrap_err();
    assert!(e.to_string().contains("first_from_last_step"), "{e}");
}

#[test]
fn step_outputs_agree_with_logits() {
    use minisgl::batch::{ResolvedSampling, SampleMode, SampleSpec};
    use minisgl_plugin_sdk::SamplingParams;
    let r = reference("qwen2");
    let p = &r.prompts[3];
    let mut run = runner("qwen2");
    let mut pages = Pages::new(NUM_PAGES);
    let n = pages_for(p.len());
    let logits = run
        .logits(&step(vec![seq(1, p, 0, &pages.take(n), true)]))
        .unwrap()
        .remove(0);
    let m = logits.iter().cloned().fold(f32::MIN, f32::max);
    let lse = m + logits
        .iter()
        .map(|x| ((x - m) as f64).exp())
        .sum::<f64>()
        .ln() as f32;

    let mut s = seq(2, p, 0, &pages.take(n), true);
    s.sample = Some(SampleSpec {
        mode: SampleMode::Greedy,
        logprobs: Some(5),
    });
    let out = run.step(&step(vec![s])).unwrap().outputs.remove(0);
    let argmax = (0..logits.len())
        .max_by(|&a, &b| logits[a].total_cmp(&logits[b]))
        .unwrap() as u32;
    assert_eq!(out.token, argmax);
    assert_eq!(out.top_logprobs.len(), 5);
    assert_eq!(out.top_logprobs[0].token, argmax);
    assert!((out.logprob.unwrap() - (logits[argmax as usize] - lse)).abs() < 1e-4);

    // Seeded sampling: same seed → same token, on fresh KV pages each time.
    let sampled = |run: &mut dyn ModelRunner, pages: &mut Pages, seed: u64| {
        let mut s = seq(3, p, 0, &pages.take(n), true);
        s.sample = Some(SampleSpec {
            mode: SampleMode::Sample(ResolvedSampling {
                params: SamplingParams {
                    temperature: 1.5,
                    ..Default::default()
                },
                seed,
                logit_bias: vec![],
                allowed_tokens: None,
                prompt_tokens: vec![],
                output_tokens: vec![],
            }),
            logprobs: None,
        });
        run.step(&step(vec![s])).unwrap().outputs[0].token
    };
    let a: Vec<u32> = (0..6)
        .map(|seed| sampled(&mut run, &mut pages, seed))
        .collect();
    let b: Vec<u32> = (0..6)
        .map(|seed| sampled(&mut run, &mut pages, seed))
        .collect();
    assert_eq!(a, b);
    assert!(
        a.iter().any(|&t| t != a[0]),
        "temperature 1.5 never varied: {a:?}"
    );
}
