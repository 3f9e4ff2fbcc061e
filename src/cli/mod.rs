//! Command groups of the `trustlens` binary.
pub mod activations;
pub mod capture;
pub mod cases;
pub mod model;
pub mod patch;
pub mod probe;
