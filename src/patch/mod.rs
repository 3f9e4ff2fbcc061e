//! Activation patching between matched prompts, forward and reverse, scored by cosine shift.
//!
//! For each case and channel the adversarial prompt A and its benign control B form a pair (their lengths may
//! differ: every patch is placed at each prompt's own last-token index). With r the readout (by default the final
//! norm's output at the last token):
//! - **forward** (adversarial -> benign): run B with A's `blocks.{l}.hook_resid_post` (at A's last token) written
//!   into B's last token; shift = cos(r_patched, r_A) - cos(r_B, r_A).
//! - **reverse** (benign -> adversarial): run A with B's value; shift = cos(r_patched, r_B) - cos(r_A, r_B).
//! - **recovery** = shift / (1 - cos(r_target, r_source)): the fraction of the gap the patch closes.
//!
//! A layer *set* patches several layers at once (each with the source's value at that layer): `[l]` is the paper's
//! single-layer patch, `l..L` the cumulative one.
//!
//! The patched run is computed over the target's cached keys and values ([`Llama::resume_last_token`]): a change
//! at the last token never reaches earlier positions, so only the last token is recomputed from the first patched
//! block up. `full_recompute` runs the whole prompt instead (the reference path).
use crate::model::{Batch, HookPoint, HookSpec, Intervention, InterventionMode, Llama, ModelError};
use crate::stats::{bootstrap_groups, Estimate};
use serde::Serialize;
use std::collections::BTreeMap;
use tch::{Device, Kind, Tensor};

/// What the shift is measured on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Readout {
    /// `ln_final.hook_normalized` at the last token (default).
    LnFinal,
    /// `blocks.{n-1}.hook_resid_post` at the last token.
    ResidPost,
    /// The logits at the last token.
    Logits,
}

impl Readout {
    pub fn parse(s: &str) -> Result<Self, String> {
        match s {
            "ln_final" => Ok(Readout::LnFinal),
            "resid_post" => Ok(Readout::ResidPost),
            "logits" => Ok(Readout::Logits),
            _ => Err(format!("unknown readout `{s}` (ln_final, resid_post, logits)")),
        }
    }
    fn hook(self, n_layers: usize) -> HookPoint {
        match self {
            Readout::LnFinal => HookPoint::LnFinal,
            Readout::ResidPost => HookPoint::ResidPost(n_layers - 1),
            Readout::Logits => HookPoint::Logits,
        }
    }
}

/// A matched pair: token ids of the adversarial and benign prompts of one case in one channel.
#[derive(Debug, Clone)]
pub struct Pair {
    pub case_id: String,
    pub family: String,
    pub subtype: Option<String>,
    pub channel: String,
    pub adversarial: Vec<u32>,
    pub benign: Vec<u32>,
}

/// A pair's stored last-token `hook_resid_post` values from a capture run (`trustlens patch --run`), checked against
/// the clean pass before any patch is placed: a run made with another model, dtype or template is refused rather
/// than silently patched with values it never produced.
#[derive(Debug, Clone)]
pub struct StoredSources {
    /// Block indices; every one must be among the patched layers.
    pub layers: Vec<usize>,
    /// `[layers.len()][d_model]`: the adversarial prompt's stored values.
    pub adversarial: Vec<Vec<f32>>,
    /// `[layers.len()][d_model]`: the benign control's stored values.
    pub benign: Vec<Vec<f32>>,
}

/// The lowest cosine between a stored activation and the clean pass that [`run_checked`] accepts. Same model, dtype
/// and prompts give >= 0.9999 (f16 storage, other batch padding); another model or template gives far less.
pub const STORED_MIN_COS: f64 = 0.99;

/// How to patch.
#[derive(Debug, Clone)]
pub struct PatchOptions {
    /// Layer sets; each is patched together (sorted, distinct, in range).
    pub layer_sets: Vec<Vec<usize>>,
    pub readout: Readout,
    /// Pairs per forward pass (2x prompts).
    pub batch_pairs: usize,
    /// Recompute whole prompts instead of the last token over the cached prefix.
    pub full_recompute: bool,
    /// Also patch a random vector of the source's norm (single-layer sets only), as a control.
    pub random_control: bool,
    pub seed: u64,
    pub pad_id: u32,
}

/// One pair, one layer set, one direction.
#[derive(Debug, Clone, Serialize)]
pub struct PairResult {
    pub case_id: String,
    pub family: String,
    pub subtype: Option<String>,
    pub channel: String,
    /// The layer set as text: `12`, `12+20`, `12..29`.
    pub layers: String,
    /// `forward` (adversarial -> benign) or `reverse`.
    pub direction: &'static str,
    pub shift: f64,
    pub recovery: f64,
    /// cos(r_target, r_source) before patching.
    pub cos_clean: f64,
    /// Shift from patching a random vector of the source's norm (single-layer sets with the control on).
    pub random_shift: Option<f64>,
    /// With stored sources ([`run_checked`]): the lowest cosine between the pair's stored activations and its clean
    /// pass, over both prompts and every stored layer.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stored_cos: Option<f64>,
}

/// Text name of a layer set.
pub fn set_name(set: &[usize]) -> String {
    if set.len() > 2 && set.windows(2).all(|w| w[1] == w[0] + 1) {
        format!("{}..{}", set[0], set[set.len() - 1])
    } else {
        set.iter().map(|l| l.to_string()).collect::<Vec<_>>().join("+")
    }
}

/// Cosine similarity per row of two `[n, d]` tensors, in f64.
fn row_cos(a: &Tensor, b: &Tensor) -> Vec<f64> {
    let a = a.to_kind(Kind::Double).to_device(Device::Cpu);
    let b = b.to_kind(Kind::Double).to_device(Device::Cpu);
    let num = (&a * &b).sum_dim_intlist(&[-1i64][..], false, Kind::Double);
    let den = a.norm_scalaropt_dim(2, &[-1i64][..], false) * b.norm_scalaropt_dim(2, &[-1i64][..], false);
    Vec::<f64>::try_from(num / den.clamp_min(1e-30)).unwrap_or_default()
}

/// Patch every pair at every layer set, both directions. `progress` is called with the number of pairs done.
///
/// # Shapes
/// Each batch runs `2 k` prompts (k adversarial, then their k benign controls); captures are `[2k, d_model]`.
pub fn run(
    model: &Llama,
    pairs: &[Pair],
    opts: &PatchOptions,
    progress: impl FnMut(usize),
) -> Result<Vec<PairResult>, ModelError> {
    run_inner(model, pairs, None, opts, progress)
}

/// [`run`], with each pair's stored activations (`stored[i]` belongs to `pairs[i]`) compared with its clean pass
/// first: a cosine below `min_cos` at any stored layer stops the run with an error naming the case and block.
/// The patches themselves use the clean pass's values (exact, in the compute dtype); each result records the
/// agreement in [`PairResult::stored_cos`].
///
/// # Shapes
/// As [`run`]; every stored vector is `[d_model]`.
pub fn run_checked(
    model: &Llama,
    pairs: &[Pair],
    stored: &[StoredSources],
    min_cos: f64,
    opts: &PatchOptions,
    progress: impl FnMut(usize),
) -> Result<Vec<PairResult>, ModelError> {
    if stored.len() != pairs.len() {
        return Err(ModelError::Input(format!("{} stored sources for {} pairs", stored.len(), pairs.len())));
    }
    run_inner(model, pairs, Some((stored, min_cos)), opts, progress)
}

fn run_inner(
    model: &Llama,
    pairs: &[Pair],
    stored: Option<(&[StoredSources], f64)>,
    opts: &PatchOptions,
    mut progress: impl FnMut(usize),
) -> Result<Vec<PairResult>, ModelError> {
    let n = model.n_layers();
    for set in &opts.layer_sets {
        if set.is_empty() || set.windows(2).any(|w| w[1] <= w[0]) || set.iter().any(|&l| l >= n) {
            return Err(ModelError::Input(format!(
                "layer set {set:?}: layers must be distinct, increasing and below the model's {n} layers"
            )));
        }
    }
    let readout = opts.readout.hook(n);
    let mut layers: Vec<usize> = opts.layer_sets.iter().flatten().copied().collect();
    layers.sort_unstable();
    layers.dedup();
    let mut out = Vec::new();
    tch::manual_seed(opts.seed as i64);
    for (chunk_i, chunk) in pairs.chunks(opts.batch_pairs.max(1)).enumerate() {
        let k = chunk.len();
        let prompts: Vec<Vec<u32>> =
            chunk.iter().map(|p| p.adversarial.clone()).chain(chunk.iter().map(|p| p.benign.clone())).collect();
        let lens: Vec<usize> = prompts.iter().map(|p| p.len()).collect();
        let batch = Batch::left_padded(&prompts, opts.pad_id)?;
        let mut spec = HookSpec::new().capture_last(readout);
        for &l in &layers {
            if HookPoint::ResidPost(l) != readout {
                spec = spec.capture_last(HookPoint::ResidPost(l));
            }
        }
        let (clean, prefix) = model.forward_with_prefix(&batch, &spec)?;
        let r_clean = clean.cache.get(readout).expect("readout captured").shallow_clone();
        let resid = |l: usize| clean.cache.get(HookPoint::ResidPost(l)).expect("captured").shallow_clone();
        // Row i's partner: adversarial i <-> benign i.
        let partner: Vec<i64> = (0..2 * k).map(|i| if i < k { (i + k) as i64 } else { (i - k) as i64 }).collect();
        let partner_t = Tensor::from_slice(&partner).to_device(r_clean.device());
        let r_source = r_clean.index_select(0, &partner_t);
        // The partner's resid_post at block l (on block l's device when the model is split over devices).
        let partner_resid = |l: usize| {
            let r = resid(l);
            r.index_select(0, &partner_t.to_device(r.device()))
        };
        let cos_clean = row_cos(&r_clean, &r_source);
        let chunk_start = chunk_i * opts.batch_pairs.max(1);
        let mut stored_cos = vec![None; k];
        if let Some((stored, min_cos)) = stored {
            for (j, p) in chunk.iter().enumerate() {
                let s = &stored[chunk_start + j];
                let mut worst = f64::INFINITY;
                for (li, &l) in s.layers.iter().enumerate() {
                    if !layers.contains(&l) {
                        return Err(ModelError::Input(format!(
                            "case {} ({}): stored block {l} is not among the patched layers",
                            p.case_id, p.channel
                        )));
                    }
                    let live = resid(l);
                    let d = live.size()[1] as usize;
                    let (sa, sb) = (&s.adversarial[li], &s.benign[li]);
                    if sa.len() != d || sb.len() != d {
                        return Err(ModelError::Input(format!(
                            "case {} ({}): stored block {l} holds {} values, the model's residual stream {d}",
                            p.case_id,
                            p.channel,
                            sa.len()
                        )));
                    }
                    let rows = Tensor::from_slice(&[j as i64, (k + j) as i64]).to_device(live.device());
                    let want = Tensor::from_slice(&[sa.as_slice(), sb.as_slice()].concat()).view([2, d as i64]);
                    let c = row_cos(&live.index_select(0, &rows), &want);
                    let c = c.iter().copied().fold(f64::INFINITY, f64::min);
                    if c.is_nan() || c < min_cos {
                        return Err(ModelError::Input(format!(
                            "case {} ({}): the run's stored activation at block {l} disagrees with this model's clean \
                             pass (cosine {c:.4}, below {min_cos}): the run was captured with another model, dtype, \
                             template or case file",
                            p.case_id, p.channel
                        )));
                    }
                    worst = worst.min(c);
                }
                stored_cos[j] = worst.is_finite().then_some(worst);
            }
        }
        let last_targets: Vec<(usize, i64)> = lens.iter().enumerate().map(|(b, &len)| (b, len as i64 - 1)).collect();
        let patched_readout = |set: &[usize], first: &Tensor| -> Result<Tensor, ModelError> {
            let mut ivs = Vec::new();
            for (j, &l) in set.iter().enumerate() {
                let values = if j == 0 { first.shallow_clone() } else { partner_resid(l) };
                ivs.push(Intervention {
                    hook: HookPoint::ResidPost(l),
                    targets: last_targets.clone(),
                    values,
                    mode: InterventionMode::Replace,
                });
            }
            let mut spec = HookSpec::new().capture_last(readout);
            if opts.full_recompute {
                for iv in ivs {
                    spec = spec.intervene(iv);
                }
                let mut o = model.forward(&batch, &spec)?;
                return Ok(o.cache.take(readout).expect("readout captured"));
            }
            // The readout is the last block's resid_post and the first patched layer is the last block: the
            // patched value is the readout.
            if readout == HookPoint::ResidPost(n - 1) && set[0] == n - 1 {
                return Ok(first.shallow_clone());
            }
            for iv in ivs.into_iter().skip(1) {
                spec = spec.intervene(iv);
            }
            let mut o = model.resume_last_token(&prefix, set[0] + 1, first, &spec)?;
            Ok(o.take(readout).expect("readout captured"))
        };
        for set in &opts.layer_sets {
            let src_first = partner_resid(set[0]);
            let r_p = patched_readout(set, &src_first)?;
            let cos_p = row_cos(&r_p, &r_source);
            let random = if opts.random_control && set.len() == 1 {
                let noise = Tensor::randn(src_first.size(), (Kind::Float, Device::Cpu)).to_device(src_first.device());
                let scale = src_first.to_kind(Kind::Float).norm_scalaropt_dim(2, &[-1i64][..], true)
                    / noise.norm_scalaropt_dim(2, &[-1i64][..], true);
                let h = (noise * scale).to_kind(src_first.kind());
                Some(row_cos(&patched_readout(set, &h)?, &r_source))
            } else {
                None
            };
            for i in 0..2 * k {
                let p = &chunk[i % k];
                let shift = cos_p[i] - cos_clean[i];
                let gap = 1.0 - cos_clean[i];
                out.push(PairResult {
                    case_id: p.case_id.clone(),
                    family: p.family.clone(),
                    subtype: p.subtype.clone(),
                    channel: p.channel.clone(),
                    layers: set_name(set),
                    // Rows < k are adversarial targets receiving benign values: reverse.
                    direction: if i < k { "reverse" } else { "forward" },
                    shift,
                    recovery: if gap.abs() > 1e-12 { shift / gap } else { f64::NAN },
                    cos_clean: cos_clean[i],
                    random_shift: random.as_ref().map(|c| c[i] - cos_clean[i]),
                    stored_cos: stored_cos[i % k],
                });
            }
        }
        progress((chunk_start + k).min(pairs.len()));
    }
    Ok(out)
}

/// Mean shift of one group of pair results with a bootstrap CI over cases.
#[derive(Debug, Clone, Serialize)]
pub struct SummaryRow {
    pub layers: String,
    pub direction: String,
    pub channel: String,
    /// `all`, `TP`, `IPI`, `CTS`.
    pub family: String,
    pub n: usize,
    pub shift: Estimate,
    pub recovery: Estimate,
    pub random_shift: Option<Estimate>,
}

/// Mean shift (and recovery, and the random control) per layer set x direction x channel x family (plus `all`),
/// with percentile bootstrap CIs resampling cases.
pub fn summarize(results: &[PairResult], n_boot: usize, level: f64, seed: u64) -> Vec<SummaryRow> {
    let mut groups: BTreeMap<(String, String, String, String), Vec<&PairResult>> = BTreeMap::new();
    for r in results {
        for fam in ["all".to_string(), r.family.clone()] {
            groups.entry((r.layers.clone(), r.direction.to_string(), r.channel.clone(), fam)).or_default().push(r);
        }
    }
    let mean = |rows: &[&PairResult], f: &dyn Fn(&PairResult) -> f64, idx: &[usize]| -> f64 {
        let v: Vec<f64> = idx.iter().map(|&i| f(rows[i])).filter(|x| x.is_finite()).collect();
        if v.is_empty() {
            f64::NAN
        } else {
            v.iter().sum::<f64>() / v.len() as f64
        }
    };
    let mut rows: Vec<SummaryRow> = groups
        .into_iter()
        .map(|((layers, direction, channel, family), rows)| {
            let ids: Vec<String> = rows.iter().map(|r| r.case_id.clone()).collect();
            let est =
                |f: &dyn Fn(&PairResult) -> f64| bootstrap_groups(&ids, n_boot, level, seed, |idx| mean(&rows, f, idx));
            let random_shift =
                rows.iter().all(|r| r.random_shift.is_some()).then(|| est(&|r| r.random_shift.unwrap_or(f64::NAN)));
            SummaryRow {
                n: rows.len(),
                shift: est(&|r| r.shift),
                recovery: est(&|r| r.recovery),
                random_shift,
                layers,
                direction,
                channel,
                family,
            }
        })
        .collect();
    // Numeric layer order (the map's is lexicographic: `12` < `12+20` < `6`); stable, so direction, channel and
    // family keep their order within a layer set.
    rows.sort_by_cached_key(|r| set_order(&r.layers));
    rows
}

/// Sort key of a layer-set name: single layers by index, then multi-layer sets by first layer, then size.
pub fn set_order(name: &str) -> (bool, usize, usize, Vec<usize>) {
    match parse_layer_set(name) {
        Ok(v) if !v.is_empty() => (v.len() > 1, v[0], v.len(), v),
        _ => (true, usize::MAX, usize::MAX, Vec::new()),
    }
}

/// Parse layer sets: `12`, `12+20`, `12..29`, several separated by `;` or given as separate strings; `frac` layers
/// are resolved by the caller.
pub fn parse_layer_set(s: &str) -> Result<Vec<usize>, String> {
    let s = s.trim();
    let index = |x: &str| {
        let x = x.trim();
        x.parse::<usize>().map_err(|_| {
            let what =
                if x.is_empty() { "a layer index is missing".into() } else { format!("`{x}` is not a layer index") };
            format!("bad layer set `{s}`: {what} (expected e.g. `12`, `12+20` or `12..29`)")
        })
    };
    if let Some((a, b)) = s.split_once("..") {
        let (a, b) = (index(a)?, index(b)?);
        if b < a {
            return Err(format!("bad layer set `{s}`: empty range ({b} comes before {a}; write `{b}..{a}`)"));
        }
        return Ok((a..=b).collect());
    }
    let mut v: Vec<usize> = s.split('+').map(index).collect::<Result<_, _>>()?;
    v.sort_unstable();
    v.dedup();
    Ok(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layer_sets_parse_and_print() {
        assert_eq!(parse_layer_set("12").unwrap(), vec![12]);
        assert_eq!(parse_layer_set("20+12").unwrap(), vec![12, 20]);
        assert_eq!(parse_layer_set("3..6").unwrap(), vec![3, 4, 5, 6]);
        assert!(parse_layer_set("6..3").is_err());
        assert!(parse_layer_set("x").is_err());
        assert_eq!(set_name(&[3, 4, 5, 6]), "3..6");
        assert_eq!(set_name(&[12, 20]), "12+20");
        assert_eq!(set_name(&[7]), "7");
        for bad in ["12+", "abc", "5..2", "..3", "1.5"] {
            let e = parse_layer_set(bad).unwrap_err();
            assert!(e.contains(&format!("`{bad}`")), "{e}");
        }
        assert!(parse_layer_set("5..2").unwrap_err().contains("empty range"));
    }

    #[test]
    fn layer_sets_sort_numerically() {
        let mut names = ["12+20", "6", "18..29", "12", "18", "6+12+18+24", "0..29", "2"];
        names.sort_by_key(|n| set_order(n));
        assert_eq!(names, ["2", "6", "12", "18", "0..29", "6+12+18+24", "12+20", "18..29"]);

        let pr = |layers: &str, case: &str| PairResult {
            case_id: case.into(),
            family: "TP".into(),
            subtype: None,
            channel: "chat".into(),
            layers: layers.into(),
            direction: "forward",
            shift: 0.1,
            recovery: 0.5,
            cos_clean: 0.9,
            random_shift: None,
            stored_cos: None,
        };
        let results: Vec<PairResult> =
            ["12+20", "18", "6", "12", "24..29"].iter().flat_map(|l| [pr(l, "a"), pr(l, "b")]).collect();
        let order: Vec<String> =
            summarize(&results, 10, 0.95, 0).into_iter().filter(|r| r.family == "all").map(|r| r.layers).collect();
        assert_eq!(order, ["6", "12", "18", "12+20", "24..29"]);
    }
}
