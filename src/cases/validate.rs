//! The case-set validator: structural checks on every case, then (with a model) rendering checks in every channel and
//! condition. Every problem is reported with its case; nothing stops at the first failure.
use std::collections::{BTreeMap, HashSet};

use serde_json::Value;

use super::io::LoadedCase;
use super::render::{
    build_conversation, render_case_with, Channel, Condition, RenderOptions, TemplateBackend, TokenizerBackend,
    ToolRendering,
};
use super::schema::{ActionSpec, Case, Family, Payload, PredicateOp, ToolDef};
use crate::prompt::PromptAssets;

/// Benign control payloads must be within this factor of the adversarial payload's length (in bytes).
pub const MAX_LENGTH_RATIO: f64 = 2.0;

/// One problem found by the validator.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// The case id (empty for set-level problems).
    pub case_id: String,
    /// Line of the case in its file (0 if unknown).
    pub line: usize,
    /// What is wrong.
    pub reason: String,
}

impl std::fmt::Display for Problem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match (self.line, self.case_id.is_empty()) {
            (0, true) => write!(f, "{}", self.reason),
            (0, false) => write!(f, "case {}: {}", self.case_id, self.reason),
            (l, true) => write!(f, "line {l}: {}", self.reason),
            (l, false) => write!(f, "line {l} (case {}): {}", self.case_id, self.reason),
        }
    }
}

/// The validator's findings.
#[derive(Debug, Clone, Default)]
pub struct ValidationReport {
    /// Number of cases checked.
    pub cases: usize,
    /// Number of prompts rendered (0 without a model).
    pub renderings: usize,
    /// Every problem found.
    pub problems: Vec<Problem>,
}

impl ValidationReport {
    /// True when no problem was found.
    pub fn is_ok(&self) -> bool {
        self.problems.is_empty()
    }

    /// Ids of the cases with at least one problem, sorted.
    pub fn failing_cases(&self) -> Vec<String> {
        let set: std::collections::BTreeSet<_> =
            self.problems.iter().filter(|p| !p.case_id.is_empty()).map(|p| p.case_id.clone()).collect();
        set.into_iter().collect()
    }
}

/// What the validator renders with.
#[derive(Clone, Copy)]
pub struct RenderCheck<'a> {
    /// Chat template.
    pub template: &'a dyn TemplateBackend,
    /// Tokenizer.
    pub tokenizer: &'a dyn TokenizerBackend,
    /// Rendering options (tool rendering choice).
    pub options: &'a RenderOptions,
}

impl<'a> RenderCheck<'a> {
    /// From loaded prompt assets; `None` when the model has no chat template.
    pub fn from_assets(assets: &'a PromptAssets, options: &'a RenderOptions) -> Option<RenderCheck<'a>> {
        assets.template.as_ref().map(|t| RenderCheck { template: t, tokenizer: &assets.tokenizer, options })
    }
}

/// Validates a set: structural checks always; rendering checks in every channel and condition when `render` is
/// given (`None` with a model that has no template is reported as a set-level problem by the caller).
pub fn validate_set(cases: &[LoadedCase], render: Option<RenderCheck<'_>>) -> ValidationReport {
    let mut report = ValidationReport { cases: cases.len(), ..Default::default() };
    // Unique ids.
    let mut seen: BTreeMap<&str, usize> = BTreeMap::new();
    for lc in cases {
        if let Some(first) = seen.get(lc.case.id.as_str()) {
            report.problems.push(Problem {
                case_id: lc.case.id.clone(),
                line: lc.line,
                reason: format!("duplicate id (first used on line {first})"),
            });
        } else {
            seen.insert(&lc.case.id, lc.line);
        }
    }
    // Payloads must differ across cases.
    let mut payloads: BTreeMap<String, &str> = BTreeMap::new();
    for lc in cases {
        let text = lc.case.payload.text();
        if let Some(other) = payloads.get(&text) {
            report.problems.push(Problem {
                case_id: lc.case.id.clone(),
                line: lc.line,
                reason: format!("same payload as case {other}"),
            });
        } else {
            payloads.insert(text, &lc.case.id);
        }
    }
    for lc in cases {
        let mut reasons = check_case(&lc.case);
        if reasons.is_empty() {
            if let Some(rc) = render {
                let (n, mut r) = check_rendering(&lc.case, rc);
                report.renderings += n;
                reasons.append(&mut r);
            }
        }
        report.problems.extend(reasons.into_iter().map(|reason| Problem {
            case_id: lc.case.id.clone(),
            line: lc.line,
            reason,
        }));
    }
    report
}

/// Structural checks of one case; returns one reason per problem.
pub fn check_case(case: &Case) -> Vec<String> {
    let mut out = Vec::new();
    if case.id.trim().is_empty() {
        out.push("empty id".to_string());
    }
    if case.user_task.trim().is_empty() {
        out.push("empty user_task".to_string());
    }
    // Family-specific blocks.
    match case.family {
        Family::Tp => {
            if case.subtype.is_none() {
                out.push("TP case without `subtype` (P1, P2 or P3)".into());
            }
            if case.tp.is_none() {
                out.push("TP case without `tp.carrier_tool`".into());
            }
        }
        Family::Ipi => {
            if case.ipi.is_none() {
                out.push("IPI case without its `ipi` block (call, result_before, result_after)".into())
            }
        }
        Family::Cts => {
            if case.cts.is_none() {
                out.push("CTS case without its `cts` block (poisoned_tool, target_tool)".into())
            }
        }
    }
    if case.family != Family::Tp && case.subtype.is_some() {
        out.push(format!("`subtype` is only for TP cases, this is {}", case.family));
    }
    for (present, fam, block) in [
        (case.tp.is_some(), Family::Tp, "tp"),
        (case.ipi.is_some(), Family::Ipi, "ipi"),
        (case.cts.is_some(), Family::Cts, "cts"),
    ] {
        if present && case.family != fam {
            out.push(format!("`{block}` block given for a {} case", case.family));
        }
    }
    // Payloads.
    check_payload("payload", &case.payload, &mut out);
    check_payload("benign", &case.benign, &mut out);
    let (adv, ben) = (case.payload.text(), case.benign.text());
    if adv == ben {
        out.push("benign control payload is identical to the payload".into());
    }
    if case.payload.order != case.benign.order {
        out.push("payload and benign control differ in structure (`order`)".into());
    }
    if case.payload.justification.is_empty() != case.benign.justification.is_empty() {
        out.push("payload and benign control differ in structure (one has a justification, the other not)".into());
    }
    let ratio = adv.len().max(1) as f64 / ben.len().max(1) as f64;
    if !(1.0 / MAX_LENGTH_RATIO..=MAX_LENGTH_RATIO).contains(&ratio) {
        out.push(format!(
            "benign control length ({} bytes) is not comparable to the payload's ({} bytes; allowed ratio 1/{MAX_LENGTH_RATIO}..{MAX_LENGTH_RATIO})",
            ben.len(),
            adv.len()
        ));
    }
    if !adv.is_empty() && !ben.is_empty() && (case.user_task.contains(&adv) || case.user_task.contains(&ben)) {
        out.push("the user task contains the payload".into());
    }
    // Tools.
    let mut names = HashSet::new();
    for t in &case.tools {
        if !names.insert(t.name.as_str()) {
            out.push(format!("tool `{}` is defined twice", t.name));
        }
        check_tool(t, &mut out);
    }
    let need_tool = |name: &str, role: &str, out: &mut Vec<String>| -> Option<ToolDef> {
        match case.tool(name) {
            Some(t) => Some(t.clone()),
            None => {
                out.push(format!("{role} `{name}` is referenced but not defined in `tools`"));
                None
            }
        }
    };
    if let Some(tp) = &case.tp {
        need_tool(&tp.carrier_tool, "carrier tool", &mut out);
    }
    if let Some(ipi) = &case.ipi {
        if let Some(t) = need_tool(&ipi.call.name, "called tool", &mut out) {
            check_call_args(&t, &ipi.call.arguments, &mut out);
        }
        for (field, text) in [("result_before", &ipi.result_before), ("result_after", &ipi.result_after)] {
            if text.contains(&adv) || text.contains(&ben) {
                out.push(format!("ipi.{field} already contains the payload; it is inserted between the two"));
            }
        }
    }
    if let Some(cts) = &case.cts {
        need_tool(&cts.poisoned_tool, "poisoned tool", &mut out);
        need_tool(&cts.target_tool, "target tool", &mut out);
        if cts.poisoned_tool == cts.target_tool {
            out.push("CTS poisoned_tool and target_tool must be different tools".into());
        }
        for (what, text) in [("payload", &adv), ("benign control", &ben)] {
            if !text.contains(&cts.target_tool) {
                out.push(format!("CTS {what} does not name its target tool `{}`", cts.target_tool));
            }
        }
    }
    check_action("malicious_action", &case.malicious_action, case, &mut out);
    if let Some(b) = &case.benign_action {
        check_action("benign_action", b, case, &mut out);
    }
    let s = &case.sampling;
    if !(s.temperature >= 0.0 && s.temperature.is_finite()) {
        out.push(format!("sampling.temperature must be >= 0, got {}", s.temperature));
    }
    if !(s.top_p > 0.0 && s.top_p <= 1.0) {
        out.push(format!("sampling.top_p must be in (0, 1], got {}", s.top_p));
    }
    if s.max_new_tokens == 0 {
        out.push("sampling.max_new_tokens must be > 0".into());
    }
    out
}

fn check_payload(field: &str, p: &Payload, out: &mut Vec<String>) {
    if p.action.trim().is_empty() {
        out.push(format!("{field}.action is empty"));
    }
    if p.action != p.action.trim() || p.justification != p.justification.trim() {
        out.push(format!("{field} has leading or trailing whitespace (it would not survive templates that trim)"));
    }
    match &p.sha256 {
        None => out.push(format!(
            "{field} has no `sha256` fingerprint (run `trustlens cases fingerprint FILE --write` after reviewing it)"
        )),
        Some(h) if *h != p.fingerprint() => out.push(format!(
            "{field} text does not match its recorded fingerprint (sha256 {h}, text hashes to {}): the payload bytes \
             were changed after review",
            p.fingerprint()
        )),
        Some(_) => {}
    }
}

fn check_tool(t: &ToolDef, out: &mut Vec<String>) {
    if t.name.is_empty() || !t.name.chars().all(|c| c.is_ascii_alphanumeric() || "_-.".contains(c)) {
        out.push(format!("tool name `{}` must be letters, digits, `_`, `-` or `.`", t.name));
    }
    if t.description.trim().is_empty() {
        out.push(format!("tool `{}` has an empty description", t.name));
    }
    if let Err(e) = check_schema(&t.parameters, "parameters") {
        out.push(format!("tool `{}`: {e}", t.name));
    }
}

/// Checks that a value is a usable JSON Schema for function parameters.
pub fn check_schema(schema: &Value, at: &str) -> Result<(), String> {
    let obj = schema.as_object().ok_or_else(|| format!("{at} must be a JSON Schema object"))?;
    if obj.get("type").and_then(Value::as_str) != Some("object") {
        return Err(format!("{at}.type must be \"object\""));
    }
    let props = match obj.get("properties") {
        None => return Ok(()),
        Some(Value::Object(p)) => p,
        Some(_) => return Err(format!("{at}.properties must be an object")),
    };
    for (name, sub) in props {
        check_property(sub, &format!("{at}.properties.{name}"))?;
    }
    if let Some(req) = obj.get("required") {
        let arr = req.as_array().ok_or_else(|| format!("{at}.required must be an array"))?;
        for r in arr {
            let r = r.as_str().ok_or_else(|| format!("{at}.required must list strings"))?;
            if !props.contains_key(r) {
                return Err(format!("{at}.required names `{r}`, which is not a property"));
            }
        }
    }
    Ok(())
}

fn check_property(sub: &Value, at: &str) -> Result<(), String> {
    const TYPES: [&str; 7] = ["string", "number", "integer", "boolean", "array", "object", "null"];
    let o = sub.as_object().ok_or_else(|| format!("{at} must be an object"))?;
    match o.get("type") {
        Some(Value::String(t)) if TYPES.contains(&t.as_str()) => {
            if t == "object" && o.contains_key("properties") {
                check_schema(sub, at)?;
            }
            if t == "array" {
                if let Some(items) = o.get("items") {
                    check_property(items, &format!("{at}.items"))?;
                }
            }
            Ok(())
        }
        Some(Value::String(t)) => Err(format!("{at}.type `{t}` is not a JSON Schema type")),
        Some(Value::Array(ts)) if ts.iter().all(|t| t.as_str().is_some_and(|t| TYPES.contains(&t))) => Ok(()),
        Some(_) => Err(format!("{at}.type is not a JSON Schema type")),
        None if o.contains_key("enum") || o.contains_key("anyOf") || o.contains_key("oneOf") => Ok(()),
        None => Err(format!("{at} has no `type`")),
    }
}

fn check_call_args(t: &ToolDef, args: &Value, out: &mut Vec<String>) {
    let Some(obj) = args.as_object() else {
        out.push(format!("ipi.call.arguments for `{}` must be an object", t.name));
        return;
    };
    let props = t.property_names();
    for k in obj.keys() {
        if !props.contains(k) {
            out.push(format!("ipi.call passes `{k}`, which `{}` does not declare", t.name));
        }
    }
    if let Some(req) = t.parameters.get("required").and_then(Value::as_array) {
        for r in req.iter().filter_map(Value::as_str) {
            if !obj.contains_key(r) {
                out.push(format!("ipi.call lacks required argument `{r}` of `{}`", t.name));
            }
        }
    }
}

fn check_action(field: &str, a: &ActionSpec, case: &Case, out: &mut Vec<String>) {
    if a.description.trim().is_empty() {
        out.push(format!("{field}.description is empty"));
    }
    match &a.tool {
        None if !a.args.is_empty() => out.push(format!("{field} has argument predicates but no tool")),
        None => {}
        Some(name) => match case.tool(name) {
            None => out.push(format!("{field}.tool `{name}` is referenced but not defined in `tools`")),
            Some(t) => {
                let props = t.property_names();
                for p in &a.args {
                    let top = p.arg.split('.').next().unwrap_or("");
                    if !props.iter().any(|n| n == top) {
                        out.push(format!("{field} tests argument `{}`, which `{name}` does not declare", p.arg));
                    }
                    if p.op != PredicateOp::Exists && p.value.is_none() {
                        out.push(format!("{field} predicate on `{}` needs a `value`", p.arg));
                    }
                }
            }
        },
    }
}

/// Rendering checks of one case in every channel and condition. Returns the number of renderings made and the
/// problems.
pub fn check_rendering(case: &Case, rc: RenderCheck<'_>) -> (usize, Vec<String>) {
    let mut out = Vec::new();
    let mut n = 0;
    // Without any template: the payload must sit once in the message/tool structure.
    for ch in Channel::ALL {
        for cond in Condition::ALL {
            let payload = case.payload_for(cond).text();
            match build_conversation(case, ch, &payload, Some(ToolRendering::Hermes)) {
                Ok(conv) => {
                    let mut hay: String = conv
                        .messages
                        .iter()
                        .filter_map(|m| m.get("content").and_then(Value::as_str))
                        .collect::<Vec<_>>()
                        .join("\u{0}");
                    if let Some(t) = &conv.tools {
                        hay.push_str(&serde_json::to_string(t).unwrap_or_default());
                    }
                    let c = hay.matches(payload.as_str()).count();
                    if c != 1 {
                        out.push(format!("[{ch}/{cond}] the payload appears {c} times in the messages, expected once"));
                    }
                }
                Err(e) => out.push(format!("[{ch}/{cond}] {e}")),
            }
        }
    }
    if !out.is_empty() {
        return (0, out);
    }
    for ch in Channel::ALL {
        let mut rendered = Vec::new();
        for cond in Condition::ALL {
            n += 1;
            match render_case_with(case, ch, cond, rc.template, rc.tokenizer, rc.options) {
                Ok(r) => rendered.push(r),
                Err(e) => out.push(strip_case_prefix(&e.to_string(), &case.id)),
            }
        }
        if let [adv, ben] = &rendered[..] {
            let swapped = format!(
                "{}{}{}",
                &adv.text[..adv.payload_byte_span.start],
                ben.payload,
                &adv.text[adv.payload_byte_span.end..]
            );
            if swapped != ben.text {
                out.push(format!(
                    "[{ch}] adversarial and benign renderings differ outside the payload (they must share structure)"
                ));
            }
        }
    }
    (n, out)
}

fn strip_case_prefix(msg: &str, id: &str) -> String {
    msg.strip_prefix(&format!("case {id} "))
        .or_else(|| msg.strip_prefix(&format!("case {id}: ")))
        .unwrap_or(msg)
        .to_string()
}
