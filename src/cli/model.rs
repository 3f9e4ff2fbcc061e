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
    let types: Vec<String> = s
        .stored_types
        .iter()
        .map(|(k, v)| format!("{k} x{v}"))
        .collect();
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
        s.rope_scaling
            .map(|r| format!(", scaling {r}"))
            .unwrap_or_default()
    );
    println!(
        "stored types    {}{}",
        types.join(", "),
        if s.quantised { " (quantised)" } else { "" }
    );
    println!(
        "stored bytes    {}",
        group_thousands(s.stored_bytes as usize)
    );
    Ok(())
}

fn generate(a: GenerateArgs) -> Result<()> {
    let dtype: DType = a.dtype.parse().map_err(anyhow::Error::msg)?;
    let device = model::parse_device(&a.device)?;
    let assets = PromptAssets::load(&a.path)?;
    let text = if a.chat {
        let template = assets.template.as_ref().with_context(|| {
            format!(
                "{}: the model has no chat template; drop --chat",
                a.path.display()
            )
        })?;
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
    let pad = assets
        .tokenizer
        .pad_id()
        .or(assets.tokenizer.bos_id())
        .unwrap_or(0);
    let out = m.generate_greedy(std::slice::from_ref(&ids), pad, a.max_new_tokens, &stop)?;
    if a.verbose {
        eprintln!("prompt ({} tokens): {:?}", ids.len(), ids);
        eprintln!("generated ids: {:?}", out[0]);
    }
    println!("{}", assets.tokenizer.decode(&out[0], true)?);
    Ok(())
}

fn group_thousands(n: usize) -> String {
    let s = n.to_string();
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}
