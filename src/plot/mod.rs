//! Paper-quality per-layer figures (PNG + SVG, embedded font) from the CSV tables that the probe, patch and SAS stages
//! write. Work in progress (issue 7).
