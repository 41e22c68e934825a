//! Typed reads of JSON request fields with errors that name the field and
//! echo the value. Requests are parsed from `serde_json::Value` rather than
//! derived structs so that every message can say *which* field was wrong.
//! `null` counts as absent, as in the OpenAI API.

use serde_json::{Map, Value};

use super::error::{echo, ApiError};

/// A JSON object being read; `prefix` is prepended to field names in errors
/// (`sampling_params.top_k`).
pub struct Fields<'a> {
    map: &'a Map<String, Value>,
    prefix: String,
}

fn bad(param: String, want: &str, got: &Value) -> ApiError {
    ApiError::field(
        param.clone(),
        format!("`{param}` must be {want}, got {}", echo(got)),
    )
}

impl<'a> Fields<'a> {
    /// Reads the request body: a JSON object.
    pub fn body(v: &'a Value) -> Result<Fields<'a>, ApiError> {
        match v {
            Value::Object(map) => Ok(Fields {
                map,
                prefix: String::new(),
            }),
            other => Err(ApiError::MalformedJson(format!(
                "request body must be a JSON object, got {}",
                echo(other)
            ))),
        }
    }

    /// A nested object field (`sampling_params`, `stream_options`).
    pub fn object(&self, name: &str) -> Result<Option<Fields<'a>>, ApiError> {
        match self.get(name) {
            None => Ok(None),
            Some(Value::Object(map)) => Ok(Some(Fields {
                map,
                prefix: format!("{}.", self.name(name)),
            })),
            Some(v) => Err(bad(self.name(name), "an object", v)),
        }
    }

    /// Full name of a field for messages.
    pub fn name(&self, field: &str) -> String {
        format!("{}{}", self.prefix, field)
    }

    /// The raw value, `None` when absent or null.
    pub fn get(&self, name: &str) -> Option<&'a Value> {
        self.map.get(name).filter(|v| !v.is_null())
    }

    pub fn error(&self, name: &str, want: &str, got: &Value) -> ApiError {
        bad(self.name(name), want, got)
    }

    pub fn bool(&self, name: &str) -> Result<Option<bool>, ApiError> {
        match self.get(name) {
            None => Ok(None),
            Some(Value::Bool(b)) => Ok(Some(*b)),
            Some(v) => Err(self.error(name, "a boolean", v)),
        }
    }

    pub fn str(&self, name: &str) -> Result<Option<&'a str>, ApiError> {
        match self.get(name) {
            None => Ok(None),
            Some(Value::String(s)) => Ok(Some(s)),
            Some(v) => Err(self.error(name, "a string", v)),
        }
    }

    /// An integer in `lo..=hi`.
    pub fn int(&self, name: &str, lo: i64, hi: i64) -> Result<Option<i64>, ApiError> {
        let Some(v) = self.get(name) else {
            return Ok(None);
        };
        let want = || format!("an integer between {lo} and {hi}");
        // 5.0 is accepted (some clients serialise every number as a float).
        let n = match v {
            Value::Number(n) => n.as_i64().or_else(|| {
                n.as_f64()
                    .filter(|f| f.fract() == 0.0 && f.abs() < 9e15)
                    .map(|f| f as i64)
            }),
            _ => None,
        };
        match n {
            Some(n) if (lo..=hi).contains(&n) => Ok(Some(n)),
            _ => Err(self.error(name, &want(), v)),
        }
    }

    /// A finite number in `[lo, hi]` (or `(lo, hi]` when `lo_open`).
    pub fn num(
        &self,
        name: &str,
        lo: f64,
        hi: f64,
        lo_open: bool,
    ) -> Result<Option<f32>, ApiError> {
        let Some(v) = self.get(name) else {
            return Ok(None);
        };
        let range = if lo_open {
            format!("a number greater than {lo} and at most {hi}")
        } else {
            format!("a number between {lo} and {hi}")
        };
        match v.as_f64() {
            Some(x) if x.is_finite() && x <= hi && (x > lo || (!lo_open && x == lo)) => {
                Ok(Some(x as f32))
            }
            _ => Err(self.error(name, &range, v)),
        }
    }

    /// A string or a list of strings (`stop`), each non-empty.
    pub fn strings(&self, name: &str, max: usize) -> Result<Vec<String>, ApiError> {
        let want = format!("a non-empty string or a list of at most {max} non-empty strings");
        match self.get(name) {
            None => Ok(Vec::new()),
            Some(Value::String(s)) if !s.is_empty() => Ok(vec![s.clone()]),
            Some(v @ Value::Array(items)) if items.len() <= max => items
                .iter()
                .map(|x| match x {
                    Value::String(s) if !s.is_empty() => Ok(s.clone()),
                    _ => Err(self.error(name, &want, v)),
                })
                .collect(),
            Some(v) => Err(self.error(name, &want, v)),
        }
    }

    /// A list of token ids, each below `vocab`.
    pub fn token_ids(&self, name: &str, vocab: u32) -> Result<Vec<u32>, ApiError> {
        match self.get(name) {
            None => Ok(Vec::new()),
            Some(v) => token_list(&self.name(name), v, vocab),
        }
    }
}

/// Reads `[int, ...]` as token ids below `vocab`; `param` names the field.
pub fn token_list(param: &str, v: &Value, vocab: u32) -> Result<Vec<u32>, ApiError> {
    let Value::Array(items) = v else {
        return Err(bad(param.to_string(), "a list of token ids", v));
    };
    items
        .iter()
        .enumerate()
        .map(|(i, x)| match x.as_u64() {
            Some(t) if t < u64::from(vocab) => Ok(t as u32),
            _ => Err(ApiError::field(
                param,
                format!(
                    "`{param}[{i}]` must be a token id between 0 and {}, got {}",
                    vocab.saturating_sub(1),
                    echo(x)
                ),
            )),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn messages_name_field_and_value() {
        let body = json!({"max_tokens": "ten", "top_p": 1.5, "stop": [1], "ids": [1, 99]});
        let f = Fields::body(&body).unwrap();
        let e = f.int("max_tokens", 1, 100).unwrap_err().to_string();
        assert!(e.contains("max_tokens") && e.contains("\"ten\""), "{e}");
        let e = f.num("top_p", 0.0, 1.0, true).unwrap_err().to_string();
        assert!(e.contains("top_p") && e.contains("1.5"), "{e}");
        assert!(f.strings("stop", 4).is_err());
        let e = f.token_ids("ids", 50).unwrap_err().to_string();
        assert!(e.contains("ids[1]") && e.contains("99"), "{e}");
        assert_eq!(f.int("absent", 0, 1).unwrap(), None);
    }

    #[test]
    fn nested_prefix_and_null() {
        let body = json!({"sampling_params": {"top_k": -5}, "seed": null});
        let f = Fields::body(&body).unwrap();
        assert_eq!(f.int("seed", 0, 1).unwrap(), None);
        let sp = f.object("sampling_params").unwrap().unwrap();
        let e = sp.int("top_k", -1, 1000).unwrap_err().to_string();
        assert!(e.contains("sampling_params.top_k"), "{e}");
        assert!(Fields::body(&json!([1])).is_err());
    }
}
