//! The Llama-family decoder (Llama 2/3.x, Mistral, Qwen2) on libtorch, with hook points.
//!
//! One forward pass serves every architecture: pre-norm blocks with RMSNorm, rotary embeddings (default, `linear` and
//! `llama3` scaling), grouped-query attention through `scaled_dot_product_attention`, and a SwiGLU MLP. q/k/v and
//! gate/up projections are fused at load time into one matrix each (one GEMM instead of three or two); weights keep
//! their HF names until then, so there is no conversion step.
use super::config::ModelConfig;
use super::hooks::{ActivationCache, HookPoint, HookSpec, Intervention, InterventionMode, Positions};
use super::weights::WeightStore;
use super::ModelError;
use tch::{Device, Kind, Tensor};

/// One decoder block's weights, already in the compute dtype and on their device.
pub struct Block {
    /// `[(n_heads + 2 * n_kv_heads) * head_dim, d_model]`
    wqkv: Tensor,
    bqkv: Option<Tensor>,
    /// `[d_model, n_heads * head_dim]`
    wo: Tensor,
    bo: Option<Tensor>,
    /// `[2 * d_ffn, d_model]`: gate rows then up rows.
    w_gate_up: Tensor,
    /// `[d_model, d_ffn]`
    w_down: Tensor,
    ln_attn: Tensor,
    ln_mlp: Tensor,
    pub device: Device,
}

/// A batch of prompts, left-padded to a common length.
///
/// # Shapes
/// - `input_ids`: `[batch, seq]` i64, pad positions hold the pad id
/// - `attention_mask`: `[batch, seq]` i64, 1 for real tokens, 0 for padding
#[derive(Debug)]
pub struct Batch {
    pub input_ids: Tensor,
    pub attention_mask: Tensor,
    /// Real tokens per example.
    pub lengths: Vec<usize>,
    /// Left padding per example (`seq - lengths[b]`).
    pub pad: Vec<usize>,
}

impl Batch {
    /// Left-pad `seqs` with `pad_id`. Errors on an empty batch or an empty sequence.
    pub fn left_padded(seqs: &[Vec<u32>], pad_id: u32) -> Result<Batch, ModelError> {
        if seqs.is_empty() {
            return Err(ModelError::Input("empty batch".into()));
        }
        if let Some(i) = seqs.iter().position(|s| s.is_empty()) {
            return Err(ModelError::Input(format!("sequence {i} of the batch has no tokens")));
        }
        let t = seqs.iter().map(|s| s.len()).max().unwrap_or(0);
        let b = seqs.len();
        let mut ids = vec![pad_id as i64; b * t];
        let mut mask = vec![0i64; b * t];
        let mut pad = Vec::with_capacity(b);
        for (i, s) in seqs.iter().enumerate() {
            let p = t - s.len();
            pad.push(p);
            for (j, &tok) in s.iter().enumerate() {
                ids[i * t + p + j] = tok as i64;
                mask[i * t + p + j] = 1;
            }
        }
        let shape = [b as i64, t as i64];
        Ok(Batch {
            input_ids: Tensor::from_slice(&ids).reshape(shape),
            attention_mask: Tensor::from_slice(&mask).reshape(shape),
            lengths: seqs.iter().map(|s| s.len()).collect(),
            pad,
        })
    }

    pub fn size(&self) -> usize {
        self.lengths.len()
    }

    pub fn seq_len(&self) -> usize {
        self.lengths.iter().copied().max().unwrap_or(0)
    }

    /// Each example's last real token in its own coordinates (`length - 1`).
    pub fn last_token_index(&self) -> Vec<i64> {
        self.lengths.iter().map(|&l| l as i64 - 1).collect()
    }
}

/// What a forward pass returns.
#[derive(Debug)]
pub struct ForwardOutput {
    pub cache: ActivationCache,
    /// Each example's last real token in its own coordinates; the padded index is `pad + this`.
    pub last_token_index: Vec<i64>,
    /// How many blocks actually ran (early exit after the deepest hooked layer).
    pub blocks_run: usize,
}

/// Keys and values of every block for incremental decoding.
///
/// # Shapes
/// - `k[l]`, `v[l]`: `[batch, n_kv_heads, past, head_dim]`
/// - `key_mask`: `[batch, past]` i64 (1 = real token)
/// - `next_pos`: `[batch]` i64, the position id of each example's next token
pub struct KvCache {
    pub k: Vec<Tensor>,
    pub v: Vec<Tensor>,
    pub key_mask: Tensor,
    pub next_pos: Tensor,
}

/// How attention is computed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AttnImpl {
    /// `softmax(q k^T * scale + mask) v` with an f32 softmax, exactly as transformers' eager attention: bitwise equal
    /// hidden states in f32 on CPU. The default on CPU.
    Eager,
    /// libtorch's fused `scaled_dot_product_attention` (flash / memory-efficient kernels on CUDA). The default on
    /// CUDA; on CPU it differs from eager by float rounding (about 1e-6 relative).
    Sdpa,
}

/// Keys and values of every block for all positions but each example's last token, from a clean run
/// ([`Llama::forward_with_prefix`]).
///
/// # Shapes
/// - `k[l]`, `v[l]`: `[batch, n_kv_heads, seq - 1, head_dim]`; `key_mask`: `[batch, seq - 1]`; `last_pos`: `[batch]`
pub struct PrefixCache {
    k: Vec<Tensor>,
    v: Vec<Tensor>,
    key_mask: Tensor,
    last_pos: Tensor,
    lengths: Vec<usize>,
}

/// The loaded decoder.
pub struct Llama {
    pub config: ModelConfig,
    pub kind: Kind,
    /// Attention kernel; chosen by device at load, settable.
    pub attn_impl: AttnImpl,
    embed: Tensor,
    pub blocks: Vec<Block>,
    norm: Tensor,
    /// Shares storage with `embed` when embeddings are tied.
    lm_head: Tensor,
    /// `[head_dim / 2]` f32 on the first device.
    inv_freq: Tensor,
    n_params: usize,
}

struct Ctx<'a> {
    batch_pad: &'a [usize],
    lengths: &'a [usize],
    seq: i64,
}

impl Llama {
    /// Build the model from a weight store, converting to `kind` and placing every block on `device`.
    pub fn load(config: ModelConfig, store: &WeightStore, kind: Kind, device: Device) -> Result<Self, ModelError> {
        let devices = vec![device; config.num_hidden_layers];
        Self::load_placed(config, store, kind, &devices, device)
    }

    /// Build the model with block `i` on `block_devices[i]`; embeddings live on the first block's device and the
    /// final norm and unembedding on `head_device`. [`super::placement::plan`] makes such a list from memory budgets.
    pub fn load_placed(
        config: ModelConfig,
        store: &WeightStore,
        kind: Kind,
        block_devices: &[Device],
        head_device: Device,
    ) -> Result<Self, ModelError> {
        store.check_supported()?;
        let inv_freq = rope_inv_freq(&config, Some(store))?;
        let has_lm_head = store.contains("lm_head.weight");
        let fetch = |name: &str, shape: &[usize], dev: Device| -> Result<Tensor, ModelError> {
            let t = store
                .load(name, shape, kind)?
                .ok_or_else(|| ModelError::MissingTensor { path: store.path_of(name), name: name.to_string() })?;
            Ok(t.to_device(dev))
        };
        Self::build(config, kind, block_devices, head_device, inv_freq, has_lm_head, fetch)
    }

    /// A model of `config`'s shapes with random weights (no weight file), for speed and memory measurements: matrices
    /// and biases drawn from N(0, 0.02^2) (transformers' `initializer_range`), norm weights 1. Tensors are drawn on
    /// their own device, so an 8B model is built on a GPU in seconds. Deterministic for a seed on a given device.
    pub fn random_placed(
        config: ModelConfig,
        kind: Kind,
        block_devices: &[Device],
        head_device: Device,
        seed: i64,
    ) -> Result<Self, ModelError> {
        config.architecture().map_err(ModelError::Input)?;
        tch::manual_seed(seed);
        let inv_freq = rope_inv_freq(&config, None)?;
        let has_lm_head = !config.tie_word_embeddings;
        let fetch = |name: &str, shape: &[usize], dev: Device| -> Result<Tensor, ModelError> {
            let shape: Vec<i64> = shape.iter().map(|&x| x as i64).collect();
            let _guard = tch::no_grad_guard();
            Ok(if name.ends_with("norm.weight") {
                Tensor::ones(shape.as_slice(), (kind, dev))
            } else {
                (Tensor::randn(shape.as_slice(), (Kind::Float, dev)) * 0.02).to_kind(kind)
            })
        };
        Self::build(config, kind, block_devices, head_device, inv_freq, has_lm_head, fetch)
    }

    /// Assemble the model from `fetch(hf_name, shape, device)`, fusing q/k/v and gate/up per block.
    fn build(
        config: ModelConfig,
        kind: Kind,
        block_devices: &[Device],
        head_device: Device,
        inv_freq: Tensor,
        has_lm_head: bool,
        mut fetch: impl FnMut(&str, &[usize], Device) -> Result<Tensor, ModelError>,
    ) -> Result<Self, ModelError> {
        if block_devices.len() != config.num_hidden_layers {
            return Err(ModelError::Input(format!(
                "{} block devices for a model of {} blocks",
                block_devices.len(),
                config.num_hidden_layers
            )));
        }
        let d = config.hidden_size;
        let (h, kv, hd, ffn) =
            (config.num_attention_heads, config.n_kv_heads(), config.head_dim(), config.intermediate_size);
        let first = *block_devices.first().unwrap_or(&head_device);
        let mut n_params = 0usize;
        let mut get = |name: &str, shape: &[usize], dev: Device| -> Result<Tensor, ModelError> {
            let t = fetch(name, shape, dev)?;
            n_params += t.numel();
            Ok(t)
        };
        let embed = get("model.embed_tokens.weight", &[config.vocab_size, d], first)?;
        let mut blocks = Vec::with_capacity(config.num_hidden_layers);
        for (i, &dev) in block_devices.iter().enumerate() {
            let p = format!("model.layers.{i}");
            let q = get(&format!("{p}.self_attn.q_proj.weight"), &[h * hd, d], dev)?;
            let k = get(&format!("{p}.self_attn.k_proj.weight"), &[kv * hd, d], dev)?;
            let v = get(&format!("{p}.self_attn.v_proj.weight"), &[kv * hd, d], dev)?;
            let wqkv = Tensor::cat(&[q, k, v], 0);
            let bqkv = if config.qkv_bias() {
                let bq = get(&format!("{p}.self_attn.q_proj.bias"), &[h * hd], dev)?;
                let bk = get(&format!("{p}.self_attn.k_proj.bias"), &[kv * hd], dev)?;
                let bv = get(&format!("{p}.self_attn.v_proj.bias"), &[kv * hd], dev)?;
                Some(Tensor::cat(&[bq, bk, bv], 0))
            } else {
                None
            };
            let wo = get(&format!("{p}.self_attn.o_proj.weight"), &[d, h * hd], dev)?;
            let bo = if config.o_bias() { Some(get(&format!("{p}.self_attn.o_proj.bias"), &[d], dev)?) } else { None };
            let g = get(&format!("{p}.mlp.gate_proj.weight"), &[ffn, d], dev)?;
            let u = get(&format!("{p}.mlp.up_proj.weight"), &[ffn, d], dev)?;
            let w_gate_up = Tensor::cat(&[g, u], 0);
            let w_down = get(&format!("{p}.mlp.down_proj.weight"), &[d, ffn], dev)?;
            let ln_attn = get(&format!("{p}.input_layernorm.weight"), &[d], dev)?;
            let ln_mlp = get(&format!("{p}.post_attention_layernorm.weight"), &[d], dev)?;
            // The unfused q/k/v and gate/up pieces were just freed: hand them back before the next block allocates, so
            // loading peaks at the weights plus one block rather than accumulating freed scratch on the heap.
            release_free_memory();
            blocks.push(Block { wqkv, bqkv, wo, bo, w_gate_up, w_down, ln_attn, ln_mlp, device: dev });
        }
        let norm = get("model.norm.weight", &[d], head_device)?;
        let lm_head = if config.tie_word_embeddings || !has_lm_head {
            if !config.tie_word_embeddings {
                // Let the fetcher name the missing tensor and its file.
                let _ = get("lm_head.weight", &[config.vocab_size, d], head_device)?;
            }
            // Shares storage with the embedding on the same device; a copy on another.
            embed.to_device(head_device)
        } else {
            get("lm_head.weight", &[config.vocab_size, d], head_device)?
        };
        let inv_freq = inv_freq.to_device(first);
        let attn_impl = if first.is_cuda() { AttnImpl::Sdpa } else { AttnImpl::Eager };
        release_free_memory();
        Ok(Llama { config, kind, attn_impl, embed, blocks, norm, lm_head, inv_freq, n_params })
    }

    /// The device of the final norm and unembedding.
    pub fn head_device(&self) -> Device {
        self.norm.device()
    }

    /// Unique parameters (tied embeddings counted once).
    pub fn n_params(&self) -> usize {
        self.n_params
    }

    pub fn n_layers(&self) -> usize {
        self.blocks.len()
    }

    pub fn d_model(&self) -> usize {
        self.config.hidden_size
    }

    /// The device of the embeddings (where inputs go).
    pub fn input_device(&self) -> Device {
        self.embed.device()
    }

    /// A batch's ids, mask and position ids (`cumsum(mask) - 1`, pads at 0) on the input device, each `[batch, seq]`.
    fn inputs(&self, batch: &Batch) -> (Tensor, Tensor, Tensor) {
        let dev = self.input_device();
        let ids = batch.input_ids.to_device(dev);
        let mask = batch.attention_mask.to_device(dev);
        let pos = (mask.cumsum(1, Kind::Int64) - 1).clamp_min(0);
        (ids, mask, pos)
    }

    /// Run a batch with hooks.
    ///
    /// # Shapes
    /// - `batch.input_ids`, `batch.attention_mask`: `[batch, seq]`
    /// - captures in `ForwardOutput::cache`: `[batch, d_model]` for `Positions::Last`/`At`, `[batch, k, d_model]` for
    ///   `Many`, `[batch, seq, d_model]` for `All`; logits have `vocab` in place of `d_model`.
    pub fn forward(&self, batch: &Batch, spec: &HookSpec) -> Result<ForwardOutput, ModelError> {
        let _guard = tch::no_grad_guard();
        let (ids, mask, pos) = self.inputs(batch);
        let ctx = Ctx { batch_pad: &batch.pad, lengths: &batch.lengths, seq: batch.seq_len() as i64 };
        let depth = spec.depth(self.n_layers()).min(self.n_layers());
        let mut cache = ActivationCache::default();
        self.validate_spec(spec, &ctx)?;
        let h = self.embed_tokens(&ids);
        let (_, blocks_run) = self.run_blocks(h, &mask, &pos, None, spec, &ctx, 0..depth, &mut cache)?;
        Ok(ForwardOutput { cache, last_token_index: batch.last_token_index(), blocks_run })
    }

    fn embed_tokens(&self, ids: &Tensor) -> Tensor {
        Tensor::embedding(&self.embed, ids, -1, false, false)
    }

    fn validate_spec(&self, spec: &HookSpec, ctx: &Ctx) -> Result<(), ModelError> {
        let n = self.n_layers();
        let b = ctx.lengths.len();
        let check_pos = |what: &str, ex: usize, p: i64| -> Result<(), ModelError> {
            if ex >= b {
                return Err(ModelError::Input(format!("{what}: example {ex} is outside the batch of {b}")));
            }
            if p < 0 || p as usize >= ctx.lengths[ex] {
                return Err(ModelError::Input(format!(
                    "{what}: position {p} is outside example {ex}, which has {} tokens",
                    ctx.lengths[ex]
                )));
            }
            Ok(())
        };
        for c in &spec.captures {
            if let Some(l) = c.hook.layer() {
                if l >= n {
                    return Err(ModelError::Input(format!("hook {} is past the model's {n} layers", c.hook)));
                }
            }
            match &c.positions {
                Positions::At(p) => {
                    if p.len() != b {
                        return Err(ModelError::Input(format!(
                            "capture {}: {} positions for {b} examples",
                            c.hook,
                            p.len()
                        )));
                    }
                    for (i, &q) in p.iter().enumerate() {
                        check_pos(&format!("capture {}", c.hook), i, q)?;
                    }
                }
                Positions::Many(ps) => {
                    if ps.len() != b {
                        return Err(ModelError::Input(format!(
                            "capture {}: {} position lists for {b} examples",
                            c.hook,
                            ps.len()
                        )));
                    }
                    let k = ps.first().map(|p| p.len()).unwrap_or(0);
                    for (i, p) in ps.iter().enumerate() {
                        if p.len() != k {
                            return Err(ModelError::Input(format!(
                                "capture {}: position lists differ in length",
                                c.hook
                            )));
                        }
                        for &q in p {
                            check_pos(&format!("capture {}", c.hook), i, q)?;
                        }
                    }
                }
                Positions::All | Positions::Last => {}
            }
        }
        for iv in &spec.interventions {
            if let Some(l) = iv.hook.layer() {
                if l >= n {
                    return Err(ModelError::Input(format!(
                        "intervention at {} is past the model's {n} layers",
                        iv.hook
                    )));
                }
            }
            if iv.hook == HookPoint::Logits {
                return Err(ModelError::Input("interventions on logits are not supported".into()));
            }
            let sz = iv.values.size();
            if sz.len() != 2 || sz[0] as usize != iv.targets.len() || sz[1] as usize != self.d_model() {
                return Err(ModelError::Input(format!(
                    "intervention at {}: values have shape {sz:?}, expected [{}, {}]",
                    iv.hook,
                    iv.targets.len(),
                    self.d_model()
                )));
            }
            for &(ex, p) in &iv.targets {
                check_pos(&format!("intervention at {}", iv.hook), ex, p)?;
            }
        }
        Ok(())
    }

    /// Run blocks `0..depth` over `h` (`[batch, seq, d]`), then the final norm and logits if the spec asks. With a
    /// `kv` cache, `key_mask` covers past + new keys and the new keys/values are appended.
    #[allow(clippy::too_many_arguments)]
    fn run_blocks(
        &self,
        mut h: Tensor,
        key_mask: &Tensor,
        pos: &Tensor,
        mut kv: Option<&mut KvCache>,
        spec: &HookSpec,
        ctx: &Ctx,
        blocks: std::ops::Range<usize>,
        cache: &mut ActivationCache,
    ) -> Result<(Option<Tensor>, usize), ModelError> {
        let depth = blocks.end;
        let t = h.size()[1];
        let s = key_mask.size()[1];
        let attn_mask = attention_mask(key_mask, t, s);
        let (mut cos, mut sin) = self.rope_tables(pos);
        if blocks.start == 0 {
            h = self.hook(HookPoint::Embed, h, spec, ctx, cache);
        }
        let mut mask_dev = attn_mask;
        for (l, blk) in self.blocks.iter().enumerate().take(depth).skip(blocks.start) {
            // Block boundary between devices: the residual stream, the mask and the rotary tables follow the block
            // (each checked on its own: a resumed pass starts with `h` already on the block's device).
            if h.device() != blk.device {
                h = h.to_device(blk.device);
            }
            if mask_dev.device() != blk.device {
                mask_dev = mask_dev.to_device(blk.device);
            }
            if cos.device() != blk.device {
                cos = cos.to_device(blk.device);
                sin = sin.to_device(blk.device);
            }
            h = self.hook(HookPoint::ResidPre(l), h, spec, ctx, cache);
            let x = rms_norm(&h, &blk.ln_attn, self.config.rms_norm_eps);
            let layer_kv = kv.as_deref_mut().map(|c| (&mut c.k[l], &mut c.v[l]));
            let attn = self.attention(blk, &x, &cos, &sin, &mask_dev, layer_kv);
            let attn = self.hook(HookPoint::AttnOut(l), attn, spec, ctx, cache);
            h = self.hook(HookPoint::ResidMid(l), h + attn, spec, ctx, cache);
            let x = rms_norm(&h, &blk.ln_mlp, self.config.rms_norm_eps);
            let gu = x.linear::<&Tensor>(&blk.w_gate_up, None);
            let parts = gu.chunk(2, -1);
            let mlp = (parts[0].silu() * &parts[1]).linear::<&Tensor>(&blk.w_down, None);
            let mlp = self.hook(HookPoint::MlpOut(l), mlp, spec, ctx, cache);
            h = self.hook(HookPoint::ResidPost(l), h + mlp, spec, ctx, cache);
        }
        let wants_head = spec.wants(HookPoint::LnFinal) || spec.wants(HookPoint::Logits);
        if depth < self.n_layers() || !wants_head {
            return Ok((None, depth));
        }
        let h = h.to_device(self.norm.device());
        let normed = rms_norm(&h, &self.norm, self.config.rms_norm_eps);
        let normed = self.hook(HookPoint::LnFinal, normed, spec, ctx, cache);
        for c in spec.captures.iter().filter(|c| c.hook == HookPoint::Logits) {
            let rows = gather(&normed, &c.positions, ctx);
            cache.tensors.insert(HookPoint::Logits, rows.linear::<&Tensor>(&self.lm_head, None));
        }
        Ok((Some(normed), depth))
    }

    /// Apply interventions at `point`, then record captures. Returns `x` untouched when nothing names `point`.
    fn hook(&self, point: HookPoint, mut x: Tensor, spec: &HookSpec, ctx: &Ctx, cache: &mut ActivationCache) -> Tensor {
        if !spec.wants(point) {
            return x;
        }
        for iv in spec.interventions.iter().filter(|i| i.hook == point) {
            let bidx: Vec<i64> = iv.targets.iter().map(|&(b, _)| b as i64).collect();
            let pidx: Vec<i64> = iv.targets.iter().map(|&(b, p)| padded(ctx, b, p)).collect();
            let dev = x.device();
            let idx = [Some(Tensor::from_slice(&bidx).to_device(dev)), Some(Tensor::from_slice(&pidx).to_device(dev))];
            let vals = iv.values.to_device(dev).to_kind(x.kind());
            x = x.index_put(&idx, &vals, iv.mode == InterventionMode::Add);
        }
        if point != HookPoint::Logits {
            for c in spec.captures.iter().filter(|c| c.hook == point) {
                cache.tensors.insert(point, gather(&x, &c.positions, ctx));
            }
        }
        x
    }

    /// Self-attention for one block.
    ///
    /// # Shapes
    /// - `x`: `[batch, seq, d_model]`; `cos`, `sin`: `[batch, 1, seq, head_dim]`; `mask`: `[batch, 1, seq, keys]` bool
    /// - returns `[batch, seq, d_model]`
    fn attention(
        &self,
        blk: &Block,
        x: &Tensor,
        cos: &Tensor,
        sin: &Tensor,
        mask: &Tensor,
        kv: Option<(&mut Tensor, &mut Tensor)>,
    ) -> Tensor {
        let (b, t) = (x.size()[0], x.size()[1]);
        let (h, kvh, hd) =
            (self.config.num_attention_heads as i64, self.config.n_kv_heads() as i64, self.config.head_dim() as i64);
        let qkv = x.linear(&blk.wqkv, blk.bqkv.as_ref());
        let parts = qkv.split_with_sizes([h * hd, kvh * hd, kvh * hd], -1);
        let q = parts[0].view([b, t, h, hd]).transpose(1, 2);
        let k = parts[1].view([b, t, kvh, hd]).transpose(1, 2);
        let v = parts[2].view([b, t, kvh, hd]).transpose(1, 2);
        let q = apply_rope(&q, cos, sin);
        let mut k = apply_rope(&k, cos, sin);
        let mut v = v.contiguous();
        if let Some((ck, cv)) = kv {
            if ck.numel() > 0 {
                k = Tensor::cat(&[&*ck, &k], 2);
                v = Tensor::cat(&[&*cv, &v], 2);
            }
            *ck = k.shallow_clone();
            *cv = v.shallow_clone();
        }
        let out = match self.attn_impl {
            AttnImpl::Eager => {
                // HF's eager attention, op for op (bitwise equal to transformers in f32 on CPU).
                let rep = h / kvh;
                let (k, v) = if rep > 1 {
                    (k.repeat_interleave_self_int(rep, 1, None), v.repeat_interleave_self_int(rep, 1, None))
                } else {
                    (k, v)
                };
                let w = q.matmul(&k.transpose(2, 3)) * (1.0 / (hd as f64).sqrt());
                let w = w.masked_fill(&mask.logical_not(), kind_min(w.kind()));
                w.softmax(-1, Kind::Float).to_kind(q.kind()).matmul(&v)
            }
            AttnImpl::Sdpa => Tensor::scaled_dot_product_attention(&q, &k, &v, Some(mask), 0.0, false, None, h != kvh),
        };
        out.transpose(1, 2).reshape([b, t, h * hd]).linear(&blk.wo, blk.bo.as_ref())
    }

    /// cos/sin tables for position ids `[batch, seq]` -> `[batch, 1, seq, head_dim]` in the compute dtype.
    fn rope_tables(&self, pos: &Tensor) -> (Tensor, Tensor) {
        let freqs = pos.to_kind(Kind::Float).unsqueeze(-1) * self.inv_freq.view([1, 1, -1]);
        let emb = Tensor::cat(&[&freqs, &freqs], -1);
        (emb.cos().to_kind(self.kind).unsqueeze(1), emb.sin().to_kind(self.kind).unsqueeze(1))
    }

    /// Run a batch through every block (like [`Self::forward`]) and keep each block's keys and values for all
    /// positions but each example's last token, so that the last token can be recomputed cheaply from any block
    /// onwards ([`Self::resume_last_token`]): a change to the last token's residual stream never reaches earlier
    /// positions, whose keys and values therefore stay valid.
    ///
    /// # Shapes
    /// - as [`Self::forward`]; the prefix cache holds `[batch, n_kv_heads, seq - 1, head_dim]` per block
    pub fn forward_with_prefix(
        &self,
        batch: &Batch,
        spec: &HookSpec,
    ) -> Result<(ForwardOutput, PrefixCache), ModelError> {
        let (cache, kv) = self.forward_keeping_kv(batch, spec)?;
        let n = self.n_layers();
        let t = batch.seq_len() as i64;
        let prefix = PrefixCache {
            k: kv.k.iter().map(|k| k.narrow(2, 0, t - 1)).collect(),
            v: kv.v.iter().map(|v| v.narrow(2, 0, t - 1)).collect(),
            key_mask: kv.key_mask.narrow(1, 0, t - 1),
            last_pos: &kv.next_pos - 1,
            lengths: batch.lengths.clone(),
        };
        Ok((ForwardOutput { cache, last_token_index: batch.last_token_index(), blocks_run: n }, prefix))
    }

    /// Recompute only each example's last token from block `start` on, over a clean run's [`PrefixCache`], with `h`
    /// as that token's residual stream entering block `start` (`blocks.{start-1}.hook_resid_post`, patched or not).
    /// `start == n_layers` runs no block, only the final norm and unembedding.
    ///
    /// Captures must use `Positions::Last`, and interventions must target each example's last token (its own index
    /// `length - 1`): nothing else exists in this pass. The result equals a full forward pass with the same
    /// interventions up to float rounding (the tests hold it to 1e-4), at the cost of one token per block.
    ///
    /// # Shapes
    /// - `h`: `[batch, d_model]`; captures `[batch, d_model]` (`[batch, vocab]` for logits)
    pub fn resume_last_token(
        &self,
        prefix: &PrefixCache,
        start: usize,
        h: &Tensor,
        spec: &HookSpec,
    ) -> Result<ActivationCache, ModelError> {
        let _guard = tch::no_grad_guard();
        let n = self.n_layers();
        let b = prefix.lengths.len();
        if start > n {
            return Err(ModelError::Input(format!("resume from block {start}: the model has {n} blocks")));
        }
        if h.size() != [b as i64, self.d_model() as i64] {
            return Err(ModelError::Input(format!(
                "resume: h has shape {:?}, expected [{b}, {}]",
                h.size(),
                self.d_model()
            )));
        }
        let mut local = HookSpec::new();
        for c in &spec.captures {
            if c.positions != Positions::Last {
                return Err(ModelError::Input(format!("resume: capture {} must use the last position", c.hook)));
            }
            if c.hook.layer().is_some_and(|l| l < start) || c.hook == HookPoint::Embed {
                return Err(ModelError::Input(format!("resume from block {start}: {} is not recomputed", c.hook)));
            }
            local.captures.push(c.clone());
        }
        for iv in &spec.interventions {
            if iv.hook.layer().is_some_and(|l| l < start) || iv.hook == HookPoint::Embed {
                return Err(ModelError::Input(format!("resume from block {start}: cannot intervene at {}", iv.hook)));
            }
            let mut targets = Vec::with_capacity(iv.targets.len());
            for &(ex, p) in &iv.targets {
                if ex >= b || p != prefix.lengths[ex] as i64 - 1 {
                    return Err(ModelError::Input(format!(
                        "resume: intervention at {} targets ({ex}, {p}), not an example's last token",
                        iv.hook
                    )));
                }
                targets.push((ex, 0));
            }
            local.interventions.push(Intervention {
                hook: iv.hook,
                targets,
                values: iv.values.shallow_clone(),
                mode: iv.mode,
            });
        }
        let dev = self.blocks.get(start).map(|blk| blk.device).unwrap_or_else(|| self.norm.device());
        let ones = Tensor::ones([b as i64, 1], (Kind::Int64, prefix.key_mask.device()));
        let key_mask = Tensor::cat(&[&prefix.key_mask, &ones], 1);
        let pos = prefix.last_pos.view([b as i64, 1]);
        let mut kv = KvCache {
            k: prefix.k.iter().map(|t| t.shallow_clone()).collect(),
            v: prefix.v.iter().map(|t| t.shallow_clone()).collect(),
            key_mask: key_mask.shallow_clone(),
            next_pos: prefix.last_pos.shallow_clone(),
        };
        let (pad, lengths) = (vec![0usize; b], vec![1usize; b]);
        let ctx = Ctx { batch_pad: &pad, lengths: &lengths, seq: 1 };
        let depth = local.depth(n).max(start).min(n);
        let mut cache = ActivationCache::default();
        let h = h.to_device(dev).to_kind(self.kind).unsqueeze(1);
        self.run_blocks(h, &key_mask, &pos, Some(&mut kv), &local, &ctx, start..depth, &mut cache)?;
        Ok(cache)
    }

    /// Run every block over `batch`, keeping each block's keys and values (`[batch, n_kv_heads, seq, head_dim]`).
    fn forward_keeping_kv(&self, batch: &Batch, spec: &HookSpec) -> Result<(ActivationCache, KvCache), ModelError> {
        let _guard = tch::no_grad_guard();
        let dev = self.input_device();
        let (ids, mask, pos) = self.inputs(batch);
        let ctx = Ctx { batch_pad: &batch.pad, lengths: &batch.lengths, seq: batch.seq_len() as i64 };
        self.validate_spec(spec, &ctx)?;
        let n = self.n_layers();
        let empty = || Tensor::zeros([0], (self.kind, dev));
        let mut kv = KvCache {
            k: (0..n).map(|_| empty()).collect(),
            v: (0..n).map(|_| empty()).collect(),
            key_mask: mask.shallow_clone(),
            next_pos: pos.select(1, -1) + 1,
        };
        let mut cache = ActivationCache::default();
        self.run_blocks(self.embed_tokens(&ids), &mask, &pos, Some(&mut kv), spec, &ctx, 0..n, &mut cache)?;
        Ok((cache, kv))
    }

    /// Start incremental decoding: run the prompt batch and keep every block's keys and values.
    ///
    /// # Shapes
    /// - returns logits at each example's last token: `[batch, vocab]` (f32)
    pub fn prefill(&self, batch: &Batch) -> Result<(Tensor, KvCache), ModelError> {
        let (mut cache, kv) = self.forward_keeping_kv(batch, &HookSpec::new().capture_last(HookPoint::Logits))?;
        let logits = cache.take(HookPoint::Logits).expect("logits were requested").to_kind(Kind::Float);
        Ok((logits, kv))
    }

    /// Feed one new token per example.
    ///
    /// # Shapes
    /// - `tokens`: `[batch]` i64; returns logits `[batch, vocab]` (f32)
    pub fn decode_step(&self, tokens: &Tensor, kv: &mut KvCache) -> Result<Tensor, ModelError> {
        let _guard = tch::no_grad_guard();
        let dev = self.input_device();
        let b = tokens.size()[0];
        let ids = tokens.to_device(dev).view([b, 1]);
        let ones = Tensor::ones([b, 1], (Kind::Int64, dev));
        let key_mask = Tensor::cat(&[&kv.key_mask, &ones], 1);
        let pos = kv.next_pos.view([b, 1]);
        let lengths = vec![1usize; b as usize];
        let pad = vec![0usize; b as usize];
        let ctx = Ctx { batch_pad: &pad, lengths: &lengths, seq: 1 };
        let spec = HookSpec::new().capture_last(HookPoint::Logits);
        let mut cache = ActivationCache::default();
        let n = self.n_layers();
        self.run_blocks(self.embed_tokens(&ids), &key_mask, &pos, Some(kv), &spec, &ctx, 0..n, &mut cache)?;
        kv.key_mask = key_mask;
        kv.next_pos = &kv.next_pos + 1;
        Ok(cache.take(HookPoint::Logits).expect("logits were requested").to_kind(Kind::Float))
    }

    /// Greedy decoding with a KV cache. Stops per example at an id in `stop` (included in the output) or after
    /// `max_new` tokens. Returns the new tokens of each prompt.
    pub fn generate_greedy(
        &self,
        prompts: &[Vec<u32>],
        pad_id: u32,
        max_new: usize,
        stop: &[u32],
    ) -> Result<Vec<Vec<u32>>, ModelError> {
        let batch = Batch::left_padded(prompts, pad_id)?;
        let (mut logits, mut kv) = self.prefill(&batch)?;
        let mut out = vec![Vec::new(); prompts.len()];
        let mut done = vec![false; prompts.len()];
        for step in 0..max_new {
            let next = logits.argmax(-1, false);
            let ids: Vec<i64> = Vec::<i64>::try_from(&next.to_device(Device::Cpu))
                .map_err(|e| ModelError::Input(format!("reading logits: {e}")))?;
            for (i, &t) in ids.iter().enumerate() {
                if !done[i] {
                    out[i].push(t as u32);
                    done[i] = stop.contains(&(t as u32));
                }
            }
            if done.iter().all(|&d| d) || step + 1 == max_new {
                break;
            }
            logits = self.decode_step(&next, &mut kv)?;
        }
        Ok(out)
    }
}

/// Return free heap memory to the OS (glibc's `malloc_trim`; a no-op elsewhere).
fn release_free_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only releases memory that is already free.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// Padded batch index of example `b`'s own position `p`.
fn padded(ctx: &Ctx, b: usize, p: i64) -> i64 {
    ctx.batch_pad[b] as i64 + p
}

/// Rows of `x` (`[batch, seq, d]`) at `positions`.
fn gather(x: &Tensor, positions: &Positions, ctx: &Ctx) -> Tensor {
    let dev = x.device();
    let b = ctx.lengths.len();
    let pick = |bi: Vec<i64>, pi: Vec<i64>| {
        x.index(&[Some(Tensor::from_slice(&bi).to_device(dev)), Some(Tensor::from_slice(&pi).to_device(dev))])
    };
    match positions {
        Positions::All => x.copy(),
        // Left padding: every example's last real token sits at the last padded position.
        Positions::Last => x.select(1, ctx.seq - 1).copy(),
        Positions::At(p) => {
            pick((0..b as i64).collect(), p.iter().enumerate().map(|(i, &q)| padded(ctx, i, q)).collect())
        }
        Positions::Many(ps) => {
            let k = ps.first().map(|p| p.len()).unwrap_or(0) as i64;
            let bi = (0..b).flat_map(|i| std::iter::repeat_n(i as i64, k as usize)).collect();
            let pi = ps.iter().enumerate().flat_map(|(i, p)| p.iter().map(move |&q| padded(ctx, i, q))).collect();
            pick(bi, pi).view([b as i64, k, -1])
        }
    }
}

/// Boolean attention mask `[batch, 1, t, s]` for `t` new queries over `s` keys (the last `t` of which are the new
/// ones): causal, no padded keys, and every query may see itself so that pad rows never become all-masked (NaN).
fn attention_mask(key_mask: &Tensor, t: i64, s: i64) -> Tensor {
    let dev = key_mask.device();
    let q = Tensor::arange(t, (Kind::Int64, dev)).view([t, 1]) + (s - t);
    let k = Tensor::arange(s, (Kind::Int64, dev)).view([1, s]);
    let causal = k.le_tensor(&q);
    let diag = k.eq_tensor(&q);
    let keys = key_mask.ne(0).view([-1, 1, 1, s]);
    causal.unsqueeze(0).unsqueeze(0).logical_and(&keys).logical_or(&diag.unsqueeze(0).unsqueeze(0))
}

/// The most negative finite value of a float kind (`torch.finfo(kind).min`), HF's additive mask value.
fn kind_min(kind: Kind) -> f64 {
    match kind {
        Kind::Half => -65504.0,
        Kind::BFloat16 => -3.3895313892515355e38,
        Kind::Double => f64::MIN,
        _ => f64::from(f32::MIN),
    }
}

/// HF's RMSNorm: normalise in f32, cast back, then scale.
fn rms_norm(x: &Tensor, w: &Tensor, eps: f64) -> Tensor {
    let xf = x.to_kind(Kind::Float);
    let var = xf.square().mean_dim(-1, true, Kind::Float);
    let y = xf * (var + eps).rsqrt();
    w * y.to_kind(x.kind())
}

/// `x * cos + rotate_half(x) * sin` with `rotate_half(x) = cat(-x2, x1)`.
fn apply_rope(x: &Tensor, cos: &Tensor, sin: &Tensor) -> Tensor {
    let half = x.size()[3] / 2;
    let x1 = x.narrow(3, 0, half);
    let x2 = x.narrow(3, half, half);
    let rot = Tensor::cat(&[&x2.neg(), &x1], 3);
    x * cos + rot * sin
}

/// Rotary inverse frequencies `[head_dim / 2]` (f32), with `linear` or `llama3` scaling, or a GGUF `rope_freqs`
/// factor tensor, computed the way HF does.
fn rope_inv_freq(cfg: &ModelConfig, store: Option<&WeightStore>) -> Result<Tensor, ModelError> {
    let dim = cfg.head_dim() as i64;
    let exps = Tensor::arange_start_step(0, dim, 2, (Kind::Int64, Device::Cpu)).to_kind(Kind::Float) / dim as f64;
    let base = Tensor::from(cfg.rope_theta as f32);
    let mut inv = base.pow(&exps).reciprocal();
    if let Some(rs) = &cfg.rope_scaling {
        match rs.rope_type.as_str() {
            "linear" => inv /= rs.factor.unwrap_or(1.0),
            "llama3" => {
                let factor = rs.factor.unwrap_or(1.0);
                let lo = rs.low_freq_factor.unwrap_or(1.0);
                let hi = rs.high_freq_factor.unwrap_or(4.0);
                let old = rs.original_max_position_embeddings.unwrap_or(8192) as f64;
                let lo_wav = old / lo;
                let hi_wav = old / hi;
                let wavelen = inv.reciprocal() * (2.0 * std::f64::consts::PI);
                let scaled = inv.where_self(&wavelen.le(lo_wav), &(&inv / factor));
                let smooth = (wavelen.reciprocal() * old - lo) / (hi - lo);
                let smoothed = (smooth.ones_like() - &smooth) * &scaled / factor + &smooth * &scaled;
                let medium = wavelen.ge(hi_wav).logical_and(&wavelen.le(lo_wav));
                inv = smoothed.where_self(&medium, &scaled);
            }
            _ => {}
        }
    }
    if let Some(WeightStore::Gguf { file, .. }) = store {
        if file.tensor_info("rope_freqs.weight").is_some() {
            let f = file.dequantize("rope_freqs.weight").map_err(ModelError::Gguf)?;
            inv /= Tensor::from_slice(&f);
        }
    }
    Ok(inv)
}
