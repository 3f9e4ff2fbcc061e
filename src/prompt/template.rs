//! [`ChatTemplate`]: Jinja chat templates rendered with minijinja the way transformers' `apply_chat_template`
//! renders them with Jinja2.
//!
//! What is reproduced: `trim_blocks` and `lstrip_blocks` on, the trailing newline of the template dropped,
//! `raise_exception(msg)`, `strftime_now(fmt)`, a `tojson` filter that is Python's
//! `json.dumps(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False)` (keys in insertion order),
//! Python string/dict/list methods (`.strip()`, `.items()`, ...) via minijinja-contrib's pycompat callback, values
//! printed as Python prints them (`True`, `None`, `['a']`), and the message preprocessing of transformers 5
//! (keys whose value is null dropped; `reasoning_content`/`thinking`/`reasoning` aliased). The context holds
//! `messages`, `tools` (none when absent), `documents` (none), `add_generation_prompt`, the special tokens and any
//! extra variables.
//!
//! Known gaps: Jinja2's `{% generation %}` extension tag is not supported (templates using it fail to parse);
//! `~` and `|string` still print minijinja's spellings (`true`, `none`); `strftime_now` uses UTC where Python
//! uses local time.
use super::pyfmt::{json_dumps, python_str, JsonOptions};
use super::PromptError;
use minijinja::syntax::SyntaxConfig;
use minijinja::value::{Kwargs, Rest, Value, ValueOrKwargs};
use minijinja::{Environment, Error, ErrorKind, State};
use serde_json::{Map, Value as Json};
use sha2::{Digest, Sha256};
use std::path::Path;

const TEMPLATE_NAME: &str = "chat_template";

/// A compiled chat template plus the special tokens it is rendered with.
#[derive(Debug, Clone)]
pub struct ChatTemplate {
    source: String,
    origin: String,
    special: Vec<(String, String)>,
    env: Environment<'static>,
    supports_tools: bool,
}

impl ChatTemplate {
    /// Compile `source`; `bos_token` and `eos_token` are visible to the template under those names.
    /// Syntax errors are reported as [`PromptError::TemplateSyntax`].
    pub fn new(source: String, bos_token: Option<String>, eos_token: Option<String>) -> Result<Self, PromptError> {
        Self::new_with_origin(source, bos_token, eos_token, "<chat template>".to_string())
    }

    /// [`ChatTemplate::new`] naming where the template came from (a file path) in every error.
    pub fn new_with_origin(
        source: String,
        bos_token: Option<String>,
        eos_token: Option<String>,
        origin: String,
    ) -> Result<Self, PromptError> {
        let syntax_error = |e: Error| PromptError::TemplateSyntax { origin: origin.clone(), message: error_text(&e) };
        let mut env = Environment::new();
        let syntax = SyntaxConfig::builder().trim_blocks(true).lstrip_blocks(true).keep_trailing_newline(false).build();
        env.set_syntax(syntax.map_err(syntax_error)?);
        env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
        env.set_formatter(python_formatter);
        env.add_filter("tojson", tojson);
        env.add_function("raise_exception", raise_exception);
        env.add_function("strftime_now", strftime_now);
        env.add_template_owned(TEMPLATE_NAME, source.clone()).map_err(syntax_error)?;
        let supports_tools =
            env.get_template(TEMPLATE_NAME).map(|t| t.undeclared_variables(false).contains("tools")).unwrap_or(false);
        let mut special = Vec::new();
        if let Some(b) = bos_token {
            special.push(("bos_token".to_string(), b));
        }
        if let Some(e) = eos_token {
            special.push(("eos_token".to_string(), e));
        }
        Ok(ChatTemplate { source, origin, special, env, supports_tools })
    }

    /// Read and compile a template file; the path names the template in errors.
    pub fn from_file(path: &Path, bos_token: Option<String>, eos_token: Option<String>) -> Result<Self, PromptError> {
        let source =
            std::fs::read_to_string(path).map_err(|source| PromptError::Io { path: path.to_path_buf(), source })?;
        Self::new_with_origin(source, bos_token, eos_token, path.display().to_string())
    }

    /// Rename where the template came from (used in error messages).
    pub fn with_origin(mut self, origin: impl Into<String>) -> Self {
        self.origin = origin.into();
        self
    }

    /// Add (or replace) a special-token variable such as `unk_token` or `pad_token`.
    pub fn with_special_token(mut self, name: &str, value: &str) -> Self {
        match self.special.iter_mut().find(|(k, _)| k == name) {
            Some(slot) => slot.1 = value.to_string(),
            None => self.special.push((name.to_string(), value.to_string())),
        }
        self
    }

    /// HF `apply_chat_template(messages, tools=tools, add_generation_prompt=..., tokenize=False)`, byte-identical.
    pub fn render(
        &self,
        messages: &[Json],
        tools: Option<&[Json]>,
        add_generation_prompt: bool,
    ) -> Result<String, PromptError> {
        self.render_with(messages, tools, add_generation_prompt, &Map::new())
    }

    /// [`ChatTemplate::render`] with extra template variables (HF's `**kwargs`, e.g. `date_string`,
    /// `builtin_tools`, `tools_in_user_message`); they override the special tokens of the same name.
    pub fn render_with(
        &self,
        messages: &[Json],
        tools: Option<&[Json]>,
        add_generation_prompt: bool,
        extra: &Map<String, Json>,
    ) -> Result<String, PromptError> {
        let fail = |message: String| PromptError::TemplateRender { origin: self.origin.clone(), message };
        if messages.is_empty() {
            return Err(fail("cannot apply a chat template to an empty conversation".into()));
        }
        let mut normalized = Vec::with_capacity(messages.len());
        for (i, m) in messages.iter().enumerate() {
            let Json::Object(obj) = m else {
                return Err(fail(format!("message #{i} is not a JSON object: {m}")));
            };
            normalized.push(Json::Object(normalize_message(obj)));
        }
        if let Some(tools) = tools {
            if let Some((i, t)) = tools.iter().enumerate().find(|(_, t)| !t.is_object()) {
                return Err(fail(format!("tool #{i} is not a JSON schema object: {t}")));
            }
        }
        let mut ctx = Map::new();
        for (k, v) in &self.special {
            ctx.insert(k.clone(), Json::String(v.clone()));
        }
        for (k, v) in extra {
            if matches!(k.as_str(), "messages" | "tools" | "documents" | "add_generation_prompt") {
                return Err(fail(format!("extra variable `{k}` clashes with a variable the renderer sets")));
            }
            ctx.insert(k.clone(), v.clone());
        }
        ctx.insert("messages".into(), Json::Array(normalized));
        ctx.insert("tools".into(), tools.map(|t| Json::Array(t.to_vec())).unwrap_or(Json::Null));
        ctx.insert("documents".into(), Json::Null);
        ctx.insert("add_generation_prompt".into(), Json::Bool(add_generation_prompt));
        let template = self.env.get_template(TEMPLATE_NAME).map_err(|e| fail(error_text(&e)))?;
        template.render(json_to_value(&Json::Object(ctx))).map_err(|e| fail(error_text(&e)))
    }

    /// Whether the template source refers to a `tools` variable (it can render tool schemas).
    pub fn supports_tools(&self) -> bool {
        self.supports_tools
    }

    /// The template source.
    pub fn source(&self) -> &str {
        &self.source
    }

    /// Where the template came from, as used in error messages.
    pub fn origin(&self) -> &str {
        &self.origin
    }

    /// Hex SHA-256 of the template source (for provenance records).
    pub fn sha256(&self) -> String {
        hex::encode(Sha256::digest(self.source.as_bytes()))
    }
}

/// transformers 5 message preprocessing: drop top-level keys whose value is null, then, when a message carries
/// reasoning under `reasoning_content`, `thinking` or `reasoning`, expose it as both `thinking` (first key) and
/// `reasoning_content`.
fn normalize_message(obj: &Map<String, Json>) -> Map<String, Json> {
    let kept: Map<String, Json> =
        obj.iter().filter(|(_, v)| !v.is_null()).map(|(k, v)| (k.clone(), v.clone())).collect();
    let reasoning = ["reasoning_content", "thinking", "reasoning"].iter().find_map(|k| kept.get(*k)).cloned();
    let Some(reasoning) = reasoning else {
        return kept;
    };
    let mut out = Map::new();
    out.insert("thinking".into(), reasoning.clone());
    for (k, v) in kept {
        out.insert(k, v);
    }
    out.insert("reasoning_content".into(), reasoning);
    out
}

/// A JSON value as a template value (maps keep their key order).
fn json_to_value(j: &Json) -> Value {
    match j {
        Json::Null => Value::from(()),
        Json::Bool(b) => Value::from(*b),
        Json::Number(n) => match (n.as_i64(), n.as_u64()) {
            (Some(i), _) => Value::from(i),
            (None, Some(u)) => Value::from(u),
            _ => Value::from(n.as_f64().unwrap_or(f64::NAN)),
        },
        Json::String(s) => Value::from(s.as_str()),
        Json::Array(a) => Value::from(a.iter().map(json_to_value).collect::<Vec<_>>()),
        Json::Object(o) => Value::from_pairs(o.iter().map(|(k, v)| (Value::from(k.as_str()), json_to_value(v)))),
    }
}

/// Full text of a minijinja error: its message, location and causes.
fn error_text(e: &Error) -> String {
    let mut text = e.to_string();
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}

/// Print values as Jinja2 does (Python `str()`).
fn python_formatter(out: &mut minijinja::Output, _state: &mut State, value: &Value) -> Result<(), Error> {
    let mut s = String::new();
    python_str(&mut s, value)?;
    out.write_str(&s).map_err(|e| Error::new(ErrorKind::WriteFailure, e.to_string()))
}

/// HF's `tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False)`, positional or keyword.
fn tojson(value: &Value, args: Rest<ValueOrKwargs>) -> Result<Value, Error> {
    let mut positional = args.into_values();
    let kwargs = match positional.pop() {
        Some(last) if last.is_kwargs() => Kwargs::try_from(last)?,
        Some(last) => {
            positional.push(last);
            Kwargs::from_iter(std::iter::empty::<(String, Value)>())
        }
        None => Kwargs::from_iter(std::iter::empty::<(String, Value)>()),
    };
    if positional.len() > 4 {
        return Err(Error::new(ErrorKind::TooManyArguments, "tojson takes at most 4 positional arguments"));
    }
    let mut positional = positional.into_iter();
    let (ensure_ascii, indent, separators, sort_keys) =
        (positional.next(), positional.next(), positional.next(), positional.next());
    let pick = |pos: Option<Value>, key: &str| -> Result<Option<Value>, Error> {
        match (pos, kwargs.get::<Option<Value>>(key)?) {
            (Some(_), Some(_)) => {
                Err(Error::new(ErrorKind::TooManyArguments, format!("tojson got multiple values for `{key}`")))
            }
            (p, k) => Ok(p.or(k).filter(|v| !v.is_none() && !v.is_undefined())),
        }
    };
    let ensure_ascii = pick(ensure_ascii, "ensure_ascii")?.is_some_and(|v| v.is_true());
    let sort_keys = pick(sort_keys, "sort_keys")?.is_some_and(|v| v.is_true());
    let indent = match pick(indent, "indent")? {
        None => None,
        Some(v) if v.as_str().is_some() => v.as_str().map(str::to_string),
        Some(v) => {
            let n = i64::try_from(v).map_err(|_| {
                Error::new(ErrorKind::InvalidOperation, "tojson: indent must be an integer or a string")
            })?;
            Some(" ".repeat(usize::try_from(n).unwrap_or(0)))
        }
    };
    let separators = match pick(separators, "separators")? {
        None => None,
        Some(v) => {
            let parts: Vec<Value> = v.try_iter()?.collect();
            match parts.as_slice() {
                [a, b] if a.as_str().is_some() && b.as_str().is_some() => {
                    Some((a.as_str().unwrap_or_default().to_string(), b.as_str().unwrap_or_default().to_string()))
                }
                _ => {
                    return Err(Error::new(
                        ErrorKind::InvalidOperation,
                        "tojson: separators must be a pair of strings (item_separator, key_separator)",
                    ))
                }
            }
        }
    };
    kwargs.assert_all_used()?;
    let opts = JsonOptions { ensure_ascii, indent, separators, sort_keys };
    Ok(Value::from(json_dumps(value, &opts)?))
}

/// `raise_exception(message)`: abort rendering with the template's own message.
fn raise_exception(message: String) -> Result<Value, Error> {
    Err(Error::new(ErrorKind::InvalidOperation, message))
}

/// `strftime_now(format)`: the current time (UTC) formatted like Python's `strftime`.
fn strftime_now(format: String) -> Result<Value, Error> {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_err(|e| Error::new(ErrorKind::InvalidOperation, format!("strftime_now: clock before 1970: {e}")))?;
    let secs = i64::try_from(now.as_secs()).unwrap_or(i64::MAX);
    Ok(Value::from(strftime_utc(secs, &format)))
}

const DAYS: [&str; 7] = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"];
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

/// Format a Unix time (UTC) with Python/C `strftime` directives: `%a %A %b %B %d %e %H %I %j %m %M %p %S %y %Y
/// %F %T %%` (C locale). `%Z` and `%z` give nothing, as for Python's naive `datetime.now()`; other directives are
/// copied through unchanged.
pub fn strftime_utc(unix_seconds: i64, format: &str) -> String {
    let days = unix_seconds.div_euclid(86_400);
    let secs = unix_seconds.rem_euclid(86_400);
    let (hour, minute, second) = (secs / 3600, secs % 3600 / 60, secs % 60);
    // Howard Hinnant's civil_from_days.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy_mar = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy_mar + 2) / 153;
    let day = doy_mar - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    let leap = (year % 4 == 0 && year % 100 != 0) || year % 400 == 0;
    const CUM: [i64; 12] = [0, 31, 59, 90, 120, 151, 181, 212, 243, 273, 304, 334];
    let yday = CUM[(month - 1) as usize] + day + i64::from(leap && month > 2);
    let weekday = (days + 3).rem_euclid(7) as usize; // 1970-01-01 was a Thursday (index 3 from Monday).
    let hour12 = if hour % 12 == 0 { 12 } else { hour % 12 };

    let mut out = String::new();
    let mut chars = format.chars();
    while let Some(c) = chars.next() {
        if c != '%' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('a') => out.push_str(&DAYS[weekday][..3]),
            Some('A') => out.push_str(DAYS[weekday]),
            Some('b') | Some('h') => out.push_str(&MONTHS[(month - 1) as usize][..3]),
            Some('B') => out.push_str(MONTHS[(month - 1) as usize]),
            Some('d') => out.push_str(&format!("{day:02}")),
            Some('e') => out.push_str(&format!("{day:>2}")),
            Some('H') => out.push_str(&format!("{hour:02}")),
            Some('I') => out.push_str(&format!("{hour12:02}")),
            Some('j') => out.push_str(&format!("{yday:03}")),
            Some('m') => out.push_str(&format!("{month:02}")),
            Some('M') => out.push_str(&format!("{minute:02}")),
            Some('p') => out.push_str(if hour < 12 { "AM" } else { "PM" }),
            Some('S') => out.push_str(&format!("{second:02}")),
            Some('y') => out.push_str(&format!("{:02}", year.rem_euclid(100))),
            Some('Y') => out.push_str(&year.to_string()),
            Some('F') => out.push_str(&format!("{year}-{month:02}-{day:02}")),
            Some('T') => out.push_str(&format!("{hour:02}:{minute:02}:{second:02}")),
            Some('Z') | Some('z') => {}
            Some('%') => out.push('%'),
            Some(other) => {
                out.push('%');
                out.push(other);
            }
            None => out.push('%'),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strftime_known_dates() {
        assert_eq!(strftime_utc(0, "%d %b %Y %H:%M:%S %a %j"), "01 Jan 1970 00:00:00 Thu 001");
        assert_eq!(strftime_utc(951_782_400, "%F %A %j"), "2000-02-29 Tuesday 060");
        assert_eq!(strftime_utc(-1, "%F %T"), "1969-12-31 23:59:59");
    }

    #[test]
    fn normalize_aliases_reasoning() {
        let m: Map<String, Json> =
            serde_json::from_str(r#"{"role":"assistant","content":null,"reasoning":"r"}"#).unwrap_or_default();
        let n = normalize_message(&m);
        let keys: Vec<&str> = n.keys().map(String::as_str).collect();
        assert_eq!(keys, ["thinking", "role", "reasoning", "reasoning_content"]);
    }
}
