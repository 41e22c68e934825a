//! ggml's tensor types and their block formats, decoded to f32.
//!
//! Block layouts follow ggml's `ggml-common.h`; every block type is checked
//! against the reference implementation in the `gguf` Python package
//! (`gguf.quants.dequantize`) by `tests/gguf_dequant.rs`. The formats live
//! with the backend because kernels compute on them ([`QuantType`]); the
//! GGUF loader only reads files and names tensors in errors.

use half::{bf16, f16};

use super::QuantType;

/// Elements per K-quant super-block.
const QK_K: usize = 256;

macro_rules! ggml_types {
    ($($variant:ident = $id:literal, $name:literal, $block:expr, $bytes:expr;)*) => {
        /// A ggml tensor type (the `type` field of a GGUF tensor info).
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        #[allow(non_camel_case_types)]
        pub enum GgmlType { $($variant),* }

        impl GgmlType {
            /// The type for a GGUF type id; `None` for ids ggml never used or
            /// has removed.
            pub fn from_id(id: u32) -> Option<Self> {
                match id { $($id => Some(Self::$variant),)* _ => None }
            }

            /// ggml's name for the type (as `gguf.GGMLQuantizationType` spells it).
            pub fn name(self) -> &'static str {
                match self { $(Self::$variant => $name),* }
            }

            /// (elements per block, bytes per block).
            pub fn block(self) -> (usize, usize) {
                match self { $(Self::$variant => ($block, $bytes)),* }
            }
        }
    };
}

ggml_types! {
    F32 = 0, "F32", 1, 4;
    F16 = 1, "F16", 1, 2;
    Q4_0 = 2, "Q4_0", 32, 2 + 16;
    Q4_1 = 3, "Q4_1", 32, 2 + 2 + 16;
    Q5_0 = 6, "Q5_0", 32, 2 + 4 + 16;
    Q5_1 = 7, "Q5_1", 32, 2 + 2 + 4 + 16;
    Q8_0 = 8, "Q8_0", 32, 2 + 32;
    Q8_1 = 9, "Q8_1", 32, 4 + 32;
    Q2_K = 10, "Q2_K", QK_K, QK_K / 16 + QK_K / 4 + 2 + 2;
    Q3_K = 11, "Q3_K", QK_K, QK_K / 8 + QK_K / 4 + 12 + 2;
    Q4_K = 12, "Q4_K", QK_K, 2 + 2 + 12 + QK_K / 2;
    Q5_K = 13, "Q5_K", QK_K, 2 + 2 + 12 + QK_K / 8 + QK_K / 2;
    Q6_K = 14, "Q6_K", QK_K, QK_K / 2 + QK_K / 4 + QK_K / 16 + 2;
    Q8_K = 15, "Q8_K", QK_K, 4 + QK_K + QK_K / 8;
    IQ2_XXS = 16, "IQ2_XXS", QK_K, 2 + QK_K / 4;
    IQ2_XS = 17, "IQ2_XS", QK_K, 2 + QK_K / 4 + QK_K / 32;
    IQ3_XXS = 18, "IQ3_XXS", QK_K, 2 + QK_K / 4 + QK_K / 8;
    IQ1_S = 19, "IQ1_S", QK_K, 2 + QK_K / 8 + QK_K / 16;
    IQ4_NL = 20, "IQ4_NL", 32, 2 + 16;
    IQ3_S = 21, "IQ3_S", QK_K, 2 + QK_K / 4 + QK_K / 8 + QK_K / 32 + 4;
    IQ2_S = 22, "IQ2_S", QK_K, 2 + QK_K / 4 + QK_K / 16;
    IQ4_XS = 23, "IQ4_XS", QK_K, 2 + 2 + QK_K / 2 + QK_K / 64;
    I8 = 24, "I8", 1, 1;
    I16 = 25, "I16", 1, 2;
    I32 = 26, "I32", 1, 4;
    I64 = 27, "I64", 1, 8;
    F64 = 28, "F64", 1, 8;
    IQ1_M = 29, "IQ1_M", QK_K, QK_K / 8 + QK_K / 16 + QK_K / 32;
    BF16 = 30, "BF16", 1, 2;
    TQ1_0 = 34, "TQ1_0", QK_K, 2 + 4 * 13;
    TQ2_0 = 35, "TQ2_0", QK_K, 2 + 64;
    MXFP4 = 39, "MXFP4", 32, 1 + 16;
}

/// Dequantises one block of `block.len()` bytes into `out` (one block's
/// worth of elements).
pub type BlockFn = fn(&[u8], &mut [f32]);

impl GgmlType {
    /// The decoder of one block, if this type has one.
    pub fn block_fn(self) -> Option<BlockFn> {
        Some(match self {
            Self::F32 => |b, o| o[0] = f32::from_le_bytes([b[0], b[1], b[2], b[3]]),
            Self::F16 => |b, o| o[0] = half_at(b, 0),
            Self::BF16 => |b, o| o[0] = bf16::from_bits(u16::from_le_bytes([b[0], b[1]])).to_f32(),
            Self::F64 => |b, o| o[0] = f64::from_le_bytes(b.try_into().expect("8 bytes")) as f32,
            Self::I8 => |b, o| o[0] = f32::from(b[0] as i8),
            Self::I16 => |b, o| o[0] = f32::from(i16::from_le_bytes([b[0], b[1]])),
            Self::I32 => |b, o| o[0] = i32::from_le_bytes([b[0], b[1], b[2], b[3]]) as f32,
            Self::Q4_0 => q4_0,
            Self::Q4_1 => q4_1,
            Self::Q5_0 => q5_0,
            Self::Q5_1 => q5_1,
            Self::Q8_0 => q8_0,
            Self::Q2_K => q2_k,
            Self::Q3_K => q3_k,
            Self::Q4_K => q4_k,
            Self::Q5_K => q5_k,
            Self::Q6_K => q6_k,
            Self::Q8_K => q8_k,
            Self::IQ4_NL => iq4_nl,
            Self::IQ4_XS => iq4_xs,
            _ => return None,
        })
    }

    /// Whether this type can be decoded to f32.
    pub fn is_supported(self) -> bool {
        self.block_fn().is_some()
    }
}

fn half_at(b: &[u8], at: usize) -> f32 {
    f16::from_bits(u16::from_le_bytes([b[at], b[at + 1]])).to_f32()
}

// Blocks of 32: low nibbles hold elements 0..16, high nibbles 16..32.

fn q4_0(b: &[u8], o: &mut [f32]) {
    let d = half_at(b, 0);
    let qs = &b[2..18];
    for (j, &q) in qs.iter().enumerate() {
        o[j] = d * f32::from((q & 0x0f) as i8 - 8);
        o[j + 16] = d * f32::from((q >> 4) as i8 - 8);
    }
}

fn q4_1(b: &[u8], o: &mut [f32]) {
    let (d, m) = (half_at(b, 0), half_at(b, 2));
    let qs = &b[4..20];
    for (j, &q) in qs.iter().enumerate() {
        o[j] = d * f32::from(q & 0x0f) + m;
        o[j + 16] = d * f32::from(q >> 4) + m;
    }
}

/// The fifth bits of a Q5 block: bit j of `qh` belongs to element j.
fn q5_high(qh: u32, j: usize) -> (u8, u8) {
    (
        (((qh >> j) << 4) & 0x10) as u8,
        ((qh >> (j + 12)) & 0x10) as u8,
    )
}

fn q5_0(b: &[u8], o: &mut [f32]) {
    let d = half_at(b, 0);
    let qh = u32::from_le_bytes([b[2], b[3], b[4], b[5]]);
    let qs = &b[6..22];
    for (j, &q) in qs.iter().enumerate() {
        let (h0, h1) = q5_high(qh, j);
        o[j] = d * f32::from(((q & 0x0f) | h0) as i8 - 16);
        o[j + 16] = d * f32::from(((q >> 4) | h1) as i8 - 16);
    }
}

fn q5_1(b: &[u8], o: &mut [f32]) {
    let (d, m) = (half_at(b, 0), half_at(b, 2));
    let qh = u32::from_le_bytes([b[4], b[5], b[6], b[7]]);
    let qs = &b[8..24];
    for (j, &q) in qs.iter().enumerate() {
        let (h0, h1) = q5_high(qh, j);
        o[j] = d * f32::from((q & 0x0f) | h0) + m;
        o[j + 16] = d * f32::from((q >> 4) | h1) + m;
    }
}

fn q8_0(b: &[u8], o: &mut [f32]) {
    let d = half_at(b, 0);
    for (j, &q) in b[2..34].iter().enumerate() {
        o[j] = d * f32::from(q as i8);
    }
}

fn q8_k(b: &[u8], o: &mut [f32]) {
    let d = f32::from_le_bytes([b[0], b[1], b[2], b[3]]);
    for (j, &q) in b[4..4 + QK_K].iter().enumerate() {
        o[j] = d * f32::from(q as i8);
    }
}

fn q2_k(b: &[u8], o: &mut [f32]) {
    let scales = &b[0..16];
    let qs = &b[16..80];
    let (d, dmin) = (half_at(b, 80), half_at(b, 82));
    let mut y = 0;
    let mut is = 0;
    for q in qs.chunks_exact(32) {
        for shift in (0..8).step_by(2) {
            for half in q.chunks_exact(16) {
                let sc = scales[is];
                is += 1;
                let dl = d * f32::from(sc & 0x0f);
                let ml = dmin * f32::from(sc >> 4);
                for &v in half {
                    o[y] = dl * f32::from((v >> shift) & 3) - ml;
                    y += 1;
                }
            }
        }
    }
}

fn q3_k(b: &[u8], o: &mut [f32]) {
    let hmask = &b[0..32];
    let qs = &b[32..96];
    let raw = &b[96..108];
    let d = half_at(b, 108);
    // Sixteen 6-bit scales: low 4 bits in raw[0..8] nibbles, high 2 bits
    // packed four to a byte in raw[8..12].
    let mut scales = [0i8; 16];
    for (i, s) in scales.iter_mut().enumerate() {
        let low = if i < 8 {
            raw[i] & 0x0f
        } else {
            raw[i - 8] >> 4
        };
        let high = (raw[8 + i % 4] >> (2 * (i / 4))) & 3;
        *s = (low | (high << 4)) as i8 - 32;
    }
    let mut y = 0;
    let mut is = 0;
    let mut m = 1u8;
    for q in qs.chunks_exact(32) {
        for shift in (0..8).step_by(2) {
            for (h, part) in [(0usize, &q[..16]), (16, &q[16..])] {
                let dl = d * f32::from(scales[is]);
                is += 1;
                for (l, &v) in part.iter().enumerate() {
                    let high = if hmask[h + l] & m != 0 { 0 } else { 4 };
                    o[y] = dl * f32::from(((v >> shift) & 3) as i8 - high);
                    y += 1;
                }
            }
            m <<= 1;
        }
    }
}

/// Scale and min of sub-block `j` of a Q4_K / Q5_K block (6 bits each,
/// packed into 12 bytes).
fn scale_min_k4(j: usize, q: &[u8]) -> (u8, u8) {
    if j < 4 {
        (q[j] & 63, q[j + 4] & 63)
    } else {
        (
            (q[j + 4] & 0x0f) | ((q[j - 4] >> 6) << 4),
            (q[j + 4] >> 4) | ((q[j] >> 6) << 4),
        )
    }
}

fn q4_k(b: &[u8], o: &mut [f32]) {
    let (d, dmin) = (half_at(b, 0), half_at(b, 2));
    let scales = &b[4..16];
    let qs = &b[16..144];
    for (n, q) in qs.chunks_exact(32).enumerate() {
        let (sc1, m1) = scale_min_k4(2 * n, scales);
        let (sc2, m2) = scale_min_k4(2 * n + 1, scales);
        let (d1, m1) = (d * f32::from(sc1), dmin * f32::from(m1));
        let (d2, m2) = (d * f32::from(sc2), dmin * f32::from(m2));
        let y = &mut o[64 * n..64 * n + 64];
        for (l, &v) in q.iter().enumerate() {
            y[l] = d1 * f32::from(v & 0x0f) - m1;
            y[l + 32] = d2 * f32::from(v >> 4) - m2;
        }
    }
}

fn q5_k(b: &[u8], o: &mut [f32]) {
    let (d, dmin) = (half_at(b, 0), half_at(b, 2));
    let scales = &b[4..16];
    let qh = &b[16..48];
    let qs = &b[48..176];
    for (n, q) in qs.chunks_exact(32).enumerate() {
        let (sc1, m1) = scale_min_k4(2 * n, scales);
        let (sc2, m2) = scale_min_k4(2 * n + 1, scales);
        let (d1, m1) = (d * f32::from(sc1), dmin * f32::from(m1));
        let (d2, m2) = (d * f32::from(sc2), dmin * f32::from(m2));
        let (u1, u2) = (1u8 << (2 * n), 2u8 << (2 * n));
        let y = &mut o[64 * n..64 * n + 64];
        for (l, &v) in q.iter().enumerate() {
            let h1 = if qh[l] & u1 != 0 { 16 } else { 0 };
            let h2 = if qh[l] & u2 != 0 { 16 } else { 0 };
            y[l] = d1 * f32::from((v & 0x0f) + h1) - m1;
            y[l + 32] = d2 * f32::from((v >> 4) + h2) - m2;
        }
    }
}

fn q6_k(b: &[u8], o: &mut [f32]) {
    let ql_all = &b[0..128];
    let qh_all = &b[128..192];
    let sc_all = &b[192..208];
    let d = half_at(b, 208);
    for n in 0..2 {
        let ql = &ql_all[64 * n..64 * n + 64];
        let qh = &qh_all[32 * n..32 * n + 32];
        let sc = &sc_all[8 * n..8 * n + 8];
        let y = &mut o[128 * n..128 * n + 128];
        for l in 0..32 {
            let is = l / 16;
            let q1 = ((ql[l] & 0x0f) | ((qh[l] & 3) << 4)) as i8 - 32;
            let q2 = ((ql[l + 32] & 0x0f) | (((qh[l] >> 2) & 3) << 4)) as i8 - 32;
            let q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) as i8 - 32;
            let q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) as i8 - 32;
            let s = |k: usize| d * f32::from(sc[is + k] as i8);
            y[l] = s(0) * f32::from(q1);
            y[l + 32] = s(2) * f32::from(q2);
            y[l + 64] = s(4) * f32::from(q3);
            y[l + 96] = s(6) * f32::from(q4);
        }
    }
}

/// The 16 non-linear levels of the IQ4 types.
const IQ4_LEVELS: [i8; 16] = [
    -127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113,
];

/// 32 elements from 16 bytes of IQ4 nibbles (low nibbles first) at scale `d`.
fn iq4_32(qs: &[u8], d: f32, y: &mut [f32]) {
    for (j, &q) in qs.iter().enumerate() {
        y[j] = d * f32::from(IQ4_LEVELS[(q & 0x0f) as usize]);
        y[j + 16] = d * f32::from(IQ4_LEVELS[(q >> 4) as usize]);
    }
}

fn iq4_nl(b: &[u8], o: &mut [f32]) {
    iq4_32(&b[2..18], half_at(b, 0), o);
}

fn iq4_xs(b: &[u8], o: &mut [f32]) {
    let d = half_at(b, 0);
    let scales_h = u16::from_le_bytes([b[2], b[3]]);
    let scales_l = &b[4..8];
    let qs = &b[8..136];
    for ib in 0..8 {
        let low = (scales_l[ib / 2] >> (4 * (ib % 2))) & 0x0f;
        let high = ((scales_h >> (2 * ib)) & 3) as u8;
        let dl = d * f32::from((low | (high << 4)) as i8 - 32);
        iq4_32(
            &qs[16 * ib..16 * ib + 16],
            dl,
            &mut o[32 * ib..32 * ib + 32],
        );
    }
}

impl GgmlType {
    /// The block format a backend can take as is ([`QuantType`]), if this is one.
    pub fn quant_type(self) -> Option<QuantType> {
        Some(match self {
            Self::Q4_0 => QuantType::Q4_0,
            Self::Q4_1 => QuantType::Q4_1,
            Self::Q8_0 => QuantType::Q8_0,
            Self::Q4_K => QuantType::Q4_K,
            Self::Q6_K => QuantType::Q6_K,
            _ => return None,
        })
    }

    /// The ggml type of a [`QuantType`].
    pub fn from_quant(q: QuantType) -> Self {
        match q {
            QuantType::Q4_0 => Self::Q4_0,
            QuantType::Q4_1 => Self::Q4_1,
            QuantType::Q8_0 => Self::Q8_0,
            QuantType::Q4_K => Self::Q4_K,
            QuantType::Q6_K => Self::Q6_K,
        }
    }
}

/// Dequantises whole blocks of `q` to f32 (serially: callers are per row or
/// already parallel). A trailing partial block, which a validated tensor
/// never has, is ignored.
pub fn dequantize_quant(q: QuantType, bytes: &[u8]) -> Vec<f32> {
    let f = GgmlType::from_quant(q)
        .block_fn()
        .expect("every QuantType has a block decoder");
    let (be, bb) = (q.block_elems(), q.block_bytes());
    let mut out = vec![0f32; bytes.len() / bb * be];
    for (o, b) in out.chunks_exact_mut(be).zip(bytes.chunks_exact(bb)) {
        f(b, o);
    }
    out
}
