//! Hook points, named like TransformerLens, and the declarative spec of what a forward pass captures and changes.
//!
//! A [`HookSpec`] goes in, an [`ActivationCache`] comes out. A hook point that no capture or intervention names costs
//! nothing: the forward pass asks the spec once per hook point and only then copies rows. The pass also stops after
//! the deepest layer the spec needs ([`HookSpec::depth`]) and computes logits only at the requested positions.
use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;
use tch::Tensor;

/// A place in the forward pass where the residual stream (or a sublayer output) can be read or changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum HookPoint {
    /// `hook_embed`: token embeddings (the input to block 0).
    Embed,
    /// `blocks.{i}.hook_resid_pre`: the residual stream entering block i.
    ResidPre(usize),
    /// `blocks.{i}.hook_attn_out`: the attention sublayer's output (after o_proj), before it is added.
    AttnOut(usize),
    /// `blocks.{i}.hook_resid_mid`: resid_pre + attn_out.
    ResidMid(usize),
    /// `blocks.{i}.hook_mlp_out`: the MLP's output, before it is added.
    MlpOut(usize),
    /// `blocks.{i}.hook_resid_post`: the residual stream leaving block i.
    ResidPost(usize),
    /// `ln_final.hook_normalized`: the final RMSNorm's output.
    LnFinal,
    /// `logits`: the unembedding's output (`[.., vocab]`).
    Logits,
}

impl HookPoint {
    /// The block this hook lives in, if any.
    pub fn layer(self) -> Option<usize> {
        match self {
            HookPoint::ResidPre(l)
            | HookPoint::AttnOut(l)
            | HookPoint::ResidMid(l)
            | HookPoint::MlpOut(l)
            | HookPoint::ResidPost(l) => Some(l),
            _ => None,
        }
    }

    /// How many blocks must run before this hook's value exists (`n_layers` for LnFinal/Logits).
    pub fn blocks_needed(self, n_layers: usize) -> usize {
        match self {
            HookPoint::Embed => 0,
            HookPoint::ResidPre(l) => l,
            HookPoint::AttnOut(l) | HookPoint::ResidMid(l) | HookPoint::MlpOut(l) | HookPoint::ResidPost(l) => l + 1,
            HookPoint::LnFinal | HookPoint::Logits => n_layers,
        }
    }
}

impl fmt::Display for HookPoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HookPoint::Embed => write!(f, "hook_embed"),
            HookPoint::ResidPre(l) => write!(f, "blocks.{l}.hook_resid_pre"),
            HookPoint::AttnOut(l) => write!(f, "blocks.{l}.hook_attn_out"),
            HookPoint::ResidMid(l) => write!(f, "blocks.{l}.hook_resid_mid"),
            HookPoint::MlpOut(l) => write!(f, "blocks.{l}.hook_mlp_out"),
            HookPoint::ResidPost(l) => write!(f, "blocks.{l}.hook_resid_post"),
            HookPoint::LnFinal => write!(f, "ln_final.hook_normalized"),
            HookPoint::Logits => write!(f, "logits"),
        }
    }
}

impl FromStr for HookPoint {
    type Err = String;
    /// Parse TransformerLens names: `blocks.12.hook_resid_post`, `ln_final.hook_normalized`, `logits`, `hook_embed`.
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "hook_embed" => return Ok(HookPoint::Embed),
            "ln_final.hook_normalized" => return Ok(HookPoint::LnFinal),
            "logits" => return Ok(HookPoint::Logits),
            _ => {}
        }
        let bad = || {
            format!(
                "unknown hook point `{s}` (expected blocks.N.hook_resid_pre|hook_attn_out|hook_resid_mid|hook_mlp_out|hook_resid_post, ln_final.hook_normalized, logits or hook_embed)"
            )
        };
        let rest = s.strip_prefix("blocks.").ok_or_else(bad)?;
        let (n, name) = rest.split_once('.').ok_or_else(bad)?;
        let l: usize = n.parse().map_err(|_| bad())?;
        Ok(match name {
            "hook_resid_pre" => HookPoint::ResidPre(l),
            "hook_attn_out" => HookPoint::AttnOut(l),
            "hook_resid_mid" => HookPoint::ResidMid(l),
            "hook_mlp_out" => HookPoint::MlpOut(l),
            "hook_resid_post" => HookPoint::ResidPost(l),
            _ => return Err(bad()),
        })
    }
}

/// Which token positions a capture reads. Indices are in each example's own coordinates (0 = its first real
/// token), never in padded batch coordinates; the forward pass adds each example's left-padding offset.
#[derive(Debug, Clone, PartialEq)]
pub enum Positions {
    /// Every position of the padded batch: `[batch, seq, d]` (pad positions included; use the mask).
    All,
    /// Each example's last real token: `[batch, d]`.
    Last,
    /// One position per example: `[batch, d]`.
    At(Vec<i64>),
    /// The same number of positions per example: `[batch, k, d]`.
    Many(Vec<Vec<i64>>),
}

/// Read a hook point at some positions.
#[derive(Debug, Clone, PartialEq)]
pub struct Capture {
    pub hook: HookPoint,
    pub positions: Positions,
}

/// How an intervention combines its vector with the activation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InterventionMode {
    Replace,
    Add,
}

/// Replace or add vectors at a hook point, at explicit (example, position) targets.
///
/// # Shapes
/// - `targets`: `n` pairs of (example index in the batch, token index in that example's own coordinates)
/// - `values`: `[n, d_model]`, any dtype/device (converted to the activation's)
#[derive(Debug)]
pub struct Intervention {
    pub hook: HookPoint,
    pub targets: Vec<(usize, i64)>,
    pub values: Tensor,
    pub mode: InterventionMode,
}

/// What a forward pass should capture and change.
#[derive(Debug, Default)]
pub struct HookSpec {
    pub captures: Vec<Capture>,
    pub interventions: Vec<Intervention>,
}

impl HookSpec {
    /// Nothing hooked: the forward pass runs every block and returns last-token logits only if asked.
    pub fn new() -> Self {
        Self::default()
    }

    /// Capture `hook` at `positions`.
    pub fn capture(mut self, hook: HookPoint, positions: Positions) -> Self {
        self.captures.push(Capture { hook, positions });
        self
    }

    /// Capture `hook` at each example's last token.
    pub fn capture_last(self, hook: HookPoint) -> Self {
        self.capture(hook, Positions::Last)
    }

    /// Add an intervention.
    pub fn intervene(mut self, iv: Intervention) -> Self {
        self.interventions.push(iv);
        self
    }

    /// How many blocks must run: the deepest hook any capture or intervention names.
    pub fn depth(&self, n_layers: usize) -> usize {
        self.captures
            .iter()
            .map(|c| c.hook)
            .chain(self.interventions.iter().map(|i| i.hook))
            .map(|h| h.blocks_needed(n_layers))
            .max()
            .unwrap_or(n_layers)
    }

    pub(crate) fn wants(&self, hook: HookPoint) -> bool {
        self.captures.iter().any(|c| c.hook == hook) || self.interventions.iter().any(|i| i.hook == hook)
    }
}

/// Captured activations by hook point (shapes as [`Positions`] says; dtype of the forward pass).
#[derive(Debug, Default)]
pub struct ActivationCache {
    pub tensors: BTreeMap<HookPoint, Tensor>,
}

impl ActivationCache {
    pub fn get(&self, hook: HookPoint) -> Option<&Tensor> {
        self.tensors.get(&hook)
    }
    /// Remove and return a captured tensor.
    pub fn take(&mut self, hook: HookPoint) -> Option<Tensor> {
        self.tensors.remove(&hook)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for h in [
            HookPoint::Embed,
            HookPoint::ResidPre(0),
            HookPoint::AttnOut(3),
            HookPoint::ResidMid(7),
            HookPoint::MlpOut(11),
            HookPoint::ResidPost(29),
            HookPoint::LnFinal,
            HookPoint::Logits,
        ] {
            assert_eq!(h.to_string().parse::<HookPoint>().unwrap(), h);
        }
        assert!("blocks.x.hook_resid_post".parse::<HookPoint>().is_err());
        assert!("blocks.1.hook_nope".parse::<HookPoint>().is_err());
    }

    #[test]
    fn depth_is_deepest_hook() {
        let s = HookSpec::new().capture_last(HookPoint::ResidPost(4)).capture_last(HookPoint::ResidPre(9));
        assert_eq!(s.depth(30), 9);
        assert_eq!(HookSpec::new().depth(30), 30);
        assert_eq!(HookSpec::new().capture_last(HookPoint::Logits).depth(30), 30);
    }
}
