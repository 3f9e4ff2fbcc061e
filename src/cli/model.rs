//! `trustlens model ...`: inspect a checkpoint, greedy-generate for a sanity check.
use anyhow::{Context, Result};
use clap::{Args, Subcommand};
use std::path::PathBuf;
use trustlens::model::{self, DType, LoadOptions};
use trustlens::prompt::PromptAssets;

#[derive(Subcommand)]
pub enum ModelCommand {
    /// Print a checkpoint's architecture, sizes, parameter count and stored tensor types (reads no weights).
    ///
    /// PATH is a model directory (config.json + safetensors), a .safetensors file, or a .gguf file.
    Inspect {
        path: PathBuf,
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
        /// Also load (and dequantise) every weight on the CPU, checking shapes against the config.
        #[arg(long)]
        verify: bool,
    },
    /// Greedy-decode a prompt with a KV cache (a sanity check that the weights load and answer sensibly).
    ///
    /// Example: trustlens model generate models/SmolLM2-135M-Instruct.Q4_1.gguf --chat --prompt "What is the capital of France?"
    Generate(GenerateArgs),
    /// Time the forward pass, capture or patching on token-id prompts (used by `just bench` and `just gpu-check`;
    /// prints one JSON object).
    ///
    /// --mode forward: every prompt alone (batch 1) with all residual streams and the logits captured at every
    /// position, the same work as transformers' `output_hidden_states=True`; also reports peak RSS after loading and
    /// the machine's matmul peak. --mode capture: batches of --batch-size prompts (grouped by length), the residual
    /// stream at --layers at each prompt's last token copied to the CPU in f32 (the forward work of `trustlens
    /// capture`). --mode patch: consecutive prompts paired, both directions patched at each of --layers (the work of
    /// `trustlens patch`).
    ///
    /// --random builds the model from PATH = a config.json with random weights (no weight file read): speed and memory
    /// at a real model's shapes without its weights.
    ///
    /// Example: trustlens model bench --random llama-3.1-8b.json --ids ids.json --mode capture --dtype bf16 --device cuda
    Bench(BenchArgs),
}

#[derive(Args)]
pub struct BenchArgs {
    /// Model directory, .safetensors file or .gguf file; with --random, a config.json.
    pub path: PathBuf,
    /// JSON file with a list of token-id lists.
    #[arg(long)]
    pub ids: PathBuf,
    /// Intra-op threads (0 = libtorch's default).
    #[arg(long, default_value_t = 0)]
    pub threads: i32,
    /// Timed repetitions over all prompts; the best is reported.
    #[arg(long, default_value_t = 3)]
    pub repeats: usize,
    /// Compute dtype: f32, f16 or bf16.
    #[arg(long, default_value = "f32")]
    pub dtype: String,
    /// Device: cpu, cuda, cuda:N or auto.
    #[arg(long, default_value = "cpu", conflicts_with = "devices")]
    pub device: String,
    /// Split the blocks over several devices by memory (as `trustlens capture --devices`). Example: cuda:0,cpu
    #[arg(long, value_name = "LIST")]
    pub devices: Option<String>,
    /// Weight budgets for --devices. Example: cuda:0=70GiB,cpu=200GB
    #[arg(long, value_name = "DEV=SIZE,...")]
    pub device_memory: Option<String>,
    /// What to time: forward, capture or patch (see above).
    #[arg(long, default_value = "forward", value_parser = ["forward", "capture", "patch"])]
    pub mode: String,
    /// Prompts per forward pass (capture) or pairs per batch (patch).
    #[arg(long, default_value_t = 8)]
    pub batch_size: usize,
    /// Layers captured (capture) or patched one at a time (patch): `6,12,18` or `frac:0.25,0.5`; default all.
    #[arg(long)]
    pub layers: Option<String>,
    /// Patch mode: recompute whole prompts instead of the last token over the cached prefix.
    #[arg(long)]
    pub full_recompute: bool,
    /// Build the model with random weights from PATH = config.json (matrices N(0, 0.02^2), norms 1).
    #[arg(long)]
    pub random: bool,
    /// Seed for --random.
    #[arg(long, default_value_t = 0)]
    pub seed: i64,
    /// Attention kernel: eager or sdpa (default: sdpa when the embedding is on a GPU, else eager).
    #[arg(long, value_parser = ["eager", "sdpa"])]
    pub attn: Option<String>,
    /// Also write the results of the last repetition, for comparing runs: forward and capture modes write
    /// safetensors (`blocks.L.hook_resid_post` and `logits`, f32; forward: `[all tokens of all prompts, d]` in prompt
    /// order; capture: `[prompts, d]` at each last token in prompt order), patch mode a JSON list of pair results.
    #[arg(long, value_name = "FILE")]
    pub dump: Option<PathBuf>,
}

#[derive(Args)]
pub struct GenerateArgs {
    /// Model directory, .safetensors file or .gguf file.
    pub path: PathBuf,
    /// The text to continue (with --chat: the user message).
    #[arg(long)]
    pub prompt: String,
    /// Wrap the prompt as one user message in the model's chat template and add the generation prompt.
    #[arg(long)]
    pub chat: bool,
    /// Optional system message (with --chat).
    #[arg(long)]
    pub system: Option<String>,
    /// Maximum new tokens.
    #[arg(long, default_value_t = 64)]
    pub max_new_tokens: usize,
    /// Compute dtype: f32, f16 or bf16.
    #[arg(long, default_value = "f32")]
    pub dtype: String,
    /// Device: cpu, cuda, cuda:N or auto.
    #[arg(long, default_value = "auto")]
    pub device: String,
    /// Also print the prompt's token ids and the generated ids.
    #[arg(long)]
    pub verbose: bool,
}

pub fn run(cmd: ModelCommand) -> Result<()> {
    match cmd {
        ModelCommand::Inspect { path, json, verify } => inspect(path, json, verify),
        ModelCommand::Generate(args) => generate(args),
        ModelCommand::Bench(args) => bench(args),
    }
}

fn inspect(path: PathBuf, json: bool, verify: bool) -> Result<()> {
    let s = model::inspect(&path)?;
    if verify {
        let t = std::time::Instant::now();
        let m = model::load(&path, LoadOptions::default())?;
        anyhow::ensure!(
            m.n_params() == s.parameters,
            "{}: loaded {} parameters but the config implies {}",
            path.display(),
            m.n_params(),
            s.parameters
        );
        eprintln!(
            "verified: all {} parameters loaded in {:.2}s",
            group_thousands(m.n_params()),
            t.elapsed().as_secs_f64()
        );
    }
    if json {
        println!("{}", serde_json::to_string_pretty(&s)?);
        return Ok(());
    }
    let types: Vec<String> = s.stored_types.iter().map(|(k, v)| format!("{k} x{v}")).collect();
    println!("path            {}", s.path.display());
    println!("format          {}", s.format);
    println!("architecture    {}", s.architecture);
    println!("layers          {}", s.layers);
    println!("d_model         {}", s.d_model);
    println!("d_ffn           {}", s.d_ffn);
    println!("heads           {} / {} KV heads", s.heads, s.kv_heads);
    println!("head_dim        {}", s.head_dim);
    println!("vocab           {}", s.vocab);
    println!("parameters      {}", group_thousands(s.parameters));
    println!("tied embeddings {}", s.tied_embeddings);
    println!(
        "rope            theta {}{}",
        s.rope_theta,
        s.rope_scaling.map(|r| format!(", scaling {r}")).unwrap_or_default()
    );
    println!("stored types    {}{}", types.join(", "), if s.quantised { " (quantised)" } else { "" });
    println!("stored bytes    {}", group_thousands(s.stored_bytes as usize));
    Ok(())
}

fn generate(a: GenerateArgs) -> Result<()> {
    let dtype: DType = a.dtype.parse().map_err(anyhow::Error::msg)?;
    let device = model::parse_device(&a.device)?;
    let assets = PromptAssets::load(&a.path)?;
    let text = if a.chat {
        let template = assets
            .template
            .as_ref()
            .with_context(|| format!("{}: the model has no chat template; drop --chat", a.path.display()))?;
        let mut msgs = Vec::new();
        if let Some(sys) = &a.system {
            msgs.push(serde_json::json!({"role": "system", "content": sys}));
        }
        msgs.push(serde_json::json!({"role": "user", "content": a.prompt}));
        template.render(&msgs, None, true)?
    } else {
        a.prompt.clone()
    };
    let ids = assets.tokenizer.encode(&text)?;
    let m = model::load(&a.path, LoadOptions { dtype, device })?;
    let mut stop = assets.tokenizer.eos_ids();
    stop.extend(m.config.eos_ids());
    let pad = assets.tokenizer.pad_id().or(assets.tokenizer.bos_id()).unwrap_or(0);
    let out = m.generate_greedy(std::slice::from_ref(&ids), pad, a.max_new_tokens, &stop)?;
    if a.verbose {
        eprintln!("prompt ({} tokens): {:?}", ids.len(), ids);
        eprintln!("generated ids: {:?}", out[0]);
    }
    println!("{}", assets.tokenizer.decode(&out[0], true)?);
    Ok(())
}

fn bench(a: BenchArgs) -> Result<()> {
    use std::time::Instant;
    use tch::{Kind, Tensor};
    use trustlens::experiment::LayerSpec;
    use trustlens::model::{placement, AttnImpl, Batch, DeviceChoice, HookPoint, HookSpec, Llama, Positions};
    if a.threads > 0 {
        tch::set_num_threads(a.threads);
    }
    let dtype: DType = a.dtype.parse().map_err(anyhow::Error::msg)?;
    let text = std::fs::read_to_string(&a.ids).with_context(|| format!("reading {}", a.ids.display()))?;
    let prompts: Vec<Vec<u32>> = serde_json::from_str(&text)
        .with_context(|| format!("{}: expected a JSON list of token-id lists", a.ids.display()))?;
    anyhow::ensure!(!prompts.is_empty(), "{}: no prompts", a.ids.display());
    if let Some(i) = prompts.iter().position(|p| p.is_empty()) {
        anyhow::bail!("{}: prompt {i} has no tokens", a.ids.display());
    }
    let choice = match &a.devices {
        Some(d) => DeviceChoice::Split { devices: d.clone(), memory: a.device_memory.clone() },
        None => DeviceChoice::Single(a.device.clone()),
    };
    let rss_before_load = proc_status_kb("VmRSS") * 1024;
    let t0 = Instant::now();
    let (mut m, placement) = if a.random {
        let cfg = trustlens::model::ModelConfig::from_file(&a.path)?;
        let placement = choice.plan(&cfg, dtype)?;
        let m = Llama::random_placed(cfg, dtype.kind(), &placement.block_devices, placement.head_device, a.seed)?;
        (m, placement)
    } else {
        let (cfg, store) = model::ModelSource::resolve(&a.path)?.open()?;
        let placement = choice.plan(&cfg, dtype)?;
        let m = Llama::load_placed(cfg, &store, dtype.kind(), &placement.block_devices, placement.head_device)?;
        (m, placement)
    };
    if let Some(v) = &a.attn {
        m.attn_impl = if v == "eager" { AttnImpl::Eager } else { AttnImpl::Sdpa };
    }
    let device = m.input_device();
    let load_s = t0.elapsed().as_secs_f64();
    let rss_after_load = proc_status_kb("VmHWM") * 1024;
    let n = m.n_layers();
    let vocab = m.config.vocab_size as u32;
    if let Some((i, t)) = prompts.iter().enumerate().find_map(|(i, p)| p.iter().find(|&&t| t >= vocab).map(|t| (i, *t)))
    {
        anyhow::bail!("{}: prompt {i} has token id {t}, outside the model's vocabulary of {vocab}", a.ids.display());
    }
    let layers = match &a.layers {
        Some(s) => LayerSpec::parse_arg(s)?.resolve(n)?,
        None => (0..n).collect(),
    };
    let tokens: usize = prompts.iter().map(|p| p.len()).sum();
    // One full pass over the prompts in the chosen mode; returns what --dump writes.
    enum Dump {
        Tensors(Vec<(String, Tensor)>),
        Json(serde_json::Value),
    }
    let run_all = |dump: bool| -> Result<Dump> {
        match a.mode.as_str() {
            "forward" => {
                let mut spec = HookSpec::new().capture(HookPoint::Logits, Positions::All);
                for l in 0..n {
                    spec = spec.capture(HookPoint::ResidPost(l), Positions::All);
                }
                let mut kept: Vec<Vec<Tensor>> = (0..=n).map(|_| Vec::new()).collect();
                for p in &prompts {
                    let b = Batch::left_padded(std::slice::from_ref(p), 0)?;
                    let mut out = m.forward(&b, &spec)?;
                    // Make sure the work is done (CUDA is asynchronous) by touching one value.
                    let _ = out.cache.get(HookPoint::Logits).map(|t| t.double_value(&[0, 0, 0]));
                    if dump {
                        for (l, k) in kept.iter_mut().enumerate() {
                            let h = if l < n { HookPoint::ResidPost(l) } else { HookPoint::Logits };
                            let t = out.cache.take(h).expect("captured");
                            k.push(t.squeeze_dim(0).to_kind(Kind::Float).to_device(tch::Device::Cpu));
                        }
                    }
                }
                Ok(Dump::Tensors(if dump { named(kept, n) } else { Vec::new() }))
            }
            "capture" => {
                let mut spec = HookSpec::new();
                for &l in &layers {
                    spec = spec.capture_last(HookPoint::ResidPost(l));
                }
                spec = spec.capture_last(HookPoint::Logits);
                let lengths: Vec<usize> = prompts.iter().map(|p| p.len()).collect();
                let mut rows: Vec<Option<Vec<Tensor>>> = (0..prompts.len()).map(|_| None).collect();
                for members in trustlens::capture::plan_batches(&lengths, a.batch_size.max(1)) {
                    let seqs: Vec<Vec<u32>> = members.iter().map(|&i| prompts[i].clone()).collect();
                    let b = Batch::left_padded(&seqs, 0)?;
                    let mut out = m.forward(&b, &spec)?;
                    // As `trustlens capture` does: f32 on the CPU.
                    let got: Vec<Tensor> = layers
                        .iter()
                        .map(|&l| HookPoint::ResidPost(l))
                        .chain([HookPoint::Logits])
                        .map(|h| out.cache.take(h).expect("captured").to_kind(Kind::Float).to_device(tch::Device::Cpu))
                        .collect();
                    if dump {
                        for (j, &i) in members.iter().enumerate() {
                            rows[i] = Some(got.iter().map(|t| t.get(j as i64)).collect());
                        }
                    }
                }
                if !dump {
                    return Ok(Dump::Tensors(Vec::new()));
                }
                let mut out = Vec::new();
                for (k, name) in layers
                    .iter()
                    .map(|l| format!("blocks.{l}.hook_resid_post"))
                    .chain(["logits".to_string()])
                    .enumerate()
                {
                    let col: Vec<Tensor> =
                        rows.iter().map(|r| r.as_ref().expect("every prompt ran")[k].shallow_clone()).collect();
                    out.push((name, Tensor::stack(&col, 0)));
                }
                Ok(Dump::Tensors(out))
            }
            _ => {
                anyhow::ensure!(
                    prompts.len() >= 2,
                    "{}: patch mode needs at least 2 prompts (paired)",
                    a.ids.display()
                );
                let pairs: Vec<trustlens::patch::Pair> = prompts
                    .chunks_exact(2)
                    .enumerate()
                    .map(|(i, p)| trustlens::patch::Pair {
                        case_id: format!("pair{i}"),
                        family: "bench".into(),
                        subtype: None,
                        channel: "bench".into(),
                        adversarial: p[0].clone(),
                        benign: p[1].clone(),
                    })
                    .collect();
                let opts = trustlens::patch::PatchOptions {
                    layer_sets: layers.iter().map(|&l| vec![l]).collect(),
                    readout: trustlens::patch::Readout::parse("ln_final").map_err(anyhow::Error::msg)?,
                    batch_pairs: a.batch_size.max(1),
                    full_recompute: a.full_recompute,
                    random_control: false,
                    seed: 0,
                    pad_id: 0,
                };
                let res = trustlens::patch::run(&m, &pairs, &opts, |_| {})?;
                Ok(Dump::Json(if dump { serde_json::to_value(&res)? } else { serde_json::Value::Null }))
            }
        }
    };
    fn named(kept: Vec<Vec<Tensor>>, n: usize) -> Vec<(String, Tensor)> {
        kept.into_iter()
            .enumerate()
            .map(|(l, ts)| {
                let name = if l < n { format!("blocks.{l}.hook_resid_post") } else { "logits".to_string() };
                (name, Tensor::cat(&ts, 0))
            })
            .collect()
    }
    run_all(false)?; // warm-up
    let mut best = f64::INFINITY;
    let mut last = None;
    let reps = a.repeats.max(1);
    for r in 0..reps {
        let t = Instant::now();
        let d = run_all(a.dump.is_some() && r + 1 == reps)?;
        best = best.min(t.elapsed().as_secs_f64());
        last = Some(d);
    }
    if let (Some(path), Some(d)) = (&a.dump, last) {
        match d {
            Dump::Tensors(ts) => {
                Tensor::write_safetensors(&ts, path).with_context(|| format!("writing {}", path.display()))?
            }
            Dump::Json(v) => std::fs::write(path, serde_json::to_string(&v)?)
                .with_context(|| format!("writing {}", path.display()))?,
        }
    }
    // FLOPs of one forward pass per token: 2 * (matmul weights) + attention (2 * 2 * T/2 * d_attn on average per
    // layer, causal) + the unembedding.
    let c = &m.config;
    let d_attn = c.num_attention_heads * c.head_dim();
    let per_layer = (d_attn + 2 * c.n_kv_heads() * c.head_dim()) * c.hidden_size
        + c.hidden_size * d_attn
        + 3 * c.intermediate_size * c.hidden_size;
    let mut flops = 0f64;
    for p in &prompts {
        let t = p.len() as f64;
        flops += 2.0 * t * (c.num_hidden_layers * per_layer + c.vocab_size * c.hidden_size) as f64;
        flops += c.num_hidden_layers as f64 * 2.0 * t * t * d_attn as f64; // q k^T and a v, causal half each
    }
    let mut out = serde_json::json!({
        "mode": a.mode,
        "tokens": tokens,
        "prompts": prompts.len(),
        "seconds": best,
        "prompts_per_s": prompts.len() as f64 / best,
        "tokens_per_s": tokens as f64 / best,
        "load_s": load_s,
        "random_weights": a.random,
        "rss_before_load_bytes": rss_before_load,
        "peak_rss_after_load_bytes": rss_after_load,
        "peak_rss_bytes": proc_status_kb("VmHWM") * 1024,
        "weight_bytes_in_dtype": m.n_params() * match dtype { DType::F32 => 4, _ => 2 },
        "threads": tch::get_num_threads(),
        "dtype": dtype.name(),
        "device": placement.short(),
        "attn": format!("{:?}", m.attn_impl).to_ascii_lowercase(),
        "placement": placement.slots,
        "layers": layers,
    });
    if a.mode == "forward" {
        let achieved = flops / best;
        let peak = matmul_peak(dtype.kind(), device);
        out["forward_flops"] = serde_json::json!(flops);
        out["achieved_flops_per_s"] = serde_json::json!(achieved);
        out["matmul_peak_flops_per_s"] = serde_json::json!(peak);
        out["fraction_of_matmul_peak"] = serde_json::json!(achieved / peak);
    } else {
        out["batch_size"] = serde_json::json!(a.batch_size);
    }
    if a.mode == "patch" {
        let pairs = prompts.len() / 2;
        out["pairs"] = serde_json::json!(pairs);
        out["pairs_per_s"] = serde_json::json!(pairs as f64 / best);
        out["full_recompute"] = serde_json::json!(a.full_recompute);
        // Only paired prompts ran.
        let used: usize = prompts.iter().take(2 * pairs).map(|p| p.len()).sum();
        out["prompts"] = serde_json::json!(2 * pairs);
        out["tokens"] = serde_json::json!(used);
        out["prompts_per_s"] = serde_json::json!((2 * pairs) as f64 / best);
        out["tokens_per_s"] = serde_json::json!(used as f64 / best);
    }
    if placement.uses_cuda() {
        let mut gpus = serde_json::Map::new();
        for d in placement.block_devices.iter().chain([&placement.embed_device, &placement.head_device]) {
            if let tch::Device::Cuda(i) = *d {
                if let Ok((free, total)) = placement::cuda_mem_info(i) {
                    gpus.insert(format!("cuda:{i}"), serde_json::json!({"free_bytes": free, "total_bytes": total}));
                }
            }
        }
        out["gpu_memory_after"] = serde_json::Value::Object(gpus);
    }
    println!("{}", serde_json::to_string_pretty(&out)?);
    Ok(())
}

/// A field of /proc/self/status in kB (0 where unavailable).
fn proc_status_kb(field: &str) -> usize {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with(field))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse().ok())
        })
        .unwrap_or(0)
}

/// Best-of-5 FLOP/s of a square matmul (1024 on CPU, 8192 on CUDA) in `kind`.
fn matmul_peak(kind: tch::Kind, device: tch::Device) -> f64 {
    let n: i64 = if device.is_cuda() { 8192 } else { 1024 };
    let a = tch::Tensor::randn([n, n], (kind, device));
    let b = tch::Tensor::randn([n, n], (kind, device));
    let mut best = f64::INFINITY;
    for _ in 0..5 {
        let t = std::time::Instant::now();
        let c = a.matmul(&b);
        let _ = c.double_value(&[0, 0]);
        best = best.min(t.elapsed().as_secs_f64());
    }
    2.0 * (n * n * n) as f64 / best
}

fn group_thousands(n: usize) -> String {
    let s = n.to_string();
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}
