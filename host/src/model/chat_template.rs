//! Chat templates rendered the way transformers renders them: Jinja with
//! `trim_blocks` and `lstrip_blocks`, Python string/dict methods (through
//! minijinja-contrib's pycompat), `raise_exception`, `strftime_now`, and a
//! `tojson` that writes what Python's `json.dumps` writes.

use minijinja::value::{Value, ValueKind};
use minijinja::{Environment, Error, ErrorKind};

use super::ModelError;

/// A compiled chat template.
pub struct ChatTemplate {
    env: Environment<'static>,
}

fn raise_exception(msg: String) -> Result<Value, Error> {
    Err(Error::new(ErrorKind::InvalidOperation, msg))
}

/// Python-style JSON string literal (ensure_ascii=False).
fn py_json_str(s: &str, out: &mut String) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
}

fn py_json(v: &Value, indent: Option<usize>, depth: usize, out: &mut String) -> Result<(), Error> {
    let nl = |out: &mut String, d: usize| {
        if let Some(n) = indent {
            out.push('\n');
            out.push_str(&" ".repeat(n * d));
        }
    };
    let (item_sep, kv_sep) = if indent.is_some() {
        (",", ": ")
    } else {
        (", ", ": ")
    };
    match v.kind() {
        ValueKind::Undefined | ValueKind::None => out.push_str("null"),
        ValueKind::Bool => out.push_str(if v.is_true() { "true" } else { "false" }),
        ValueKind::Number => {
            if let (true, Some(i)) = (v.is_integer(), v.as_i64()) {
                out.push_str(&i.to_string());
            } else {
                let f = f64::try_from(v.clone()).unwrap_or(f64::NAN);
                if f.is_finite() && f == f.trunc() && f.abs() < 1e16 {
                    out.push_str(&format!("{f:.1}"));
                } else {
                    out.push_str(&f.to_string());
                }
            }
        }
        ValueKind::String => py_json_str(v.as_str().unwrap_or(""), out),
        ValueKind::Seq | ValueKind::Iterable => {
            let items: Vec<Value> = v.try_iter()?.collect();
            out.push('[');
            for (i, it) in items.iter().enumerate() {
                if i > 0 {
                    out.push_str(item_sep);
                }
                nl(out, depth + 1);
                py_json(it, indent, depth + 1, out)?;
            }
            if !items.is_empty() {
                nl(out, depth);
            }
            out.push(']');
        }
        ValueKind::Map => {
            let keys: Vec<Value> = v.try_iter()?.collect();
            out.push('{');
            for (i, k) in keys.iter().enumerate() {
                if i > 0 {
                    out.push_str(item_sep);
                }
                nl(out, depth + 1);
                match k.as_str() {
                    Some(s) => py_json_str(s, out),
                    None => py_json_str(&k.to_string(), out),
                }
                out.push_str(kv_sep);
                py_json(&v.get_item(k)?, indent, depth + 1, out)?;
            }
            if !keys.is_empty() {
                nl(out, depth);
            }
            out.push('}');
        }
        _ => py_json_str(&v.to_string(), out),
    }
    Ok(())
}

fn tojson(v: Value, kwargs: minijinja::value::Kwargs) -> Result<Value, Error> {
    let indent: Option<usize> = kwargs.get("indent")?;
    kwargs.assert_all_used()?;
    let mut s = String::new();
    py_json(&v, indent, 0, &mut s)?;
    Ok(Value::from_safe_string(s))
}

/// Days since 1970-01-01 → (year, month, day), proleptic Gregorian.
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (yoe + era * 400 + i64::from(m <= 2), m, d)
}

/// `strftime_now(fmt)` (UTC) for the directives chat templates use.
fn strftime_now(fmt: String) -> Result<Value, Error> {
    const MONTHS: [&str; 12] = [
        "January",
        "February",
        "March",
        "April",
        "May",
        "June",
        "July",
        "August",
        "September",
        "October",
        "November",
        "December",
    ];
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0);
    let (y, m, d) = civil_from_days(secs.div_euclid(86_400));
    let sod = secs.rem_euclid(86_400);
    let mut out = String::new();
    let mut it = fmt.chars();
    while let Some(c) = it.next() {
        if c != '%' {
            out.push(c);
            continue;
        }
        match it.next() {
            Some('Y') => out.push_str(&y.to_string()),
            Some('m') => out.push_str(&format!("{m:02}")),
            Some('d') => out.push_str(&format!("{d:02}")),
            Some('B') => out.push_str(MONTHS[m as usize - 1]),
            Some('b') => out.push_str(&MONTHS[m as usize - 1][..3]),
            Some('H') => out.push_str(&format!("{:02}", sod / 3600)),
            Some('M') => out.push_str(&format!("{:02}", sod / 60 % 60)),
            Some('S') => out.push_str(&format!("{:02}", sod % 60)),
            Some('%') => out.push('%'),
            Some(o) => {
                return Err(Error::new(
                    ErrorKind::InvalidOperation,
                    format!("strftime_now: unsupported directive %{o}"),
                ))
            }
            None => out.push('%'),
        }
    }
    Ok(Value::from(out))
}

impl ChatTemplate {
    /// Compile a template source.
    pub fn new(source: &str) -> Result<Self, ModelError> {
        let mut env = Environment::new();
        env.set_trim_blocks(true);
        env.set_lstrip_blocks(true);
        minijinja_contrib::add_to_environment(&mut env);
        env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
        env.add_function("raise_exception", raise_exception);
        env.add_function("strftime_now", strftime_now);
        env.add_filter("tojson", tojson);
        env.add_template_owned("chat", source.to_string())
            .map_err(|e| ModelError::Template(format!("cannot compile: {e:#}")))?;
        Ok(ChatTemplate { env })
    }

    /// Render with `messages`, `add_generation_prompt` and the given special
    /// tokens (absent ones are left undefined, as in transformers).
    pub fn render(
        &self,
        messages: &serde_json::Value,
        add_generation_prompt: bool,
        specials: &[(&str, Option<&str>)],
    ) -> Result<String, ModelError> {
        if !messages.is_array() {
            return Err(ModelError::Template(format!(
                "messages must be a list, got {messages}"
            )));
        }
        let mut ctx = std::collections::BTreeMap::new();
        ctx.insert("messages".to_string(), Value::from_serialize(messages));
        ctx.insert(
            "add_generation_prompt".to_string(),
            Value::from(add_generation_prompt),
        );
        for (k, v) in specials {
            if let Some(v) = v {
                ctx.insert(k.to_string(), Value::from(*v));
            }
        }
        let t = self
            .env
            .get_template("chat")
            .map_err(|e| ModelError::Template(e.to_string()))?;
        t.render(Value::from(ctx))
            .map_err(|e| ModelError::Template(format!("render failed: {e:#}")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn render(src: &str, messages: serde_json::Value) -> Result<String, ModelError> {
        ChatTemplate::new(src)?.render(&messages, false, &[("bos_token", Some("<s>"))])
    }

    #[test]
    fn tojson_writes_what_python_json_dumps_writes() {
        // Expected strings come from Python's json.dumps(v, ensure_ascii=False[, indent=2]).
        let v = serde_json::json!([{"a": [1, 2.5, "é\n\"q\"", true, null, 3.0], "b": {}, "c": []}]);
        let flat = render("{{ messages[0] | tojson }}", v.clone()).unwrap();
        assert_eq!(
            flat,
            r#"{"a": [1, 2.5, "é\n\"q\"", true, null, 3.0], "b": {}, "c": []}"#
        );
        let indented = render("{{ messages[0] | tojson(indent=2) }}", v).unwrap();
        let want = "{\n  \"a\": [\n    1,\n    2.5,\n    \"é\\n\\\"q\\\"\",\n    true,\n    null,\n    3.0\n  ],\n  \"b\": {},\n  \"c\": []\n}";
        assert_eq!(indented, want);
    }

    #[test]
    fn python_methods_whitespace_control_and_exceptions() {
        let src = "{{ bos_token }}{% for m in messages %}\n  {{ m.content.strip().upper() }}|\n{% endfor %}";
        let out = render(
            src,
            serde_json::json!([{"content": "  hi "}, {"content": "yo"}]),
        )
        .unwrap();
        // trim_blocks drops the newline after a block tag; lstrip_blocks the
        // indentation before one.
        assert_eq!(out, "<s>  HI|\n  YO|\n");
        let e = render("{{ raise_exception('bad role') }}", serde_json::json!([])).unwrap_err();
        assert!(e.to_string().contains("bad role"), "{e}");
        let e = ChatTemplate::new("{% for %}").err().expect("syntax error");
        assert!(e.to_string().contains("cannot compile"), "{e}");
        let y = render("{{ strftime_now('%Y') }}", serde_json::json!([])).unwrap();
        assert!(y.parse::<i32>().unwrap() >= 2024);
    }
}
