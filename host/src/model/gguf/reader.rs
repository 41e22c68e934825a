//! The GGUF container: header, metadata key/values, tensor infos, alignment.
//! The file is memory-mapped; tensor data is borrowed from the map, never
//! copied before dequantisation.

use std::collections::HashMap;
use std::fs::File;
use std::path::{Path, PathBuf};

use memmap2::Mmap;

use super::dequant::GgmlType;
use super::error::GgufError;
use super::value::{type_id_name, MetadataArray, MetadataValue};

const MAGIC: [u8; 4] = *b"GGUF";
const DEFAULT_ALIGNMENT: u64 = 32;
/// ggml tensors have at most four dimensions.
const MAX_DIMS: u32 = 4;
/// Arrays nested deeper than this are treated as corruption (the format
/// allows nesting; real files use none).
const MAX_ARRAY_DEPTH: u32 = 8;

/// One tensor as described in the file header.
#[derive(Debug, Clone)]
pub struct TensorInfo {
    pub name: String,
    /// ggml order: `dims[0]` is the innermost (contiguous) dimension, so the
    /// row-major shape is `dims` reversed.
    pub dims: Vec<u64>,
    pub ggml_type: GgmlType,
    /// Byte offset relative to the start of the data section.
    pub offset: u64,
    /// Size in bytes of the tensor's data.
    pub n_bytes: u64,
}

impl TensorInfo {
    /// Row-major shape (outermost first), as PyTorch / Hugging Face see it.
    pub fn shape(&self) -> Vec<usize> {
        self.dims.iter().rev().map(|&d| d as usize).collect()
    }

    pub fn n_elements(&self) -> u64 {
        self.dims.iter().product()
    }
}

/// A parsed, memory-mapped GGUF file.
pub struct GgufFile {
    path: PathBuf,
    map: Mmap,
    pub version: u32,
    /// Metadata in file order.
    pub metadata: Vec<(String, MetadataValue)>,
    index: HashMap<String, usize>,
    pub tensors: Vec<TensorInfo>,
    pub alignment: u64,
    /// Absolute byte offset of the tensor data section.
    pub data_offset: u64,
}

impl GgufFile {
    /// Maps and parses `path`, validating every tensor's extent against the
    /// file size.
    pub fn open(path: &Path) -> Result<Self, GgufError> {
        let io = |source| GgufError::Io {
            path: path.to_path_buf(),
            source,
        };
        let file = File::open(path).map_err(io)?;
        // SAFETY: the map is read-only and private to this process; like every
        // mmap-based loader we assume the file is not truncated or rewritten
        // by another process while it is loaded.
        let map = unsafe { Mmap::map(&file) }.map_err(io)?;
        let header = parse(path, &map)?;
        let index = header
            .metadata
            .iter()
            .enumerate()
            .map(|(i, (k, _))| (k.clone(), i))
            .collect();
        Ok(Self {
            path: path.to_path_buf(),
            map,
            version: header.version,
            metadata: header.metadata,
            index,
            tensors: header.tensors,
            alignment: header.alignment,
            data_offset: header.data_offset,
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The metadata value of `key`, if present.
    pub fn get(&self, key: &str) -> Option<&MetadataValue> {
        self.index.get(key).map(|&i| &self.metadata[i].1)
    }

    /// The raw bytes of a tensor (bounds were checked when parsing).
    pub fn tensor_bytes(&self, info: &TensorInfo) -> &[u8] {
        let start = (self.data_offset + info.offset) as usize;
        &self.map[start..start + info.n_bytes as usize]
    }

    /// Looks a tensor up by its GGUF name.
    pub fn tensor(&self, name: &str) -> Option<&TensorInfo> {
        self.tensors.iter().find(|t| t.name == name)
    }
}

struct Header {
    version: u32,
    metadata: Vec<(String, MetadataValue)>,
    tensors: Vec<TensorInfo>,
    alignment: u64,
    data_offset: u64,
}

/// Parses the header of a GGUF file held in `bytes`.
fn parse(path: &Path, bytes: &[u8]) -> Result<Header, GgufError> {
    let mut c = Cursor { bytes, pos: 0 };
    let magic = c.take(4, "magic bytes")?;
    if magic != MAGIC {
        return Err(GgufError::BadMagic {
            path: path.to_path_buf(),
            found: magic.try_into().expect("4 bytes"),
        });
    }
    let version = c.u32("version")?;
    if version != 2 && version != 3 {
        let hint = if version == 1 {
            " (version 1 is obsolete; re-convert the model with a current llama.cpp)"
        } else if version.swap_bytes() == 2 || version.swap_bytes() == 3 {
            " (this looks like a big-endian GGUF file, which is not supported)"
        } else {
            ""
        };
        return Err(GgufError::UnsupportedVersion { version, hint });
    }
    let tensor_count = c.u64("tensor count")?;
    let kv_count = c.u64("metadata key/value count")?;
    // Each key/value needs at least 12 bytes and each tensor info 24; larger
    // counts cannot fit in the file and would only make us over-allocate.
    c.check_count(kv_count, 12, "metadata key/value count")?;

    let mut metadata = Vec::with_capacity(kv_count as usize);
    let mut seen = HashMap::new();
    for i in 0..kv_count {
        let key_at = c.pos as u64;
        let key = c.string(&format!("key of metadata entry #{i}"))?;
        let what = format!("value of metadata key {key:?}");
        let value_type = c.u32(&format!("value type of metadata key {key:?}"))?;
        let value = c.value(value_type, &what, 0)?;
        if seen.insert(key.clone(), i).is_some() {
            return Err(GgufError::Corrupt {
                what: format!("metadata key {key:?}"),
                offset: key_at,
                detail: "the key appears twice".into(),
            });
        }
        metadata.push((key, value));
    }

    let alignment = match metadata.iter().find(|(k, _)| k == "general.alignment") {
        None => DEFAULT_ALIGNMENT,
        Some((_, v)) => match v {
            MetadataValue::U32(a) if *a > 0 && a.is_power_of_two() => u64::from(*a),
            other => {
                return Err(GgufError::BadValue {
                    key: "general.alignment".into(),
                    value: other.to_string(),
                    detail: "must be a uint32 power of two".into(),
                })
            }
        },
    };

    c.check_count(tensor_count, 24, "tensor count")?;
    let mut tensors = Vec::with_capacity(tensor_count as usize);
    let mut names = HashMap::new();
    for i in 0..tensor_count {
        let info_at = c.pos as u64;
        let name = c.string(&format!("name of tensor info #{i}"))?;
        let n_dims = c.u32(&format!("dimension count of tensor {name:?}"))?;
        if n_dims == 0 || n_dims > MAX_DIMS {
            return Err(GgufError::Corrupt {
                what: format!("tensor {name:?}"),
                offset: info_at,
                detail: format!("has {n_dims} dimensions (expected 1 to {MAX_DIMS})"),
            });
        }
        let mut dims = Vec::with_capacity(n_dims as usize);
        for d in 0..n_dims {
            dims.push(c.u64(&format!("dimension {d} of tensor {name:?}"))?);
        }
        let type_id = c.u32(&format!("type of tensor {name:?}"))?;
        let offset = c.u64(&format!("data offset of tensor {name:?}"))?;
        let corrupt = |detail: String| GgufError::Corrupt {
            what: format!("tensor info {name:?}"),
            offset: info_at,
            detail,
        };
        let ggml_type = GgmlType::from_id(type_id)
            .ok_or_else(|| corrupt(format!("unknown ggml type id {type_id}")))?;
        let n_elements = dims
            .iter()
            .try_fold(1u64, |acc, &d| acc.checked_mul(d))
            .ok_or_else(|| corrupt(format!("dimensions {dims:?} overflow")))?;
        let (block, block_bytes) = ggml_type.block();
        if dims[0] % block as u64 != 0 {
            return Err(corrupt(format!(
                "innermost dimension {} is not a multiple of the {} block size {block}",
                dims[0],
                ggml_type.name()
            )));
        }
        let n_bytes = (n_elements / block as u64)
            .checked_mul(block_bytes as u64)
            .ok_or_else(|| corrupt(format!("dimensions {dims:?} overflow")))?;
        if offset % alignment != 0 {
            return Err(corrupt(format!(
                "data offset {offset} is not a multiple of the alignment {alignment}"
            )));
        }
        if names.insert(name.clone(), i).is_some() {
            return Err(corrupt("the tensor name appears twice".into()));
        }
        tensors.push(TensorInfo {
            name,
            dims,
            ggml_type,
            offset,
            n_bytes,
        });
    }

    let data_offset = (c.pos as u64).div_ceil(alignment) * alignment;
    let file_len = bytes.len() as u64;
    for t in &tensors {
        let end = data_offset
            .checked_add(t.offset)
            .and_then(|s| s.checked_add(t.n_bytes));
        match end {
            Some(end) if end <= file_len => {}
            _ => {
                return Err(GgufError::Truncated {
                    what: format!(
                        "data of tensor {:?} ({} {:?})",
                        t.name,
                        t.ggml_type.name(),
                        t.dims
                    ),
                    offset: data_offset.saturating_add(t.offset),
                    needed: t.n_bytes,
                    file_len,
                })
            }
        }
    }

    Ok(Header {
        version,
        metadata,
        tensors,
        alignment,
        data_offset,
    })
}

/// A bounds-checked little-endian reader over the mapped file.
struct Cursor<'a> {
    bytes: &'a [u8],
    pos: usize,
}

impl<'a> Cursor<'a> {
    fn take(&mut self, n: u64, what: &str) -> Result<&'a [u8], GgufError> {
        let remaining = (self.bytes.len() - self.pos) as u64;
        if n > remaining {
            return Err(GgufError::Truncated {
                what: what.to_string(),
                offset: self.pos as u64,
                needed: n,
                file_len: self.bytes.len() as u64,
            });
        }
        let s = &self.bytes[self.pos..self.pos + n as usize];
        self.pos += n as usize;
        Ok(s)
    }

    fn array<const N: usize>(&mut self, what: &str) -> Result<[u8; N], GgufError> {
        Ok(self.take(N as u64, what)?.try_into().expect("N bytes"))
    }

    fn u32(&mut self, what: &str) -> Result<u32, GgufError> {
        Ok(u32::from_le_bytes(self.array(what)?))
    }

    fn u64(&mut self, what: &str) -> Result<u64, GgufError> {
        Ok(u64::from_le_bytes(self.array(what)?))
    }

    /// Rejects element counts that cannot possibly fit in the rest of the
    /// file (a truncated file or a corrupt count) before allocating for them.
    fn check_count(&self, count: u64, min_size: u64, what: &str) -> Result<(), GgufError> {
        let remaining = (self.bytes.len() - self.pos) as u64;
        let needed = count.saturating_mul(min_size);
        if needed > remaining {
            return Err(GgufError::Truncated {
                what: format!("{what} ({count} entries of at least {min_size} bytes each)"),
                offset: self.pos as u64,
                needed,
                file_len: self.bytes.len() as u64,
            });
        }
        Ok(())
    }

    fn string(&mut self, what: &str) -> Result<String, GgufError> {
        let at = self.pos as u64;
        let len = self.u64(what)?;
        let raw = self.take(len, what)?;
        String::from_utf8(raw.to_vec()).map_err(|e| GgufError::Corrupt {
            what: what.to_string(),
            offset: at,
            detail: format!("string is not valid UTF-8 ({e})"),
        })
    }

    fn value(&mut self, ty: u32, what: &str, depth: u32) -> Result<MetadataValue, GgufError> {
        use MetadataValue as V;
        Ok(match ty {
            0 => V::U8(self.array::<1>(what)?[0]),
            1 => V::I8(i8::from_le_bytes(self.array(what)?)),
            2 => V::U16(u16::from_le_bytes(self.array(what)?)),
            3 => V::I16(i16::from_le_bytes(self.array(what)?)),
            4 => V::U32(self.u32(what)?),
            5 => V::I32(i32::from_le_bytes(self.array(what)?)),
            6 => V::F32(f32::from_le_bytes(self.array(what)?)),
            7 => {
                let at = self.pos as u64;
                match self.array::<1>(what)?[0] {
                    0 => V::Bool(false),
                    1 => V::Bool(true),
                    b => {
                        return Err(GgufError::Corrupt {
                            what: what.to_string(),
                            offset: at,
                            detail: format!("bool byte is {b}, expected 0 or 1"),
                        })
                    }
                }
            }
            8 => V::String(self.string(what)?),
            9 => {
                let at = self.pos as u64;
                let element_type = self.u32(what)?;
                let count = self.u64(what)?;
                if depth >= MAX_ARRAY_DEPTH {
                    return Err(GgufError::Corrupt {
                        what: what.to_string(),
                        offset: at,
                        detail: format!("arrays nested more than {MAX_ARRAY_DEPTH} deep"),
                    });
                }
                let min_size = match element_type {
                    0 | 1 | 7 => 1,
                    2 | 3 => 2,
                    4..=6 => 4,
                    8 | 10..=12 => 8,
                    9 => 12,
                    other => {
                        return Err(GgufError::Corrupt {
                            what: what.to_string(),
                            offset: at,
                            detail: format!("unknown array element type id {other}"),
                        })
                    }
                };
                self.check_count(count, min_size, what)?;
                let mut values = Vec::with_capacity(count as usize);
                for _ in 0..count {
                    values.push(self.value(element_type, what, depth + 1)?);
                }
                V::Array(MetadataArray {
                    element_type,
                    values,
                })
            }
            10 => V::U64(self.u64(what)?),
            11 => V::I64(i64::from_le_bytes(self.array(what)?)),
            12 => V::F64(f64::from_le_bytes(self.array(what)?)),
            other => {
                return Err(GgufError::Corrupt {
                    what: what.to_string(),
                    offset: self.pos.saturating_sub(4) as u64,
                    detail: format!("unknown value type id {other} ({})", type_id_name(other)),
                })
            }
        })
    }
}
