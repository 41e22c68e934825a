//! How much of a step's prefill attention reads K/V tiles that lie on consecutive
//! pages. The Hopper prefill kernel copies such a tile (128 cache rows) as one box per
//! 64 columns instead of one per page chunk; at pages of 16 that was worth a fifth of
//! the kernel (docs/results/gpu-2026-12-02-epilogue.md). Whether a tile qualifies is
//! up to the page pool's order and the schedule, so replays measure it.

use crate::batch::StepInput;

/// Cache rows of one prefill K/V tile (the kernel's `P_BK`).
pub const TILE_ROWS: u32 = 128;

/// Prefill K/V tile reads of some steps, and how many of them lie on consecutive
/// pages. Each query tile of 128 rows reads every K/V tile up to its causal end, as
/// the kernel does (query heads read alike, so they are not counted).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TileRuns {
    pub reads: u64,
    pub whole: u64,
}

impl TileRuns {
    /// The prefill chunks of `input` (sequences of two or more tokens) over pages of
    /// `page_size` rows. At pages of [`TILE_ROWS`] or more every tile is one box
    /// already and counts as whole.
    pub fn of(input: &StepInput, page_size: u32) -> TileRuns {
        let mut r = TileRuns::default();
        let ps = page_size.max(1);
        for seq in input.seqs.iter().filter(|s| s.tokens.len() > 1) {
            let n = seq.tokens.len() as u32;
            let end = seq.start_pos + n;
            let tiles = end.div_ceil(TILE_ROWS);
            // Tile t's page chunks are consecutive pages (those that exist).
            let consecutive: Vec<bool> = (0..tiles)
                .map(|t| {
                    let first = (t * TILE_ROWS / ps) as usize;
                    let last = (((t + 1) * TILE_ROWS).min(end).div_ceil(ps) as usize)
                        .min(seq.page_table.len());
                    (first..last)
                        .all(|i| seq.page_table[i] == seq.page_table[first] + (i - first) as u32)
                })
                .collect();
            for q0 in (0..n).step_by(TILE_ROWS as usize) {
                let kv_end = seq.start_pos + (q0 + TILE_ROWS).min(n);
                for t in 0..kv_end.div_ceil(TILE_ROWS) {
                    r.reads += 1;
                    // Every chunk of the tile must start before kv_end: the kernel
                    // copies the ones past it as zero-filled boxes, chunk by chunk.
                    let chunks_in = ps >= TILE_ROWS || (t + 1) * TILE_ROWS - ps < kv_end;
                    if chunks_in && consecutive[t as usize] {
                        r.whole += 1;
                    }
                }
            }
        }
        r
    }

    pub fn add(&mut self, o: TileRuns) {
        self.reads += o.reads;
        self.whole += o.whole;
    }

    /// Whole reads over all reads, or `None` with no prefill.
    pub fn fraction(&self) -> Option<f64> {
        (self.reads > 0).then(|| self.whole as f64 / self.reads as f64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::batch::SeqInput;

    fn seq(start: u32, n: u32, pages: Vec<u32>) -> SeqInput {
        SeqInput {
            id: 1,
            tokens: vec![0; n as usize],
            first_from_last_step: false,
            start_pos: start,
            page_table: pages,
            sample: None,
        }
    }

    #[test]
    fn consecutive_pages_make_whole_tiles_and_a_break_spoils_one() {
        // 256 rows at pages of 16: two query tiles, reading 1 and 2 K/V tiles.
        let run: Vec<u32> = (100..116).collect();
        let input = StepInput {
            seqs: vec![seq(0, 256, run.clone())],
        };
        assert_eq!(TileRuns::of(&input, 16), TileRuns { reads: 3, whole: 3 });
        // A break inside the second tile: its one read is not whole.
        let mut broken = run;
        broken[12] = 7;
        let input = StepInput {
            seqs: vec![seq(0, 256, broken)],
        };
        assert_eq!(TileRuns::of(&input, 16), TileRuns { reads: 3, whole: 2 });
    }

    #[test]
    fn a_tile_cut_by_the_end_and_decodes_do_not_count() {
        // 100 rows: one tile whose chunks past row 100 do not exist (not whole);
        // the decode (one token) reads no prefill tile.
        let input = StepInput {
            seqs: vec![seq(0, 100, (0..7).collect()), seq(500, 1, vec![9; 32])],
        };
        assert_eq!(TileRuns::of(&input, 16), TileRuns { reads: 1, whole: 0 });
        // At pages of 128 a tile is one box anyway.
        assert_eq!(TileRuns::of(&input, 128), TileRuns { reads: 1, whole: 1 });
        assert_eq!(TileRuns::default().fraction(), None);
    }
}
