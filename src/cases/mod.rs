//! Matched-payload case sets: the schema ([`schema`]), JSONL reading and writing ([`io`]), channel rendering through a
//! model's chat template ([`render`]), the validator ([`validate`]), the seeded generator ([`generate`]) over
//! hand-written parts ([`catalog`]), importers ([`import`]) and summary statistics ([`stats`]).
//!
//! The design follows "Same Payload, Different Channel": for every case the payload (malicious action + plausible
//! justification) is stored once and placed byte-identically in the chat prompt and in the tool prompt; only the
//! delivery channel differs. Every command that renders prompts calls [`render::render_case`], which enforces that.
//! See `docs/cases.md`.
pub mod catalog;
pub mod error;
pub mod generate;
pub mod import;
pub mod io;
pub mod render;
pub mod schema;
pub mod stats;
pub mod validate;

pub use error::{CaseError, LineProblem};
pub use io::{load_cases, parse_jsonl, write_cases, LoadedCase};
pub use render::{render_case, Channel, Condition, RenderOptions, RenderedPrompt, ToolRendering};
pub use schema::{Case, Family, Payload, TpSubtype};
pub use validate::{validate_set, ValidationReport};
