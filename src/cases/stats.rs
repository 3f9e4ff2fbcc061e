//! Summary statistics of a case set: counts per family and subtype, payload lengths, and (with a model) the token
//! length of the rendered prompts per channel.
use std::collections::BTreeMap;

use super::io::LoadedCase;
use super::render::{render_case_with, Channel, Condition, RenderOptions, TemplateBackend, TokenizerBackend};
use super::schema::Family;

/// Five-number summary plus mean of a sample.
#[derive(Debug, Clone, PartialEq)]
pub struct Distribution {
    /// Sample size.
    pub n: usize,
    /// Minimum.
    pub min: usize,
    /// 25th percentile (nearest rank).
    pub p25: usize,
    /// Median (nearest rank).
    pub median: usize,
    /// 75th percentile (nearest rank).
    pub p75: usize,
    /// Maximum.
    pub max: usize,
    /// Mean.
    pub mean: f64,
}

impl Distribution {
    /// Summary of a sample; `None` when empty.
    pub fn of(values: &[usize]) -> Option<Distribution> {
        if values.is_empty() {
            return None;
        }
        let mut v = values.to_vec();
        v.sort_unstable();
        let q = |p: f64| v[((p * (v.len() - 1) as f64).round() as usize).min(v.len() - 1)];
        Some(Distribution {
            n: v.len(),
            min: v[0],
            p25: q(0.25),
            median: q(0.5),
            p75: q(0.75),
            max: v[v.len() - 1],
            mean: v.iter().sum::<usize>() as f64 / v.len() as f64,
        })
    }
}

impl std::fmt::Display for Distribution {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "n={} min={} p25={} median={} p75={} max={} mean={:.1}",
            self.n, self.min, self.p25, self.median, self.p75, self.max, self.mean
        )
    }
}

/// Statistics of a set.
#[derive(Debug, Clone, Default)]
pub struct SetStats {
    /// Number of cases.
    pub total: usize,
    /// Cases per family/subtype label (`TP/P1`, `IPI`, ...).
    pub by_kind: BTreeMap<String, usize>,
    /// Cases per family.
    pub by_family: BTreeMap<String, usize>,
    /// Payload length in bytes (adversarial).
    pub payload_bytes: Option<Distribution>,
    /// Benign control length in bytes.
    pub benign_bytes: Option<Distribution>,
    /// Prompt token counts per channel (adversarial condition), when rendered.
    pub tokens_per_channel: Vec<(Channel, Distribution)>,
    /// Payload token counts (tool channel, adversarial), when rendered.
    pub payload_tokens: Option<Distribution>,
    /// Rendering failures (case id and message); the set does not validate when non-empty.
    pub render_errors: Vec<String>,
}

/// Computes statistics; renders every case in every channel when `render` is given.
pub fn set_stats(
    cases: &[LoadedCase],
    render: Option<(&dyn TemplateBackend, &dyn TokenizerBackend, &RenderOptions)>,
) -> SetStats {
    let mut s = SetStats { total: cases.len(), ..Default::default() };
    for f in Family::ALL {
        s.by_family.insert(f.to_string(), 0);
    }
    for lc in cases {
        *s.by_family.entry(lc.case.family.to_string()).or_default() += 1;
        *s.by_kind.entry(lc.case.kind_label()).or_default() += 1;
    }
    let adv: Vec<usize> = cases.iter().map(|c| c.case.payload.text().len()).collect();
    let ben: Vec<usize> = cases.iter().map(|c| c.case.benign.text().len()).collect();
    s.payload_bytes = Distribution::of(&adv);
    s.benign_bytes = Distribution::of(&ben);
    if let Some((template, tokenizer, opts)) = render {
        let mut payload_tokens = Vec::new();
        for ch in Channel::ALL {
            let mut counts = Vec::new();
            for lc in cases {
                match render_case_with(&lc.case, ch, Condition::Adversarial, template, tokenizer, opts) {
                    Ok(r) => {
                        counts.push(r.token_count());
                        if ch == Channel::Tool {
                            payload_tokens.push(r.payload_token_span.len());
                        }
                    }
                    Err(e) => s.render_errors.push(e.to_string()),
                }
            }
            if let Some(d) = Distribution::of(&counts) {
                s.tokens_per_channel.push((ch, d));
            }
        }
        s.payload_tokens = Distribution::of(&payload_tokens);
    }
    s
}
