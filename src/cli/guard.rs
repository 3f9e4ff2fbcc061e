//! `trustlens guard`: final-action risk scoring under untrusted tool feedback (TRUST-BENCH episodes, the paper's
//! triplet abstraction, scorers, GuardedJoint). See docs/guard.md.
use anyhow::{bail, Context, Result};
use clap::{Args, Subcommand};
use indicatif::{ProgressBar, ProgressStyle};
use serde_json::json;
use std::path::{Path, PathBuf};
use std::time::Instant;
use trustlens::experiment::LayerSpec;
use trustlens::guard::eval::{self, Calibration, EvalConfig, ScorerResult};
use trustlens::guard::scorers::{self, Fixed, Probe, ScalarLogReg, Scorer, TfidfLogReg};
use trustlens::guard::triplet::{self, Format};
use trustlens::guard::{generate, lm, schema, write_atomic};
use trustlens::model::{self, DType, LoadOptions, ModelSource};
use trustlens::prompt::PromptAssets;

/// Final-action risk scoring under untrusted tool feedback ("Trust No Tool"): generate TRUST-BENCH-style episodes,
/// show the paper's triplet abstraction of one, and evaluate scorers with GuardedJoint under grouped 5-fold CV.
#[derive(Args)]
pub struct GuardArgs {
    #[command(subcommand)]
    pub command: GuardCommand,
}

#[derive(Subcommand)]
pub enum GuardCommand {
    /// Write synthetic episodes (trustbench_clean_episode_v1, JSONL) built the paper's way: six attack types, hidden
    /// triggers, three exploratory turns, a matched benign control per malicious episode, noise in both classes.
    ///
    /// Example: trustlens guard generate --n 1000 --seed 7 --out episodes.jsonl
    Generate(GenerateArgs),
    /// Print one episode's triplet (world-model state, parameter features, both risk formulas) and its serialised
    /// observation, as a scorer sees it.
    ///
    /// Example: trustlens guard show episodes.jsonl --index 0 --format json
    Show(ShowArgs),
    /// Evaluate scorers with the paper's protocol: grouped k-fold CV by pair, a threshold per fold calibrated on the
    /// training part only (maximising G_rho), pooled AMR/BMR/RNR/ACNR and G_rho fold mean ± std (Table 3), and a rho
    /// sweep with the thresholds frozen. Writes results.csv, results.json, sweep.csv and scores.csv.
    ///
    /// Example: trustlens guard eval episodes.jsonl --model models/SmolLM2-135M-Instruct.Q4_1.gguf --layers frac:0.25,0.5,0.75,1.0
    Eval(Box<EvalArgs>),
}

#[derive(Args)]
pub struct GenerateArgs {
    /// Number of episodes (even: n/2 malicious/benign pairs).
    #[arg(long, default_value_t = 1000)]
    pub n: usize,
    /// Seed; the same seed gives byte-identical output.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Output JSONL file (written atomically); `-` for stdout.
    #[arg(long)]
    pub out: PathBuf,
}

#[derive(Args)]
pub struct ShowArgs {
    /// Episodes file (JSON array or JSONL).
    pub episodes: PathBuf,
    /// Episode by position in the file (0-based).
    #[arg(long, conflicts_with = "record")]
    pub index: Option<usize>,
    /// Episode by record_id.
    #[arg(long)]
    pub record: Option<String>,
    /// Serialisation: `compact` (key=value lines) or `json` (the paper's Appendix N).
    #[arg(long, default_value = "compact")]
    pub format: String,
    /// Also print the prompt's token count under this model's tokenizer and chat template.
    #[arg(long)]
    pub model: Option<PathBuf>,
}

#[derive(Args)]
pub struct EvalArgs {
    /// Episodes file (JSON array or JSONL of trustbench_clean_episode_v1 records).
    pub episodes: PathBuf,
    /// Model for the `lm` and `probe` scorers (HF directory, .safetensors or .gguf).
    #[arg(long)]
    pub model: Option<PathBuf>,
    /// Comma-separated scorers: keyword, param-risk, state-risk, scalar-logreg, tfidf-logreg, lm, probe, or `all`
    /// (lm and probe only with --model).
    #[arg(long, default_value = "all")]
    pub scorers: String,
    /// Probe layers: `6,12,18`, `frac:0.25,0.5,1.0` or `all` (blocks.{l}.hook_resid_post at the last token).
    #[arg(long, default_value = "frac:0.1,0.25,0.5,0.75,1.0")]
    pub layers: String,
    /// Penalty weight rho the thresholds are calibrated for (G_rho = max(0, 100 - (rho + 1/2) AMR - 3/2 RNR)).
    #[arg(long, default_value_t = 1.5)]
    pub rho: f64,
    /// Rho values of the sweep (thresholds frozen), comma-separated.
    #[arg(long, default_value = "0.5,1,1.5,2,3")]
    pub rho_sweep: String,
    /// Grouped folds (by pair_id).
    #[arg(long, default_value_t = 5)]
    pub folds: usize,
    /// Seed of the fold assignment.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Threshold calibration on the training part: `inner` (out-of-fold scores of inner grouped folds) or `fit`
    /// (the fitted model's scores on its own training rows, the paper's wording).
    #[arg(long, default_value = "inner")]
    pub calibration: String,
    /// Inner folds for `--calibration inner`.
    #[arg(long, default_value_t = 4)]
    pub inner_folds: usize,
    /// Serialisation the text and model scorers see: `compact` or `json` (the paper's Appendix N).
    #[arg(long, default_value = "compact")]
    pub format: String,
    /// The two label continuations `high,low` of the zero-shot LM scorer.
    #[arg(long, default_value = "high_risk,low_risk")]
    pub labels: String,
    /// Inverse l2 strength C of the TF-IDF and scalar logistic regressions.
    #[arg(long, default_value_t = 1.0)]
    pub c: f64,
    /// Inverse l2 strength C of the residual-stream probes (features standardised).
    #[arg(long, default_value_t = 0.05)]
    pub probe_c: f64,
    /// Episodes per forward pass.
    #[arg(long, default_value_t = 4)]
    pub batch_size: usize,
    /// Device: cpu, cuda, cuda:N or auto.
    #[arg(long, default_value = "cpu")]
    pub device: String,
    /// Compute dtype: f32, f16 or bf16.
    #[arg(long, default_value = "f32")]
    pub dtype: String,
    /// Intra-op threads (0 = libtorch's default).
    #[arg(long, default_value_t = 0)]
    pub threads: i32,
    /// Where the per-episode LM features (label log-probs + activations) are cached, keyed by model and episodes.
    #[arg(long, default_value = "activations/guard-cache")]
    pub cache_dir: PathBuf,
    /// Output folder (default figures/guard/<episodes file stem>).
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Evaluate even when a pair lacks its malicious or benign side.
    #[arg(long)]
    pub allow_unpaired: bool,
    /// No progress bar.
    #[arg(long)]
    pub quiet: bool,
}

pub fn run(args: GuardArgs) -> Result<()> {
    match args.command {
        GuardCommand::Generate(a) => run_generate(a),
        GuardCommand::Show(a) => run_show(a),
        GuardCommand::Eval(a) => run_eval(*a),
    }
}

fn run_generate(a: GenerateArgs) -> Result<()> {
    let eps = generate::generate(a.n, a.seed)?;
    let mut text = String::new();
    for e in &eps {
        text.push_str(&e.to_json_line());
        text.push('\n');
    }
    if a.out.as_os_str() == "-" {
        print!("{text}");
    } else {
        write_atomic(&a.out, text.as_bytes())?;
        eprintln!("wrote {} episodes ({} pairs) to {}", eps.len(), eps.len() / 2, a.out.display());
    }
    Ok(())
}

fn run_show(a: ShowArgs) -> Result<()> {
    let eps = schema::load_episodes(&a.episodes)?;
    let format = Format::parse(&a.format).map_err(anyhow::Error::msg)?;
    let ep = match (&a.record, a.index) {
        (Some(id), _) => eps
            .iter()
            .find(|e| &e.record_id == id)
            .with_context(|| format!("{}: no episode with record_id \"{id}\"", a.episodes.display()))?,
        (None, i) => {
            let i = i.unwrap_or(0);
            eps.get(i)
                .with_context(|| format!("{}: index {i} is past the {} episodes", a.episodes.display(), eps.len()))?
        }
    };
    let t = triplet::triplet(ep);
    let s = &t.state;
    let p = &t.params;
    println!(
        "record_id {}  pair {}  label {}",
        ep.record_id,
        ep.pair_id,
        if t.high_risk { "high_risk" } else { "low_risk" }
    );
    println!(
        "state: T={} c=(trig {}, probe {}, mis {}, drift {}, warn {})  a={:.3}  q={}  s={}  state_risk=clip(0.20 + w.c)={:.3}",
        s.total_steps,
        s.triggered_count,
        s.probe_detect_count,
        s.high_mismatch_count,
        s.id_drift_count,
        s.warning_count,
        s.anomaly_density,
        s.repeated_consistency_anomaly,
        s.strong_signal,
        s.state_risk
    );
    println!(
        "params: m_hi={} m_by={} m_safe={} m_eff={}  param_risk={:.3}",
        p.high_impact_count, p.bypass_count, p.safety_count, p.high_effect_markers, p.param_risk
    );
    let text = t.serialize(format);
    println!("--- serialised ({}) ---\n{text}", format.name());
    if let Some(m) = &a.model {
        let assets = PromptAssets::load(m)?;
        let rendered = lm::render_prompt(&assets, &text)?;
        let ids = assets.tokenizer.encode(&rendered)?;
        println!("--- prompt: {} tokens ---\n{rendered}", ids.len());
    }
    Ok(())
}

fn parse_list(s: &str, what: &str) -> Result<Vec<f64>> {
    s.split(',').map(|x| x.trim().parse::<f64>().with_context(|| format!("--{what}: `{x}` is not a number"))).collect()
}

const ALL_SCORERS: [&str; 7] = ["keyword", "param-risk", "state-risk", "scalar-logreg", "tfidf-logreg", "lm", "probe"];

fn run_eval(a: EvalArgs) -> Result<()> {
    if a.threads > 0 {
        tch::set_num_threads(a.threads);
    }
    let t_start = Instant::now();
    let format = Format::parse(&a.format).map_err(anyhow::Error::msg)?;
    let calibration = match a.calibration.as_str() {
        "fit" => Calibration::Fit,
        "inner" => {
            anyhow::ensure!(a.inner_folds >= 2, "--inner-folds must be at least 2, got {}", a.inner_folds);
            Calibration::Inner(a.inner_folds)
        }
        other => bail!("--calibration must be `inner` or `fit`, got `{other}`"),
    };
    anyhow::ensure!(a.rho.is_finite() && a.rho >= 0.0, "--rho must be a non-negative number, got {}", a.rho);
    anyhow::ensure!(a.c > 0.0 && a.probe_c > 0.0, "--c and --probe-c must be positive");
    let cfg = EvalConfig {
        folds: a.folds,
        seed: a.seed,
        rho: a.rho,
        rho_sweep: parse_list(&a.rho_sweep, "rho-sweep")?,
        calibration,
    };
    let mut wanted: Vec<String> = Vec::new();
    for s in a.scorers.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        if s == "all" {
            for x in ALL_SCORERS {
                if a.model.is_some() || !matches!(x, "lm" | "probe") {
                    wanted.push(x.to_string());
                }
            }
        } else if ALL_SCORERS.contains(&s) {
            wanted.push(s.to_string());
        } else {
            bail!("--scorers: unknown scorer `{s}` (expected {} or all)", ALL_SCORERS.join(", "));
        }
    }
    wanted.dedup();
    let needs_model = wanted.iter().any(|s| s == "lm" || s == "probe");
    if needs_model && a.model.is_none() {
        bail!("--scorers lm/probe need --model (e.g. --model models/SmolLM2-135M-Instruct.Q4_1.gguf)");
    }

    let eps = schema::load_episodes(&a.episodes)?;
    let n_pairs = schema::check_pairs(&eps, a.allow_unpaired).with_context(|| a.episodes.display().to_string())?;
    let malicious: Vec<bool> = eps.iter().map(|e| e.is_malicious()).collect();
    let groups: Vec<String> = eps.iter().map(|e| e.pair_id.clone()).collect();
    let folds = eval::make_folds(&groups, &malicious, cfg.folds, cfg.seed).context("grouped folds by pair_id")?;
    let trips: Vec<_> = eps.iter().map(triplet::triplet).collect();
    let texts: Vec<String> = trips.iter().map(|t| t.serialize(format)).collect();
    let n_mal = malicious.iter().filter(|&&m| m).count();
    eprintln!(
        "{}: {} episodes ({} malicious, {} normal) in {} pair groups; {}-fold grouped CV, rho {}, calibration {}",
        a.episodes.display(),
        eps.len(),
        n_mal,
        eps.len() - n_mal,
        n_pairs,
        cfg.folds,
        cfg.rho,
        a.calibration
    );

    let out_dir = a.out.clone().unwrap_or_else(|| {
        let stem = a.episodes.file_stem().map(|s| s.to_string_lossy().to_string()).unwrap_or_else(|| "episodes".into());
        PathBuf::from("figures/guard").join(stem)
    });

    // Language-model features: one pass per episode, cached.
    let mut lm_info = serde_json::Value::Null;
    let mut lm_feats = None;
    if needs_model {
        let path = a.model.clone().unwrap_or_default();
        let (feats, info) = lm_features(&a, &path, &texts)?;
        lm_info = info;
        lm_feats = Some(feats);
    }

    let mut scorers_list: Vec<Box<dyn Scorer>> = Vec::new();
    for s in &wanted {
        match s.as_str() {
            "keyword" => scorers_list.push(Box::new(Fixed {
                name: "keyword".into(),
                scores: texts.iter().map(|t| scorers::keyword_score(t)).collect(),
            })),
            "param-risk" => scorers_list.push(Box::new(Fixed {
                name: "param-risk".into(),
                scores: trips.iter().map(|t| t.params.param_risk).collect(),
            })),
            "state-risk" => scorers_list.push(Box::new(Fixed {
                name: "state-risk".into(),
                scores: trips.iter().map(|t| t.state.state_risk).collect(),
            })),
            "scalar-logreg" => {
                let x = ndarray::Array2::from_shape_fn((trips.len(), 10), |(i, j)| trips[i].scalars()[j] as f32);
                scorers_list.push(Box::new(ScalarLogReg { x, y: malicious.clone(), c: a.c }));
            }
            "tfidf-logreg" => scorers_list.push(Box::new(TfidfLogReg::new(&texts, malicious.clone(), a.c))),
            "lm" => {
                if let Some(f) = &lm_feats {
                    scorers_list.push(Box::new(Fixed { name: "lm-zeroshot".into(), scores: f.risk() }));
                }
            }
            "probe" => {
                if let Some(f) = &lm_feats {
                    let layers = LayerSpec::parse_arg(&a.layers)?.resolve(f.n_layers)?;
                    for l in layers {
                        scorers_list.push(Box::new(Probe {
                            layer: l,
                            x: f.layer(l),
                            y: malicious.clone(),
                            c: a.probe_c,
                        }));
                    }
                }
            }
            _ => {}
        }
    }

    let t_eval = Instant::now();
    let mut results: Vec<ScorerResult> = Vec::new();
    let mut timings = serde_json::Map::new();
    for s in &scorers_list {
        let t0 = Instant::now();
        let r = eval::evaluate(s.as_ref(), &malicious, &groups, &folds, &cfg)
            .with_context(|| format!("scorer {}", s.name()))?;
        timings.insert(s.name(), json!(t0.elapsed().as_secs_f64()));
        if !a.quiet {
            eprintln!(
                "  {:<16} G_{} = {:.1} ± {:.1}  ({:.1} s)",
                r.scorer,
                cfg.rho,
                r.g_mean,
                r.g_std,
                t0.elapsed().as_secs_f64()
            );
        }
        results.push(r);
    }
    let eval_s = t_eval.elapsed().as_secs_f64();

    println!(
        "\nGrouped {}-fold evaluation of {} ({} episodes, {} pairs; serialisation `{}`).",
        cfg.folds,
        a.episodes.display(),
        eps.len(),
        n_pairs,
        format.name()
    );
    println!(
        "Pooled rates over held-out episodes; G_{} = max(0, 100 - {} AMR - 1.5 RNR) as fold mean ± std.\n",
        cfg.rho,
        cfg.rho + 0.5
    );
    print!("{}", eval::table(&results, cfg.rho));
    println!("\nG_rho with thresholds frozen at rho = {} (fold mean ± std):", cfg.rho);
    print!("{}", eval::sweep_table(&results));

    // Outputs.
    write_atomic(&out_dir.join("results.csv"), eval::to_csv(&results, cfg.rho).as_bytes())?;
    write_atomic(&out_dir.join("sweep.csv"), eval::sweep_csv(&results).as_bytes())?;
    let mut scores_csv = String::from("record_id,pair_id,malicious,fold");
    for r in &results {
        scores_csv.push_str(&format!(",{0}_score,{0}_reject", r.scorer));
    }
    scores_csv.push('\n');
    for (i, e) in eps.iter().enumerate() {
        let fold = results.first().map(|r| r.test_fold[i]).unwrap_or(0);
        scores_csv.push_str(&format!("{},{},{},{}", e.record_id, e.pair_id, malicious[i], fold));
        for r in &results {
            scores_csv.push_str(&format!(",{},{}", r.test_scores[i], u8::from(r.rejected[i])));
        }
        scores_csv.push('\n');
    }
    write_atomic(&out_dir.join("scores.csv"), scores_csv.as_bytes())?;
    let report = json!({
        "episodes": a.episodes.display().to_string(),
        "n_episodes": eps.len(), "n_malicious": n_mal, "n_pairs": n_pairs,
        "format": format.name(), "config": cfg, "c": a.c, "probe_c": a.probe_c,
        "lm": lm_info,
        "timings_s": {"total": t_start.elapsed().as_secs_f64(), "evaluation": eval_s, "per_scorer": timings},
        "folds": folds.iter().map(|f| json!({"train": f.train.len(), "test": f.test.len()})).collect::<Vec<_>>(),
        "results": results.iter().map(|r| json!({
            "scorer": r.scorer, "counts": r.counts, "rates": r.rates, "g_pooled": r.g_pooled, "g_mean": r.g_mean,
            "g_std": r.g_std, "auroc_mean": r.auroc_mean, "folds": r.folds, "sweep": r.sweep.iter().map(|(rho, m, s, p)| json!({"rho": rho, "g_mean": m, "g_std": s, "g_pooled": p})).collect::<Vec<_>>(),
        })).collect::<Vec<_>>(),
    });
    write_atomic(&out_dir.join("results.json"), serde_json::to_string_pretty(&report)?.as_bytes())?;
    eprintln!(
        "\nwrote {}/results.csv, results.json, sweep.csv, scores.csv ({:.1} s)",
        out_dir.display(),
        t_start.elapsed().as_secs_f64()
    );
    Ok(())
}

fn lm_features(a: &EvalArgs, path: &Path, texts: &[String]) -> Result<(lm::LmFeatures, serde_json::Value)> {
    let (high, low) = a.labels.split_once(',').context("--labels must be `high,low`, e.g. high_risk,low_risk")?;
    let assets = PromptAssets::load(path)?;
    let rendered0 = lm::render_prompt(&assets, &texts[0])?;
    let labels = lm::label_tokens(&assets, &rendered0, high.trim(), low.trim())?;
    let prompts = lm::prompts(&assets, texts, &labels)?;
    let src = ModelSource::resolve(path)?;
    let model_sha = trustlens::capture::model_sha256(&src).context("hashing the model for the feature cache")?;
    let key = lm::cache_key(&model_sha, &a.dtype, &labels, &[]);
    let dtype: DType = a.dtype.parse().map_err(anyhow::Error::msg)?;
    let device = model::parse_device(&a.device)?;
    let t_load = Instant::now();
    let m = model::load(path, LoadOptions { dtype, device })?;
    let load_s = t_load.elapsed().as_secs_f64();
    let n_tok: Vec<usize> = prompts.iter().map(|p| p.ids.len()).collect();
    let mean_tok = n_tok.iter().sum::<usize>() as f64 / n_tok.len().max(1) as f64;
    eprintln!(
        "model {} ({} layers, d {}): prompts {:.0} tokens on average (max {}); labels {:?} -> {} / {} tokens after {} shared",
        path.display(),
        m.n_layers(),
        m.d_model(),
        mean_tok,
        n_tok.iter().max().unwrap_or(&0),
        a.labels,
        labels.high_rest.len(),
        labels.low_rest.len(),
        labels.shared.len()
    );
    let pb = if a.quiet {
        ProgressBar::hidden()
    } else {
        let pb = ProgressBar::new(prompts.len() as u64);
        pb.set_style(
            ProgressStyle::with_template("{msg} [{bar:30}] {pos}/{len} episodes ({per_sec}, eta {eta})")
                .unwrap_or_else(|_| ProgressStyle::default_bar()),
        );
        pb.set_message("LM features");
        pb
    };
    let pad = assets.tokenizer.pad_id().unwrap_or(0);
    let feats =
        lm::extract(&m, &prompts, &labels, pad, a.batch_size, &a.cache_dir, &key, |d| pb.set_position(d as u64))?;
    pb.finish_and_clear();
    eprintln!(
        "LM features: {} computed in {:.1} s ({:.2} s/episode), {} from cache {}",
        prompts.len() - feats.from_cache,
        feats.compute_s,
        feats.compute_s / (prompts.len() - feats.from_cache).max(1) as f64,
        feats.from_cache,
        feats.cache_dir.display()
    );
    let info = json!({
        "model": path.display().to_string(), "model_sha256": model_sha, "dtype": a.dtype, "device": a.device,
        "labels": labels, "cache_key": key, "cache_dir": feats.cache_dir.display().to_string(),
        "prompt_tokens_mean": mean_tok, "prompt_tokens_max": n_tok.iter().max(), "load_s": load_s,
        "computed": prompts.len() - feats.from_cache, "from_cache": feats.from_cache, "compute_s": feats.compute_s,
        "system_prompt": lm::SYSTEM_PROMPT, "n_layers": feats.n_layers, "d_model": feats.d_model,
    });
    Ok((feats, info))
}
