//! Tool-call parsing for the common output formats. Never fails: text that tries to be a call but cannot be read
//! becomes a [`MalformedCall`] (scored `AMBIGUOUS`, see `docs/behaviour.md`).
//!
//! Formats recognised (all may appear several times in one output, with prose around them):
//! - **Hermes / Qwen** and the project's Hermes fallback rendering: `<tool_call>\n{"name": ..., "arguments": {...}}\n</tool_call>`
//!   (a missing closing tag is tolerated: the body runs to the next `<tool_call>` or the end of the output).
//! - **Llama 3.x JSON**: a bare `{"name": ..., "parameters": {...}}` object anywhere in the text (also inside code
//!   fences, also with `"arguments"`, also OpenAI's `{"type": "function", "function": {...}}`).
//! - **Llama 3.x `<|python_tag|>`**: JSON calls (one or several, `;`-separated) or built-in calls in Python syntax
//!   (`brave_search.call(query="...")`) up to `<|eom_id|>` / `<|eot_id|>`.
//! - **Llama 3.2 pythonic list**: an output that starts with `[get_weather(city="Paris"), ...]`.
//! - **Mistral**: `[TOOL_CALLS][{"name": ..., "arguments": {...}}, ...]` (v3) and `[TOOL_CALLS]name[ARGS]{...}`
//!   (v11+, with an optional `[CALL_ID]id`).
//!
//! `arguments` given as a JSON-encoded string (OpenAI style) are decoded.
use std::ops::Range;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// The syntax a call was written in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CallFormat {
    /// `<tool_call>{json}</tool_call>` (Hermes, Qwen, the project's fallback rendering).
    Hermes,
    /// A bare JSON call object in the text (Llama 3.x JSON function calling).
    BareJson,
    /// After `<|python_tag|>` (Llama 3.x).
    PythonTag,
    /// `[name(arg=value), ...]` (Llama 3.2 pythonic).
    Pythonic,
    /// `[TOOL_CALLS]` (Mistral).
    Mistral,
}

/// One well-formed tool call.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ParsedCall {
    /// Function name.
    pub name: String,
    /// Arguments object (`{}` when the call gave none).
    pub arguments: Value,
    /// Syntax.
    pub format: CallFormat,
    /// Byte range in the output covered by the call (including its markers).
    pub span: Range<usize>,
}

/// Text that tries to be a tool call but cannot be read as one.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MalformedCall {
    /// Syntax it was attempting.
    pub format: CallFormat,
    /// Byte range in the output.
    pub span: Range<usize>,
    /// Why it could not be read.
    pub reason: String,
}

/// Everything found in one output.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct ParsedOutput {
    /// Well-formed calls in output order.
    pub calls: Vec<ParsedCall>,
    /// Malformed call attempts in output order.
    pub malformed: Vec<MalformedCall>,
    /// The output with every call and call attempt removed (what the refusal detector and the judges read).
    pub prose: String,
}

impl ParsedOutput {
    /// Whether the output contains any call or call attempt.
    pub fn has_call_syntax(&self) -> bool {
        !self.calls.is_empty() || !self.malformed.is_empty()
    }
}

/// End-of-turn markers removed from the end of an output before parsing.
pub const END_MARKERS: [&str; 7] =
    ["<|im_end|>", "<|eot_id|>", "<|eom_id|>", "</s>", "<|endoftext|>", "<|end|>", "<eos>"];

/// Parses every tool call in a model output. Never fails.
pub fn parse_tool_calls(output: &str) -> ParsedOutput {
    let mut p = Parser { text: output, calls: Vec::new(), malformed: Vec::new(), taken: Vec::new() };
    p.hermes();
    p.mistral();
    p.python_tag();
    p.pythonic_list();
    p.bare_json();
    p.calls.sort_by_key(|c| c.span.start);
    p.malformed.sort_by_key(|m| m.span.start);
    let mut taken = p.taken.clone();
    taken.sort_by_key(|r| r.start);
    let mut prose = String::new();
    let mut at = 0;
    for r in taken {
        if r.start > at {
            prose.push_str(&output[at..r.start]);
        }
        at = at.max(r.end);
    }
    if at < output.len() {
        prose.push_str(&output[at..]);
    }
    let mut prose = prose.trim().to_string();
    loop {
        let before = prose.len();
        for m in END_MARKERS {
            if let Some(s) = prose.strip_suffix(m) {
                prose = s.trim_end().to_string();
            }
        }
        if prose.len() == before {
            break;
        }
    }
    ParsedOutput { calls: p.calls, malformed: p.malformed, prose }
}

struct Parser<'a> {
    text: &'a str,
    calls: Vec<ParsedCall>,
    malformed: Vec<MalformedCall>,
    taken: Vec<Range<usize>>,
}

impl Parser<'_> {
    fn is_taken(&self, i: usize) -> bool {
        self.taken.iter().any(|r| r.contains(&i))
    }

    fn push_values(&mut self, values: Result<Vec<Value>, String>, format: CallFormat, span: Range<usize>) {
        match values {
            Ok(vs) if vs.is_empty() => {
                self.malformed.push(MalformedCall { format, span: span.clone(), reason: "empty call".into() })
            }
            Ok(vs) => {
                for v in vs {
                    let items = match v {
                        Value::Array(items) => items,
                        other => vec![other],
                    };
                    if items.is_empty() {
                        self.malformed.push(MalformedCall {
                            format,
                            span: span.clone(),
                            reason: "empty call list".into(),
                        });
                    }
                    for item in items {
                        match call_from_value(&item) {
                            Ok((name, arguments)) => {
                                self.calls.push(ParsedCall { name, arguments, format, span: span.clone() })
                            }
                            Err(reason) => self.malformed.push(MalformedCall { format, span: span.clone(), reason }),
                        }
                    }
                }
            }
            Err(reason) => self.malformed.push(MalformedCall { format, span: span.clone(), reason }),
        }
        self.taken.push(span);
    }

    /// `<tool_call> body </tool_call>`.
    fn hermes(&mut self) {
        const OPEN: &str = "<tool_call>";
        const CLOSE: &str = "</tool_call>";
        let t = self.text;
        let mut from = 0;
        while let Some(rel) = t[from..].find(OPEN) {
            let start = from + rel;
            let body_start = start + OPEN.len();
            let next_open = t[body_start..].find(OPEN).map(|r| body_start + r);
            let close =
                t[body_start..].find(CLOSE).map(|r| body_start + r).filter(|&c| next_open.is_none_or(|n| c < n));
            let (body_end, end, closed) = match close {
                Some(c) => (c, c + CLOSE.len(), true),
                None => {
                    let e = next_open.unwrap_or(t.len());
                    (e, e, false)
                }
            };
            let body = strip_fence(&t[body_start..body_end]);
            let mut values = json_values(body, &[]);
            if !closed {
                values = values.map_err(|e| format!("{e} (no closing </tool_call>)"));
            }
            self.push_values(values, CallFormat::Hermes, start..end);
            from = end.max(body_start);
        }
    }

    /// `[TOOL_CALLS][...]` or `[TOOL_CALLS]name[CALL_ID]id[ARGS]{...}`.
    fn mistral(&mut self) {
        const TAG: &str = "[TOOL_CALLS]";
        let t = self.text;
        let mut from = 0;
        while let Some(rel) = t[from..].find(TAG) {
            let start = from + rel;
            let after = start + TAG.len();
            let rest = &t[after..];
            let lead = rest.len() - rest.trim_start().len();
            let body = &rest[lead..];
            if body.starts_with('[') || body.starts_with('{') {
                let mut it = serde_json::Deserializer::from_str(body).into_iter::<Value>();
                match it.next() {
                    Some(Ok(v)) => {
                        let end = after + lead + it.byte_offset();
                        self.push_values(Ok(vec![v]), CallFormat::Mistral, start..end);
                        from = end;
                    }
                    Some(Err(e)) => {
                        let end = t[after..].find(TAG).map(|r| after + r).unwrap_or(t.len());
                        self.push_values(
                            Err(format!("invalid JSON after [TOOL_CALLS]: {e}")),
                            CallFormat::Mistral,
                            start..end,
                        );
                        from = end;
                    }
                    None => {
                        self.push_values(Err("nothing after [TOOL_CALLS]".into()), CallFormat::Mistral, start..t.len());
                        from = t.len();
                    }
                }
                continue;
            }
            // v11+: name[ARGS]{json}, optionally name[CALL_ID]id[ARGS]{json}
            let Some(args_rel) = body.find("[ARGS]") else {
                let end = t[after..].find(TAG).map(|r| after + r).unwrap_or(t.len());
                self.push_values(
                    Err("[TOOL_CALLS] followed by neither a JSON list nor name[ARGS]{...}".into()),
                    CallFormat::Mistral,
                    start..end,
                );
                from = end;
                continue;
            };
            let head = &body[..args_rel];
            let name = head.split("[CALL_ID]").next().unwrap_or("").trim();
            let json_start = after + lead + args_rel + "[ARGS]".len();
            let mut it = serde_json::Deserializer::from_str(&t[json_start..]).into_iter::<Value>();
            match it.next() {
                Some(Ok(args)) if is_ident(name) => {
                    let end = json_start + it.byte_offset();
                    let v = serde_json::json!({"name": name, "arguments": args});
                    self.push_values(Ok(vec![v]), CallFormat::Mistral, start..end);
                    from = end;
                }
                other => {
                    let end = t[after..].find(TAG).map(|r| after + r).unwrap_or(t.len());
                    let reason = match other {
                        Some(Err(e)) => format!("invalid JSON after [ARGS]: {e}"),
                        None => "nothing after [ARGS]".into(),
                        Some(Ok(_)) => format!("`{name}` is not a function name"),
                    };
                    self.push_values(Err(reason), CallFormat::Mistral, start..end);
                    from = end;
                }
            }
        }
    }

    /// `<|python_tag|>` followed by JSON calls or Python-syntax calls, up to an end marker.
    fn python_tag(&mut self) {
        const TAG: &str = "<|python_tag|>";
        let t = self.text;
        let mut from = 0;
        while let Some(rel) = t[from..].find(TAG) {
            let start = from + rel;
            let body_start = start + TAG.len();
            let end = ["<|eom_id|>", "<|eot_id|>", TAG]
                .iter()
                .filter_map(|m| t[body_start..].find(m).map(|r| body_start + r))
                .min()
                .unwrap_or(t.len());
            let body = strip_fence(&t[body_start..end]);
            let trimmed = body.trim();
            let values = if trimmed.starts_with('{') || trimmed.starts_with('[') {
                json_values(trimmed, &[';'])
            } else {
                python_calls(trimmed)
            };
            self.push_values(values, CallFormat::PythonTag, start..end);
            from = end;
        }
    }

    /// Llama 3.2's pythonic list at the start of the output: `[f(a=1), g(b="x")]`.
    fn pythonic_list(&mut self) {
        let t = self.text;
        let lead = t.len() - t.trim_start().len();
        let body = &t[lead..];
        if !body.starts_with('[') || self.is_taken(lead) {
            return;
        }
        let inner = body[1..].trim_start();
        let ident_len = inner.find(|c: char| !(c.is_alphanumeric() || c == '_' || c == '.')).unwrap_or(inner.len());
        if ident_len == 0 || !inner[ident_len..].starts_with('(') {
            return;
        }
        match matching_bracket(body, 0) {
            Some(close) => {
                let values = python_calls(&body[1..close]);
                self.push_values(values, CallFormat::Pythonic, lead..lead + close + 1);
            }
            None => self.push_values(
                Err("pythonic call list without its closing `]`".into()),
                CallFormat::Pythonic,
                lead..t.len(),
            ),
        }
    }

    /// Bare JSON call objects anywhere in the remaining text.
    fn bare_json(&mut self) {
        let t = self.text;
        let mut i = 0;
        while i < t.len() {
            let Some(rel) = t[i..].find('{') else { break };
            let start = i + rel;
            if self.is_taken(start) {
                i = start + 1;
                continue;
            }
            let mut it = serde_json::Deserializer::from_str(&t[start..]).into_iter::<Value>();
            match it.next() {
                Some(Ok(v)) => {
                    let end = start + it.byte_offset();
                    if looks_like_call_object(&v) {
                        self.push_values(Ok(vec![v]), CallFormat::BareJson, start..end);
                        i = end;
                    } else {
                        i = start + 1;
                    }
                }
                Some(Err(e)) => {
                    if starts_like_call(&t[start..]) {
                        // The attempt runs to the end of its line block (blank line) or the output.
                        let end = t[start..].find("\n\n").map(|r| start + r).unwrap_or(t.len());
                        self.push_values(
                            Err(format!("invalid JSON in a call object: {e}")),
                            CallFormat::BareJson,
                            start..end,
                        );
                        i = end;
                    } else {
                        i = start + 1;
                    }
                }
                None => break,
            }
        }
    }
}

/// Removes a surrounding Markdown code fence (```json ... ```).
fn strip_fence(s: &str) -> &str {
    let t = s.trim();
    if let Some(rest) = t.strip_prefix("```") {
        let rest = rest.trim_start_matches(|c: char| c.is_ascii_alphabetic());
        return rest.trim().strip_suffix("```").unwrap_or(rest).trim();
    }
    t
}

/// All JSON values in `s`, separated by whitespace or `separators`. Errors name the JSON problem.
fn json_values(s: &str, separators: &[char]) -> Result<Vec<Value>, String> {
    let mut out = Vec::new();
    let mut rest = s.trim();
    while !rest.is_empty() {
        let mut it = serde_json::Deserializer::from_str(rest).into_iter::<Value>();
        match it.next() {
            Some(Ok(v)) => {
                out.push(v);
                rest = rest[it.byte_offset()..].trim_start();
                while let Some(c) = rest.chars().next().filter(|c| separators.contains(c)) {
                    rest = rest[c.len_utf8()..].trim_start();
                }
            }
            Some(Err(e)) => return Err(format!("invalid JSON: {e}")),
            None => break,
        }
    }
    if out.is_empty() {
        return Err("empty call body".into());
    }
    Ok(out)
}

fn is_ident(s: &str) -> bool {
    !s.is_empty() && s.chars().all(|c| c.is_alphanumeric() || c == '_' || c == '-' || c == '.')
}

/// `(name, arguments)` from a call object: `{"name", "arguments"|"parameters"}`, or OpenAI's `{"function": {...}}`.
fn call_from_value(v: &Value) -> Result<(String, Value), String> {
    let Value::Object(obj) = v else {
        return Err(format!("a call must be a JSON object, got {}", kind_of(v)));
    };
    if let Some(f) = obj.get("function").filter(|f| f.is_object()) {
        return call_from_value(f);
    }
    let name = match obj.get("name") {
        Some(Value::String(s)) if !s.trim().is_empty() => s.trim().to_string(),
        Some(other) => return Err(format!("`name` must be a non-empty string, got {}", kind_of(other))),
        None => return Err("the call object has no `name`".into()),
    };
    let args = obj.get("arguments").or_else(|| obj.get("parameters"));
    let arguments = match args {
        None | Some(Value::Null) => Value::Object(Map::new()),
        Some(Value::Object(m)) => Value::Object(m.clone()),
        Some(Value::String(s)) => match serde_json::from_str::<Value>(s) {
            Ok(Value::Object(m)) => Value::Object(m),
            Ok(other) => return Err(format!("`arguments` string decodes to {}, not an object", kind_of(&other))),
            Err(e) => return Err(format!("`arguments` is a string that is not JSON: {e}")),
        },
        Some(other) => return Err(format!("`arguments` must be an object, got {}", kind_of(other))),
    };
    Ok((name, arguments))
}

fn kind_of(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// A JSON object that is a call: a string `name` plus `arguments`/`parameters`, or a `function` object.
fn looks_like_call_object(v: &Value) -> bool {
    let Value::Object(o) = v else { return false };
    if o.get("function").is_some_and(|f| f.get("name").is_some()) {
        return true;
    }
    o.get("name").is_some_and(Value::is_string) && (o.contains_key("arguments") || o.contains_key("parameters"))
}

/// Text starting with `{` whose first key is `name` (or `"type": "function"`): a call attempt.
fn starts_like_call(s: &str) -> bool {
    let compact: String = s.chars().take(64).filter(|c| !c.is_whitespace()).collect();
    compact.starts_with("{\"name\":")
        || compact.starts_with("{\"type\":\"function\"")
        || compact.starts_with("{\"function\":")
}

/// Index of the bracket closing the one at `open` (`[`/`(`/`{`), skipping quoted strings.
fn matching_bracket(s: &str, open: usize) -> Option<usize> {
    let b = s.as_bytes();
    let mut depth = 0i32;
    let mut quote: Option<u8> = None;
    let mut i = open;
    while i < b.len() {
        let c = b[i];
        if let Some(q) = quote {
            if c == b'\\' {
                i += 2;
                continue;
            }
            if c == q {
                quote = None;
            }
        } else {
            match c {
                b'"' | b'\'' => quote = Some(c),
                b'[' | b'(' | b'{' => depth += 1,
                b']' | b')' | b'}' => {
                    depth -= 1;
                    if depth == 0 {
                        return Some(i);
                    }
                }
                _ => {}
            }
        }
        i += 1;
    }
    None
}

/// Splits at top-level commas (outside brackets and quotes).
fn split_top_level(s: &str, sep: u8) -> Vec<&str> {
    let b = s.as_bytes();
    let mut out = Vec::new();
    let mut depth = 0i32;
    let mut quote: Option<u8> = None;
    let mut start = 0;
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        if let Some(q) = quote {
            if c == b'\\' {
                i += 2;
                continue;
            }
            if c == q {
                quote = None;
            }
        } else {
            match c {
                b'"' | b'\'' => quote = Some(c),
                b'[' | b'(' | b'{' => depth += 1,
                b']' | b')' | b'}' => depth -= 1,
                _ if c == sep && depth == 0 => {
                    out.push(&s[start..i]);
                    start = i + 1;
                }
                _ => {}
            }
        }
        i += 1;
    }
    out.push(&s[start..]);
    out.into_iter().map(str::trim).filter(|p| !p.is_empty()).collect()
}

/// Python-syntax calls `name(k=v, ...)` / `tool.call(k=v)`, separated by commas, `;` or lines.
fn python_calls(s: &str) -> Result<Vec<Value>, String> {
    let mut out = Vec::new();
    for part in split_top_level(s, b',').into_iter().flat_map(|p| split_top_level(p, b';')) {
        for line in part.lines().map(str::trim).filter(|l| !l.is_empty()) {
            out.push(python_call(line)?);
        }
    }
    if out.is_empty() {
        return Err("empty call body".into());
    }
    Ok(out)
}

fn python_call(s: &str) -> Result<Value, String> {
    let open = s.find('(').ok_or_else(|| format!("`{}` is not a call (no `(`)", clip(s)))?;
    let name = s[..open].trim();
    let name = name.strip_suffix(".call").unwrap_or(name);
    if !is_ident(name) {
        return Err(format!("`{}` is not a function name", clip(name)));
    }
    let close = matching_bracket(s, open).ok_or_else(|| format!("`{}`: unbalanced parentheses", clip(s)))?;
    if !s[close + 1..].trim().is_empty() {
        return Err(format!("`{}`: text after the call", clip(s)));
    }
    let mut args = Map::new();
    for kv in split_top_level(&s[open + 1..close], b',') {
        let (k, v) = kv.split_once('=').ok_or_else(|| format!("argument `{}` is not key=value", clip(kv)))?;
        let k = k.trim();
        if !is_ident(k) {
            return Err(format!("argument name `{}` is not an identifier", clip(k)));
        }
        args.insert(k.to_string(), python_literal(v.trim())?);
    }
    Ok(serde_json::json!({"name": name, "arguments": Value::Object(args)}))
}

/// A Python literal as JSON: strings ('' or ""), numbers, True/False/None, lists and dicts of those.
fn python_literal(s: &str) -> Result<Value, String> {
    match s {
        "True" => return Ok(Value::Bool(true)),
        "False" => return Ok(Value::Bool(false)),
        "None" => return Ok(Value::Null),
        _ => {}
    }
    if let Ok(v) = serde_json::from_str::<Value>(s) {
        return Ok(v);
    }
    if s.len() >= 2 && s.starts_with('\'') && s.ends_with('\'') {
        let inner = &s[1..s.len() - 1];
        let mut out = String::new();
        let mut chars = inner.chars();
        while let Some(c) = chars.next() {
            if c == '\\' {
                match chars.next() {
                    Some('n') => out.push('\n'),
                    Some('t') => out.push('\t'),
                    Some(o) => out.push(o),
                    None => {}
                }
            } else {
                out.push(c);
            }
        }
        return Ok(Value::String(out));
    }
    if (s.starts_with('[') && s.ends_with(']')) || (s.starts_with('(') && s.ends_with(')')) {
        let items: Result<Vec<Value>, String> =
            split_top_level(&s[1..s.len() - 1], b',').into_iter().map(python_literal).collect();
        return Ok(Value::Array(items?));
    }
    if s.starts_with('{') && s.ends_with('}') {
        let mut m = Map::new();
        for kv in split_top_level(&s[1..s.len() - 1], b',') {
            let (k, v) = kv.split_once(':').ok_or_else(|| format!("dict entry `{}` is not key: value", clip(kv)))?;
            let key = match python_literal(k.trim())? {
                Value::String(k) => k,
                other => other.to_string(),
            };
            m.insert(key, python_literal(v.trim())?);
        }
        return Ok(Value::Object(m));
    }
    Err(format!("`{}` is not a Python literal", clip(s)))
}

fn clip(s: &str) -> String {
    let mut end = s.len().min(40);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    if end < s.len() {
        format!("{}...", &s[..end])
    } else {
        s.to_string()
    }
}
