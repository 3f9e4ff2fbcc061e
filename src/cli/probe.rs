//! `trustlens probe --run activations/<run>`: per-layer probes with grouped CV, transfer across channels, CIs.
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use clap::Args;

use trustlens::activations::ActivationFile;
use trustlens::probe::solver::SolverOptions;
use trustlens::probe::{run_probes, CChoice, Method, ProbeConfig, ProbeData, RowInfo};

/// Arguments of `trustlens probe`.
#[derive(Args)]
pub struct ProbeArgs {
    /// Activation run: a directory holding `activations.h5` (as `trustlens capture` writes it) or the file itself.
    #[arg(long)]
    run: PathBuf,
    /// Outer grouped folds (the group is the case).
    #[arg(long, default_value_t = 5)]
    folds: usize,
    /// Inner grouped folds for choosing C on each outer training fold.
    #[arg(long, default_value_t = 3)]
    inner_folds: usize,
    /// Seed for folds, bootstrap and permutations.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Fixed inverse regularisation C (= 1/alpha) for logistic and rbf; overrides --c-grid.
    #[arg(long)]
    c: Option<f64>,
    /// C grid searched by inner grouped CV (lowest held-out log-loss), comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "0.001,0.01,0.1,1,10,100")]
    c_grid: Vec<f64>,
    /// Probe methods, comma-separated: logistic, diffmeans, rbf.
    #[arg(long, value_delimiter = ',', default_value = "logistic,diffmeans,rbf")]
    methods: Vec<String>,
    /// Layers to probe (default: all in the run).
    #[arg(long, value_delimiter = ',')]
    layers: Vec<usize>,
    /// Positions to probe (default: all in the run).
    #[arg(long, value_delimiter = ',')]
    positions: Vec<String>,
    /// Channels to use (default: all in the run).
    #[arg(long, value_delimiter = ',')]
    channels: Vec<String>,
    /// Bootstrap replicates over cases for the 95% CIs (0: none).
    #[arg(long, default_value_t = 1000)]
    bootstrap: usize,
    /// Label permutations (within cases) for the p-values of logistic and diffmeans trained on one channel (0: none).
    #[arg(long, default_value_t = 100)]
    permutations: usize,
    /// RBF kernel gamma (default 1/d_model on standardised features).
    #[arg(long)]
    gamma: Option<f64>,
    /// Do not train on all channels pooled.
    #[arg(long)]
    no_pooled: bool,
    /// Keep every fold's logistic weights in probes.json (large).
    #[arg(long)]
    save_weights: bool,
    /// Worker threads (default: all cores). Results do not depend on it.
    #[arg(long)]
    threads: Option<usize>,
    /// Output directory (default: figures/<run name>).
    #[arg(long)]
    out: Option<PathBuf>,
    /// Do not print the summary tables.
    #[arg(long)]
    quiet: bool,
}

fn h5_path(run: &Path) -> PathBuf {
    if run.is_dir() {
        run.join("activations.h5")
    } else {
        run.to_path_buf()
    }
}

fn run_name(run: &Path) -> String {
    let dir = if run.is_dir() { run.to_path_buf() } else { run.parent().map(Path::to_path_buf).unwrap_or_default() };
    dir.file_name().map(|s| s.to_string_lossy().into_owned()).filter(|s| !s.is_empty()).unwrap_or_else(|| "run".into())
}

/// Read an activation file into probe input, keeping the requested layers and positions.
pub fn load(path: &Path, layers: &[usize], positions: &[String]) -> Result<ProbeData> {
    let file = ActivationFile::open(path)?;
    if !file.attrs.complete {
        bail!(
            "{}: the capture run is not complete (a checkpoint); finish it with `trustlens capture` first",
            path.display()
        );
    }
    for &l in layers {
        if !file.layers.contains(&l) {
            bail!("{}: layer {l} is not in the activation run (it has layers {:?})", path.display(), file.layers);
        }
    }
    for p in positions {
        if !file.positions.contains(p) {
            bail!(
                "{}: position '{p}' is not in the activation run (it has {})",
                path.display(),
                file.positions.join(", ")
            );
        }
    }
    let layers = if layers.is_empty() { file.layers.clone() } else { layers.to_vec() };
    let positions = if positions.is_empty() { file.positions.clone() } else { positions.to_vec() };
    let mut rows = Vec::with_capacity(file.rows.len());
    for (i, r) in file.rows.iter().enumerate() {
        let label = match r.condition.as_str() {
            "adversarial" => true,
            "benign" => false,
            other => bail!(
                "{}: row {i} (case '{}', channel '{}') has condition '{other}', expected adversarial or benign",
                path.display(),
                r.case_id,
                r.channel
            ),
        };
        rows.push(RowInfo { case_id: r.case_id.clone(), family: r.family.clone(), channel: r.channel.clone(), label });
    }
    let mut data = ProbeData { rows, matrices: Default::default() };
    for &l in &layers {
        for p in &positions {
            let x = file.read(l, p).with_context(|| format!("reading layer {l} position '{p}'"))?;
            data.matrices.insert((l, p.clone()), x);
        }
    }
    Ok(data)
}

/// Run `trustlens probe`.
pub fn run(args: ProbeArgs) -> Result<()> {
    let path = h5_path(&args.run);
    let mut data = load(&path, &args.layers, &args.positions)?;
    if !args.channels.is_empty() {
        data.select_channels(&args.channels).with_context(|| path.display().to_string())?;
    }
    let mut methods = Vec::new();
    for m in &args.methods {
        methods
            .push(Method::parse(m).with_context(|| format!("unknown probe method '{m}' (logistic, diffmeans, rbf)"))?);
    }
    let cfg = ProbeConfig {
        folds: args.folds,
        inner_folds: args.inner_folds,
        seed: args.seed,
        c: match args.c {
            Some(c) => CChoice::Fixed(c),
            None => CChoice::Grid(args.c_grid.clone()),
        },
        methods,
        bootstrap: args.bootstrap,
        permutations: args.permutations,
        level: 0.95,
        rbf_gamma: args.gamma,
        pooled: !args.no_pooled,
        solver: SolverOptions::default(),
        keep_weights: args.save_weights,
    };
    let out = args.out.clone().unwrap_or_else(|| PathBuf::from("figures").join(run_name(&args.run)));
    let pool = rayon::ThreadPoolBuilder::new().num_threads(args.threads.unwrap_or(0)).build()?;
    let pb = if args.quiet { indicatif::ProgressBar::hidden() } else { indicatif::ProgressBar::new(0) };
    pb.set_style(
        indicatif::ProgressStyle::with_template("probe {bar:30} {pos}/{len} fits [{elapsed_precise} < {eta_precise}]")
            .expect("template"),
    );
    let t0 = std::time::Instant::now();
    let mut report = pool.install(|| run_probes(&data, &cfg, Some(&pb))).with_context(|| path.display().to_string())?;
    pb.finish_and_clear();
    let secs = t0.elapsed().as_secs_f64();
    report.input = serde_json::json!({ "path": path.display().to_string() });
    report.write(&out)?;
    if !args.quiet {
        print!("{}", report.summary());
    }
    eprintln!(
        "probes: {} layer(s) x {} position(s), {} rows, {} cases, {} cells in {secs:.2} s -> {}",
        report.layers.len(),
        report.positions.len(),
        report.n_rows,
        report.n_cases,
        report.cells.len(),
        out.display()
    );
    Ok(())
}
