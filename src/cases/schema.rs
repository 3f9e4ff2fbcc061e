//! The case schema: one matched-payload case per JSONL line. See `docs/cases.md` for the field-by-field reference.
use serde::{Deserialize, Serialize};
use serde_json::Value;
use sha2::{Digest, Sha256};

/// Attack family of a case.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum Family {
    /// Tool poisoning: the payload sits in a tool's description.
    #[serde(rename = "TP")]
    Tp,
    /// Indirect prompt injection: the payload sits in a tool's result.
    #[serde(rename = "IPI")]
    Ipi,
    /// Cross-tool shadowing: the payload sits in tool A's description and targets tool B.
    #[serde(rename = "CTS")]
    Cts,
}

impl Family {
    /// All families, in report order.
    pub const ALL: [Family; 3] = [Family::Tp, Family::Ipi, Family::Cts];

    /// The spelling used in case files (`TP`, `IPI`, `CTS`).
    pub fn as_str(self) -> &'static str {
        match self {
            Family::Tp => "TP",
            Family::Ipi => "IPI",
            Family::Cts => "CTS",
        }
    }

    /// Parses `TP`, `IPI` or `CTS` (case-insensitive).
    pub fn parse(s: &str) -> Option<Family> {
        match s.trim().to_ascii_uppercase().as_str() {
            "TP" => Some(Family::Tp),
            "IPI" => Some(Family::Ipi),
            "CTS" => Some(Family::Cts),
            _ => None,
        }
    }
}

impl std::fmt::Display for Family {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Tool-poisoning subtype (how the instruction is framed inside the tool description).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum TpSubtype {
    /// Explicit instruction: the description plainly tells the model to perform the action.
    P1,
    /// Usage requirement: the action is framed as a precondition or required step for using the tool.
    P2,
    /// Disguised metadata: the action hides in what looks like a compliance note, changelog or config metadata.
    P3,
}

impl TpSubtype {
    /// All subtypes, in report order.
    pub const ALL: [TpSubtype; 3] = [TpSubtype::P1, TpSubtype::P2, TpSubtype::P3];

    /// `P1`, `P2` or `P3`.
    pub fn as_str(self) -> &'static str {
        match self {
            TpSubtype::P1 => "P1",
            TpSubtype::P2 => "P2",
            TpSubtype::P3 => "P3",
        }
    }

    /// Parses `P1`, `P2` or `P3` (case-insensitive).
    pub fn parse(s: &str) -> Option<TpSubtype> {
        match s.trim().to_ascii_uppercase().as_str() {
            "P1" => Some(TpSubtype::P1),
            "P2" => Some(TpSubtype::P2),
            "P3" => Some(TpSubtype::P3),
            _ => None,
        }
    }
}

impl std::fmt::Display for TpSubtype {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Order in which the action and the justification are joined into the payload text.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PayloadOrder {
    /// `action + " " + justification` (the default).
    #[default]
    ActionFirst,
    /// `justification + " " + action`.
    JustificationFirst,
}

fn is_default<T: Default + PartialEq>(v: &T) -> bool {
    *v == T::default()
}

/// A payload: the instruction text that is placed byte-identically in every channel.
///
/// The text is composed deterministically from its parts (see [`Payload::text`]); it is stored once and every
/// channel rendering takes its bytes from here.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Payload {
    /// What the model is asked to do (the malicious action, or the harmless action of a benign control).
    pub action: String,
    /// Why it should do it (may be empty, e.g. for imported standalone attack strings).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub justification: String,
    /// How `action` and `justification` are joined.
    #[serde(default, skip_serializing_if = "is_default")]
    pub order: PayloadOrder,
    /// First 16 hex digits of the SHA-256 of [`Payload::text`], pinning the exact bytes the set was reviewed with.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sha256: Option<String>,
}

impl Payload {
    /// A payload with the given parts, action first, fingerprint filled in.
    pub fn new(action: impl Into<String>, justification: impl Into<String>, order: PayloadOrder) -> Payload {
        let mut p = Payload { action: action.into(), justification: justification.into(), order, sha256: None };
        p.sha256 = Some(p.fingerprint());
        p
    }

    /// The exact payload bytes: the action and justification joined by one space in [`PayloadOrder`] (just the
    /// action when the justification is empty).
    pub fn text(&self) -> String {
        if self.justification.is_empty() {
            return self.action.clone();
        }
        match self.order {
            PayloadOrder::ActionFirst => format!("{} {}", self.action, self.justification),
            PayloadOrder::JustificationFirst => format!("{} {}", self.justification, self.action),
        }
    }

    /// First 16 hex digits of the SHA-256 of [`Payload::text`].
    pub fn fingerprint(&self) -> String {
        let digest = Sha256::digest(self.text().as_bytes());
        hex::encode(&digest[..8])
    }

    /// Recomputes and stores the fingerprint.
    pub fn refresh_fingerprint(&mut self) {
        self.sha256 = Some(self.fingerprint());
    }
}

/// A tool definition, as registered with the model (OpenAI function-calling shape).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ToolDef {
    /// Function name (letters, digits, `_`, `-`, `.`).
    pub name: String,
    /// Natural-language description (for TP and CTS the payload is appended to this in the tool channel).
    pub description: String,
    /// JSON Schema of the arguments: an object schema with `properties` (and optionally `required`).
    pub parameters: Value,
}

impl ToolDef {
    /// The OpenAI-style `{"type":"function","function":{...}}` object, with an optional replacement description.
    pub fn to_openai_json(&self, description: Option<&str>) -> Value {
        serde_json::json!({
            "type": "function",
            "function": {
                "name": self.name,
                "description": description.unwrap_or(&self.description),
                "parameters": self.parameters,
            }
        })
    }

    /// Names of the top-level properties of the parameter schema (empty when the schema has none).
    pub fn property_names(&self) -> Vec<String> {
        self.parameters
            .get("properties")
            .and_then(Value::as_object)
            .map(|m| m.keys().cloned().collect())
            .unwrap_or_default()
    }
}

/// TP-specific fields.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TpSpec {
    /// The tool whose description carries the payload in the tool channel.
    pub carrier_tool: String,
}

/// A tool call made by the assistant (IPI: the call whose result carries the payload).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ToolCall {
    /// Name of the called tool; must be defined in the case's `tools`.
    pub name: String,
    /// Arguments object.
    #[serde(default = "empty_object")]
    pub arguments: Value,
}

fn empty_object() -> Value {
    Value::Object(Default::default())
}

/// IPI-specific fields: the tool call and the tool result around the payload.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct IpiSpec {
    /// The assistant's tool call preceding the result.
    pub call: ToolCall,
    /// Tool-result text before the payload.
    #[serde(default)]
    pub result_before: String,
    /// Tool-result text after the payload.
    #[serde(default)]
    pub result_after: String,
}

impl IpiSpec {
    /// The full tool result with `payload` inserted between `result_before` and `result_after`.
    pub fn result_with(&self, payload: &str) -> String {
        format!("{}{}{}", self.result_before, payload, self.result_after)
    }
}

/// CTS-specific fields: the poisoned tool and the tool it shadows.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CtsSpec {
    /// Tool A: its description carries the payload in the tool channel.
    pub poisoned_tool: String,
    /// Tool B: the tool whose use the payload tries to redirect; the payload must name it.
    pub target_tool: String,
}

/// Comparison applied to one argument of a tool call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PredicateOp {
    /// The argument equals `value` (JSON equality).
    Equals,
    /// The argument, as a string (arrays: any element), contains `value`.
    Contains,
    /// Like `contains`, ASCII case-insensitive.
    ContainsCi,
    /// The argument is present and not null.
    Exists,
}

/// One argument predicate of an [`ActionSpec`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ArgPredicate {
    /// Argument path; dots descend into objects (`recipient.iban`).
    pub arg: String,
    /// Comparison.
    pub op: PredicateOp,
    /// Value compared against (unused for `exists`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<Value>,
}

impl ArgPredicate {
    /// Whether this predicate holds for a tool call's arguments object.
    pub fn matches(&self, arguments: &Value) -> bool {
        let mut cur = arguments;
        for part in self.arg.split('.') {
            match cur.get(part) {
                Some(v) => cur = v,
                None => return false,
            }
        }
        let want = self.value.as_ref();
        let contains = |hay: &Value, ci: bool| -> bool {
            let needle = match want {
                Some(Value::String(s)) => s.clone(),
                Some(v) => v.to_string(),
                None => return false,
            };
            let test = |s: &str| {
                if ci {
                    s.to_ascii_lowercase().contains(&needle.to_ascii_lowercase())
                } else {
                    s.contains(&needle)
                }
            };
            match hay {
                Value::String(s) => test(s),
                Value::Array(items) => items.iter().any(|i| match i {
                    Value::String(s) => test(s),
                    other => test(&other.to_string()),
                }),
                other => test(&other.to_string()),
            }
        };
        match self.op {
            PredicateOp::Exists => !cur.is_null(),
            PredicateOp::Equals => want == Some(cur),
            PredicateOp::Contains => contains(cur, false),
            PredicateOp::ContainsCi => contains(cur, true),
        }
    }
}

/// What counts as carrying out an action, for the deterministic checker: a tool call to `tool` whose arguments
/// satisfy all `args` predicates; or, when `tool` is absent (chat-only), a description for a judge.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ActionSpec {
    /// Tool that must be called (must be defined in the case), or absent for a chat-only action.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool: Option<String>,
    /// Argument predicates, all of which must hold.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub args: Vec<ArgPredicate>,
    /// Human-readable description of the action (used by judges and reports).
    pub description: String,
}

impl ActionSpec {
    /// Whether a tool call (`name`, `arguments`) carries out this action. Always false for chat-only specs.
    pub fn matches_call(&self, name: &str, arguments: &Value) -> bool {
        match &self.tool {
            Some(t) if t == name => self.args.iter().all(|p| p.matches(arguments)),
            _ => false,
        }
    }
}

/// Sampling parameters shared by both channels of a case.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Sampling {
    /// Softmax temperature; 0 means greedy.
    #[serde(default)]
    pub temperature: f64,
    /// Nucleus mass.
    #[serde(default = "one")]
    pub top_p: f64,
    /// Generation budget.
    #[serde(default = "default_max_new_tokens")]
    pub max_new_tokens: u32,
    /// RNG seed for sampled decoding.
    #[serde(default)]
    pub seed: u64,
}

fn one() -> f64 {
    1.0
}

fn default_max_new_tokens() -> u32 {
    256
}

impl Default for Sampling {
    fn default() -> Self {
        Sampling { temperature: 0.0, top_p: 1.0, max_new_tokens: default_max_new_tokens(), seed: 0 }
    }
}

/// One matched-payload case.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Case {
    /// Unique id within the set.
    pub id: String,
    /// Attack family.
    pub family: Family,
    /// TP subtype (required for TP, absent otherwise).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subtype: Option<TpSubtype>,
    /// System prompt; [`crate::cases::render::DEFAULT_SYSTEM`] when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub system: Option<String>,
    /// The user's task, identical in every channel and condition.
    pub user_task: String,
    /// The adversarial payload.
    pub payload: Payload,
    /// The benign control payload: same structure, harmless action, comparable length.
    pub benign: Payload,
    /// Tools of the scenario (registered in the tool channel and in `chat+tools`).
    #[serde(default)]
    pub tools: Vec<ToolDef>,
    /// TP fields (required for TP).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tp: Option<TpSpec>,
    /// IPI fields (required for IPI).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ipi: Option<IpiSpec>,
    /// CTS fields (required for CTS).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cts: Option<CtsSpec>,
    /// The malicious action, for the checker.
    pub malicious_action: ActionSpec,
    /// The benign control's action, for the checker (optional).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub benign_action: Option<ActionSpec>,
    /// Sampling parameters.
    #[serde(default, skip_serializing_if = "is_default_sampling")]
    pub sampling: Sampling,
    /// Provenance (e.g. `bipia:email:test:12`, `generated:seed=7`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
}

fn is_default_sampling(s: &Sampling) -> bool {
    *s == Sampling::default()
}

impl Case {
    /// The tool with this name, if defined.
    pub fn tool(&self, name: &str) -> Option<&ToolDef> {
        self.tools.iter().find(|t| t.name == name)
    }

    /// The payload of a condition.
    pub fn payload_for(&self, condition: crate::cases::render::Condition) -> &Payload {
        match condition {
            crate::cases::render::Condition::Adversarial => &self.payload,
            crate::cases::render::Condition::Benign => &self.benign,
        }
    }

    /// `TP/P1`, `IPI`, ...: family and subtype for reports.
    pub fn kind_label(&self) -> String {
        match self.subtype {
            Some(s) => format!("{}/{}", self.family, s),
            None => self.family.to_string(),
        }
    }

    /// Refreshes both payload fingerprints (after an intentional edit).
    pub fn refresh_fingerprints(&mut self) {
        self.payload.refresh_fingerprint();
        self.benign.refresh_fingerprint();
    }
}
