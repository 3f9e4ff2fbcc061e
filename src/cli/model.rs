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
    /// Time the forward pass on token-id prompts (used by `just bench`; prints one JSON object).
    ///
    /// Every prompt runs alone (batch 1) with all residual streams and the logits captured at every position, the
    /// same work as transformers' `output_hidden_states=True`. Also reports peak RSS after loading and the machine's
    /// f32 matmul peak.
    Bench(BenchArgs),
}

#[derive(Args)]
pub struct BenchArgs {
    /// Model directory, .safetensors file or .gguf file.
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
    #[arg(long, default_value = "cpu")]
    pub device: String,
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
    use trustlens::model::{Batch, HookPoint, HookSpec, Positions};
    if a.threads > 0 {
        tch::set_num_threads(a.threads);
    }
    let dtype: DType = a.dtype.parse().map_err(anyhow::Error::msg)?;
    let device = model::parse_device(&a.device)?;
    let text = std::fs::read_to_string(&a.ids).with_context(|| format!("reading {}", a.ids.display()))?;
    let prompts: Vec<Vec<u32>> = serde_json::from_str(&text)
        .with_context(|| format!("{}: expected a JSON list of token-id lists", a.ids.display()))?;
    anyhow::ensure!(!prompts.is_empty(), "{}: no prompts", a.ids.display());
    let rss_before_load = proc_status_kb("VmRSS") * 1024;
    let t0 = Instant::now();
    let m = model::load(&a.path, LoadOptions { dtype, device })?;
    let load_s = t0.elapsed().as_secs_f64();
    let rss_after_load = proc_status_kb("VmHWM") * 1024;
    let n = m.n_layers();
    let mut spec = HookSpec::new().capture(HookPoint::Logits, Positions::All);
    for l in 0..n {
        spec = spec.capture(HookPoint::ResidPost(l), Positions::All);
    }
    let batches: Vec<Batch> =
        prompts.iter().map(|p| Batch::left_padded(std::slice::from_ref(p), 0)).collect::<Result<_, _>>()?;
    let tokens: usize = prompts.iter().map(|p| p.len()).sum();
    let run_all = || -> Result<()> {
        for b in &batches {
            let out = m.forward(b, &spec)?;
            // Make sure the work is done (CUDA is asynchronous) by touching one value.
            let _ = out.cache.get(HookPoint::Logits).map(|t| t.double_value(&[0, 0, 0]));
        }
        Ok(())
    };
    run_all()?; // warm-up
    let mut best = f64::INFINITY;
    for _ in 0..a.repeats.max(1) {
        let t = Instant::now();
        run_all()?;
        best = best.min(t.elapsed().as_secs_f64());
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
    let achieved = flops / best;
    let peak = matmul_peak(dtype.kind(), device);
    let out = serde_json::json!({
        "tokens": tokens,
        "prompts": prompts.len(),
        "seconds": best,
        "tokens_per_s": tokens as f64 / best,
        "load_s": load_s,
        "rss_before_load_bytes": rss_before_load,
        "peak_rss_after_load_bytes": rss_after_load,
        "peak_rss_bytes": proc_status_kb("VmHWM") * 1024,
        "weight_bytes_in_dtype": m.n_params() * match dtype { DType::F32 => 4, _ => 2 },
        "forward_flops": flops,
        "achieved_flops_per_s": achieved,
        "matmul_peak_flops_per_s": peak,
        "fraction_of_matmul_peak": achieved / peak,
        "threads": tch::get_num_threads(),
        "dtype": dtype.name(),
        "device": format!("{device:?}"),
    });
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
