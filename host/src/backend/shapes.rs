//! The input rules of the ops both backends implement (shapes, token ids),
//! written once: a call the CPU backend (the reference) rejects, the CUDA
//! backend rejects with the same error. Each check takes shapes and element
//! counts rather than a backend's tensor, and returns the dimensions the op
//! then works with.

use super::{BackendError, HostData};

/// The error of a call whose tensors do not fit the op.
pub(super) fn shape_err(op: &'static str, detail: String) -> BackendError {
    BackendError::Shape { op, detail }
}

/// `(rows, cols)` of a 2-D tensor; a 1-D tensor of `c` values is one row.
pub(super) fn rows_cols(shape: &[usize], op: &'static str) -> Result<(usize, usize), BackendError> {
    match shape {
        [r, c] => Ok((*r, *c)),
        [c] => Ok((1, *c)),
        s => Err(shape_err(op, format!("expected a 2-D tensor, got {s:?}"))),
    }
}

/// [`Backend::upload`](super::Backend::upload): `data` holds exactly the
/// elements of `shape`, in whole elements.
pub(super) fn upload(shape: &[usize], data: &HostData<'_>) -> Result<(), BackendError> {
    let n: usize = shape.iter().product();
    if data.len() != n || !data.bytes.len().is_multiple_of(data.dtype.size()) {
        return Err(shape_err(
            "upload",
            format!(
                "shape {shape:?} needs {n} elements, data has {}",
                data.len()
            ),
        ));
    }
    Ok(())
}

/// [`Backend::embedding`](super::Backend::embedding): every token is a row
/// of the `[vocab, hidden]` table. Returns `(vocab, hidden)`.
pub(super) fn embedding(table: &[usize], tokens: &[u32]) -> Result<(usize, usize), BackendError> {
    let (vocab, hidden) = rows_cols(table, "embedding")?;
    if let Some(t) = tokens.iter().find(|&&t| t as usize >= vocab) {
        return Err(BackendError::InvalidInput(format!(
            "token id {t} out of range (vocab {vocab})"
        )));
    }
    Ok((vocab, hidden))
}

/// [`Backend::split_cols`](super::Backend::split_cols): the widths cover
/// the columns exactly. Returns `(rows, cols)`.
pub(super) fn split_cols(x: &[usize], widths: &[usize]) -> Result<(usize, usize), BackendError> {
    let (rows, cols) = rows_cols(x, "split_cols")?;
    if widths.iter().sum::<usize>() != cols {
        return Err(shape_err(
            "split_cols",
            format!("{widths:?} do not sum to {cols}"),
        ));
    }
    Ok((rows, cols))
}

/// [`Backend::linear`](super::Backend::linear): `x [m, k] · w [n, k]ᵀ`, plus
/// a bias of `n` values. `bias` is its shape (for the message) and the
/// number of values the backend holds for it. Returns `(m, k, n)`.
pub(super) fn linear(
    x: &[usize],
    w: &[usize],
    bias: Option<(&[usize], usize)>,
) -> Result<(usize, usize, usize), BackendError> {
    let (m, k) = rows_cols(x, "linear")?;
    let (n, kw) = rows_cols(w, "linear")?;
    if k != kw {
        return Err(shape_err("linear", format!("x {x:?} w {w:?}")));
    }
    if let Some((shape, len)) = bias {
        if len != n {
            return Err(shape_err(
                "linear",
                format!("bias {shape:?} for {n} outputs"),
            ));
        }
    }
    Ok((m, k, n))
}

/// [`Backend::linear_into`](super::Backend::linear_into): the product's
/// `[m, n]` fits in the first rows of `out`, which is `n` wide. Returns
/// `(m, k, n)`.
pub(super) fn linear_into(
    x: &[usize],
    w: &[usize],
    out: &[usize],
) -> Result<(usize, usize, usize), BackendError> {
    let (m, k, n) = linear(x, w, None)?;
    let (rows, cols) = rows_cols(out, "linear_into")?;
    if rows < m || cols != n {
        return Err(shape_err(
            "linear_into",
            format!("[{m}, {n}] does not fit into {out:?}"),
        ));
    }
    Ok((m, k, n))
}

/// [`Backend::rope`](super::Backend::rope): `x [rows, cols]` is whole heads
/// of an even `head_dim`, one row per position, with `head_dim / 2` inverse
/// frequencies (`inv_freq`: their shape, for the message, and how many the
/// backend holds). Returns `(rows, cols)`.
pub(super) fn rope(
    x: &[usize],
    head_dim: usize,
    inv_freq: (&[usize], usize),
    positions: usize,
) -> Result<(usize, usize), BackendError> {
    let (rows, cols) = rows_cols(x, "rope")?;
    if head_dim == 0
        || !head_dim.is_multiple_of(2)
        || !cols.is_multiple_of(head_dim)
        || inv_freq.1 != head_dim / 2
        || rows != positions
    {
        return Err(shape_err(
            "rope",
            format!(
                "x {x:?}, head_dim {head_dim}, inv_freq {:?}, {positions} positions",
                inv_freq.0
            ),
        ));
    }
    Ok((rows, cols))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn op(e: BackendError) -> &'static str {
        match e {
            BackendError::Shape { op, .. } => op,
            e => panic!("not a shape error: {e}"),
        }
    }

    #[test]
    fn linear_takes_matching_inner_dims_and_a_bias_per_output() {
        assert_eq!(
            linear(&[3, 8], &[5, 8], Some((&[5], 5))).unwrap(),
            (3, 8, 5)
        );
        assert_eq!(linear(&[8], &[5, 8], None).unwrap(), (1, 8, 5));
        assert_eq!(op(linear(&[3, 8], &[5, 7], None).unwrap_err()), "linear");
        assert_eq!(
            op(linear(&[3, 8], &[5, 8], Some((&[4], 4))).unwrap_err()),
            "linear"
        );
        assert_eq!(op(linear(&[2, 3, 8], &[5, 8], None).unwrap_err()), "linear");
        assert_eq!(linear_into(&[2, 8], &[5, 8], &[4, 5]).unwrap(), (2, 8, 5));
        assert_eq!(
            op(linear_into(&[2, 8], &[5, 8], &[1, 5]).unwrap_err()),
            "linear_into"
        );
        assert_eq!(
            op(linear_into(&[2, 8], &[5, 8], &[4, 6]).unwrap_err()),
            "linear_into"
        );
    }

    #[test]
    fn rope_takes_whole_even_heads_and_a_position_per_row() {
        assert_eq!(rope(&[3, 64], 32, (&[16], 16), 3).unwrap(), (3, 64));
        for (x, head_dim, freqs, positions) in [
            ([3, 64], 0, 0, 3),   // no head
            ([3, 63], 21, 10, 3), // odd head_dim
            ([3, 48], 32, 16, 3), // not whole heads
            ([3, 64], 32, 8, 3),  // too few frequencies
            ([3, 64], 32, 16, 2), // a row without a position
        ] {
            let e = rope(&x, head_dim, (&[freqs], freqs), positions).unwrap_err();
            assert_eq!(op(e), "rope", "{x:?} head_dim {head_dim}");
        }
    }
}
