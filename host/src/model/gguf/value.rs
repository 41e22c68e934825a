//! GGUF metadata values (all thirteen value types, arrays included).

use std::fmt;

/// One metadata value. Arrays keep their element type so an empty array is
/// still typed.
#[derive(Debug, Clone, PartialEq)]
pub enum MetadataValue {
    U8(u8),
    I8(i8),
    U16(u16),
    I16(i16),
    U32(u32),
    I32(i32),
    F32(f32),
    Bool(bool),
    String(String),
    Array(MetadataArray),
    U64(u64),
    I64(i64),
    F64(f64),
}

/// A typed array value. Nested arrays are allowed by the format.
#[derive(Debug, Clone, PartialEq)]
pub struct MetadataArray {
    /// GGUF value type id of the elements.
    pub element_type: u32,
    pub values: Vec<MetadataValue>,
}

impl MetadataValue {
    /// The GGUF name of this value's type, for error messages.
    pub fn type_name(&self) -> String {
        match self {
            Self::U8(_) => "uint8".into(),
            Self::I8(_) => "int8".into(),
            Self::U16(_) => "uint16".into(),
            Self::I16(_) => "int16".into(),
            Self::U32(_) => "uint32".into(),
            Self::I32(_) => "int32".into(),
            Self::F32(_) => "float32".into(),
            Self::Bool(_) => "bool".into(),
            Self::String(_) => "string".into(),
            Self::Array(a) => format!("array of {}", type_id_name(a.element_type)),
            Self::U64(_) => "uint64".into(),
            Self::I64(_) => "int64".into(),
            Self::F64(_) => "float64".into(),
        }
    }

    /// The value as an unsigned integer, if it is a non-negative integer of
    /// any width.
    pub fn as_u64(&self) -> Option<u64> {
        match *self {
            Self::U8(v) => Some(v.into()),
            Self::U16(v) => Some(v.into()),
            Self::U32(v) => Some(v.into()),
            Self::U64(v) => Some(v),
            Self::I8(v) => u64::try_from(v).ok(),
            Self::I16(v) => u64::try_from(v).ok(),
            Self::I32(v) => u64::try_from(v).ok(),
            Self::I64(v) => u64::try_from(v).ok(),
            _ => None,
        }
    }

    /// The value as a signed integer, if it is an integer that fits.
    pub fn as_i64(&self) -> Option<i64> {
        match *self {
            Self::I8(v) => Some(v.into()),
            Self::I16(v) => Some(v.into()),
            Self::I32(v) => Some(v.into()),
            Self::I64(v) => Some(v),
            _ => self.as_u64().and_then(|v| i64::try_from(v).ok()),
        }
    }

    /// The value as a float (floats of either width; integers are not
    /// silently converted).
    pub fn as_f64(&self) -> Option<f64> {
        match *self {
            Self::F32(v) => Some(v.into()),
            Self::F64(v) => Some(v),
            _ => None,
        }
    }

    pub fn as_bool(&self) -> Option<bool> {
        match *self {
            Self::Bool(v) => Some(v),
            _ => None,
        }
    }

    pub fn as_str(&self) -> Option<&str> {
        match self {
            Self::String(s) => Some(s),
            _ => None,
        }
    }

    pub fn as_array(&self) -> Option<&MetadataArray> {
        match self {
            Self::Array(a) => Some(a),
            _ => None,
        }
    }
}

/// Name of a GGUF value type id (unknown ids are shown as numbers).
pub fn type_id_name(id: u32) -> String {
    let name = match id {
        0 => "uint8",
        1 => "int8",
        2 => "uint16",
        3 => "int16",
        4 => "uint32",
        5 => "int32",
        6 => "float32",
        7 => "bool",
        8 => "string",
        9 => "array",
        10 => "uint64",
        11 => "int64",
        12 => "float64",
        _ => return format!("unknown type {id}"),
    };
    name.to_string()
}

impl fmt::Display for MetadataValue {
    /// Short rendering for error messages (long arrays and strings elided).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::U8(v) => write!(f, "{v}"),
            Self::I8(v) => write!(f, "{v}"),
            Self::U16(v) => write!(f, "{v}"),
            Self::I16(v) => write!(f, "{v}"),
            Self::U32(v) => write!(f, "{v}"),
            Self::I32(v) => write!(f, "{v}"),
            Self::F32(v) => write!(f, "{v}"),
            Self::Bool(v) => write!(f, "{v}"),
            Self::String(s) if s.chars().count() > 80 => {
                let head: String = s.chars().take(80).collect();
                write!(f, "{head:?}…")
            }
            Self::String(s) => write!(f, "{s:?}"),
            Self::Array(a) => write!(f, "[{} × {}]", a.values.len(), type_id_name(a.element_type)),
            Self::U64(v) => write!(f, "{v}"),
            Self::I64(v) => write!(f, "{v}"),
            Self::F64(v) => write!(f, "{v}"),
        }
    }
}
