//! Paged attention: CUDA (the selected path and the `simple` kernel) vs the CPU
//! backend on ragged batches, prefix + extend, long contexts, page sizes 1/16/256.

use anyhow::Result;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use super::inputs::{randn, up};
use super::report::Report;
use minisgl::backend::cpu::CpuBackend;
use minisgl::backend::cuda::ops::AttnPath;
use minisgl::backend::cuda::CudaBackend;
use minisgl::backend::{Backend, KvLayout, StepMeta};

/// One attention scenario: sequences as (cached prefix, new tokens).
pub struct Case {
    pub name: &'static str,
    pub page_size: usize,
    /// Pages in ascending runs of 1-24 (tiles that lie on consecutive pages, as a fresh
    /// pool hands them out, beside tiles that do not) instead of random.
    pub page_runs: bool,
    pub head_dim: usize,
    pub q_heads: usize,
    pub kv_heads: usize,
    pub seqs: Vec<(usize, usize)>,
}

impl Case {
    /// A one-layer cache of `num_pages` pages in this case's page size and heads.
    pub fn layout(&self, num_pages: usize) -> KvLayout {
        KvLayout {
            num_layers: 1,
            num_pages,
            page_size: self.page_size,
            kv_heads: self.kv_heads,
            head_dim: self.head_dim,
        }
    }

    /// A case whose pages are handed out at random (not in runs).
    pub fn new(
        name: &'static str,
        page_size: usize,
        head_dim: usize,
        q_heads: usize,
        kv_heads: usize,
        seqs: impl Into<Vec<(usize, usize)>>,
    ) -> Case {
        Case {
            name,
            page_size,
            page_runs: false,
            head_dim,
            q_heads,
            kv_heads,
            seqs: seqs.into(),
        }
    }
}

/// Page tables (random distinct pages, or runs of them: [`Case::page_runs`]) and the
/// two step metas: `fill` writes K/V for every position of every sequence, `attn` runs
/// the new tokens.
pub fn metas(c: &Case, rng: &mut ChaCha8Rng) -> (usize, StepMeta, StepMeta) {
    let ps = c.page_size;
    let need: Vec<usize> = c.seqs.iter().map(|&(p, n)| (p + n).div_ceil(ps)).collect();
    let total: usize = need.iter().sum();
    let num_pages = total + 3;
    let mut pool: Vec<u32> = (0..num_pages as u32).collect();
    if c.page_runs {
        let mut runs: Vec<&[u32]> = Vec::new();
        let mut rest = pool.as_slice();
        while !rest.is_empty() {
            let (run, tail) = rest.split_at(rng.random_range(1..=24).min(rest.len()));
            runs.push(run);
            rest = tail;
        }
        runs.shuffle(rng);
        pool = runs.concat();
    } else {
        pool.shuffle(rng);
    }
    let mut fill = StepMeta {
        page_size: ps as u32,
        q_indptr: vec![0],
        page_indptr: vec![0],
        ..Default::default()
    };
    let mut attn = fill.clone();
    let mut next = 0;
    for (&(prefix, new), &np) in c.seqs.iter().zip(&need) {
        let pages = &pool[next..next + np];
        next += np;
        let ctx = prefix + new;
        for (m, range) in [(&mut fill, 0..ctx), (&mut attn, prefix..ctx)] {
            for p in range.clone() {
                m.tokens.push(0);
                m.positions.push(p as u32);
                m.slots.push(pages[p / ps] * ps as u32 + (p % ps) as u32);
            }
            m.q_indptr.push(m.tokens.len() as u32);
            m.kv_lens.push(ctx as u32);
            m.page_table.extend_from_slice(pages);
            m.page_indptr.push(m.page_table.len() as u32);
        }
    }
    (num_pages, fill, attn)
}

pub fn cases() -> Vec<Case> {
    let mut rng = ChaCha8Rng::seed_from_u64(7);
    let mut decode = |n: usize, max: usize| -> Vec<(usize, usize)> {
        (0..n).map(|_| (rng.random_range(0..max), 1)).collect()
    };
    vec![
        Case {
            name: "prefill ragged",
            page_size: 16,
            page_runs: false,
            head_dim: 128,
            q_heads: 16,
            kv_heads: 8,
            seqs: vec![(0, 1), (0, 17), (0, 64), (0, 100), (0, 300)],
        },
        Case {
            name: "prefix+extend",
            page_size: 1,
            page_runs: false,
            head_dim: 64,
            q_heads: 9,
            kv_heads: 3,
            seqs: vec![(5, 3), (100, 37), (1000, 130), (63, 1), (0, 65)],
        },
        Case {
            name: "prefix+extend",
            page_size: 256,
            page_runs: false,
            head_dim: 128,
            q_heads: 32,
            kv_heads: 8,
            seqs: vec![(300, 200), (0, 513), (255, 2)],
        },
        Case {
            name: "mixed prefill+decode",
            page_size: 16,
            page_runs: false,
            head_dim: 128,
            q_heads: 40,
            kv_heads: 8,
            seqs: vec![(700, 1), (0, 90), (33, 1), (1200, 64)],
        },
        // Many decodes beside a prompt's chunk and a one-token extend (group 2), and a
        // long-context decode beside a short prompt (group 4, head_dim 64, pages of 8;
        // the decode splits).
        Case {
            name: "mixed prefill+decode",
            page_size: 16,
            page_runs: false,
            head_dim: 128,
            q_heads: 16,
            kv_heads: 8,
            seqs: decode(40, 1500)
                .into_iter()
                .chain([(0, 300), (2047, 1), (500, 129)])
                .collect(),
        },
        Case {
            name: "mixed prefill+decode",
            page_size: 8,
            page_runs: false,
            head_dim: 64,
            q_heads: 16,
            kv_heads: 4,
            seqs: vec![(9000, 1), (0, 40), (3, 1)],
        },
        Case {
            name: "decode",
            page_size: 16,
            page_runs: false,
            head_dim: 128,
            q_heads: 16,
            kv_heads: 8,
            seqs: decode(32, 2000),
        },
        Case {
            name: "decode",
            page_size: 1,
            page_runs: false,
            head_dim: 64,
            q_heads: 9,
            kv_heads: 3,
            seqs: decode(17, 3000),
        },
        Case {
            name: "decode",
            page_size: 256,
            page_runs: false,
            head_dim: 128,
            q_heads: 64,
            kv_heads: 8,
            seqs: decode(9, 5000),
        },
        Case {
            name: "decode",
            page_size: 16,
            page_runs: false,
            head_dim: 128,
            q_heads: 40,
            kv_heads: 8,
            seqs: decode(5, 1500),
        },
        Case {
            name: "decode",
            page_size: 16,
            page_runs: false,
            head_dim: 64,
            q_heads: 8,
            kv_heads: 8,
            seqs: decode(64, 700),
        },
        // Groups of 9-16 heads: the tensor-core decode's A rows 8-15 are live heads
        // there, a build of its own (decode_mma_tile's HI) that the groups above never take.
        Case {
            name: "decode",
            page_size: 16,
            page_runs: false,
            head_dim: 128,
            q_heads: 32,
            kv_heads: 2,
            seqs: decode(11, 2600),
        },
        Case {
            name: "decode",
            page_size: 16,
            page_runs: false,
            head_dim: 64,
            q_heads: 12,
            kv_heads: 1,
            seqs: decode(6, 900),
        },
        // Many ragged short contexts: 2,400 (sequence, kv head) blocks, six waves, and
        // stream-K ranges that cut many sequences.
        Case {
            name: "decode many",
            page_size: 16,
            page_runs: false,
            head_dim: 128,
            q_heads: 16,
            kv_heads: 8,
            seqs: decode(300, 300),
        },
        Case {
            name: "decode long",
            page_size: 16,
            page_runs: false,
            head_dim: 128,
            q_heads: 16,
            kv_heads: 8,
            seqs: vec![(32767, 1), (20000, 1), (9, 1), (16383, 1)],
        },
        // Pages in runs: whole-tile copies at pages of 16 (head_dim 128) and 8 (64), a
        // cached prefix, and tiles cut by the end of a sequence.
        Case {
            name: "prefill page runs",
            page_size: 16,
            page_runs: true,
            head_dim: 128,
            q_heads: 40,
            kv_heads: 8,
            seqs: vec![(0, 1500), (512, 1000), (0, 129), (1000, 300)],
        },
        Case {
            name: "prefill page runs",
            page_size: 8,
            page_runs: true,
            head_dim: 64,
            q_heads: 16,
            kv_heads: 8,
            seqs: vec![(0, 1000), (100, 600), (37, 200)],
        },
        Case {
            name: "prefill long prefix",
            page_size: 16,
            page_runs: false,
            head_dim: 128,
            q_heads: 16,
            kv_heads: 8,
            seqs: vec![(8000, 512)],
        },
    ]
}

pub fn run(cpu: &CpuBackend, gpu: &CudaBackend, seed: u64, rep: &mut Report) -> Result<()> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0xa77);
    for c in cases() {
        let (num_pages, fill, attn) = metas(&c, &mut rng);
        let layout = c.layout(num_pages);
        let kvw = c.kv_heads * c.head_dim;
        let nf = fill.tokens.len();
        let k = randn(&mut rng, nf * kvw, 1.0);
        let v = randn(&mut rng, nf * kvw, 1.0);
        let t = attn.tokens.len();
        let q = randn(&mut rng, t * c.q_heads * c.head_dim, 1.0);
        let scale = 1.0 / (c.head_dim as f32).sqrt();
        // CPU reference.
        let mut kvc = cpu.alloc_kv(layout)?;
        let fc = cpu.prepare_step(&fill)?;
        cpu.store_kv(
            &mut kvc,
            0,
            &up(cpu, &[nf, kvw], &k)?,
            &up(cpu, &[nf, kvw], &v)?,
            &fc,
        )?;
        let ac = cpu.prepare_step(&attn)?;
        let oc = cpu.to_host(&cpu.attention(
            &up(cpu, &[t, c.q_heads * c.head_dim], &q)?,
            &kvc,
            0,
            &ac,
            scale,
        )?)?;
        // GPU: the path the backend picks, then the simple kernel.
        let mut kvg = gpu.alloc_kv(layout)?;
        let fg = gpu.prepare_step(&fill)?;
        gpu.store_kv(
            &mut kvg,
            0,
            &up(gpu, &[nf, kvw], &k)?,
            &up(gpu, &[nf, kvw], &v)?,
            &fg,
        )?;
        let ag = gpu.prepare_step(&attn)?;
        let qg = up(gpu, &[t, c.q_heads * c.head_dim], &q)?;
        let group = c.q_heads / c.kv_heads;
        let path = gpu.attention_path(&ag, c.head_dim, group);
        let og = gpu.attention(&qg, &kvg, 0, &ag, scale)?;
        let max_ctx = attn.kv_lens.iter().max().copied().unwrap_or(0);
        let desc = format!(
            "{} ps={} hd={} {}q/{}kv seqs={} T={t} max_ctx={max_ctx}",
            c.name,
            c.page_size,
            c.head_dim,
            c.q_heads,
            c.kv_heads,
            c.seqs.len()
        );
        rep.check(
            "attention",
            format!("{desc} [{path:?}]"),
            &gpu.to_host(&og)?,
            &oc,
            2e-2,
        );
        // Every other kernel that could run this step: the simple one, and the
        // portable prefill kernel where the Hopper one is the default.
        let mut others = Vec::new();
        if path != AttnPath::Simple {
            others.push(AttnPath::Simple);
        }
        if path == AttnPath::PrefillHopper {
            others.push(AttnPath::Prefill);
        }
        // With the ws kernel (the default on sm_90), the earlier Hopper kernel too.
        if path == AttnPath::PrefillWs {
            others.push(AttnPath::PrefillHopper);
            others.push(AttnPath::Prefill);
        }
        // Every decode kernel and schedule wherever they apply, whichever is the default.
        let decodes = [AttnPath::Decode, AttnPath::DecodeMma, AttnPath::DecodeMmaSk];
        if decodes.contains(&path) {
            others.extend(
                decodes
                    .into_iter()
                    .filter(|&p| p != path && (p == AttnPath::Decode || group <= 16)),
            );
        }
        for other in others {
            let os = gpu.new_output(t, c.q_heads * c.head_dim)?;
            gpu.attention_into(&qg, &kvg, 0, &ag, scale, &os, Some(other))?;
            rep.check(
                "attention",
                format!("{desc} [{other:?}]"),
                &gpu.to_host(&os)?,
                &oc,
                2e-2,
            );
        }
        // A mixed step the other way too: the checks above ran it as set (by default its
        // one-token sequences on the decode kernel), here on each prefill kernel with
        // MINISGL_MIXED_SPLIT flipped (by default every row on the prefill kernel), then
        // split with the decode forced to three or more splits (the combine over the
        // one-token sequences only).
        if ag.mixed_decodes() > 0 {
            let split0 = gpu.mixed_split();
            let mut runs = vec![(!split0, None, 0)];
            if path == AttnPath::PrefillWs {
                runs.push((!split0, Some(AttnPath::PrefillHopper), 0));
                runs.push((!split0, Some(AttnPath::Prefill), 0));
            }
            runs.push((true, None, 3));
            for (split, other, min_splits) in runs {
                let (splits0, part0) = (gpu.decode_min_splits(), gpu.decode_min_part());
                gpu.set_mixed_split(split);
                if min_splits > 0 {
                    gpu.set_decode_min_splits(min_splits);
                    gpu.set_decode_min_part(32);
                }
                let os = gpu.new_output(t, c.q_heads * c.head_dim)?;
                let r = gpu.attention_into(&qg, &kvg, 0, &ag, scale, &os, other);
                gpu.set_mixed_split(split0);
                gpu.set_decode_min_splits(splits0);
                gpu.set_decode_min_part(part0);
                r?;
                let how = match (split, min_splits) {
                    (false, _) => "every row on the prefill kernel".to_string(),
                    (true, 0) => format!("{} one-token rows on the decode", ag.mixed_decodes()),
                    (true, n) => format!("one-token rows on the decode, {n}+ splits"),
                };
                let on = other.unwrap_or(path);
                rep.check(
                    "attention",
                    format!("{desc} [{on:?}, mixed: {how}]"),
                    &gpu.to_host(&os)?,
                    &oc,
                    2e-2,
                );
            }
        }
        // The split-grid kernels with at least three splits too (so the combine runs),
        // with splits of at least 32 and of at least 64 rows.
        if decodes.contains(&path) {
            let (splits0, part0) = (gpu.decode_min_splits(), gpu.decode_min_part());
            let variants = [
                (AttnPath::Decode, 32),
                (AttnPath::DecodeMma, 32),
                (AttnPath::DecodeMma, 64),
            ];
            for (other, part) in variants {
                if other != AttnPath::Decode && group > 16 {
                    continue;
                }
                let note = format!(", {part}+ rows a split");
                gpu.set_decode_min_splits(3);
                gpu.set_decode_min_part(part);
                let os = gpu.new_output(t, c.q_heads * c.head_dim)?;
                let r = gpu.attention_into(&qg, &kvg, 0, &ag, scale, &os, Some(other));
                gpu.set_decode_min_splits(splits0);
                gpu.set_decode_min_part(part0);
                r?;
                rep.check(
                    "attention",
                    format!("{desc} [{other:?}, at least 3 splits{note}]"),
                    &gpu.to_host(&os)?,
                    &oc,
                    2e-2,
                );
            }
            // The tensor-core split grid with its blocks in the batch's order, not
            // longest context first (the other setting of MINISGL_DECODE_ORDER).
            if group <= 16 {
                let order0 = gpu.decode_order();
                gpu.set_decode_order(!order0);
                let os = gpu.new_output(t, c.q_heads * c.head_dim)?;
                let r =
                    gpu.attention_into(&qg, &kvg, 0, &ag, scale, &os, Some(AttnPath::DecodeMma));
                gpu.set_decode_order(order0);
                r?;
                let how = if order0 {
                    "batch order"
                } else {
                    "longest first"
                };
                rep.check(
                    "attention",
                    format!("{desc} [DecodeMma, {how}]"),
                    &gpu.to_host(&os)?,
                    &oc,
                    2e-2,
                );
            }
        }
    }
    Ok(())
}
