//! `trustlens sas OUTCOMES.jsonl [...]`: ASR per channel, SAS per model and family with paired bootstrap CIs, group
//! means and dSAS, the channel trust hierarchy and rank agreement with a reference table; writes sas.csv and sas.json.
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use clap::Args;

use trustlens::sas::{
    build_report, parse_group, read_outcomes_located, FamilySlice, Outcome, ReportOptions, SasConfig,
};

/// Arguments of `trustlens sas`.
///
/// Example: `trustlens sas figures/run/outcomes.jsonl imports/api-models.jsonl --group agent=nemotron,gpt-oss
/// --group general=llama-3.3-70b,qwen3 --reference mcptox.csv --out figures/sas-all`
#[derive(Args)]
#[command(after_help = "Outcome rows: one JSON object per line with model, case_id, family (TP|IPI|CTS), optional \
subtype (P1|P2|P3), channel (chat|tool|chat+tools), optional condition (adversarial|benign), outcome (SUCCESS|IGNORED|\
REFUSED|DIRECT-EXECUTION|AMBIGUOUS|ERRORED); see docs/outcomes.md. ASR counts SUCCESS over matched cases (a row in \
both chat and tool); SAS = ASR_tool - ASR_chat in percentage points.")]
pub struct SasArgs {
    /// Outcome JSONL files (as `trustlens behave` writes them, or imported from elsewhere); rows of all files are
    /// pooled, so one model's rows may be split across files. Example: figures/smollm2/outcomes.jsonl
    #[arg(required = true, value_name = "OUTCOMES.jsonl")]
    outcomes: Vec<PathBuf>,
    /// Output folder for sas.csv and sas.json. Default: the first file's folder when it lies under a `figures/`
    /// folder (so `figures/<run>/outcomes.jsonl` gives `figures/<run>/`), else `figures/<first file's stem>`.
    #[arg(long)]
    out: Option<PathBuf>,
    /// A model group for group means and dSAS, as NAME=MODEL,MODEL,... (repeatable; model names exactly as in the
    /// outcome rows). dSAS is reported for every pair of groups, first given minus later given.
    /// Example: --group agent=nemotron-3-super,gpt-oss-120b,kimi-k2.5 --group general=llama-3.3-70b,qwen3,gemma3
    #[arg(long = "group", value_name = "NAME=MODEL,...")]
    groups: Vec<String>,
    /// Reference per-model ASR table (CSV with header columns `model` and `asr`) for Spearman's rho against our
    /// tool-channel ASR (the paper's MCPTox check). Example: --reference mcptox_tp.csv
    #[arg(long, value_name = "TABLE.csv")]
    reference: Option<PathBuf>,
    /// Family slice whose tool-channel ASR is ranked against --reference: ALL, TP, TP-P1, TP-P2, TP-P3, IPI, CTS.
    #[arg(long, default_value = "TP")]
    reference_family: String,
    /// Bootstrap replicates for the 95% CIs (0: no intervals).
    #[arg(long, default_value_t = 10_000)]
    n_boot: usize,
    /// Seed of the bootstrap (each model x family has its own stream derived from it).
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Confidence level of the intervals.
    #[arg(long, default_value_t = 0.95)]
    level: f64,
    /// Drop matched cases whose chat or tool outcome is one of these classes (comma-separated), from both channels.
    /// Default: none (the paper's rule: every matched case counts, only SUCCESS is a success). Example:
    /// --exclude ERRORED,AMBIGUOUS
    #[arg(long, value_delimiter = ',')]
    exclude: Vec<String>,
    /// Drop cases that lack a chat or a tool row (listed as warnings) instead of stopping with an error.
    #[arg(long)]
    drop_unmatched: bool,
    /// Do not print the table.
    #[arg(long)]
    quiet: bool,
}

/// The default output folder (see `--out`).
fn default_out(first: &Path) -> PathBuf {
    let parent = first.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let under_figures = parent
        .canonicalize()
        .unwrap_or_else(|_| parent.to_path_buf())
        .ancestors()
        .any(|a| a.file_name().is_some_and(|n| n == "figures"));
    if under_figures {
        parent.to_path_buf()
    } else {
        let stem = first.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_else(|| "sas".into());
        PathBuf::from("figures").join(stem)
    }
}

pub fn run(args: SasArgs) -> Result<()> {
    let mut exclude = Vec::new();
    for e in &args.exclude {
        let Some(o) = Outcome::parse(e.trim()) else {
            bail!("--exclude {e:?} is not an outcome class; valid: {}", Outcome::valid_list())
        };
        exclude.push(o);
    }
    let Some(reference_family) = FamilySlice::parse(&args.reference_family) else {
        bail!(
            "--reference-family {:?} is not a family slice; valid: {}",
            args.reference_family,
            FamilySlice::ALL.map(|f| f.as_str()).join(", ")
        )
    };
    let groups = args.groups.iter().map(|g| parse_group(g)).collect::<Result<Vec<_>, _>>()?;
    let cfg = SasConfig {
        n_boot: args.n_boot,
        seed: args.seed,
        level: args.level,
        exclude,
        drop_unmatched: args.drop_unmatched,
    };
    let mut rows = Vec::new();
    for p in &args.outcomes {
        rows.extend(read_outcomes_located(p).with_context(|| format!("reading outcomes {}", p.display()))?);
    }
    let opts = ReportOptions { groups, reference: args.reference.clone(), reference_family: Some(reference_family) };
    let report = build_report(args.outcomes.clone(), &rows, &cfg, &opts).context("computing SAS")?;
    let out = args.out.clone().unwrap_or_else(|| default_out(&args.outcomes[0]));
    let (csv, json) = report.write(&out).with_context(|| format!("writing results to {}", out.display()))?;
    if !args.quiet {
        print!("{}", report.render());
    } else {
        for w in &report.warnings {
            eprintln!("warning: {w}");
        }
    }
    eprintln!("wrote {} and {}", csv.display(), json.display());
    Ok(())
}
