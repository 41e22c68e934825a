//! Recorded decode steps (CUDA graphs): the metadata arena at fixed
//! addresses, padded graph steps, and capture.
//!
//! A recorded step bakes in every kernel argument, so everything a replay
//! changes must live at addresses fixed at capture: the per-step arrays live
//! in one [`GraphArena`] sized for the largest batch, laid out the same way
//! for every batch size, and a replay only rewrites its prefix. Batches are
//! padded to the recorded size with rows whose token sits in a scratch page
//! past the pool (allocated by `alloc_kv`), so padding never touches a page
//! the engine owns.

use cudarc::driver::sys::{CUgraphInstantiate_flags_enum, CUstreamCaptureMode};

use super::{CudaBackend, CudaGraphStep, CudaStep, GraphArena, StepOffsets};
use crate::backend::{BackendError, KvLayout, StepMeta};

/// Offsets of the arena's arrays for up to `b` sequences (page ids last, so
/// that a replay uploads one short header and the page ids it uses).
fn arena_offsets(b: usize) -> StepOffsets {
    StepOffsets {
        tokens: 0,
        positions: b,
        slots: 2 * b,
        q_start: 3 * b,
        kv_len: 4 * b + 1,
        page_start: 5 * b + 1,
        tok_seq: 6 * b + 2,
        sample_rows: 7 * b + 2,
        seq_order: 8 * b + 2,
        tile_seq: 9 * b + 2,
        tile_q0: 9 * b + 2,
        page_ids: 9 * b + 3,
    }
}

impl CudaBackend {
    pub(crate) fn reserve_graph_arena(
        &self,
        layout: KvLayout,
        max_seqs: usize,
        max_pages: usize,
    ) -> Result<(), BackendError> {
        if max_seqs == 0 || max_pages == 0 {
            return Err(BackendError::InvalidInput(format!(
                "graph arena for {max_seqs} sequences of {max_pages} pages"
            )));
        }
        let off = arena_offsets(max_seqs);
        let buf = self
            .dev
            .stream
            .alloc_zeros::<i32>(off.page_ids + max_seqs * max_pages)?;
        *self.graph_arena.borrow_mut() = Some(GraphArena {
            buf,
            max_seqs,
            max_pages,
            scratch_page: layout.num_pages as u32,
            page_size: layout.page_size as u32,
            off,
        });
        Ok(())
    }

    /// Upload `meta` padded to `padded` sequences into the arena; returns a
    /// step reading the arena.
    pub(crate) fn graph_step(
        &self,
        meta: &StepMeta,
        padded: usize,
    ) -> Result<CudaStep, BackendError> {
        let mut guard = self.graph_arena.borrow_mut();
        let a = guard.as_mut().ok_or_else(|| {
            BackendError::InvalidInput("prepare_graph_step before reserve_graph_steps".into())
        })?;
        let s = meta.num_seqs();
        let bad = |m: String| Err(BackendError::InvalidInput(m));
        if padded == 0 || padded > a.max_seqs || s > padded {
            return bad(format!(
                "{s} sequences padded to {padded} (arena holds {})",
                a.max_seqs
            ));
        }
        if s > 0 && meta.page_size != a.page_size {
            return bad(format!(
                "page size {} differs from the cache's {}",
                meta.page_size, a.page_size
            ));
        }
        if meta.num_tokens() != s
            || meta
                .sample_rows
                .iter()
                .enumerate()
                .any(|(i, &r)| r as usize != i)
            || meta.sample_rows.len() != s
        {
            return bad(
                "a graph step needs one token and one sample per sequence, in order".into(),
            );
        }
        for i in 0..s {
            let pages = (meta.page_indptr[i + 1] - meta.page_indptr[i]) as usize;
            if pages > a.max_pages {
                return bad(format!(
                    "sequence {i} has {pages} pages (graphs hold up to {})",
                    a.max_pages
                ));
            }
        }
        let ps = a.page_size;
        let scratch_slot = a.scratch_page * ps;
        let mut p = StepMeta {
            page_size: ps,
            ..Default::default()
        };
        p.tokens.extend_from_slice(&meta.tokens);
        p.positions.extend_from_slice(&meta.positions);
        p.slots.extend_from_slice(&meta.slots);
        p.q_indptr.extend_from_slice(&meta.q_indptr);
        if p.q_indptr.is_empty() {
            p.q_indptr.push(0);
        }
        p.kv_lens.extend_from_slice(&meta.kv_lens);
        p.page_table.extend_from_slice(&meta.page_table);
        p.page_indptr.extend_from_slice(&meta.page_indptr);
        if p.page_indptr.is_empty() {
            p.page_indptr.push(0);
        }
        p.sample_rows.extend_from_slice(&meta.sample_rows);
        for i in s..padded {
            p.tokens.push(0);
            p.positions.push(0);
            p.slots.push(scratch_slot);
            p.q_indptr.push(i as u32 + 1);
            p.kv_lens.push(1);
            p.page_table.push(a.scratch_page);
            p.page_indptr.push(p.page_table.len() as u32);
            p.sample_rows.push(i as u32);
        }
        let off = a.off;
        let mut h = vec![0i32; off.page_ids];
        let mut put = |at: usize, v: &[u32]| {
            for (d, &x) in h[at..at + v.len()].iter_mut().zip(v) {
                *d = x as i32;
            }
        };
        put(off.tokens, &p.tokens);
        put(off.positions, &p.positions);
        put(off.slots, &p.slots);
        put(off.q_start, &p.q_indptr);
        put(off.kv_len, &p.kv_lens);
        put(off.page_start, &p.page_indptr);
        let rows: Vec<u32> = (0..padded as u32).collect();
        put(off.tok_seq, &rows);
        put(off.sample_rows, &rows);
        put(off.seq_order, &super::decode_order(&p.kv_lens));
        // The page ids follow the fields in the arena: one copy for both.
        h.extend(p.page_table.iter().map(|&x| x as i32));
        let st = &self.dev.stream;
        st.memcpy_htod(&h, &mut a.buf.slice_mut(0..h.len()))?;
        let base = self.ptr(&a.buf);
        self.take_last_tokens(base + (off.tokens * 4) as u64, &meta.from_last)?;
        Ok(CudaStep {
            meta: p,
            base,
            _buf: None,
            off,
            decode_only: true,
            num_tiles: 0,
            num_wide_tiles: 0,
            max_kv_hint: Some(a.max_pages * ps as usize),
            mixed: None,
        })
    }

    pub(crate) fn begin_capture_impl(&self) -> Result<(), BackendError> {
        // Thread-local mode: other threads may keep using the driver meanwhile.
        self.dev
            .stream
            .begin_capture(CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)?;
        Ok(())
    }

    pub(crate) fn end_capture_impl(&self) -> Result<CudaGraphStep, BackendError> {
        let g = self
            .dev
            .stream
            .end_capture(CUgraphInstantiate_flags_enum(0))?
            .ok_or_else(|| BackendError::Device("graph capture recorded nothing".into()))?;
        // Upload now so that the first replay is as cheap as the rest.
        g.upload()?;
        Ok(CudaGraphStep(g))
    }
}
