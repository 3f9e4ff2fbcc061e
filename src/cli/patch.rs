//! `trustlens patch EXPERIMENT.toml` or `trustlens patch --run activations/<run>`: single- and multi-layer activation
//! patching between matched prompts.
use anyhow::{Context, Result};
use clap::Args;
use indicatif::{ProgressBar, ProgressStyle};
use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use trustlens::activations::ActivationFile;
use trustlens::capture;
use trustlens::experiment::{Experiment, LayerSpec};
use trustlens::model::{self, DType};
use trustlens::patch::{self, Pair, PatchOptions, Readout, StoredSources};
use trustlens::prompt::PromptAssets;

/// Patch the last-token residual stream between each case's adversarial prompt and its benign control, in both
/// directions, at every layer of the experiment's layer set (and at any extra layer sets), scored by cosine shift of
/// the readout. Writes `<out>/patching.csv` (means with bootstrap 95% CIs over cases, per layer set, direction,
/// channel and family) and `<out>/patching.json` (the same plus every pair's values and the configuration).
///
/// forward = adversarial -> benign: shift = cos(r_patched, r_adv) - cos(r_benign, r_adv);
/// reverse = benign -> adversarial: shift = cos(r_patched, r_benign) - cos(r_adv, r_benign).
///
/// The pairs come from an experiment file, or from a capture run (`--run activations/<run>`): then the run's recorded
/// experiment, its blocks (`hook_resid_post`, position `last`) and its per-prompt last-token indices are used, and
/// each stored activation is checked against the clean pass before the pair is patched.
///
/// Examples:
///   trustlens patch experiments/channel-trust.toml --sets 12..29 --sets 12+24 --random-control
///   trustlens patch --run activations/channel-trust --layers 6,12,18,24
#[derive(Args)]
pub struct PatchArgs {
    /// Experiment file (TOML); its [model], [cases] and [capture] layers are used.
    #[arg(required_unless_present = "run", conflicts_with = "run")]
    pub experiment: Option<PathBuf>,
    /// A capture run instead of an experiment file: `activations/<run>` (or its activations.h5). It must hold
    /// `hook_resid_post` at position `last` for every patched block, and both conditions of every case.
    #[arg(long, value_name = "DIR")]
    pub run: Option<PathBuf>,
    /// Override the single-layer list: `6,12,18` or `frac:0.2,0.4,0.6,0.8` (default: [capture] layers, or the
    /// run's blocks).
    #[arg(long)]
    pub layers: Option<String>,
    /// Extra layer sets patched together: `12+20`, `12..29` (repeatable).
    #[arg(long = "sets")]
    pub sets: Vec<String>,
    /// Readout: ln_final (default), resid_post (last block) or logits.
    #[arg(long, default_value = "ln_final")]
    pub readout: String,
    /// Recompute whole prompts (the reference path) instead of the last token over the cached prefix.
    #[arg(long)]
    pub full_recompute: bool,
    /// Also patch a random vector of the source's norm at each single layer, as a control.
    #[arg(long)]
    pub random_control: bool,
    /// Pairs per forward pass.
    #[arg(long, default_value_t = 8)]
    pub batch_pairs: usize,
    /// Only the first N cases of each family (quick looks).
    #[arg(long)]
    pub max_cases: Option<usize>,
    /// Bootstrap replicates for the CIs.
    #[arg(long, default_value_t = 2000)]
    pub n_boot: usize,
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Output folder (default figures/<run>: the experiment's run name, or the run's folder name).
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Override [model] device (cpu, cuda, cuda:N, auto). Clears any [model] devices list.
    #[arg(long, conflicts_with = "devices")]
    pub device: Option<String>,
    /// Split the model's blocks over several devices by memory, in order (as `trustlens capture --devices`).
    /// Example: --devices cuda:0,cuda:1,cpu
    #[arg(long, value_name = "LIST")]
    pub devices: Option<String>,
    /// Weight budget per device for --devices. Example: --device-memory cuda:0=70GiB,cpu=200GB
    #[arg(long, value_name = "DEV=SIZE,...")]
    pub device_memory: Option<String>,
    /// Intra-op threads (0 = libtorch's default).
    #[arg(long, default_value_t = 0)]
    pub threads: i32,
    /// No progress bar.
    #[arg(long)]
    pub quiet: bool,
}

pub fn run(a: PatchArgs) -> Result<()> {
    if a.threads > 0 {
        tch::set_num_threads(a.threads);
    }
    let run = a.run.as_deref().map(open_run).transpose()?;
    let (mut exp, origin) = match (&run, &a.experiment) {
        (Some(r), _) => {
            let exp = Experiment::parse(&r.file.attrs.experiment_config, &r.h5)
                .with_context(|| format!("--run {}: its recorded experiment", r.h5.display()))?;
            (exp, r.h5.clone())
        }
        (None, Some(e)) => (Experiment::load(e)?, e.clone()),
        (None, None) => anyhow::bail!("give an experiment file or --run activations/<run>"),
    };
    if let Some(d) = &a.device {
        exp.model.device = d.clone();
        exp.model.devices = None;
        exp.model.device_memory = None;
    }
    if let Some(v) = &a.devices {
        exp.model.devices = Some(v.split(',').map(|s| s.trim().to_string()).collect());
    }
    if let Some(v) = &a.device_memory {
        exp.model.device_memory = Some(v.clone());
    }
    exp.check().map_err(anyhow::Error::msg).with_context(|| format!("{}", origin.display()))?;
    // Pairs need both conditions.
    exp.cases.conditions = vec!["adversarial".into(), "benign".into()];
    let readout = Readout::parse(&a.readout).map_err(|e| anyhow::anyhow!("--readout: {e}"))?;
    let dtype: DType = exp.model.dtype.parse().map_err(anyhow::Error::msg)?;
    // Every flag and the model's depth (from its config; no weights read) are checked before any heavy work.
    let spec = match &a.layers {
        Some(s) => Some(LayerSpec::parse_arg(s).with_context(|| format!("--layers `{s}`"))?),
        None if run.is_some() => None,
        None => Some(exp.capture.layers.clone()),
    };
    let mut extra_sets = Vec::new();
    for s in &a.sets {
        extra_sets.push((s, patch::parse_layer_set(s).map_err(|e| anyhow::anyhow!("--sets: {e}"))?));
    }
    // (As text: the I/O error's own source would repeat its reason.)
    let (cfg, store) = model::ModelSource::resolve(&exp.model.path)
        .and_then(|src| src.open())
        .map_err(|e| anyhow::anyhow!("model.path in {}: {e}", origin.display()))?;
    let n = cfg.num_hidden_layers;
    let resolved = match (&spec, &run) {
        (Some(spec), _) => spec.resolve(n).with_context(|| match &a.layers {
            Some(s) => format!("--layers `{s}`"),
            None => "capture.layers".to_string(),
        })?,
        (None, Some(r)) => r.file.layers.clone(),
        (None, None) => unreachable!("an experiment's layers are always set"),
    };
    if let Some(r) = &run {
        r.check_layers(&resolved, n, a.layers.as_deref().map(|s| format!("--layers `{s}`")))?;
    }
    let mut layer_sets: Vec<Vec<usize>> = resolved.into_iter().map(|l| vec![l]).collect();
    for (s, set) in extra_sets {
        if let Some(l) = set.iter().find(|&&l| l >= n) {
            anyhow::bail!(
                "--sets `{s}`: layer {l} is past the model's depth ({n} layers: 0..={})",
                n.saturating_sub(1)
            );
        }
        if let Some(r) = &run {
            r.check_layers(&set, n, Some(format!("--sets `{s}`")))?;
        }
        layer_sets.push(set);
    }
    let assets = PromptAssets::load(&exp.model.path)?;
    let plan = capture::prepare(&exp, &assets, None)?;
    let placement = exp.model.device_choice().plan(&cfg, dtype)?;
    if placement.slots.len() > 1 && !a.quiet {
        eprintln!("placement:\n{placement}");
    }
    let m = model::Llama::load_placed(cfg, &store, dtype.kind(), &placement.block_devices, placement.head_device)?;
    drop(store);
    let device = placement.short();
    // Pair the adversarial and benign prompt of each case x channel.
    let mut by_key: BTreeMap<(String, String), [Option<usize>; 2]> = BTreeMap::new();
    for (i, p) in plan.prompts.iter().enumerate() {
        let slot = usize::from(p.meta.condition == "benign");
        by_key.entry((p.meta.case_id.clone(), p.meta.channel.clone())).or_default()[slot] = Some(i);
    }
    // With --run: the run's last-token values at every patched block, read once.
    let stored_last = match &run {
        Some(r) => r.read_last(&stored_layers(&layer_sets))?,
        None => BTreeMap::new(),
    };
    let mut pairs: Vec<(Pair, Option<StoredSources>)> = Vec::new();
    let mut order: Vec<&String> = Vec::new();
    for p in &plan.prompts {
        if !order.contains(&&p.meta.case_id) {
            order.push(&p.meta.case_id);
        }
    }
    // The first N cases of each family, so a quick look keeps the families balanced.
    let family_of: BTreeMap<&String, &String> =
        plan.prompts.iter().map(|p| (&p.meta.case_id, &p.meta.family)).collect();
    let mut per_family: BTreeMap<&String, usize> = BTreeMap::new();
    let keep: Vec<&String> = order
        .into_iter()
        .filter(|c| {
            let k = per_family.entry(family_of[c]).or_default();
            *k += 1;
            *k <= a.max_cases.unwrap_or(usize::MAX)
        })
        .collect();
    for ((case, channel), [adv, ben]) in &by_key {
        if !keep.contains(&case) {
            continue;
        }
        let (Some(adv), Some(ben)) = (adv, ben) else {
            anyhow::bail!("case {case} ({channel}): the adversarial prompt or its benign control is missing");
        };
        let (pa, pb) = (&plan.prompts[*adv], &plan.prompts[*ben]);
        let pair = Pair {
            case_id: case.clone(),
            family: pa.meta.family.clone(),
            subtype: pa.meta.subtype.clone(),
            channel: channel.clone(),
            adversarial: pa.ids.clone(),
            benign: pb.ids.clone(),
        };
        let stored = match &run {
            Some(r) => Some(r.sources(&pair, &stored_last)?),
            None => None,
        };
        pairs.push((pair, stored));
    }
    // Similar lengths together: less padding per batch.
    pairs.sort_by_key(|(p, _)| p.adversarial.len().max(p.benign.len()));
    let (pairs, stored): (Vec<Pair>, Vec<Option<StoredSources>>) = pairs.into_iter().unzip();
    let opts = PatchOptions {
        layer_sets: layer_sets.clone(),
        readout,
        batch_pairs: a.batch_pairs,
        full_recompute: a.full_recompute,
        random_control: a.random_control,
        seed: a.seed,
        pad_id: plan.pad_id,
    };
    let bar = if a.quiet { ProgressBar::hidden() } else { ProgressBar::new(pairs.len() as u64) };
    bar.set_style(
        ProgressStyle::with_template("patching {bar:30} {pos}/{len} pairs  {per_sec}  ETA {eta}")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    let t0 = std::time::Instant::now();
    let progress = |done: usize| bar.set_position(done as u64);
    let results = if run.is_some() {
        let stored: Vec<StoredSources> = stored.into_iter().flatten().collect();
        patch::run_checked(&m, &pairs, &stored, patch::STORED_MIN_COS, &opts, progress)?
    } else {
        patch::run(&m, &pairs, &opts, progress)?
    };
    let stored_min_cos = results.iter().filter_map(|r| r.stored_cos).reduce(f64::min);
    bar.finish_and_clear();
    let secs = t0.elapsed().as_secs_f64();
    let summary = patch::summarize(&results, a.n_boot, 0.95, a.seed);
    let run_name = match &run {
        Some(r) => r.name.clone(),
        None => exp.run_name(&origin),
    };
    let out = a.out.clone().unwrap_or_else(|| PathBuf::from("figures").join(run_name));
    std::fs::create_dir_all(&out).with_context(|| format!("creating {}", out.display()))?;
    let csv_path = out.join("patching.csv");
    let mut csv = std::fs::File::create(&csv_path).with_context(|| format!("writing {}", csv_path.display()))?;
    writeln!(csv, "layers,direction,channel,family,n,shift,shift_lo,shift_hi,recovery,recovery_lo,recovery_hi,random_shift,random_lo,random_hi")?;
    for r in &summary {
        let (rs, rl, rh) = r.random_shift.map(|e| (e.value, e.lo, e.hi)).unwrap_or((f64::NAN, f64::NAN, f64::NAN));
        writeln!(
            csv,
            "{},{},{},{},{},{:.6},{:.6},{:.6},{:.6},{:.6},{:.6},{:.6},{:.6},{:.6}",
            r.layers,
            r.direction,
            r.channel,
            r.family,
            r.n,
            r.shift.value,
            r.shift.lo,
            r.shift.hi,
            r.recovery.value,
            r.recovery.lo,
            r.recovery.hi,
            rs,
            rl,
            rh
        )?;
    }
    let json_path = out.join("patching.json");
    let doc = serde_json::json!({
        "config": {
            "experiment": a.experiment, "run": run.as_ref().map(|r| &r.h5), "stored_min_cos": stored_min_cos,
            "model": exp.model.path, "dtype": dtype.name(), "device": device,
            "readout": readout, "layer_sets": layer_sets, "full_recompute": a.full_recompute,
            "random_control": a.random_control, "n_boot": a.n_boot, "seed": a.seed, "pairs": pairs.len(),
            "tool_rendering": plan.tool_rendering, "cases_sha256": plan.cases_sha256,
            "trustlens_version": env!("CARGO_PKG_VERSION"), "seconds": secs,
        },
        "summary": summary,
        "pairs": results,
    });
    std::fs::write(&json_path, serde_json::to_string_pretty(&doc)?)
        .with_context(|| format!("writing {}", json_path.display()))?;
    println!("{:<8} {:<8} {:<6} {:>5}  shift [95% CI]", "layers", "dir", "chan", "n");
    for r in summary.iter().filter(|r| r.family == "all") {
        println!(
            "{:<8} {:<8} {:<6} {:>5}  {:+.4} [{:+.4}, {:+.4}]{}",
            r.layers,
            r.direction,
            r.channel,
            r.n,
            r.shift.value,
            r.shift.lo,
            r.shift.hi,
            r.random_shift
                .map(|e| format!("   random {:+.4} [{:+.4}, {:+.4}]", e.value, e.lo, e.hi))
                .unwrap_or_default()
        );
    }
    if let Some(c) = stored_min_cos {
        eprintln!("the run's stored activations agree with the clean passes: lowest cosine {c:.6}");
    }
    eprintln!(
        "{} pairs x {} layer sets x 2 directions in {secs:.1}s; wrote {} and {}",
        pairs.len(),
        layer_sets.len(),
        csv_path.display(),
        json_path.display()
    );
    Ok(())
}

/// Every block of the layer sets, sorted and distinct: the blocks whose stored values are checked.
fn stored_layers(sets: &[Vec<usize>]) -> Vec<usize> {
    let mut v: Vec<usize> = sets.iter().flatten().copied().collect();
    v.sort_unstable();
    v.dedup();
    v
}

/// A capture run opened for patching, with the checks that need no model done.
struct Run {
    h5: PathBuf,
    /// `activations/<name>`'s folder name (names the default output folder).
    name: String,
    file: ActivationFile,
    /// `(case, channel, condition)` -> row.
    rows: BTreeMap<(String, String, String), usize>,
}

fn open_run(arg: &Path) -> Result<Run> {
    let h5 = if arg.is_dir() { arg.join("activations.h5") } else { arg.to_path_buf() };
    if !h5.exists() {
        anyhow::bail!(
            "--run {}: no activation file at {} (`trustlens capture EXP.toml` writes activations/<run>/activations.h5)",
            arg.display(),
            h5.display()
        );
    }
    let file = ActivationFile::open(&h5).with_context(|| format!("--run {}", arg.display()))?;
    let at = h5.display();
    let attrs = &file.attrs;
    if !attrs.complete {
        anyhow::bail!(
            "--run {at}: the capture is unfinished (a checkpoint); run the same `trustlens capture` again to finish it"
        );
    }
    if attrs.shard != "all" {
        anyhow::bail!(
            "--run {at}: holds shard {} only; merge the shards first (`trustlens activations merge`)",
            attrs.shard
        );
    }
    if attrs.hook_point != "hook_resid_post" {
        anyhow::bail!(
            "--run {at}: holds `{}`, but patching replaces `blocks.{{l}}.hook_resid_post`; capture with \
             [capture] hook = \"hook_resid_post\"",
            attrs.hook_point
        );
    }
    if !file.positions.iter().any(|p| p == "last") {
        anyhow::bail!(
            "--run {at}: holds positions [{}], but patching needs `last`; add \"last\" to [capture] positions and \
             capture again",
            file.positions.join(", ")
        );
    }
    let rows = file
        .rows
        .iter()
        .enumerate()
        .map(|(i, r)| ((r.case_id.clone(), r.channel.clone(), r.condition.clone()), i))
        .collect();
    let name = if h5.file_name().is_some_and(|f| f == "activations.h5") {
        h5.parent().and_then(|p| p.file_name()).map(|s| s.to_string_lossy().to_string())
    } else {
        h5.file_stem().map(|s| s.to_string_lossy().to_string())
    }
    .unwrap_or_else(|| "run".into());
    Ok(Run { h5, name, file, rows })
}

impl Run {
    /// Every block of `layers` must be in the model and stored in the run.
    fn check_layers(&self, layers: &[usize], n: usize, what: Option<String>) -> Result<()> {
        let held = &self.file.layers;
        let held_s = held.iter().map(|l| l.to_string()).collect::<Vec<_>>().join(", ");
        let what = what.map(|w| format!("{w}: ")).unwrap_or_default();
        for &l in layers {
            if l >= n {
                anyhow::bail!(
                    "{what}the run {} holds block {l}, but the model has {n} layers (0..={}): it was captured with \
                     another model",
                    self.h5.display(),
                    n.saturating_sub(1)
                );
            }
            if !held.contains(&l) {
                anyhow::bail!(
                    "{what}block {l} is not in the run {} (it holds blocks {held_s}); capture it, or patch from the \
                     experiment file, which needs no stored activations",
                    self.h5.display()
                );
            }
        }
        Ok(())
    }

    /// The stored last-token values `[n_rows, d_model]` of each block in `layers`.
    fn read_last(&self, layers: &[usize]) -> Result<BTreeMap<usize, ndarray::Array2<f32>>> {
        layers
            .iter()
            .map(|&l| {
                let a = self.file.read(l, "last").with_context(|| format!("--run {}: block {l}", self.h5.display()))?;
                Ok((l, a))
            })
            .collect()
    }

    /// The pair's rows of `last` (from [`Run::read_last`]), after checking that the run holds both prompts with the
    /// token counts they render to now.
    fn sources(&self, pair: &Pair, last: &BTreeMap<usize, ndarray::Array2<f32>>) -> Result<StoredSources> {
        let mut idx = [0usize; 2];
        for (slot, (cond, ids)) in
            [("adversarial", &pair.adversarial), ("benign", &pair.benign)].into_iter().enumerate()
        {
            let key = (pair.case_id.clone(), pair.channel.clone(), cond.to_string());
            let Some(&row) = self.rows.get(&key) else {
                let what = if cond == "benign" { "benign control" } else { "adversarial prompt" };
                anyhow::bail!(
                    "case {} ({}): the run {} holds no {what} (captured with [cases] conditions without `{cond}`?); \
                     patching needs both conditions of every case",
                    pair.case_id,
                    pair.channel,
                    self.h5.display()
                );
            };
            let meta = &self.file.rows[row];
            if meta.n_tokens != ids.len() || meta.last_index + 1 != ids.len() {
                anyhow::bail!(
                    "case {} ({}, {cond}): the run {} recorded {} tokens (last index {}), but it renders to {} tokens \
                     now: the case file, template or tokenizer changed since the capture",
                    pair.case_id,
                    pair.channel,
                    self.h5.display(),
                    meta.n_tokens,
                    meta.last_index,
                    ids.len()
                );
            }
            idx[slot] = row;
        }
        Ok(StoredSources {
            layers: last.keys().copied().collect(),
            adversarial: last.values().map(|a| a.row(idx[0]).to_vec()).collect(),
            benign: last.values().map(|a| a.row(idx[1]).to_vec()).collect(),
        })
    }
}
