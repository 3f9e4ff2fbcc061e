//! `trustlens behave run | score | export-judge | import-judge`: behavioural evaluation of an experiment.
use std::collections::HashMap;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use clap::{Args, Subcommand};
use trustlens::behave::generate::run_dir;
use trustlens::behave::judge::{export_items, pending_items};
use trustlens::behave::record::write_atomic;
use trustlens::behave::{self, read_behaviour, BehaviourRow, GenerateRequest, JudgeSpec};
use trustlens::cases::io::load_cases;
use trustlens::cases::{Case, Condition};
use trustlens::experiment::Experiment;

/// Behavioural evaluation: generate on every case x channel x condition, parse tool calls, score six-class outcomes
/// (SUCCESS, IGNORED, REFUSED, DIRECT-EXECUTION, AMBIGUOUS, ERRORED) and compare judges. Files go to
/// `<out-dir>/<run>/`: behaviour.jsonl (raw outputs), outcomes.jsonl (scored rows, input of `trustlens sas`) and
/// judges.json. Decision rules: docs/behaviour.md.
///
/// Example: trustlens behave run experiments/channel-trust.toml --max-new-tokens 64
#[derive(Args)]
pub struct BehaveArgs {
    #[command(subcommand)]
    pub command: BehaveCommand,
}

#[derive(Subcommand)]
pub enum BehaveCommand {
    /// Generate (resumable) and score.
    ///
    /// Example: trustlens behave run experiments/channel-trust.toml --max-new-tokens 96 --judge indicator --judge model
    Run(RunArgs),
    /// Score an existing behaviour.jsonl again (other judges, changed rules).
    ///
    /// Example: trustlens behave score experiments/channel-trust.toml --judge model --judge indicator
    Score(ScoreArgs),
    /// Write the rows the rules leave to a judge as JSONL for any external judge (fill in `verdict`).
    ///
    /// Example: trustlens behave export-judge experiments/channel-trust.toml --out to-judge.jsonl
    ExportJudge(ExportArgs),
    /// Score with verdicts from an external judge (the export-judge file with `verdict` filled in), compared with
    /// further judges.
    ///
    /// Example: trustlens behave import-judge experiments/channel-trust.toml judged.jsonl --name gpt --compare indicator
    ImportJudge(ImportArgs),
}

/// Experiment file, overrides and the run folder, shared by every subcommand.
#[derive(Args, Clone)]
pub struct Common {
    /// Experiment file (TOML): [model] and [cases] are used.
    pub experiment: PathBuf,
    /// Run name: files go to `<out-dir>/<run>/` (default: the experiment's capture.run, else the file stem).
    #[arg(long)]
    pub run: Option<String>,
    /// Directory holding runs.
    #[arg(long, default_value = "figures")]
    pub out_dir: PathBuf,
    /// Override [model] path.
    #[arg(long)]
    pub model: Option<PathBuf>,
    /// Override [model] dtype (f32, f16, bf16).
    #[arg(long)]
    pub dtype: Option<String>,
    /// Override [model] device (cpu, cuda, cuda:N, auto).
    #[arg(long)]
    pub device: Option<String>,
    /// Override [cases] file.
    #[arg(long)]
    pub cases: Option<PathBuf>,
    /// Override [cases] channels, comma-separated (chat, chat+tools, tool).
    #[arg(long)]
    pub channels: Option<String>,
    /// Override [cases] tool_rendering (auto, native, hermes).
    #[arg(long)]
    pub tool_rendering: Option<String>,
    /// No progress bars.
    #[arg(long)]
    pub quiet: bool,
}

/// Judge choice, shared by run and score.
#[derive(Args, Clone)]
pub struct JudgeArgs {
    /// Judge for the rows the rules leave open (chat-channel replies, chat-only actions); repeat to compare judges
    /// (the first decides outcomes.jsonl, the others are compared with it by Cohen's kappa). `indicator`: the
    /// deterministic indicator judge; `model`: the experiment's model prompted as a judge; `model:PATH`: any other
    /// chat model; `import:[NAME=]FILE`: verdicts of an external judge.
    #[arg(long = "judge", value_name = "JUDGE", default_value = "indicator")]
    pub judges: Vec<String>,
    /// Prompts per forward pass of a model judge.
    #[arg(long, default_value_t = 8)]
    pub judge_batch_size: usize,
}

#[derive(Args)]
pub struct RunArgs {
    #[command(flatten)]
    pub common: Common,
    #[command(flatten)]
    pub judge: JudgeArgs,
    /// Token budget per output (each row uses the smaller of this and its case's sampling.max_new_tokens).
    #[arg(long, default_value_t = 96)]
    pub max_new_tokens: usize,
    /// Prompts per batch (sorted by length; finished rows leave the batch).
    #[arg(long, default_value_t = 8)]
    pub batch_size: usize,
    /// Sample with each case's temperature and top_p instead of greedy decoding (rows with temperature 0 stay
    /// greedy); the per-row seed mixes SEED, the case's sampling.seed and the prompt index.
    #[arg(long, value_name = "SEED")]
    pub sample: Option<u64>,
    /// Only this case (repeatable).
    #[arg(long = "case", value_name = "ID")]
    pub case_ids: Vec<String>,
    /// Only the first N cases of the case file.
    #[arg(long, value_name = "N")]
    pub limit_cases: Option<usize>,
    /// Model name written into the rows (default: from the model path, e.g. SmolLM2-135M-Instruct).
    #[arg(long)]
    pub model_name: Option<String>,
    /// Delete the run's behaviour/outcome files first (otherwise a run with other settings is refused, and a run
    /// with the same settings resumes).
    #[arg(long)]
    pub overwrite: bool,
    /// Generate only; score later with `behave score`.
    #[arg(long)]
    pub no_score: bool,
    /// Intra-op threads (0 = libtorch's default).
    #[arg(long, default_value_t = 0)]
    pub threads: i32,
}

#[derive(Args)]
pub struct ScoreArgs {
    #[command(flatten)]
    pub common: Common,
    #[command(flatten)]
    pub judge: JudgeArgs,
}

#[derive(Args)]
pub struct ExportArgs {
    #[command(flatten)]
    pub common: Common,
    /// Output file (default: `<out-dir>/<run>/judge-export.jsonl`).
    #[arg(long)]
    pub out: Option<PathBuf>,
}

#[derive(Args)]
pub struct ImportArgs {
    #[command(flatten)]
    pub common: Common,
    /// The export-judge file with `verdict` filled in (or any JSONL with `key` and `verdict`).
    pub verdicts: PathBuf,
    /// Judge name (outcome rows get `judge: import:<name>`; default: the file stem).
    #[arg(long)]
    pub name: Option<String>,
    /// Further judges to compare with the imported verdicts (indicator, model, model:PATH, import:FILE).
    #[arg(long, value_name = "JUDGE")]
    pub compare: Vec<String>,
    /// Prompts per forward pass of a model judge.
    #[arg(long, default_value_t = 8)]
    pub judge_batch_size: usize,
}

pub fn run(a: BehaveArgs) -> Result<()> {
    match a.command {
        BehaveCommand::Run(r) => run_cmd(r),
        BehaveCommand::Score(s) => {
            let (exp, dir) = load(&s.common)?;
            let judges = parse_judges(&s.judge.judges, &exp, s.judge.judge_batch_size)?;
            score(&exp, &dir, &judges, !s.common.quiet)
        }
        BehaveCommand::ExportJudge(e) => export(e),
        BehaveCommand::ImportJudge(i) => {
            let (exp, dir) = load(&i.common)?;
            let name = i
                .name
                .clone()
                .unwrap_or_else(|| i.verdicts.file_stem().and_then(|s| s.to_str()).unwrap_or("external").to_string());
            let mut judges = vec![JudgeSpec::Import { path: i.verdicts.clone(), name }];
            judges.extend(parse_judges(&i.compare, &exp, i.judge_batch_size)?);
            score(&exp, &dir, &judges, !i.common.quiet)
        }
    }
}

fn load(c: &Common) -> Result<(Experiment, PathBuf)> {
    let mut exp = Experiment::load(&c.experiment)?;
    if let Some(v) = &c.model {
        exp.model.path = v.clone();
    }
    if let Some(v) = &c.dtype {
        exp.model.dtype = v.clone();
    }
    if let Some(v) = &c.device {
        exp.model.device = v.clone();
    }
    if let Some(v) = &c.cases {
        exp.cases.file = v.clone();
    }
    if let Some(v) = &c.channels {
        exp.cases.channels = v.split(',').map(|s| s.trim().to_string()).filter(|s| !s.is_empty()).collect();
    }
    if let Some(v) = &c.tool_rendering {
        exp.cases.tool_rendering = v.clone();
    }
    exp.check().map_err(|m| anyhow::anyhow!("{}: {m}", c.experiment.display()))?;
    let dir = run_dir(&exp, &c.experiment, &c.out_dir, c.run.as_deref());
    Ok((exp, dir))
}

fn parse_judges(specs: &[String], exp: &Experiment, batch: usize) -> Result<Vec<JudgeSpec>> {
    specs
        .iter()
        .map(|s| JudgeSpec::parse(s, &exp.model.path, &exp.model.dtype, &exp.model.device, batch).map_err(Into::into))
        .collect()
}

fn run_cmd(r: RunArgs) -> Result<()> {
    let (exp, dir) = load(&r.common)?;
    let judges = parse_judges(&r.judge.judges, &exp, r.judge.judge_batch_size)?;
    let req = GenerateRequest {
        experiment: exp.clone(),
        origin: r.common.experiment.clone(),
        out_dir: r.common.out_dir.clone(),
        run: r.common.run.clone(),
        max_new_tokens: r.max_new_tokens,
        batch_size: r.batch_size,
        sample_seed: r.sample,
        threads: (r.threads > 0).then_some(r.threads),
        progress: !r.common.quiet,
        overwrite: r.overwrite,
        case_ids: (!r.case_ids.is_empty()).then(|| r.case_ids.clone()),
        limit_cases: r.limit_cases,
        model_name: r.model_name.clone(),
    };
    let rep = behave::run_generation(&req).with_context(|| format!("{}", r.common.experiment.display()))?;
    eprintln!(
        "{}: {} rows ({} resumed, {} generated, {} errored), {} new tokens in {:.1} s ({:.2} outputs/s), total {:.1} s",
        rep.path.display(),
        rep.rows,
        rep.resumed_rows,
        rep.computed_rows,
        rep.errored_rows,
        rep.new_tokens,
        rep.generate_seconds,
        rep.computed_rows as f64 / rep.generate_seconds.max(1e-9),
        rep.total_seconds
    );
    if r.no_score {
        return Ok(());
    }
    score(&exp, &dir, &judges, !r.common.quiet)
}

fn read_run(exp: &Experiment, dir: &Path) -> Result<(Vec<BehaviourRow>, HashMap<String, Case>)> {
    let path = dir.join("behaviour.jsonl");
    if !path.exists() {
        bail!("{}: no outputs yet; run `trustlens behave run` first", path.display());
    }
    let file = read_behaviour(&path)?;
    if file.dropped_partial_tail {
        eprintln!("{}: ignoring an unfinished last line (a run was interrupted)", path.display());
    }
    let rows: Vec<BehaviourRow> = file.rows.into_values().collect();
    if rows.is_empty() {
        bail!("{}: no rows", path.display());
    }
    let cases: HashMap<String, Case> =
        load_cases(&exp.cases.file)?.into_iter().map(|lc| (lc.case.id.clone(), lc.case)).collect();
    let meta_path = dir.join("behaviour.meta.json");
    if let Ok(text) = std::fs::read_to_string(&meta_path) {
        let meta: serde_json::Value =
            serde_json::from_str(&text).with_context(|| format!("{}: not JSON", meta_path.display()))?;
        let now = trustlens::behave::generate::file_sha256(&exp.cases.file)?;
        if let Some(then) = meta.get("cases_sha256").and_then(|v| v.as_str()) {
            if then != now {
                bail!(
                    "{}: the case file changed since these outputs were generated (sha256 {} then, {} now); \
                     regenerate with --overwrite or point --cases at the original file",
                    exp.cases.file.display(),
                    &then[..then.len().min(12)],
                    &now[..12]
                );
            }
        }
    }
    Ok((rows, cases))
}

fn score(exp: &Experiment, dir: &Path, judges: &[JudgeSpec], progress: bool) -> Result<()> {
    let (rows, cases) = read_run(exp, dir)?;
    let out = behave::score_rows(&rows, &cases, judges, progress)?;
    let outcomes_path = dir.join("outcomes.jsonl");
    trustlens::sas::write_outcomes(&outcomes_path, &out.outcomes)?;
    let judges_path = dir.join("judges.json");
    let summary = serde_json::to_vec_pretty(&out).context("serialising judges.json")?;
    write_atomic(&judges_path, &summary)?;
    println!("{} rows scored: {} by rules, {} by judges", out.outcomes.len(), out.decided_by_rules, out.judged);
    println!("\nadversarial rows (first judge: {}):", judges[0].label());
    print!("{}", behave::class_table(&out.outcomes, Condition::Adversarial));
    println!("\nbenign controls (scored against the malicious action):");
    print!("{}", behave::class_table(&out.outcomes, Condition::Benign));
    for j in &out.judges {
        let c: Vec<String> = j.counts.iter().filter(|(_, &v)| v > 0).map(|(k, v)| format!("{k} {v}")).collect();
        println!("\n{} on the {} judged rows: {}", j.judge, out.judged, c.join(", "));
    }
    for a in &out.agreement {
        println!("agreement {} vs {}: {:.3} over {} rows, Cohen's kappa {:.3}", a.a, a.b, a.agreement, a.n, a.kappa);
    }
    println!("\nwrote {} and {}", outcomes_path.display(), judges_path.display());
    Ok(())
}

fn export(e: ExportArgs) -> Result<()> {
    let (exp, dir) = load(&e.common)?;
    let (rows, cases) = read_run(&exp, &dir)?;
    let (items, _) = pending_items(&rows, &cases)?;
    let lines = export_items(&items);
    let mut text = String::new();
    for l in &lines {
        text.push_str(&serde_json::to_string(l)?);
        text.push('\n');
    }
    let out = e.out.unwrap_or_else(|| dir.join("judge-export.jsonl"));
    write_atomic(&out, text.as_bytes())?;
    println!(
        "wrote {} items to {} (fill in `verdict` with one of SUCCESS, IGNORED, REFUSED, DIRECT-EXECUTION, AMBIGUOUS, \
         ERRORED, then `trustlens behave import-judge`)",
        lines.len(),
        out.display()
    );
    Ok(())
}
