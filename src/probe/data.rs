//! Probe input: per-row metadata and one `[n_rows, d_model]` matrix per (layer, position).
use std::collections::BTreeMap;

use ndarray::Array2;

use super::ProbeError;

/// One prompt (row) of an activation run, as the probes see it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct RowInfo {
    /// Case id: the grouping unit of cross-validation and of the bootstrap.
    pub case_id: String,
    /// Attack family (TP, IPI, CTS, ...): used as a stratum for the folds.
    pub family: String,
    /// Delivery channel: "chat", "chat+tools" or "tool".
    pub channel: String,
    /// true = adversarial, false = benign.
    pub label: bool,
}

/// Activations for the probes: `rows` `[n_rows]` and, per (layer, position), a `[n_rows, d_model]` f32 matrix.
#[derive(Debug, Clone, Default)]
pub struct ProbeData {
    /// Row metadata, aligned with every matrix's rows.
    pub rows: Vec<RowInfo>,
    /// `(layer, position) -> [n_rows, d_model]`.
    pub matrices: BTreeMap<(usize, String), Array2<f32>>,
}

impl ProbeData {
    /// Layers present, ascending.
    pub fn layers(&self) -> Vec<usize> {
        let mut v: Vec<usize> = self.matrices.keys().map(|(l, _)| *l).collect();
        v.dedup();
        v
    }

    /// Positions present, sorted.
    pub fn positions(&self) -> Vec<String> {
        let mut v: Vec<String> = self.matrices.keys().map(|(_, p)| p.clone()).collect();
        v.sort();
        v.dedup();
        v
    }

    /// Channels present, in first-seen order.
    pub fn channels(&self) -> Vec<String> {
        let mut v: Vec<String> = Vec::new();
        for r in &self.rows {
            if !v.contains(&r.channel) {
                v.push(r.channel.clone());
            }
        }
        v
    }

    /// Check shapes, finiteness (naming the layer, position and case of the first bad value) and that every row
    /// set has both classes.
    pub fn validate(&self) -> Result<(), ProbeError> {
        if self.rows.is_empty() {
            return Err(ProbeError::Shape("activation run has no rows".into()));
        }
        if self.matrices.is_empty() {
            return Err(ProbeError::Shape("activation run has no layers".into()));
        }
        let mut d_model = None;
        for ((layer, pos), x) in &self.matrices {
            if x.nrows() != self.rows.len() {
                return Err(ProbeError::Shape(format!(
                    "layer {layer} position '{pos}': {} rows of activations but {} rows of metadata",
                    x.nrows(),
                    self.rows.len()
                )));
            }
            if x.ncols() == 0 {
                return Err(ProbeError::Shape(format!("layer {layer} position '{pos}': zero-width activations")));
            }
            if *d_model.get_or_insert(x.ncols()) != x.ncols() {
                return Err(ProbeError::Shape(format!(
                    "layer {layer} position '{pos}': width {} differs from other layers' {}",
                    x.ncols(),
                    d_model.unwrap()
                )));
            }
            for ((row, dim), &v) in x.indexed_iter() {
                if !v.is_finite() {
                    let r = &self.rows[row];
                    return Err(ProbeError::NonFinite {
                        layer: *layer,
                        position: pos.clone(),
                        row,
                        case_id: r.case_id.clone(),
                        channel: r.channel.clone(),
                        condition: if r.label { "adversarial" } else { "benign" },
                        dim,
                        value: v,
                    });
                }
            }
        }
        let n_pos = self.rows.iter().filter(|r| r.label).count();
        if n_pos == 0 || n_pos == self.rows.len() {
            let only = if n_pos == 0 { "benign" } else { "adversarial" };
            return Err(ProbeError::OneClass { what: format!("the {} rows of the run (all {only})", self.rows.len()) });
        }
        Ok(())
    }

    /// Keep only the given layers (error naming the first missing one).
    pub fn select_layers(&mut self, layers: &[usize]) -> Result<(), ProbeError> {
        let available = self.layers();
        for &l in layers {
            if !available.contains(&l) {
                return Err(ProbeError::MissingLayer {
                    layer: l,
                    position: self.positions().join(","),
                    available: available.clone(),
                });
            }
        }
        self.matrices.retain(|(l, _), _| layers.contains(l));
        Ok(())
    }

    /// Keep only the given positions (error naming the first missing one).
    pub fn select_positions(&mut self, positions: &[String]) -> Result<(), ProbeError> {
        let available = self.positions();
        for p in positions {
            if !available.contains(p) {
                return Err(ProbeError::Config(format!(
                    "position '{p}' is not in the activation run (it has {})",
                    available.join(", ")
                )));
            }
        }
        self.matrices.retain(|(_, p), _| positions.contains(p));
        Ok(())
    }

    /// Keep only rows whose channel is in `channels` (matrices are sliced accordingly).
    pub fn select_channels(&mut self, channels: &[String]) -> Result<(), ProbeError> {
        let present = self.channels();
        for c in channels {
            if !present.contains(c) {
                return Err(ProbeError::Config(format!(
                    "channel '{c}' is not in the activation run (it has {})",
                    present.join(", ")
                )));
            }
        }
        let keep: Vec<usize> = (0..self.rows.len()).filter(|&i| channels.contains(&self.rows[i].channel)).collect();
        self.rows = keep.iter().map(|&i| self.rows[i].clone()).collect();
        for x in self.matrices.values_mut() {
            *x = x.select(ndarray::Axis(0), &keep);
        }
        Ok(())
    }
}
