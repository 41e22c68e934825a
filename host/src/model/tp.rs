//! Tensor parallelism, the weights' side: which slice of every tensor one
//! rank of `world` holds (Megatron-LM's split).
//!
//! * Column-parallel (q, k, v, gate, up and the q/k/v biases): each rank
//!   keeps a contiguous block of output rows. Because the head counts
//!   divide by `world`, q's block is whole query heads and k's and v's are
//!   whole KV heads, so a rank attends with its own heads and caches only
//!   its KV heads. gate and up are split separately before they are fused,
//!   so every rank's fused matrix is `[gate_r | up_r]`, the layout
//!   `silu_mul` expects.
//! * Row-parallel (o and down): each rank keeps a block of input columns,
//!   the ones that meet its heads (o) or its slice of the MLP (down). Its
//!   product is a partial sum that the model all-reduces; o's bias is added
//!   by rank 0 only, so it is counted once.
//! * Everything else (embedding, norms, q/k norms, LM head) is replicated.
//!   A vocab-parallel embedding and LM head would save memory on large
//!   vocabularies; it was not built or measured.
//!
//! A quantised (GGUF block) weight keeps its blocks: a row split always
//! falls between blocks (every row is whole blocks), a column split only
//! when each rank's width is a whole number of blocks; otherwise loading
//! fails with [`TpError::QuantSplit`] rather than dequantising silently
//! (which would multiply the memory of that tensor by up to 7).

use std::borrow::Cow;

use super::config::ModelConfig;
use super::weights::WeightTensor;
use crate::backend::DType;

/// Why a model cannot be split `world` ways.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum TpError {
    /// `tp = 0`.
    #[error("tensor parallelism: tp must be at least 1, got 0")]
    ZeroWorld,
    /// A rank outside `0..world`.
    #[error("tensor parallelism: rank {rank} is out of range for tp = {world}")]
    Rank { rank: usize, world: usize },
    /// A config value that must divide by `world` does not.
    #[error("tensor parallelism: {field} = {value} is not divisible by tp = {world}")]
    NotDivisible {
        field: &'static str,
        value: usize,
        world: usize,
    },
    /// A tensor dimension that must divide by `world` does not.
    #[error("tensor parallelism: `{tensor}` has {len} {dim}, not divisible by tp = {world}")]
    Uneven {
        tensor: String,
        dim: &'static str,
        len: usize,
        world: usize,
    },
    /// Fewer GPUs visible than ranks asked for (from the first device on).
    #[error(
        "tensor parallelism: tp = {world} needs {world} GPUs from device {first} on; GPUs \
         visible: {visible} (check CUDA_VISIBLE_DEVICES and MINISGL_CUDA_DEVICE)"
    )]
    TooFewGpus {
        world: usize,
        first: usize,
        visible: usize,
    },
    /// A quantised weight whose column split would cut through its blocks.
    #[error(
        "tensor parallelism: `{tensor}` is {format} with rows of {width} values; split {world} \
         ways a rank gets {per_rank} columns, not a whole number of {block}-value blocks"
    )]
    QuantSplit {
        tensor: String,
        format: &'static str,
        width: usize,
        world: usize,
        per_rank: usize,
        block: usize,
    },
}

/// One rank's place in a tensor-parallel group of `world` ranks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TpShard {
    rank: usize,
    world: usize,
}

impl TpShard {
    /// The whole model on one rank.
    pub const WHOLE: TpShard = TpShard { rank: 0, world: 1 };

    /// Rank `rank` of `world` for a model of `cfg` (checked with
    /// [`TpShard::check`]).
    pub fn new(cfg: &ModelConfig, rank: usize, world: usize) -> Result<Self, TpError> {
        Self::check(cfg, world)?;
        if rank >= world {
            return Err(TpError::Rank { rank, world });
        }
        Ok(TpShard { rank, world })
    }

    /// Whether `cfg` splits `world` ways: `world > 0`, and the query heads,
    /// KV heads and MLP width divide by it (KV heads are split, not
    /// replicated, so `world` may not exceed them).
    pub fn check(cfg: &ModelConfig, world: usize) -> Result<(), TpError> {
        if world == 0 {
            return Err(TpError::ZeroWorld);
        }
        for (field, value) in [
            ("num_attention_heads", cfg.num_heads()),
            ("num_key_value_heads", cfg.num_kv_heads()),
            ("intermediate_size", cfg.intermediate_size()),
        ] {
            if !value.is_multiple_of(world) {
                return Err(TpError::NotDivisible {
                    field,
                    value,
                    world,
                });
            }
        }
        Ok(())
    }

    pub fn rank(&self) -> usize {
        self.rank
    }

    pub fn world(&self) -> usize {
        self.world
    }

    /// Whether this is one part of several (the model then all-reduces).
    pub fn is_split(&self) -> bool {
        self.world > 1
    }

    /// `n` split `world` ways: this rank's part (`n` divides, checked).
    pub fn part(&self, n: usize) -> usize {
        n / self.world
    }

    /// Column-parallel: this rank's block of rows (dim 0) of a `[rows, ..]`
    /// weight or a `[rows]` bias. Borrows when the source does.
    pub fn rows<'a>(&self, name: &str, t: WeightTensor<'a>) -> Result<WeightTensor<'a>, TpError> {
        if self.world == 1 {
            return Ok(t);
        }
        let rows = t.shape[0];
        if !rows.is_multiple_of(self.world) {
            return Err(TpError::Uneven {
                tensor: name.to_string(),
                dim: "rows",
                len: rows,
                world: self.world,
            });
        }
        // Every row is a whole number of elements (or of blocks, for a GGUF
        // tensor), so rows split on byte boundaries.
        let row_bytes = t.bytes.len() / rows;
        let per = rows / self.world;
        let range = self.rank * per * row_bytes..(self.rank + 1) * per * row_bytes;
        let bytes = match t.bytes {
            Cow::Borrowed(b) => Cow::Borrowed(&b[range]),
            Cow::Owned(v) => Cow::Owned(v[range].to_vec()),
        };
        let mut shape = t.shape;
        shape[0] = per;
        Ok(WeightTensor {
            shape,
            dtype: t.dtype,
            bytes,
        })
    }

    /// Row-parallel: this rank's block of columns (dim 1) of a
    /// `[rows, cols]` weight (a copy: the block is strided).
    pub fn cols<'a>(&self, name: &str, t: WeightTensor<'a>) -> Result<WeightTensor<'a>, TpError> {
        if self.world == 1 {
            return Ok(t);
        }
        let (rows, cols) = (t.shape[0], t.shape[1]);
        if !cols.is_multiple_of(self.world) {
            return Err(TpError::Uneven {
                tensor: name.to_string(),
                dim: "columns",
                len: cols,
                world: self.world,
            });
        }
        let per = cols / self.world;
        let (Some(row_bytes), Some(part_bytes)) = (t.dtype.bytes_for(cols), t.dtype.bytes_for(per))
        else {
            let DType::Quant(q) = t.dtype else {
                unreachable!("dense types have whole-element byte counts")
            };
            return Err(TpError::QuantSplit {
                tensor: name.to_string(),
                format: q.name(),
                width: cols,
                world: self.world,
                per_rank: per,
                block: q.block_elems(),
            });
        };
        let start = self.rank * part_bytes;
        let mut bytes = Vec::with_capacity(rows * part_bytes);
        for row in t.bytes.chunks_exact(row_bytes) {
            bytes.extend_from_slice(&row[start..start + part_bytes]);
        }
        Ok(WeightTensor {
            shape: vec![rows, per],
            dtype: t.dtype,
            bytes: Cow::Owned(bytes),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::QuantType;

    fn dense(shape: &[usize], vals: &[f32]) -> WeightTensor<'static> {
        WeightTensor {
            shape: shape.to_vec(),
            dtype: DType::F32,
            bytes: Cow::Owned(bytemuck::cast_slice(vals).to_vec()),
        }
    }

    fn vals(t: &WeightTensor<'_>) -> Vec<f32> {
        t.host().to_f32()
    }

    fn shard(rank: usize, world: usize) -> TpShard {
        TpShard { rank, world }
    }

    #[test]
    fn rows_and_cols_tile_the_matrix() {
        // [4, 6]: element (r, c) = 10 r + c.
        let m: Vec<f32> = (0..4)
            .flat_map(|r| (0..6).map(move |c| (10 * r + c) as f32))
            .collect();
        let r1 = shard(1, 2).rows("w", dense(&[4, 6], &m)).unwrap();
        assert_eq!(r1.shape, vec![2, 6]);
        assert_eq!(vals(&r1), m[12..].to_vec());
        let c2 = shard(2, 3).cols("w", dense(&[4, 6], &m)).unwrap();
        assert_eq!(c2.shape, vec![4, 2]);
        assert_eq!(
            vals(&c2),
            vec![4.0, 5.0, 14.0, 15.0, 24.0, 25.0, 34.0, 35.0]
        );
        let b = shard(0, 2)
            .rows("b", dense(&[4], &[1.0, 2.0, 3.0, 4.0]))
            .unwrap();
        assert_eq!(vals(&b), vec![1.0, 2.0]);
    }

    #[test]
    fn quantised_columns_split_only_on_blocks() {
        let q = QuantType::Q8_0;
        // Two rows of 64 values = two Q8_0 blocks per row.
        let t = || WeightTensor {
            shape: vec![2, 64],
            dtype: DType::Quant(q),
            bytes: Cow::Owned((0..4 * q.block_bytes()).map(|i| i as u8).collect()),
        };
        let c1 = shard(1, 2).cols("w", t()).unwrap();
        let bb = q.block_bytes();
        let want: Vec<u8> = [&t().bytes[bb..2 * bb], &t().bytes[3 * bb..4 * bb]].concat();
        assert_eq!(c1.bytes.as_ref(), want.as_slice());
        assert_eq!(
            shard(0, 4)
                .cols("model.layers.0.mlp.down_proj.weight", t())
                .unwrap_err(),
            TpError::QuantSplit {
                tensor: "model.layers.0.mlp.down_proj.weight".into(),
                format: "Q8_0",
                width: 64,
                world: 4,
                per_rank: 16,
                block: 32,
            }
        );
        // Rows of a quantised tensor always split.
        let r1 = shard(1, 2).rows("w", t()).unwrap();
        assert_eq!(r1.bytes.as_ref(), &t().bytes[2 * bb..]);
    }
}
