//! Tensor maps for the copy engine (TMA, sm_90). The warp-specialised prefill kernel
//! copies each K/V tile out of the paged cache as one bulk tensor copy per page chunk,
//! issued by four warps, instead of 128 threads gathering it with cp.async. A map is a
//! 128-byte descriptor that the driver encodes on the host (no device work) and the
//! kernel takes by value (`__grid_constant__ TmaDesc`).

use cudarc::driver::{sys, DeviceRepr};

use super::error::CudaError;

/// Rows of the cache a box covers at most: a tile's rows (`P_BK`).
const TILE_ROWS: usize = 128;

/// An encoded `CUtensorMap`, passed to a kernel by value.
#[derive(Clone, Copy, Debug)]
#[repr(transparent)]
// The driver reads the descriptor through a pointer to this value (the launch).
#[allow(dead_code)]
pub(crate) struct TensorMap(sys::CUtensorMap);

// SAFETY: plain bytes; the kernel's parameter is the same 128-byte descriptor.
unsafe impl DeviceRepr for TensorMap {}

/// Whether K/V tiles of a cache with `page_size` rows a page go through the copy
/// engine (`attn_prefill_ws_hd*`): pages of at least 8 rows (a box of 8 rows x 128
/// bytes is the 128-byte swizzle's whole pattern), a power of two (the kernel
/// splits positions with shifts). Other caches take the cp.async gather build.
pub(crate) fn kv_pages_fit(page_size: usize) -> bool {
    page_size >= 8 && page_size.is_power_of_two()
}

/// Rows a box of the K/V maps takes for `page_size`: a chunk never crosses a page.
pub(crate) fn kv_box_rows(page_size: usize) -> usize {
    page_size.clamp(1, TILE_ROWS)
}

/// The map over one layer's K or V cache at `base`: bf16 rows of `row_elems` (all KV
/// heads' head_dim) for each of `slots` cache slots; boxes of 64 columns (128 bytes,
/// the wgmma tile's column block) by [`kv_box_rows`] rows, with the 128-byte swizzle
/// the kernel's shared tiles use. A box outside the cache is zero-filled.
pub(crate) fn kv_cache_map(
    base: u64,
    slots: usize,
    row_elems: usize,
    page_size: usize,
) -> Result<TensorMap, CudaError> {
    let box_rows = kv_box_rows(page_size);
    if !row_elems.is_multiple_of(64) || slots == 0 {
        return Err(CudaError::Unsupported(format!(
            "tensor map over {slots} cache slots of {row_elems} columns (needs slots and 64-column blocks)"
        )));
    }
    matrix_map(base, slots, row_elems, box_rows)
}

/// Whether [`matrix_map`] can describe a row-major bf16 matrix at `base` with `cols`
/// columns: the copy engine needs a 16-byte aligned base and row stride.
pub(crate) fn matrix_fits(base: u64, cols: usize) -> bool {
    base.is_multiple_of(16) && cols.is_multiple_of(8) && cols > 0
}

/// The map over a row-major bf16 matrix `[rows, cols]` at `base`: boxes of 64 columns
/// (128 bytes) by `box_rows` rows with the 128-byte swizzle wgmma reads; the part of a
/// box outside the matrix is zero-filled (and still counts its bytes).
pub(crate) fn matrix_map(
    base: u64,
    rows: usize,
    cols: usize,
    box_rows: usize,
) -> Result<TensorMap, CudaError> {
    if !matrix_fits(base, cols) || rows == 0 || !(1..=256).contains(&box_rows) {
        return Err(CudaError::Unsupported(format!(
            "tensor map over [{rows}, {cols}] at {base:#x} with boxes of {box_rows} rows (needs a 16-byte aligned base and row, 1-256 box rows)"
        )));
    }
    let dims: [u64; 2] = [cols as u64, rows as u64];
    let strides: [u64; 1] = [(cols * 2) as u64];
    let boxes: [u32; 2] = [64, box_rows as u32];
    let elem_strides: [u32; 2] = [1, 1];
    // SAFETY: a zeroed descriptor is only an output buffer for the driver.
    let mut map: sys::CUtensorMap = unsafe { std::mem::zeroed() };
    // SAFETY: every pointer refers to a live local array of the length the rank (2)
    // implies; the driver only encodes, it does not touch `base`'s memory.
    unsafe {
        sys::cuTensorMapEncodeTiled(
            &mut map,
            sys::CUtensorMapDataType::CU_TENSOR_MAP_DATA_TYPE_BFLOAT16,
            2,
            base as *mut std::ffi::c_void,
            dims.as_ptr(),
            strides.as_ptr(),
            boxes.as_ptr(),
            elem_strides.as_ptr(),
            sys::CUtensorMapInterleave::CU_TENSOR_MAP_INTERLEAVE_NONE,
            sys::CUtensorMapSwizzle::CU_TENSOR_MAP_SWIZZLE_128B,
            sys::CUtensorMapL2promotion::CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
            sys::CUtensorMapFloatOOBfill::CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE,
        )
    }
    .result()?;
    Ok(TensorMap(map))
}

#[cfg(test)]
mod tests {
    use super::kv_box_rows;

    #[test]
    fn boxes_stay_inside_a_page_and_a_tile() {
        assert_eq!(kv_box_rows(1), 1);
        assert_eq!(kv_box_rows(16), 16);
        assert_eq!(kv_box_rows(128), 128);
        assert_eq!(kv_box_rows(256), 128);
    }

    #[test]
    fn matrices_need_16_byte_rows_and_base() {
        assert!(super::matrix_fits(0x1000, 1024) && super::matrix_fits(0x10, 8));
        assert!(!super::matrix_fits(0x1008, 1024), "base 8 bytes off");
        assert!(!super::matrix_fits(0x1000, 1020), "rows of 2,040 bytes");
        assert!(!super::matrix_fits(0x1000, 0));
    }

    #[test]
    fn small_or_odd_pages_take_the_gather_build() {
        assert!(!super::kv_pages_fit(1) && !super::kv_pages_fit(4) && !super::kv_pages_fit(24));
        assert!(super::kv_pages_fit(8) && super::kv_pages_fit(16) && super::kv_pages_fit(256));
    }
}
