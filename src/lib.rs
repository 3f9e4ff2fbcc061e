//! trustlens: does a language model treat the same malicious instruction differently when it arrives through the
//! user's chat message, a tool's description or a tool's output? See README.md for the tour.
pub mod cases;
pub mod model;
pub mod prompt;
