//! Command groups of the `trustlens` binary.
pub mod activations;
pub mod behave;
pub mod capture;
pub mod cases;
pub mod guard;
pub mod model;
pub mod patch;
pub mod plot;
pub mod probe;
pub mod sas;
pub mod sweep;
