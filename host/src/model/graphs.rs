//! Decode steps replayed from recorded graphs (CUDA graphs).
//!
//! A decode step of a small model is a few hundred short kernels; launched one
//! by one from the host, the launches take longer than the GPU work. At start
//! the runner records one graph per batch size in [`batch_sizes`] (a step of
//! padding rows only, see [`Backend::prepare_graph_step`]); a later decode
//! step of `n` sequences replays the smallest graph of at least `n` rows after
//! rewriting the step's arrays. Prefill and mixed steps, and decode batches
//! larger than the largest graph, run eagerly.

use super::llama::Model;
use super::ModelError;
use crate::backend::{Backend, StepMeta};

/// Recorded batch sizes up to `max_bs`: 1, 2, 4, 8, then every multiple of 8
/// (padding wastes at most 7 rows), and `max_bs` itself.
pub fn batch_sizes(max_bs: usize) -> Vec<usize> {
    let mut v: Vec<usize> = [1, 2, 4]
        .into_iter()
        .chain((8..=max_bs).step_by(8))
        .filter(|&b| b <= max_bs)
        .collect();
    if max_bs > 0 && v.last() != Some(&max_bs) {
        v.push(max_bs);
    }
    v
}

/// The recorded decode graphs of one runner.
pub struct DecodeGraphs<B: Backend> {
    /// Recorded batch sizes, ascending, and their graphs (same order).
    sizes: Vec<usize>,
    graphs: Vec<B::Graph>,
    /// Where every graph writes its logits (`[largest batch, vocab]`, f32).
    logits: B::Tensor,
    /// Pages a sequence may hold and still be replayed.
    max_pages: usize,
    /// Steps replayed so far.
    pub replays: u64,
}

impl<B: Backend> DecodeGraphs<B> {
    /// Record graphs for batch sizes up to `max_bs` whose sequences hold up to
    /// `max_pages` pages. `Ok(None)` when `max_bs` is 0 or the backend cannot
    /// record.
    pub fn capture(
        b: &B,
        model: &Model<B>,
        kv: &mut B::Kv,
        max_bs: usize,
        max_pages: usize,
    ) -> Result<Option<Self>, ModelError> {
        if max_bs == 0 || max_pages == 0 || !b.reserve_graph_steps(kv, max_bs, max_pages)? {
            return Ok(None);
        }
        let mut logits = b.alloc_logits(max_bs, model.config().vocab_size())?;
        let (sizes, mut graphs) = (batch_sizes(max_bs), Vec::new());
        let padding_only = StepMeta::default();
        for &bs in &sizes {
            let step = b.prepare_graph_step(&padding_only, bs)?;
            // One eager run first: it loads every kernel and lets cuBLAS pick (and
            // allocate for) its algorithms outside the recording.
            model.forward_into(b, kv, &step, &mut logits)?;
            b.begin_capture()?;
            let recorded = model.forward_into(b, kv, &step, &mut logits);
            let graph = b.end_capture();
            recorded?;
            graphs.push(graph?);
        }
        Ok(Some(DecodeGraphs {
            sizes,
            graphs,
            logits,
            max_pages,
            replays: 0,
        }))
    }

    /// Recorded batch sizes.
    pub fn sizes(&self) -> Vec<usize> {
        self.sizes.clone()
    }

    /// Index of the graph that can run `meta`: a decode step (one token and
    /// one sample per sequence, in order) whose batch fits a recorded size and
    /// whose sequences fit the recorded page tables.
    pub fn fit(&self, meta: &StepMeta) -> Option<usize> {
        fit(&self.sizes, self.max_pages, meta)
    }

    /// Replay graph `idx` (from [`DecodeGraphs::fit`]) on `meta`; the logits
    /// land in the first `meta.num_seqs()` rows of [`DecodeGraphs::logits`].
    pub fn run(&mut self, b: &B, meta: &StepMeta, idx: usize) -> Result<(), ModelError> {
        let (bs, graph) = (self.sizes[idx], &self.graphs[idx]);
        // The step only names the arena the graph reads; the upload is what counts.
        let _step = b.prepare_graph_step(meta, bs)?;
        b.replay(graph)?;
        self.replays += 1;
        Ok(())
    }

    /// The tensor every graph writes its logits into.
    pub fn logits(&self) -> &B::Tensor {
        &self.logits
    }
}

/// Index into `sizes` (ascending) of the smallest recorded batch that can run
/// `meta`, if `meta` is a decode step a graph can replay.
fn fit(sizes: &[usize], max_pages: usize, meta: &StepMeta) -> Option<usize> {
    let s = meta.num_seqs();
    if s == 0
        || meta.num_tokens() != s
        || meta.sample_rows.len() != s
        || meta
            .sample_rows
            .iter()
            .enumerate()
            .any(|(i, &r)| r as usize != i)
        || meta
            .page_indptr
            .windows(2)
            .any(|w| (w[1] - w[0]) as usize > max_pages)
    {
        return None;
    }
    sizes.iter().position(|&b| b >= s)
}

#[cfg(test)]
mod tests {
    use super::{batch_sizes, fit};
    use crate::backend::StepMeta;

    /// A decode step of `pages.len()` sequences holding that many pages each.
    fn decode(pages: &[u32]) -> StepMeta {
        let mut m = StepMeta {
            page_size: 16,
            q_indptr: vec![0],
            page_indptr: vec![0],
            ..Default::default()
        };
        for (i, &p) in pages.iter().enumerate() {
            m.tokens.push(1);
            m.positions.push(p * 16 - 1);
            m.slots.push(0);
            m.q_indptr.push(i as u32 + 1);
            m.kv_lens.push(p * 16);
            m.page_table.extend(0..p);
            m.page_indptr.push(m.page_table.len() as u32);
            m.sample_rows.push(i as u32);
        }
        m
    }

    #[test]
    fn decode_steps_fit_the_smallest_graph_that_holds_them() {
        let sizes = batch_sizes(32);
        assert_eq!(fit(&sizes, 8, &decode(&[1])), Some(0));
        assert_eq!(fit(&sizes, 8, &decode(&[2, 3, 1])), Some(2)); // 3 -> 4
        assert_eq!(fit(&sizes, 8, &decode(&[1; 9])), Some(4)); // 9 -> 16
        assert_eq!(fit(&sizes, 8, &decode(&[1; 32])), Some(sizes.len() - 1));
    }

    #[test]
    fn other_steps_run_eagerly() {
        let sizes = batch_sizes(8);
        // More sequences than the largest graph.
        assert_eq!(fit(&sizes, 8, &decode(&[1; 9])), None);
        // A sequence with more pages than the recorded tables hold.
        assert_eq!(fit(&sizes, 8, &decode(&[1, 9])), None);
        // Empty step.
        assert_eq!(fit(&sizes, 8, &StepMeta::default()), None);
        // A prefill chunk (two tokens for one sequence).
        let mut m = decode(&[1, 1]);
        m.tokens.push(5);
        m.q_indptr[2] = 3;
        assert_eq!(fit(&sizes, 8, &m), None);
        // A sequence that does not sample, or samples out of order.
        let mut m = decode(&[1, 1]);
        m.sample_rows.pop();
        assert_eq!(fit(&sizes, 8, &m), None);
        let mut m = decode(&[1, 1]);
        m.sample_rows = vec![1, 0];
        assert_eq!(fit(&sizes, 8, &m), None);
    }

    #[test]
    fn batch_sizes_cover_every_batch_with_little_padding() {
        assert_eq!(batch_sizes(0), Vec::<usize>::new());
        assert_eq!(batch_sizes(1), vec![1]);
        assert_eq!(batch_sizes(6), vec![1, 2, 4, 6]);
        assert_eq!(batch_sizes(20), vec![1, 2, 4, 8, 16, 20]);
        for max in [1, 3, 8, 37, 160, 256] {
            let v = batch_sizes(max);
            assert_eq!(*v.last().unwrap(), max);
            for n in 1..=max {
                let g = *v.iter().find(|&&b| b >= n).unwrap();
                assert!(g - n <= 7, "batch {n} padded to {g}");
            }
        }
    }
}
