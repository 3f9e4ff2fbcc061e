//! `trustlens cases ...`: validate, render, stats, generate, import, fingerprint.
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use clap::{Args, Subcommand, ValueEnum};

use trustlens::cases::generate::{generate, GenerateOptions, BUILTIN_SEED};
use trustlens::cases::import::{import_bipia, import_rows, BipiaContext, BipiaOptions, InsertPosition, RowFormat};
use trustlens::cases::io::{load_cases_lenient, to_jsonl, write_cases, LoadedCase};
use trustlens::cases::render::{render_case, Channel, Condition, RenderOptions, ToolRendering};
use trustlens::cases::stats::set_stats;
use trustlens::cases::validate::{validate_set, Problem, RenderCheck};
use trustlens::cases::Case;
use trustlens::prompt::PromptAssets;

/// Default model: the embedded SmolLM2, relative to the repository root.
pub const DEFAULT_MODEL: &str = "models/SmolLM2-135M-Instruct.Q4_1.gguf";
/// Default BIPIA folder, relative to the repository root.
pub const DEFAULT_BIPIA: &str = "../shared/datasets/bipia";

/// Subcommands of `trustlens cases`.
#[derive(Subcommand)]
pub enum CasesCommand {
    /// Check a case file: schema, ids, tools, JSON schemas, benign controls, and (with a model) that every payload
    /// appears exactly once, byte-identical, in every channel and condition and survives tokenisation. Exits 1 on
    /// any problem, listing all of them.
    Validate {
        /// JSONL case file.
        file: PathBuf,
        #[command(flatten)]
        model: ModelArgs,
        /// Structural checks only: do not load a model or render prompts.
        #[arg(long)]
        structural_only: bool,
    },
    /// Print the exact prompt of one case in one channel, its token count, with the payload span marked.
    Render {
        /// JSONL case file.
        file: PathBuf,
        /// Case id.
        #[arg(long = "case")]
        case_id: String,
        /// Channel: chat, chat+tools or tool.
        #[arg(long, value_parser = parse_channel, default_value = "tool")]
        channel: Channel,
        /// Condition: adversarial or benign.
        #[arg(long, value_parser = parse_condition, default_value = "adversarial")]
        condition: Condition,
        #[command(flatten)]
        model: ModelArgs,
        /// Print the prompt bytes exactly, without payload markers.
        #[arg(long)]
        raw: bool,
        /// Render without the assistant generation prompt.
        #[arg(long)]
        no_generation_prompt: bool,
    },
    /// Counts per family and subtype, payload lengths, and the token-length distribution per channel for a model.
    Stats {
        /// JSONL case file.
        file: PathBuf,
        #[command(flatten)]
        model: ModelArgs,
        /// Do not load a model (no token statistics).
        #[arg(long)]
        no_model: bool,
    },
    /// Compose a new case set from the built-in hand-written parts with a seed.
    Generate {
        /// RNG seed (the built-in set uses 2026).
        #[arg(long, default_value_t = BUILTIN_SEED)]
        seed: u64,
        /// Number of TP cases (split evenly over P1/P2/P3).
        #[arg(long, default_value_t = 50)]
        tp: usize,
        /// Number of IPI cases.
        #[arg(long, default_value_t = 24)]
        ipi: usize,
        /// Number of CTS cases.
        #[arg(long, default_value_t = 24)]
        cts: usize,
        /// Output file (stdout when absent).
        #[arg(long, short)]
        out: Option<PathBuf>,
    },
    /// Import external data as cases.
    #[command(subcommand)]
    Import(ImportCommand),
    /// Check payload fingerprints (`sha256`) and, with --write, record them after an intentional edit.
    Fingerprint {
        /// JSONL case file.
        file: PathBuf,
        /// Rewrite the file with fresh fingerprints.
        #[arg(long)]
        write: bool,
    },
}

/// Importers.
#[derive(Subcommand)]
pub enum ImportCommand {
    /// BIPIA attack strings as IPI cases (payload in the email, table or code context returned by a tool).
    Bipia {
        /// BIPIA folder (default: ../shared/datasets/bipia from the repository root).
        #[arg(long)]
        bipia_dir: Option<PathBuf>,
        /// Split: test or train.
        #[arg(long, default_value = "test")]
        split: String,
        /// Context kinds, comma-separated: email, table, code.
        #[arg(long, default_value = "email,table,code")]
        contexts: String,
        /// Cases per context kind.
        #[arg(long, default_value_t = 20)]
        per_context: usize,
        /// Where the attack goes in the content: start, middle or end.
        #[arg(long, default_value = "end")]
        position: String,
        /// Shuffling seed.
        #[arg(long, default_value_t = 0)]
        seed: u64,
        /// Output file (stdout when absent).
        #[arg(long, short)]
        out: Option<PathBuf>,
    },
    /// Rows of (task, payload, tool, family) from CSV (with header) or JSONL; see docs/cases.md for optional columns.
    Rows {
        /// Input file (.csv or .jsonl).
        file: PathBuf,
        /// Input format (default: from the extension).
        #[arg(long, value_enum)]
        format: Option<RowFormatArg>,
        /// Prefix of generated ids.
        #[arg(long, default_value = "import")]
        id_prefix: String,
        /// Output file (stdout when absent).
        #[arg(long, short)]
        out: Option<PathBuf>,
    },
}

/// Row input formats.
#[derive(Clone, Copy, ValueEnum)]
pub enum RowFormatArg {
    /// CSV with a header row.
    Csv,
    /// One JSON object a line.
    Jsonl,
}

/// Tool rendering choice on the command line.
#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ToolRenderingArg {
    /// Native when the template supports tools, otherwise the Hermes fallback (announced on stderr).
    Auto,
    /// The template's own tool support; an error when it has none.
    Native,
    /// The Hermes-style fallback, whatever the template supports.
    Hermes,
}

/// Model options shared by the rendering commands.
#[derive(Args)]
pub struct ModelArgs {
    /// Model (GGUF file, HF directory, or tokenizer.json) whose tokenizer and chat template render the prompts.
    #[arg(long, default_value = DEFAULT_MODEL)]
    model: PathBuf,
    /// How tools are rendered: auto, native or hermes.
    #[arg(long, value_enum, default_value = "auto")]
    tool_rendering: ToolRenderingArg,
}

fn parse_channel(s: &str) -> Result<Channel, String> {
    Channel::parse(s).ok_or_else(|| format!("unknown channel `{s}` (chat, chat+tools or tool)"))
}

fn parse_condition(s: &str) -> Result<Condition, String> {
    Condition::parse(s).ok_or_else(|| format!("unknown condition `{s}` (adversarial or benign)"))
}

/// Resolves a default path relative to the current directory, else to the repository root.
fn resolve(path: &Path) -> PathBuf {
    if path.is_absolute() || path.exists() {
        return path.to_path_buf();
    }
    let from_root = Path::new(env!("CARGO_MANIFEST_DIR")).join(path);
    if from_root.exists() {
        from_root
    } else {
        path.to_path_buf()
    }
}

fn load_assets(args: &ModelArgs) -> Result<(PromptAssets, RenderOptions)> {
    let path = resolve(&args.model);
    let assets = PromptAssets::load(&path)
        .with_context(|| format!("loading tokenizer and chat template of {}", path.display()))?;
    let template = assets.template.as_ref().with_context(|| {
        format!("{} has no chat template; cases are rendered through the model's template", path.display())
    })?;
    let tool_rendering = match args.tool_rendering {
        ToolRenderingArg::Native => Some(ToolRendering::Native),
        ToolRenderingArg::Hermes => Some(ToolRendering::Hermes),
        ToolRenderingArg::Auto if template.supports_tools() => Some(ToolRendering::Native),
        ToolRenderingArg::Auto => {
            eprintln!(
                "note: the chat template of {} has no tool support; using the Hermes-style fallback",
                path.display()
            );
            Some(ToolRendering::Hermes)
        }
    };
    Ok((assets, RenderOptions { tool_rendering, ..Default::default() }))
}

/// Loads a case file, printing every bad line; fails if any line is bad.
fn load_or_report(file: &Path) -> Result<Vec<LoadedCase>> {
    let (cases, problems) = load_cases_lenient(file)?;
    if !problems.is_empty() {
        for p in &problems {
            eprintln!("{}: {p}", file.display());
        }
        bail!("{}: {} line(s) could not be read", file.display(), problems.len());
    }
    Ok(cases)
}

fn emit(cases: &[Case], out: Option<&Path>) -> Result<()> {
    match out {
        Some(p) => {
            write_cases(p, cases)?;
            eprintln!("wrote {} cases to {}", cases.len(), p.display());
        }
        None => print!("{}", to_jsonl(cases)),
    }
    Ok(())
}

/// Runs a `cases` subcommand.
pub fn run(cmd: CasesCommand) -> Result<()> {
    match cmd {
        CasesCommand::Validate { file, model, structural_only } => {
            let (cases, line_problems) = load_cases_lenient(&file)?;
            let mut problems: Vec<Problem> = line_problems
                .into_iter()
                .map(|p| Problem { case_id: p.id.unwrap_or_default(), line: p.line, reason: p.reason })
                .collect();
            let loaded = if structural_only { None } else { Some(load_assets(&model)?) };
            let report = match &loaded {
                Some((assets, opts)) => validate_set(&cases, RenderCheck::from_assets(assets, opts)),
                None => validate_set(&cases, None),
            };
            problems.extend(report.problems.iter().cloned());
            problems.sort_by_key(|p| p.line);
            for p in &problems {
                println!("{}: {p}", file.display());
            }
            if problems.is_empty() {
                println!(
                    "{}: OK: {} cases, {} renderings checked{}",
                    file.display(),
                    report.cases,
                    report.renderings,
                    if structural_only { " (structural only)" } else { "" }
                );
                Ok(())
            } else {
                let failing: std::collections::BTreeSet<&str> =
                    problems.iter().filter(|p| !p.case_id.is_empty()).map(|p| p.case_id.as_str()).collect();
                bail!("{}: {} problem(s) in {} case(s)", file.display(), problems.len(), failing.len().max(1))
            }
        }
        CasesCommand::Render { file, case_id, channel, condition, model, raw, no_generation_prompt } => {
            let cases = load_or_report(&file)?;
            let case = &cases
                .iter()
                .find(|c| c.case.id == case_id)
                .with_context(|| format!("{}: no case with id `{case_id}`", file.display()))?
                .case;
            let (assets, mut opts) = load_assets(&model)?;
            opts.add_generation_prompt = !no_generation_prompt;
            let r = render_case(case, channel, condition, &assets, &opts)?;
            if raw {
                print!("{}", r.text);
                return Ok(());
            }
            println!(
                "# case {} ({}) · channel {} · condition {} · tool rendering {}",
                r.case_id,
                case.kind_label(),
                r.channel,
                r.condition,
                r.tool_rendering.map(|t| t.as_str()).unwrap_or("none")
            );
            println!(
                "# tokens: {} · payload bytes {}..{} · payload tokens {}..{} · payload marked with [[PAYLOAD>> ... <<PAYLOAD]]",
                r.token_count(),
                r.payload_byte_span.start,
                r.payload_byte_span.end,
                r.payload_token_span.start,
                r.payload_token_span.end
            );
            println!("# ---- prompt ----");
            println!("{}", r.marked("[[PAYLOAD>>", "<<PAYLOAD]]"));
            println!("# ---- end ----");
            Ok(())
        }
        CasesCommand::Stats { file, model, no_model } => {
            let cases = load_or_report(&file)?;
            let loaded = if no_model { None } else { Some(load_assets(&model)?) };
            let stats = match &loaded {
                Some((assets, opts)) => {
                    let t = assets.template.as_ref().expect("checked in load_assets");
                    set_stats(&cases, Some((t, &assets.tokenizer, opts)))
                }
                None => set_stats(&cases, None),
            };
            println!("{}: {} cases", file.display(), stats.total);
            println!("per family:");
            for (f, n) in &stats.by_family {
                println!("  {f:<4} {n}");
            }
            println!("per family/subtype:");
            for (k, n) in &stats.by_kind {
                println!("  {k:<7} {n}");
            }
            if let Some(d) = &stats.payload_bytes {
                println!("payload bytes:        {d}");
            }
            if let Some(d) = &stats.benign_bytes {
                println!("benign control bytes: {d}");
            }
            if let Some((_, opts)) = &loaded {
                println!(
                    "prompt tokens per channel (adversarial, model {}, tool rendering {}):",
                    resolve(&model.model).display(),
                    opts.tool_rendering.map(|t| t.as_str()).unwrap_or("none")
                );
                for (ch, d) in &stats.tokens_per_channel {
                    println!("  {:<10} {d}", ch.as_str());
                }
                if let Some(d) = &stats.payload_tokens {
                    println!("payload tokens (tool channel): {d}");
                }
            }
            for e in &stats.render_errors {
                eprintln!("{e}");
            }
            if !stats.render_errors.is_empty() {
                bail!("{} rendering(s) failed; run `trustlens cases validate`", stats.render_errors.len());
            }
            Ok(())
        }
        CasesCommand::Generate { seed, tp, ipi, cts, out } => {
            let cases = generate(&GenerateOptions { seed, tp, ipi, cts })?;
            emit(&cases, out.as_deref())
        }
        CasesCommand::Import(ImportCommand::Bipia { bipia_dir, split, contexts, per_context, position, seed, out }) => {
            let dir = bipia_dir.unwrap_or_else(|| resolve(Path::new(DEFAULT_BIPIA)));
            let contexts = contexts
                .split(',')
                .map(|c| {
                    BipiaContext::parse(c).with_context(|| format!("unknown BIPIA context `{c}` (email, table, code)"))
                })
                .collect::<Result<Vec<_>>>()?;
            let position = InsertPosition::parse(&position)
                .with_context(|| format!("unknown position `{position}` (start, middle, end)"))?;
            if split != "test" && split != "train" {
                bail!("unknown split `{split}` (test or train)");
            }
            let cases = import_bipia(&BipiaOptions { dir, split, contexts, per_context, position, seed })?;
            emit(&cases, out.as_deref())
        }
        CasesCommand::Import(ImportCommand::Rows { file, format, id_prefix, out }) => {
            let format = format.map(|f| match f {
                RowFormatArg::Csv => RowFormat::Csv,
                RowFormatArg::Jsonl => RowFormat::Jsonl,
            });
            let res = import_rows(&file, format, &id_prefix)?;
            if !res.errors.is_empty() {
                for e in &res.errors {
                    eprintln!("{e}");
                }
                bail!("{}: {} row(s) could not be imported; nothing written", file.display(), res.errors.len());
            }
            emit(&res.cases, out.as_deref())
        }
        CasesCommand::Fingerprint { file, write } => {
            let mut cases = load_or_report(&file)?;
            let mut stale = 0;
            for lc in &mut cases {
                for (field, p) in [("payload", &mut lc.case.payload), ("benign", &mut lc.case.benign)] {
                    let fresh = p.fingerprint();
                    if p.sha256.as_deref() != Some(fresh.as_str()) {
                        stale += 1;
                        println!(
                            "line {} (case {}): {field} fingerprint {} -> {fresh}",
                            lc.line,
                            lc.case.id,
                            p.sha256.as_deref().unwrap_or("missing")
                        );
                        p.sha256 = Some(fresh);
                    }
                }
            }
            if write && stale > 0 {
                let all: Vec<Case> = cases.into_iter().map(|c| c.case).collect();
                write_cases(&file, &all)?;
                println!("{}: recorded {stale} fingerprint(s)", file.display());
            } else if stale == 0 {
                println!("{}: all fingerprints match", file.display());
            } else {
                bail!(
                    "{}: {stale} stale fingerprint(s); rerun with --write after reviewing the payloads",
                    file.display()
                );
            }
            Ok(())
        }
    }
}
