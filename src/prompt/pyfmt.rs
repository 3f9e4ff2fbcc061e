//! Python's text forms of template values: `json.dumps` (behind the `tojson` filter Hugging Face installs) and
//! `str()` (what Jinja2 prints for `{{ value }}`), so that minijinja output matches Python byte for byte.
use minijinja::value::{Value, ValueKind};
use minijinja::{Error, ErrorKind};
use std::fmt::Write;

/// Options of Python's `json.dumps` that HF's `tojson` filter exposes.
#[derive(Debug, Clone, Default)]
pub struct JsonOptions {
    /// Escape every non-ASCII character as `\uXXXX` (HF default: false).
    pub ensure_ascii: bool,
    /// Pretty-print with this string per level (Python's `indent`; an int n means n spaces).
    pub indent: Option<String>,
    /// (item separator, key separator); Python's default depends on `indent`.
    pub separators: Option<(String, String)>,
    /// Sort object keys.
    pub sort_keys: bool,
}

/// `json.dumps(value, ensure_ascii=..., indent=..., separators=..., sort_keys=...)`.
pub fn json_dumps(value: &Value, opts: &JsonOptions) -> Result<String, Error> {
    let (item_sep, key_sep) = match &opts.separators {
        Some((i, k)) => (i.clone(), k.clone()),
        None if opts.indent.is_some() => (",".to_string(), ": ".to_string()),
        None => (", ".to_string(), ": ".to_string()),
    };
    let mut out = String::new();
    let w = JsonWriter { opts, item_sep, key_sep };
    w.write(&mut out, value, 0)?;
    Ok(out)
}

struct JsonWriter<'a> {
    opts: &'a JsonOptions,
    item_sep: String,
    key_sep: String,
}

impl JsonWriter<'_> {
    fn newline(&self, out: &mut String, level: usize) {
        if let Some(ind) = &self.opts.indent {
            out.push('\n');
            for _ in 0..level {
                out.push_str(ind);
            }
        }
    }

    fn write(&self, out: &mut String, value: &Value, level: usize) -> Result<(), Error> {
        match value.kind() {
            ValueKind::None => out.push_str("null"),
            ValueKind::Bool => out.push_str(if value.is_true() { "true" } else { "false" }),
            ValueKind::Number => out.push_str(&number_repr(value, true)?),
            ValueKind::String => write_json_string(out, value.as_str().unwrap_or_default(), self.opts.ensure_ascii),
            ValueKind::Seq | ValueKind::Iterable => {
                let items: Vec<Value> = value.try_iter()?.collect();
                if items.is_empty() {
                    out.push_str("[]");
                    return Ok(());
                }
                out.push('[');
                for (i, item) in items.iter().enumerate() {
                    if i > 0 {
                        out.push_str(&self.item_sep);
                    }
                    self.newline(out, level + 1);
                    self.write(out, item, level + 1)?;
                }
                self.newline(out, level);
                out.push(']');
            }
            ValueKind::Map => {
                let mut entries = Vec::new();
                for key in value.try_iter()? {
                    let item = value.get_item(&key)?;
                    entries.push((json_key(&key)?, item));
                }
                if entries.is_empty() {
                    out.push_str("{}");
                    return Ok(());
                }
                if self.opts.sort_keys {
                    entries.sort_by(|a, b| a.0.cmp(&b.0));
                }
                out.push('{');
                for (i, (key, item)) in entries.iter().enumerate() {
                    if i > 0 {
                        out.push_str(&self.item_sep);
                    }
                    self.newline(out, level + 1);
                    write_json_string(out, key, self.opts.ensure_ascii);
                    out.push_str(&self.key_sep);
                    self.write(out, item, level + 1)?;
                }
                self.newline(out, level);
                out.push('}');
            }
            kind => {
                return Err(Error::new(
                    ErrorKind::InvalidOperation,
                    format!("tojson: object of kind {kind} is not JSON serializable"),
                ))
            }
        }
        Ok(())
    }
}

/// A dict key as Python's json module writes it (keys must be str, int, float, bool or None).
fn json_key(key: &Value) -> Result<String, Error> {
    Ok(match key.kind() {
        ValueKind::String => key.as_str().unwrap_or_default().to_string(),
        ValueKind::Bool => (if key.is_true() { "true" } else { "false" }).to_string(),
        ValueKind::None => "null".to_string(),
        ValueKind::Number => number_repr(key, true)?,
        kind => {
            return Err(Error::new(
                ErrorKind::InvalidOperation,
                format!("tojson: keys must be str, int, float, bool or None, not {kind}"),
            ))
        }
    })
}

/// A JSON string literal as Python writes it: only `"`, `\` and control characters are escaped (plus every
/// non-ASCII character, as UTF-16 escapes, with `ensure_ascii`).
fn write_json_string(out: &mut String, s: &str, ensure_ascii: bool) {
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
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c if ensure_ascii && (c as u32) > 0x7e => {
                let mut buf = [0u16; 2];
                for unit in c.encode_utf16(&mut buf) {
                    let _ = write!(out, "\\u{unit:04x}");
                }
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

/// A number as Python prints it: integers in full, floats as `repr(float)`. `json` selects JSON's spelling of
/// the non-finite values (`NaN`, `Infinity`) over Python's (`nan`, `inf`).
fn number_repr(value: &Value, json: bool) -> Result<String, Error> {
    if value.is_integer() {
        let n = i128::try_from(value.clone())?;
        return Ok(n.to_string());
    }
    let f = f64::try_from(value.clone())?;
    Ok(float_repr(f, json))
}

/// Python's `repr(float)`: the shortest round-tripping digits, in exponent form when the decimal exponent is
/// below -4 or at least 16.
pub fn float_repr(f: f64, json: bool) -> String {
    if f.is_nan() {
        return if json { "NaN" } else { "nan" }.to_string();
    }
    if f.is_infinite() {
        let s = if json { "Infinity" } else { "inf" };
        return if f < 0.0 { format!("-{s}") } else { s.to_string() };
    }
    let sci = format!("{:e}", f.abs());
    let (mantissa, exp) = sci.split_once('e').unwrap_or((&sci, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    let digits: String = mantissa.chars().filter(|c| c.is_ascii_digit()).collect();
    let sign = if f.is_sign_negative() { "-" } else { "" };
    let decpt = exp + 1;
    if !(-4 < decpt && decpt <= 16) {
        let (first, rest) = digits.split_at(1);
        let frac = if rest.is_empty() { String::new() } else { format!(".{rest}") };
        let esign = if exp < 0 { '-' } else { '+' };
        return format!("{sign}{first}{frac}e{esign}{:02}", exp.unsigned_abs());
    }
    let n = digits.len() as i32;
    let body = if decpt <= 0 {
        format!("0.{}{digits}", "0".repeat((-decpt) as usize))
    } else if decpt >= n {
        format!("{digits}{}.0", "0".repeat((decpt - n) as usize))
    } else {
        let (a, b) = digits.split_at(decpt as usize);
        format!("{a}.{b}")
    };
    format!("{sign}{body}")
}

/// Python's `str(value)` for what Jinja2 prints: `True`, `None`, `1.0`, `['a', 1]`, `{'k': 'v'}`; undefined
/// prints nothing. Values without a Python counterpart (macros, loop objects) use minijinja's own text.
pub fn python_str(out: &mut String, value: &Value) -> Result<(), Error> {
    match value.kind() {
        ValueKind::Undefined => {}
        ValueKind::String => out.push_str(value.as_str().unwrap_or_default()),
        _ => python_repr(out, value)?,
    }
    Ok(())
}

/// Python's `repr(value)` (strings quoted), used inside containers.
fn python_repr(out: &mut String, value: &Value) -> Result<(), Error> {
    match value.kind() {
        ValueKind::Undefined => {}
        ValueKind::None => out.push_str("None"),
        ValueKind::Bool => out.push_str(if value.is_true() { "True" } else { "False" }),
        ValueKind::Number => out.push_str(&number_repr(value, false)?),
        ValueKind::String => string_repr(out, value.as_str().unwrap_or_default()),
        ValueKind::Seq | ValueKind::Iterable => {
            out.push('[');
            for (i, item) in value.try_iter()?.enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                python_repr(out, &item)?;
            }
            out.push(']');
        }
        ValueKind::Map => {
            out.push('{');
            for (i, key) in value.try_iter()?.enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                python_repr(out, &key)?;
                out.push_str(": ");
                python_repr(out, &value.get_item(&key)?)?;
            }
            out.push('}');
        }
        _ => {
            let _ = write!(out, "{value}");
        }
    }
    Ok(())
}

/// Python's `repr(str)`: single quotes unless the text holds `'` and no `"`; escapes `\`, the quote and
/// non-printable characters.
fn string_repr(out: &mut String, s: &str) {
    let quote = if s.contains('\'') && !s.contains('"') { '"' } else { '\'' };
    out.push(quote);
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c == quote => {
                out.push('\\');
                out.push(c);
            }
            c if !is_printable(c) => {
                let n = c as u32;
                let _ = match n {
                    0..=0xff => write!(out, "\\x{n:02x}"),
                    0x100..=0xffff => write!(out, "\\u{n:04x}"),
                    _ => write!(out, "\\U{n:08x}"),
                };
            }
            c => out.push(c),
        }
    }
    out.push(quote);
}

/// An approximation of Python's `str.isprintable` for one character: control characters, format characters
/// and separators other than the ASCII space are not printable (covers the common ones, not all of Unicode).
fn is_printable(c: char) -> bool {
    let n = c as u32;
    !(n < 0x20
        || (0x7f..=0xa0).contains(&n)
        || n == 0xad
        || (0x2000..=0x200f).contains(&n)
        || (0x2028..=0x202f).contains(&n)
        || (0x205f..=0x206f).contains(&n)
        || n == 0x3000
        || n == 0xfeff
        || (0xd800..=0xf8ff).contains(&n)
        || (0xfff9..=0xfffb).contains(&n))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn float_repr_matches_python() {
        let cases = [
            (1.0, "1.0"),
            (-0.0, "-0.0"),
            (0.1, "0.1"),
            (1.5e-7, "1.5e-07"),
            (123456789.125, "123456789.125"),
            (1e16, "1e+16"),
            (1e15, "1000000000000000.0"),
            (2.5e-5, "2.5e-05"),
            (0.0001, "0.0001"),
            (1.7976931348623157e308, "1.7976931348623157e+308"),
            (5e-324, "5e-324"),
            (-12.5, "-12.5"),
        ];
        for (f, want) in cases {
            assert_eq!(float_repr(f, true), want, "{f:e}");
        }
        assert_eq!(float_repr(f64::NAN, true), "NaN");
        assert_eq!(float_repr(f64::NEG_INFINITY, false), "-inf");
    }

    #[test]
    fn string_repr_quotes_like_python() {
        let mut s = String::new();
        string_repr(&mut s, "it's");
        string_repr(&mut s, "both ' \"");
        assert_eq!(s, "\"it's\"'both \\' \"'");
    }
}
