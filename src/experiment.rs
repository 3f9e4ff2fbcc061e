//! Experiment files (`experiments/*.toml`): which model, which prompts, what to capture.
//!
//! ```toml
//! [model]
//! path = "models/SmolLM2-135M-Instruct.Q4_1.gguf"
//! dtype = "f32"            # f32 | f16 | bf16 (compute dtype)
//! device = "auto"          # cpu | cuda | cuda:N | auto
//! # devices = ["cuda:0", "cuda:1", "cpu"]  # optional: split the blocks over these by memory (overrides `device`)
//! # device_memory = "cuda:0=70GiB"         # optional: weight budgets instead of the measured free memory
//!
//! [cases]
//! file = "experiments/cases/channel-trust.jsonl"
//! channels = ["chat", "tool"]              # chat | chat+tools | tool
//! conditions = ["adversarial", "benign"]
//! tool_rendering = "auto"                   # auto | native | hermes
//! # max_per_family = 16                     # optional: the first N cases of each family only
//!
//! [capture]
//! layers = "frac:0.2,0.4,0.6,0.8"           # or a list: [6, 12, 18, 24]
//! hook = "hook_resid_post"                  # hook_resid_pre | hook_attn_out | hook_resid_mid | hook_mlp_out | hook_resid_post
//! positions = ["last"]                      # last | payload_last | user_end
//! batch_size = 8
//! store = "f32"                             # f32 | f16 (stored dtype; compute stays as [model] dtype)
//! run = "channel-trust"                     # activations/<run>/activations.h5
//! out_dir = "activations"
//!
//! [probe]                                   # trustlens sweep: the probe stage
//! methods = ["logistic", "diffmeans", "rbf"]
//! positions = ["last"]                      # default: every captured position
//! folds = 5
//! bootstrap = 1000
//! permutations = 100
//! seed = 0
//!
//! [patch]                                   # trustlens sweep: the patching stage
//! layers = "all"                            # default: the capture layers
//! sets = ["6+12+18+24"]
//! readout = "ln_final"                      # ln_final | resid_post | logits
//! max_cases = 8                             # per family; default all
//! random_control = true
//! n_boot = 2000
//! seed = 0
//!
//! [behave]                                  # trustlens sweep: the behave and sas stages
//! max_new_tokens = 96
//! batch_size = 8
//! judges = ["indicator"]
//! n_boot = 10000
//!
//! [sweep]
//! stages = ["capture", "probe", "patch", "figures"]   # + "behave", "sas"
//! figures_dir = "figures"
//! ```
//!
//! Every table rejects unknown keys and names the nearest valid one. Relative paths are resolved against the current
//! directory.
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// Errors reading or checking an experiment file. One line each, naming the file.
#[derive(Debug, thiserror::Error)]
pub enum ExperimentError {
    #[error("{path}: {source}", path = .path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{path}: {message}", path = .path.display())]
    Parse { path: PathBuf, message: String },
    #[error("{0}")]
    Invalid(String),
}

/// A whole experiment file. New sections go here as `#[serde(default)]` fields.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Experiment {
    pub model: ModelSection,
    pub cases: CasesSection,
    #[serde(default)]
    pub capture: CaptureSection,
    /// `[probe]`: settings of the sweep's probe stage (`trustlens sweep`).
    #[serde(default)]
    pub probe: ProbeSection,
    /// `[patch]`: settings of the sweep's patching stage.
    #[serde(default)]
    pub patch: PatchSection,
    /// `[behave]`: settings of the sweep's behaviour stage (generation and six-class scoring).
    #[serde(default)]
    pub behave: BehaveSection,
    /// `[sweep]`: which stages `trustlens sweep` runs and where results go.
    #[serde(default)]
    pub sweep: SweepSection,
}

/// `[model]`
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelSection {
    /// Model directory, `.safetensors` or `.gguf` file.
    pub path: PathBuf,
    /// Compute dtype: `f32`, `f16` or `bf16`.
    #[serde(default = "default_dtype")]
    pub dtype: String,
    /// `cpu`, `cuda`, `cuda:N` or `auto`.
    #[serde(default = "default_device")]
    pub device: String,
    /// Split the decoder blocks over these devices in order, by memory (`cuda:0`, `cuda:1`, `cpu`, `auto`); when set,
    /// `device` is not used. See `trustlens::model::placement`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub devices: Option<Vec<String>>,
    /// Weight budgets per device for `devices` (`cuda:0=70GiB,cpu=200GB`) instead of the measured free memory.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device_memory: Option<String>,
}

impl ModelSection {
    /// Where the model goes: the `devices` list if set, else `device`.
    pub fn device_choice(&self) -> crate::model::DeviceChoice {
        match &self.devices {
            Some(list) => {
                crate::model::DeviceChoice::Split { devices: list.join(","), memory: self.device_memory.clone() }
            }
            None => crate::model::DeviceChoice::Single(self.device.clone()),
        }
    }
}

/// `[cases]`
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CasesSection {
    /// JSONL case file.
    pub file: PathBuf,
    /// Delivery channels to render (`chat`, `chat+tools`, `tool`).
    #[serde(default = "default_channels")]
    pub channels: Vec<String>,
    /// Conditions (`adversarial`, `benign`).
    #[serde(default = "default_conditions")]
    pub conditions: Vec<String>,
    /// `auto` (native if the template supports tools, else Hermes), `native` or `hermes`.
    #[serde(default = "default_tool_rendering")]
    pub tool_rendering: String,
    /// Keep only the first N cases of each family, in file order (quick runs; leave out for every case).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_per_family: Option<usize>,
}

/// `[capture]`
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CaptureSection {
    /// Layer indices (0-based blocks), `"frac:f1,f2,..."` (layer = round(f * n_layers), clamped to the last) or
    /// `"all"`.
    #[serde(default = "default_layers")]
    pub layers: LayerSpec,
    /// Hook name inside each block, e.g. `hook_resid_post` (`blocks.{l}.<hook>`).
    #[serde(default = "default_hook")]
    pub hook: String,
    /// Token positions: `last` (last prompt token), `payload_last` (last payload token), `user_end` (last token of
    /// the user message's content).
    #[serde(default = "default_positions")]
    pub positions: Vec<String>,
    /// Prompts per forward pass (halved automatically on CUDA out-of-memory).
    #[serde(default = "default_batch_size")]
    pub batch_size: usize,
    /// Stored dtype: `f32` (or `f16`).
    #[serde(default = "default_store")]
    pub store: String,
    /// Run name: output goes to `<out_dir>/<run>/activations.h5`. Default: the experiment file's stem.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run: Option<String>,
    /// Directory holding runs.
    #[serde(default = "default_out_dir")]
    pub out_dir: PathBuf,
}

impl Default for CaptureSection {
    fn default() -> Self {
        CaptureSection {
            layers: default_layers(),
            hook: default_hook(),
            positions: default_positions(),
            batch_size: default_batch_size(),
            store: default_store(),
            run: None,
            out_dir: default_out_dir(),
        }
    }
}

/// A layer set: explicit indices or depth fractions.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum LayerSpec {
    List(Vec<usize>),
    Text(String),
}

impl LayerSpec {
    /// Parse a command-line value: `6,12,18`, `frac:0.2,0.4` or `all`.
    pub fn parse_arg(s: &str) -> Result<LayerSpec, ExperimentError> {
        let s = s.trim();
        if s.starts_with("frac:") || s == "all" {
            return Ok(LayerSpec::Text(s.to_string()));
        }
        let list: Result<Vec<usize>, _> = s.split(',').map(|x| x.trim().parse::<usize>()).collect();
        list.map(LayerSpec::List).map_err(|_| {
            ExperimentError::Invalid(format!("bad layer list `{s}` (expected e.g. `6,12,18` or `frac:0.2,0.4,0.6`)"))
        })
    }

    /// The sorted, de-duplicated block indices for a model with `n_layers` blocks.
    pub fn resolve(&self, n_layers: usize) -> Result<Vec<usize>, ExperimentError> {
        let mut out = match self {
            LayerSpec::List(v) => {
                if v.is_empty() {
                    return Err(ExperimentError::Invalid("capture.layers is empty".into()));
                }
                for &l in v {
                    if l >= n_layers {
                        return Err(ExperimentError::Invalid(format!(
                            "layer {l} is past the model's depth ({n_layers} layers: 0..={})",
                            n_layers.saturating_sub(1)
                        )));
                    }
                }
                v.clone()
            }
            LayerSpec::Text(t) if t == "all" => (0..n_layers).collect(),
            LayerSpec::Text(t) => {
                let body = t.strip_prefix("frac:").ok_or_else(|| {
                    ExperimentError::Invalid(format!(
                        "capture.layers: `{t}` is neither a list of integers nor `frac:f1,f2,...`"
                    ))
                })?;
                let mut v = Vec::new();
                for part in body.split(',') {
                    let f: f64 = part.trim().parse().map_err(|_| {
                        ExperimentError::Invalid(format!("capture.layers: `{}` is not a number in `{t}`", part.trim()))
                    })?;
                    if !(f > 0.0 && f <= 1.0) {
                        return Err(ExperimentError::Invalid(format!(
                            "capture.layers: fraction {f} is outside (0, 1] in `{t}`"
                        )));
                    }
                    v.push(((f * n_layers as f64).round() as usize).min(n_layers - 1));
                }
                v
            }
        };
        out.sort_unstable();
        out.dedup();
        Ok(out)
    }
}

impl std::fmt::Display for LayerSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            LayerSpec::List(v) => write!(f, "{}", v.iter().map(|x| x.to_string()).collect::<Vec<_>>().join(",")),
            LayerSpec::Text(t) => f.write_str(t),
        }
    }
}

fn default_dtype() -> String {
    "f32".into()
}
fn default_device() -> String {
    "auto".into()
}
fn default_channels() -> Vec<String> {
    vec!["chat".into(), "tool".into()]
}
fn default_conditions() -> Vec<String> {
    vec!["adversarial".into(), "benign".into()]
}
fn default_tool_rendering() -> String {
    "auto".into()
}
fn default_layers() -> LayerSpec {
    LayerSpec::Text("frac:0.2,0.4,0.6,0.8".into())
}
fn default_hook() -> String {
    "hook_resid_post".into()
}
fn default_positions() -> Vec<String> {
    vec!["last".into()]
}
fn default_batch_size() -> usize {
    8
}
fn default_store() -> String {
    "f32".into()
}
fn default_out_dir() -> PathBuf {
    PathBuf::from("activations")
}

/// Position names a capture understands.
pub const POSITIONS: [&str; 3] = ["last", "payload_last", "user_end"];
/// Hook names inside a block.
pub const BLOCK_HOOKS: [&str; 5] =
    ["hook_resid_pre", "hook_attn_out", "hook_resid_mid", "hook_mlp_out", "hook_resid_post"];

impl Experiment {
    /// Read and check an experiment file.
    pub fn load(path: &Path) -> Result<Experiment, ExperimentError> {
        let text =
            std::fs::read_to_string(path).map_err(|source| ExperimentError::Io { path: path.to_path_buf(), source })?;
        Self::parse(&text, path)
    }

    /// Parse TOML text (`origin` names it in errors) and check values that need no model.
    pub fn parse(text: &str, origin: &Path) -> Result<Experiment, ExperimentError> {
        let exp: Experiment = toml::from_str(text).map_err(|e| ExperimentError::Parse {
            path: origin.to_path_buf(),
            message: describe_toml_error(text, &e),
        })?;
        exp.check().map_err(|m| ExperimentError::Parse { path: origin.to_path_buf(), message: m })?;
        Ok(exp)
    }

    /// Value checks that need no model (also run after command-line overrides).
    pub fn check(&self) -> Result<(), String> {
        self.model.dtype.parse::<crate::model::DType>()?;
        if let Some(list) = &self.model.devices {
            if list.is_empty() {
                return Err("model.devices: the list is empty (leave the key out to use model.device)".into());
            }
            for d in list {
                if !d.eq_ignore_ascii_case("auto") && crate::model::placement::parse_device_name(d).is_none() {
                    return Err(format!("model.devices: unknown device `{d}` (cpu, cuda, cuda:N, auto)"));
                }
            }
        }
        if let Some(m) = &self.model.device_memory {
            crate::model::placement::parse_memory(m).map_err(|e| {
                format!("model.device_memory: {}", e.to_string().trim_start_matches("--device-memory: "))
            })?;
            if self.model.devices.is_none() {
                return Err("model.device_memory is only used with model.devices".into());
            }
        }
        for c in &self.cases.channels {
            if crate::cases::Channel::parse(c).is_none() {
                return Err(format!(
                    "cases.channels: unknown channel `{c}`{}",
                    suggest(c, &["chat", "chat+tools", "tool"])
                ));
            }
        }
        if self.cases.channels.is_empty() || self.cases.conditions.is_empty() {
            return Err("cases.channels and cases.conditions must not be empty".into());
        }
        for c in &self.cases.conditions {
            if crate::cases::Condition::parse(c).is_none() {
                return Err(format!(
                    "cases.conditions: unknown condition `{c}`{}",
                    suggest(c, &["adversarial", "benign"])
                ));
            }
        }
        if !["auto", "native", "hermes"].contains(&self.cases.tool_rendering.as_str()) {
            return Err(format!(
                "cases.tool_rendering: `{}` is not one of auto, native, hermes{}",
                self.cases.tool_rendering,
                suggest(&self.cases.tool_rendering, &["auto", "native", "hermes"])
            ));
        }
        let c = &self.capture;
        if !BLOCK_HOOKS.contains(&c.hook.as_str()) {
            return Err(format!(
                "capture.hook: `{}` is not one of {}{}",
                c.hook,
                BLOCK_HOOKS.join(", "),
                suggest(&c.hook, &BLOCK_HOOKS)
            ));
        }
        if c.positions.is_empty() {
            return Err("capture.positions must not be empty".into());
        }
        for p in &c.positions {
            if !POSITIONS.contains(&p.as_str()) {
                return Err(format!(
                    "capture.positions: unknown position `{p}` (last, payload_last, user_end){}",
                    suggest(p, &POSITIONS)
                ));
            }
        }
        let mut seen = c.positions.clone();
        seen.sort();
        seen.dedup();
        if seen.len() != c.positions.len() {
            return Err("capture.positions lists a position twice".into());
        }
        if c.batch_size == 0 {
            return Err("capture.batch_size must be at least 1".into());
        }
        match c.store.as_str() {
            "f32" | "f16" => {}
            other => return Err(format!("capture.store: `{other}` is not f32 or f16")),
        }
        if let Some(run) = &c.run {
            if run.is_empty() || run.contains('/') || run.contains('\\') || run == "." || run == ".." {
                return Err(format!("capture.run: `{run}` must be a plain name (no slashes)"));
            }
        }
        if let LayerSpec::Text(t) = &c.layers {
            if !t.starts_with("frac:") && t != "all" {
                return Err(format!("capture.layers: `{t}` is neither a list of integers, `frac:f1,f2,...` nor `all`"));
            }
        }
        self.check_sweep_sections()
    }

    /// The run name: `capture.run`, else the experiment file's stem.
    pub fn run_name(&self, origin: &Path) -> String {
        self.capture
            .run
            .clone()
            .unwrap_or_else(|| origin.file_stem().and_then(|s| s.to_str()).unwrap_or("run").to_string())
    }

    /// The effective configuration as TOML (stored in activation files).
    pub fn to_toml(&self) -> String {
        toml::to_string(self).expect("experiment serialises")
    }
}

/// One line from a TOML error: line number, the message, and for unknown keys the nearest valid key.
fn describe_toml_error(text: &str, e: &toml::de::Error) -> String {
    let msg = e.message().trim().replace('\n', " ");
    let at = e.span().map(|s| {
        let line = text[..s.start.min(text.len())].matches('\n').count() + 1;
        format!("line {line}: ")
    });
    let mut out = format!("{}{msg}", at.unwrap_or_default());
    if let Some(rest) = msg.strip_prefix("unknown field `") {
        if let Some((bad, tail)) = rest.split_once('`') {
            let valid: Vec<&str> = tail.split('`').skip(1).step_by(2).collect();
            let hint = suggest(bad, &valid);
            if !hint.is_empty() {
                out = format!("{}unknown key `{bad}`{hint}; valid keys: {}", at_prefix(text, e), valid.join(", "));
            }
        }
    }
    out
}

fn at_prefix(text: &str, e: &toml::de::Error) -> String {
    e.span()
        .map(|s| format!("line {}: ", text[..s.start.min(text.len())].matches('\n').count() + 1))
        .unwrap_or_default()
}

/// ` (did you mean `x`?)` for the closest candidate within a small edit distance, or "".
pub fn suggest(bad: &str, candidates: &[&str]) -> String {
    let best = candidates.iter().map(|c| (levenshtein(bad, c), *c)).min_by_key(|(d, _)| *d);
    match best {
        Some((d, c)) if d <= (bad.len().max(3) / 2).max(2) => format!(" (did you mean `{c}`?)"),
        _ => String::new(),
    }
}

fn levenshtein(a: &str, b: &str) -> usize {
    let a: Vec<char> = a.chars().collect();
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for i in 1..=a.len() {
        let mut cur = vec![i; b.len() + 1];
        for j in 1..=b.len() {
            let cost = usize::from(a[i - 1] != b[j - 1]);
            cur[j] = (prev[j] + 1).min(cur[j - 1] + 1).min(prev[j - 1] + cost);
        }
        prev = cur;
    }
    prev[b.len()]
}

/// `[probe]`: the probe stage of `trustlens sweep` (the same settings as `trustlens probe`'s flags).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProbeSection {
    /// Probe methods: `logistic`, `diffmeans`, `rbf`.
    #[serde(default = "default_probe_methods")]
    pub methods: Vec<String>,
    /// Positions to probe (default: every captured position).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub positions: Vec<String>,
    /// Outer grouped folds (grouped by case).
    #[serde(default = "default_folds")]
    pub folds: usize,
    /// Bootstrap replicates over cases for the 95% CIs.
    #[serde(default = "default_probe_bootstrap")]
    pub bootstrap: usize,
    /// Label permutations for the p-values (0: none).
    #[serde(default = "default_permutations")]
    pub permutations: usize,
    /// Seed for folds, bootstrap and permutations.
    #[serde(default)]
    pub seed: u64,
}

impl Default for ProbeSection {
    fn default() -> Self {
        ProbeSection {
            methods: default_probe_methods(),
            positions: Vec::new(),
            folds: default_folds(),
            bootstrap: default_probe_bootstrap(),
            permutations: default_permutations(),
            seed: 0,
        }
    }
}

/// `[patch]`: the patching stage of `trustlens sweep` (the same settings as `trustlens patch`'s flags).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PatchSection {
    /// Single layers to patch (list, `frac:...` or `"all"`); default: the capture layers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub layers: Option<LayerSpec>,
    /// Extra layer sets patched together (`"12+20"`, `"12..29"`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub sets: Vec<String>,
    /// Readout: `ln_final`, `resid_post` or `logits`.
    #[serde(default = "default_readout")]
    pub readout: String,
    /// Patch only the first N cases of each family (None: all).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_cases: Option<usize>,
    /// Also patch a random vector of the source's norm (a control).
    #[serde(default)]
    pub random_control: bool,
    /// Bootstrap replicates for the CIs.
    #[serde(default = "default_patch_boot")]
    pub n_boot: usize,
    /// Seed for the bootstrap and the random control.
    #[serde(default)]
    pub seed: u64,
}

impl Default for PatchSection {
    fn default() -> Self {
        PatchSection {
            layers: None,
            sets: Vec::new(),
            readout: default_readout(),
            max_cases: None,
            random_control: false,
            n_boot: default_patch_boot(),
            seed: 0,
        }
    }
}

/// `[behave]`: the behaviour stage of `trustlens sweep` (the same settings as `trustlens behave run`'s flags); its
/// outcomes feed the `sas` stage.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BehaveSection {
    /// Token budget per output.
    #[serde(default = "default_max_new_tokens")]
    pub max_new_tokens: usize,
    /// Prompts decoded together.
    #[serde(default = "default_batch_size")]
    pub batch_size: usize,
    /// Judges for the rows the rules leave open (`indicator`, `model`, `model:PATH`, `import:[NAME=]FILE`); the
    /// first decides, the others are compared with it (Cohen's kappa).
    #[serde(default = "default_judges")]
    pub judges: Vec<String>,
    /// Sample with this seed and each case's sampling parameters instead of greedy decoding.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sample_seed: Option<u64>,
    /// SAS bootstrap replicates.
    #[serde(default = "default_sas_boot")]
    pub n_boot: usize,
}

impl Default for BehaveSection {
    fn default() -> Self {
        BehaveSection {
            max_new_tokens: default_max_new_tokens(),
            batch_size: default_batch_size(),
            judges: default_judges(),
            sample_seed: None,
            n_boot: default_sas_boot(),
        }
    }
}

fn default_max_new_tokens() -> usize {
    96
}
fn default_judges() -> Vec<String> {
    vec!["indicator".into()]
}
fn default_sas_boot() -> usize {
    10000
}

/// `[sweep]`: stages and output folder of `trustlens sweep`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SweepSection {
    /// Stages to run, in pipeline order: `capture`, `probe`, `patch`, `behave`, `sas`, `figures` (default: all but
    /// the behavioural `behave` and `sas`).
    #[serde(default = "default_stages")]
    pub stages: Vec<String>,
    /// Results and figures go to `<figures_dir>/<run>/`.
    #[serde(default = "default_figures_dir")]
    pub figures_dir: PathBuf,
}

impl Default for SweepSection {
    fn default() -> Self {
        SweepSection { stages: default_stages(), figures_dir: default_figures_dir() }
    }
}

/// Stage names of `trustlens sweep`, in pipeline order.
pub const STAGES: [&str; 6] = ["capture", "probe", "patch", "behave", "sas", "figures"];

fn default_probe_methods() -> Vec<String> {
    vec!["logistic".into(), "diffmeans".into(), "rbf".into()]
}
fn default_folds() -> usize {
    5
}
fn default_probe_bootstrap() -> usize {
    1000
}
fn default_permutations() -> usize {
    100
}
fn default_readout() -> String {
    "ln_final".into()
}
fn default_patch_boot() -> usize {
    2000
}
fn default_stages() -> Vec<String> {
    ["capture", "probe", "patch", "figures"].iter().map(|s| s.to_string()).collect()
}
fn default_figures_dir() -> PathBuf {
    PathBuf::from("figures")
}

impl Experiment {
    /// Checks of the `[probe]`, `[patch]` and `[sweep]` sections that need no model.
    fn check_sweep_sections(&self) -> Result<(), String> {
        const METHODS: [&str; 3] = ["logistic", "diffmeans", "rbf"];
        if self.probe.methods.is_empty() {
            return Err("probe.methods must not be empty".into());
        }
        for m in &self.probe.methods {
            if !METHODS.contains(&m.as_str()) {
                return Err(format!(
                    "probe.methods: unknown method `{m}` (logistic, diffmeans, rbf){}",
                    suggest(m, &METHODS)
                ));
            }
        }
        for p in &self.probe.positions {
            if !self.capture.positions.contains(p) {
                return Err(format!(
                    "probe.positions: `{p}` is not captured (capture.positions: {})",
                    self.capture.positions.join(", ")
                ));
            }
        }
        if self.probe.folds < 2 {
            return Err("probe.folds must be at least 2".into());
        }
        const READOUTS: [&str; 3] = ["ln_final", "resid_post", "logits"];
        if !READOUTS.contains(&self.patch.readout.as_str()) {
            return Err(format!(
                "patch.readout: `{}` is not one of ln_final, resid_post, logits{}",
                self.patch.readout,
                suggest(&self.patch.readout, &READOUTS)
            ));
        }
        if self.patch.max_cases == Some(0) {
            return Err("patch.max_cases must be at least 1 (leave it out for all cases)".into());
        }
        if let Some(LayerSpec::Text(t)) = &self.patch.layers {
            if !t.starts_with("frac:") && t != "all" {
                return Err(format!("patch.layers: `{t}` is neither a list of integers, `frac:f1,f2,...` nor `all`"));
            }
        }
        if self.cases.max_per_family == Some(0) {
            return Err("cases.max_per_family must be at least 1 (leave it out for every case)".into());
        }
        if self.behave.max_new_tokens == 0 || self.behave.batch_size == 0 {
            return Err("behave.max_new_tokens and behave.batch_size must be at least 1".into());
        }
        if self.behave.judges.is_empty() {
            return Err("behave.judges must not be empty (e.g. [\"indicator\"])".into());
        }
        if self.sweep.stages.iter().any(|s| s == "sas") && !self.sweep.stages.iter().any(|s| s == "behave") {
            return Err("sweep.stages: `sas` needs `behave` (its outcomes)".into());
        }
        if self.sweep.stages.is_empty() {
            return Err("sweep.stages must not be empty".into());
        }
        for s in &self.sweep.stages {
            if !STAGES.contains(&s.as_str()) {
                return Err(format!(
                    "sweep.stages: unknown stage `{s}` ({}){}",
                    STAGES.join(", "),
                    suggest(s, &STAGES)
                ));
            }
        }
        Ok(())
    }
}
