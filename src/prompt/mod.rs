//! Tokenizers and chat templates: everything that turns messages into token ids the way Hugging Face does.
