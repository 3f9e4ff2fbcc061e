//! Command groups of the `trustlens` binary.
pub mod cases;
pub mod model;
