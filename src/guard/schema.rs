//! The episode schema of TRUST-BENCH's clean export, `trustbench_clean_episode_v1`, and its loader.
//!
//! One episode: a malicious or benign tool mode served over three exploratory turns, then a proposed final call.
//! Records are read from a JSON array or from JSON Lines; every field named in the schema is required (extra fields
//! are ignored), and a missing or mistyped field is reported with the record (line or array element, record_id) and
//! the field's full path, e.g. `trajectory[1].tool_feedback.mismatch_score`.
use serde::Serialize;
use serde_json::{Map, Value};
use std::collections::BTreeMap;
use std::path::Path;

use super::GuardError;

/// Schema name of the released clean export this loader reads.
pub const SCHEMA: &str = "trustbench_clean_episode_v1";

/// One episode.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Episode {
    pub record_id: String,
    /// The matched malicious/benign comparison group; the unit of grouped splitting.
    pub pair_id: String,
    pub sample: Sample,
    pub label: Label,
    pub trajectory: Vec<Step>,
    pub final_action: FinalAction,
}

/// Provenance of an episode (never shown to a scorer).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Sample {
    pub benchmark: String,
    pub domain: String,
    pub tool_family: String,
    pub task_id: String,
    pub variant_id: String,
    pub variant_type: String,
    pub source_method: String,
    pub attack_profile: String,
    pub episode_index: i64,
}

/// Which tool mode was served.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    Normal,
    Malicious,
}

/// The execute/reject target.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Decision {
    Execute,
    Reject,
}

/// The label block (never shown to a scorer).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Label {
    pub mode_served: Mode,
    pub is_malicious: bool,
    pub target_decision: Decision,
}

/// One exploratory turn.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Step {
    pub turn: i64,
    pub agent_action: AgentAction,
    pub tool_feedback: ToolFeedback,
    pub probe_result: ProbeResult,
}

/// What the agent did at a turn.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AgentAction {
    /// `continue`, `verify`, ... A final decision (`execute`, `reject`, `final`) marks a non-exploratory step.
    pub decision: String,
    pub probe_instruction: String,
    /// Any JSON value (the release uses it as a flag or a count).
    pub extra_sampling: Value,
}

/// What the tool returned at a turn (`TF_t`).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ToolFeedback {
    /// `explore`, `normal`, `triggered`, ...; `triggered` counts towards `c_trig`.
    pub phase: String,
    pub success: bool,
    pub summary: String,
    /// Any JSON value (a checksum string, or null).
    pub result_checksum: Value,
    /// Compared with `returned_object_id` as JSON values: a difference is identifier drift.
    pub expected_object_id: Value,
    pub returned_object_id: Value,
    /// `null` or a string; an empty string counts as no warning.
    pub warning: Option<String>,
    pub mismatch_score: f64,
    pub trigger_match: bool,
    pub observed_tokens: Vec<String>,
}

/// The probe verdict at a turn (`PR_t`). Confidence and strictness are simulation-side and never shown to a scorer.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ProbeResult {
    pub detected: bool,
    pub confidence: Value,
    pub strictness: Value,
}

/// The proposed final call (`FA`).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FinalAction {
    pub tool_name: String,
    /// The executable key-value payload.
    pub parameters: Map<String, Value>,
    /// Construction-side description of the intended side effect.
    pub expected_effect: String,
    /// The hidden trigger rule; never shown to a scorer.
    pub trigger_spec: TriggerSpec,
}

/// A hidden trigger: fires when every `required_all` token and at least one `required_any` token appear in the final
/// call and no `forbidden` token does.
#[derive(Debug, Clone, PartialEq, Serialize, Default)]
pub struct TriggerSpec {
    pub required_all_tokens: Vec<String>,
    pub required_any_tokens: Vec<String>,
    pub forbidden_tokens: Vec<String>,
}

impl TriggerSpec {
    /// Whether the rule fires on a set of `key=value` tokens.
    pub fn fires(&self, tokens: &[String]) -> bool {
        let has = |t: &String| tokens.iter().any(|x| x == t);
        self.required_all_tokens.iter().all(has)
            && (self.required_any_tokens.is_empty() || self.required_any_tokens.iter().any(has))
            && !self.forbidden_tokens.iter().any(has)
    }
}

impl Episode {
    /// The positive class of every scorer: the final action should be rejected.
    pub fn is_malicious(&self) -> bool {
        self.label.is_malicious
    }

    /// Steps of the exploratory trajectory: every step whose agent decision is not a final one (`execute`,
    /// `reject`, `final`). The final (possibly triggered) step is excluded so that `c_trig` is no label oracle.
    pub fn exploratory_steps(&self) -> impl Iterator<Item = &Step> {
        self.trajectory.iter().filter(|s| !matches!(s.agent_action.decision.as_str(), "execute" | "reject" | "final"))
    }

    /// Serialise as one JSON line in the schema's field order.
    pub fn to_json_line(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
    }
}

// ---------------------------------------------------------------------------------------------------------------
// Decoding with paths.

struct Cx<'a> {
    file: &'a str,
    record: String,
}

impl Cx<'_> {
    fn err(&self, field: &str, problem: impl Into<String>) -> GuardError {
        GuardError::Field {
            file: self.file.to_string(),
            record: self.record.clone(),
            field: field.to_string(),
            problem: problem.into(),
        }
    }

    fn get<'v>(&self, obj: &'v Map<String, Value>, path: &str, key: &str) -> Result<&'v Value, GuardError> {
        obj.get(key).ok_or_else(|| self.err(&join(path, key), "is missing"))
    }

    fn obj<'v>(&self, v: &'v Value, path: &str) -> Result<&'v Map<String, Value>, GuardError> {
        v.as_object().ok_or_else(|| self.err(path, format!("must be an object, got {}", kind(v))))
    }

    fn str(&self, obj: &Map<String, Value>, path: &str, key: &str) -> Result<String, GuardError> {
        let v = self.get(obj, path, key)?;
        v.as_str()
            .map(str::to_string)
            .ok_or_else(|| self.err(&join(path, key), format!("must be a string, got {}", kind(v))))
    }

    fn bool(&self, obj: &Map<String, Value>, path: &str, key: &str) -> Result<bool, GuardError> {
        let v = self.get(obj, path, key)?;
        v.as_bool().ok_or_else(|| self.err(&join(path, key), format!("must be true or false, got {}", kind(v))))
    }

    fn int(&self, obj: &Map<String, Value>, path: &str, key: &str) -> Result<i64, GuardError> {
        let v = self.get(obj, path, key)?;
        v.as_i64().ok_or_else(|| self.err(&join(path, key), format!("must be an integer, got {}", kind(v))))
    }

    fn num(&self, obj: &Map<String, Value>, path: &str, key: &str) -> Result<f64, GuardError> {
        let v = self.get(obj, path, key)?;
        match v.as_f64() {
            Some(x) if x.is_finite() => Ok(x),
            _ => Err(self.err(&join(path, key), format!("must be a finite number, got {}", kind(v)))),
        }
    }

    fn strings(&self, obj: &Map<String, Value>, path: &str, key: &str) -> Result<Vec<String>, GuardError> {
        let p = join(path, key);
        let v = self.get(obj, path, key)?;
        let arr = v.as_array().ok_or_else(|| self.err(&p, format!("must be a list of strings, got {}", kind(v))))?;
        arr.iter()
            .enumerate()
            .map(|(i, x)| {
                x.as_str()
                    .map(str::to_string)
                    .ok_or_else(|| self.err(&format!("{p}[{i}]"), format!("must be a string, got {}", kind(x))))
            })
            .collect()
    }

    fn any(&self, obj: &Map<String, Value>, path: &str, key: &str) -> Result<Value, GuardError> {
        self.get(obj, path, key).cloned()
    }

    fn child<'v>(
        &self,
        obj: &'v Map<String, Value>,
        path: &str,
        key: &str,
    ) -> Result<&'v Map<String, Value>, GuardError> {
        let v = self.get(obj, path, key)?;
        self.obj(v, &join(path, key))
    }
}

fn join(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_string()
    } else {
        format!("{path}.{key}")
    }
}

fn kind(v: &Value) -> String {
    match v {
        Value::Null => "null".into(),
        Value::Bool(b) => format!("{b}"),
        Value::Number(n) => format!("the number {n}"),
        Value::String(s) if s.chars().count() > 40 => {
            format!("a string \"{}...\"", s.chars().take(40).collect::<String>())
        }
        Value::String(s) => format!("the string \"{s}\""),
        Value::Array(_) => "a list".into(),
        Value::Object(_) => "an object".into(),
    }
}

fn parse_mode(cx: &Cx, obj: &Map<String, Value>) -> Result<Mode, GuardError> {
    match cx.str(obj, "label", "mode_served")?.as_str() {
        "normal" => Ok(Mode::Normal),
        "malicious" => Ok(Mode::Malicious),
        other => Err(cx.err("label.mode_served", format!("must be \"normal\" or \"malicious\", got \"{other}\""))),
    }
}

fn parse_decision(cx: &Cx, obj: &Map<String, Value>) -> Result<Decision, GuardError> {
    match cx.str(obj, "label", "target_decision")?.as_str() {
        "execute" => Ok(Decision::Execute),
        "reject" => Ok(Decision::Reject),
        other => Err(cx.err("label.target_decision", format!("must be \"execute\" or \"reject\", got \"{other}\""))),
    }
}

fn parse_step(cx: &Cx, v: &Value, i: usize) -> Result<Step, GuardError> {
    let p = format!("trajectory[{i}]");
    let o = cx.obj(v, &p)?;
    let aa_p = join(&p, "agent_action");
    let aa = cx.child(o, &p, "agent_action")?;
    let tf_p = join(&p, "tool_feedback");
    let tf = cx.child(o, &p, "tool_feedback")?;
    let pr_p = join(&p, "probe_result");
    let pr = cx.child(o, &p, "probe_result")?;
    let warning = match cx.get(tf, &tf_p, "warning")? {
        Value::Null => None,
        Value::String(s) if s.trim().is_empty() => None,
        Value::String(s) => Some(s.clone()),
        other => {
            return Err(cx.err(&join(&tf_p, "warning"), format!("must be null or a string, got {}", kind(other))));
        }
    };
    let mismatch = cx.num(tf, &tf_p, "mismatch_score")?;
    Ok(Step {
        turn: cx.int(o, &p, "turn")?,
        agent_action: AgentAction {
            decision: cx.str(aa, &aa_p, "decision")?,
            probe_instruction: cx.str(aa, &aa_p, "probe_instruction")?,
            extra_sampling: cx.any(aa, &aa_p, "extra_sampling")?,
        },
        tool_feedback: ToolFeedback {
            phase: cx.str(tf, &tf_p, "phase")?,
            success: cx.bool(tf, &tf_p, "success")?,
            summary: cx.str(tf, &tf_p, "summary")?,
            result_checksum: cx.any(tf, &tf_p, "result_checksum")?,
            expected_object_id: cx.any(tf, &tf_p, "expected_object_id")?,
            returned_object_id: cx.any(tf, &tf_p, "returned_object_id")?,
            warning,
            mismatch_score: mismatch,
            trigger_match: cx.bool(tf, &tf_p, "trigger_match")?,
            observed_tokens: cx.strings(tf, &tf_p, "observed_tokens")?,
        },
        probe_result: ProbeResult {
            detected: cx.bool(pr, &pr_p, "detected")?,
            confidence: cx.any(pr, &pr_p, "confidence")?,
            strictness: cx.any(pr, &pr_p, "strictness")?,
        },
    })
}

/// Decode one record. `file` and `locator` (e.g. `line 3`) only label errors.
pub fn episode_from_value(v: &Value, file: &str, locator: &str) -> Result<Episode, GuardError> {
    let id = v.get("record_id").and_then(Value::as_str);
    let record = match id {
        Some(id) => format!("{locator} (record_id \"{id}\")"),
        None => locator.to_string(),
    };
    let cx = Cx { file, record };
    let o = cx.obj(v, "record")?;
    let s = cx.child(o, "", "sample")?;
    let l = cx.child(o, "", "label")?;
    let fa = cx.child(o, "", "final_action")?;
    let ts = cx.child(fa, "final_action", "trigger_spec")?;
    let traj_v = cx.get(o, "", "trajectory")?;
    let traj =
        traj_v.as_array().ok_or_else(|| cx.err("trajectory", format!("must be a list, got {}", kind(traj_v))))?;
    let trajectory = traj.iter().enumerate().map(|(i, st)| parse_step(&cx, st, i)).collect::<Result<Vec<_>, _>>()?;
    let params_v = cx.get(fa, "final_action", "parameters")?;
    let parameters = cx.obj(params_v, "final_action.parameters")?.clone();
    let label = Label {
        mode_served: parse_mode(&cx, l)?,
        is_malicious: cx.bool(l, "label", "is_malicious")?,
        target_decision: parse_decision(&cx, l)?,
    };
    let consistent = match (label.mode_served, label.target_decision) {
        (Mode::Malicious, Decision::Reject) => label.is_malicious,
        (Mode::Normal, Decision::Execute) => !label.is_malicious,
        _ => false,
    };
    if !consistent {
        return Err(cx.err(
            "label",
            format!(
                "is inconsistent: mode_served {:?}, is_malicious {}, target_decision {:?} (expected malicious/true/reject \
                 or normal/false/execute)",
                label.mode_served, label.is_malicious, label.target_decision
            ),
        ));
    }
    Ok(Episode {
        record_id: cx.str(o, "", "record_id")?,
        pair_id: cx.str(o, "", "pair_id")?,
        sample: Sample {
            benchmark: cx.str(s, "sample", "benchmark")?,
            domain: cx.str(s, "sample", "domain")?,
            tool_family: cx.str(s, "sample", "tool_family")?,
            task_id: cx.str(s, "sample", "task_id")?,
            variant_id: cx.str(s, "sample", "variant_id")?,
            variant_type: cx.str(s, "sample", "variant_type")?,
            source_method: cx.str(s, "sample", "source_method")?,
            attack_profile: cx.str(s, "sample", "attack_profile")?,
            episode_index: cx.int(s, "sample", "episode_index")?,
        },
        label,
        trajectory,
        final_action: FinalAction {
            tool_name: cx.str(fa, "final_action", "tool_name")?,
            parameters,
            expected_effect: cx.str(fa, "final_action", "expected_effect")?,
            trigger_spec: TriggerSpec {
                required_all_tokens: cx.strings(ts, "final_action.trigger_spec", "required_all_tokens")?,
                required_any_tokens: cx.strings(ts, "final_action.trigger_spec", "required_any_tokens")?,
                forbidden_tokens: cx.strings(ts, "final_action.trigger_spec", "forbidden_tokens")?,
            },
        },
    })
}

/// Parse episodes from text: a JSON array of records, or JSON Lines (blank lines skipped). `file` labels errors.
pub fn parse_episodes(text: &str, file: &str) -> Result<Vec<Episode>, GuardError> {
    let trimmed = text.trim_start();
    let mut out = Vec::new();
    if trimmed.starts_with('[') {
        let v: Value = serde_json::from_str(text).map_err(|e| GuardError::Json {
            file: file.into(),
            record: "the JSON array".into(),
            message: e.to_string(),
        })?;
        let arr = v.as_array().map(Vec::as_slice).unwrap_or_default();
        for (i, rec) in arr.iter().enumerate() {
            out.push(episode_from_value(rec, file, &format!("element {i}"))?);
        }
    } else {
        for (i, line) in text.lines().enumerate() {
            if line.trim().is_empty() {
                continue;
            }
            let loc = format!("line {}", i + 1);
            let v: Value = serde_json::from_str(line).map_err(|e| GuardError::Json {
                file: file.into(),
                record: loc.clone(),
                message: e.to_string(),
            })?;
            out.push(episode_from_value(&v, file, &loc)?);
        }
    }
    if out.is_empty() {
        return Err(GuardError::Dataset(format!(
            "{file}: no episodes (expected a JSON array or JSON Lines of {SCHEMA})"
        )));
    }
    Ok(out)
}

/// Load a JSON array or JSONL file of episodes.
pub fn load_episodes(path: &Path) -> Result<Vec<Episode>, GuardError> {
    let text = std::fs::read_to_string(path).map_err(|source| GuardError::Io { path: path.to_path_buf(), source })?;
    parse_episodes(&text, &path.display().to_string())
}

/// Check an episode set for evaluation: distinct record ids, and (unless `allow_unpaired`) every pair holding both a
/// malicious episode and its benign control. Returns the number of pairs.
pub fn check_pairs(eps: &[Episode], allow_unpaired: bool) -> Result<usize, GuardError> {
    let mut ids: BTreeMap<&str, usize> = BTreeMap::new();
    for (i, e) in eps.iter().enumerate() {
        if let Some(j) = ids.insert(&e.record_id, i) {
            return Err(GuardError::Dataset(format!(
                "record_id \"{}\" appears twice (episodes {j} and {i}); record ids must be unique",
                e.record_id
            )));
        }
    }
    let mut pairs: BTreeMap<&str, (Vec<&str>, Vec<&str>)> = BTreeMap::new();
    for e in eps {
        let slot = pairs.entry(&e.pair_id).or_default();
        if e.is_malicious() {
            slot.0.push(&e.record_id);
        } else {
            slot.1.push(&e.record_id);
        }
    }
    if !allow_unpaired {
        for (pid, (mal, ben)) in &pairs {
            if mal.is_empty() || ben.is_empty() {
                let (side, have) = if mal.is_empty() { ("benign", ben) } else { ("malicious", mal) };
                return Err(GuardError::Dataset(format!(
                    "pair \"{pid}\" has only its {side} side (record_id {}); every pair needs a malicious episode and \
                     its matched benign control (pass --allow-unpaired to evaluate anyway)",
                    have.iter().map(|r| format!("\"{r}\"")).collect::<Vec<_>>().join(", ")
                )));
            }
        }
    }
    Ok(pairs.len())
}
