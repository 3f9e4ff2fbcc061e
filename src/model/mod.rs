//! Model loading and the Llama-class forward pass with hook points.
pub mod gguf;
