//! Rebuild a `tokenizer.json` from GGUF tokenizer metadata exactly as transformers' GGUF conversion does
//! (`transformers/integrations/gguf/gguf_tokenizer_mapping.py`, v5): the same vocabulary respelling, merges,
//! pre-tokenizer, decoder and added tokens, so ids match `AutoTokenizer.from_pretrained(..., gguf_file=...)`.
//!
//! One deliberate difference: transformers also registers its class defaults (`<|endoftext|>` for GPT-2-style,
//! `<unk>`/`<s>`/`</s>` for SentencePiece) as *new* tokens past the end of the vocabulary when the file lacks them;
//! those ids have no embedding in the model, so they are only registered here when the vocabulary has them.
use super::tokenizer::SpecialTokens;
use super::PromptError;
use crate::model::gguf::{GgufFile, GgufValue};
use serde_json::{json, Map, Value as Json};
use std::collections::{HashMap, HashSet};

/// The tokenizer JSON and the special tokens read from the metadata.
pub(super) struct Built {
    pub json: Json,
    pub special: SpecialTokens,
}

const LLAMA3_SPLIT: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
const TEKKEN_SPLIT: &str = r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+";
const GPT4O_SPLIT: &str = r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+";
const QWEN2_SPLIT: &str =
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
const QWEN35_SPLIT: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

/// transformers' `GGUF_PRE_TOKENIZER_SPLITS`: `tokenizer.ggml.pre` values whose merges were learned on a
/// different split than GPT-2's.
fn split_regex(pre: &str) -> Option<&'static str> {
    Some(match pre {
        "llama3" | "llama-v3" | "llama-bpe" | "falcon3" | "falcon-h1" | "pixtral" | "midm-2.0" | "lfm2"
        | "jina-v5-nano" | "dbrx" | "smaug-bpe" => LLAMA3_SPLIT,
        "tekken" => TEKKEN_SPLIT,
        "qwen2" | "deepseek-r1-qwen" | "kormo" | "f2llmv2" | "megrez" => QWEN2_SPLIT,
        "qwen35" => QWEN35_SPLIT,
        "gpt-4o" | "llama4" | "kanana2" | "talkie" | "minimax-m2" => GPT4O_SPLIT,
        _ => return None,
    })
}

/// GPT-2's reversible byte-to-character table.
fn bytes_to_unicode() -> [char; 256] {
    let mut table = ['\0'; 256];
    let mut n = 0u32;
    for b in 0..256u32 {
        let printable = (0x21..=0x7e).contains(&b) || (0xa1..=0xac).contains(&b) || (0xae..=0xff).contains(&b);
        let c = if printable {
            b
        } else {
            n += 1;
            255 + n
        };
        table[b as usize] = char::from_u32(c).unwrap_or('\u{fffd}');
    }
    table
}

fn strings(gguf: &GgufFile, key: &str) -> Result<Option<Vec<String>>, PromptError> {
    let Some(v) = gguf.get(key) else {
        return Ok(None);
    };
    let bad =
        || PromptError::GgufTokenizer { path: gguf.path.clone(), message: format!("`{key}` is not a string array") };
    let arr = v.as_array().ok_or_else(bad)?;
    arr.iter().map(|s| s.as_str().map(str::to_string).ok_or_else(bad)).collect::<Result<Vec<_>, _>>().map(Some)
}

fn numbers<T>(
    gguf: &GgufFile,
    key: &str,
    conv: impl Fn(&GgufValue) -> Option<T>,
) -> Result<Option<Vec<T>>, PromptError> {
    let Some(v) = gguf.get(key) else {
        return Ok(None);
    };
    let bad =
        || PromptError::GgufTokenizer { path: gguf.path.clone(), message: format!("`{key}` is not a number array") };
    let arr = v.as_array().ok_or_else(bad)?;
    arr.iter().map(|x| conv(x).ok_or_else(bad)).collect::<Result<Vec<_>, _>>().map(Some)
}

fn added_token(id: u32, content: &str, special: bool) -> Json {
    json!({"id": id, "content": content, "single_word": false, "lstrip": false, "rstrip": false,
           "normalized": false, "special": special})
}

/// Build the tokenizer JSON for a GGUF file.
pub(super) fn build(gguf: &GgufFile) -> Result<Built, PromptError> {
    let err = |message: String| PromptError::GgufTokenizer { path: gguf.path.clone(), message };
    let model = gguf
        .get("tokenizer.ggml.model")
        .and_then(GgufValue::as_str)
        .ok_or_else(|| err("no `tokenizer.ggml.model` key (the file carries no tokenizer)".into()))?
        .to_string();
    let tokens = strings(gguf, "tokenizer.ggml.tokens")?.ok_or_else(|| err("no `tokenizer.ggml.tokens` key".into()))?;
    let types = numbers(gguf, "tokenizer.ggml.token_type", GgufValue::as_i64)?.unwrap_or_default();
    let merges_meta = strings(gguf, "tokenizer.ggml.merges")?;
    let architecture = gguf.get("general.architecture").and_then(GgufValue::as_str).unwrap_or("");
    let byte_level = model == "gpt2";

    // Vocabulary: insertion order and last-wins duplicates, like a Python dict comprehension.
    let alphabet = bytes_to_unicode();
    let alphabet_set: HashSet<char> = alphabet.iter().copied().collect();
    let in_alphabet = |t: &str| t.chars().all(|c| alphabet_set.contains(&c));
    let mut vocab = Map::new();
    let mut vocab_ids: HashMap<String, u32> = HashMap::new();
    for (i, tok) in tokens.iter().enumerate() {
        let key = if byte_level && !in_alphabet(tok) {
            tok.bytes().map(|b| alphabet[b as usize]).collect()
        } else {
            tok.clone()
        };
        let id = u32::try_from(i).map_err(|_| err("too many tokens".into()))?;
        vocab.insert(key.clone(), json!(id));
        vocab_ids.insert(key, id);
    }

    let merges: Vec<(String, String)> = match merges_meta {
        Some(list) => list
            .iter()
            .map(|m| {
                let parts: Vec<&str> = m.split(' ').collect();
                match parts.as_slice() {
                    [a, b] => Ok((a.to_string(), b.to_string())),
                    _ => Err(err(format!("merge {m:?} is not two tokens separated by one space"))),
                }
            })
            .collect::<Result<_, _>>()?,
        None if byte_level => return Err(err("a `gpt2` tokenizer needs `tokenizer.ggml.merges`".into())),
        None => {
            let scores = numbers(gguf, "tokenizer.ggml.scores", GgufValue::as_f64)?
                .ok_or_else(|| err("neither `tokenizer.ggml.merges` nor `tokenizer.ggml.scores`".into()))?;
            if scores.len() != tokens.len() {
                return Err(err(format!("{} scores for {} tokens", scores.len(), tokens.len())));
            }
            generate_merges(&tokens, &scores, &vocab_ids)
        }
    };
    let merges_json: Vec<Json> = merges.iter().map(|(a, b)| json!([a, b])).collect();

    let (model_json, pre_tokenizer, decoder, defaults) = match model.as_str() {
        "gpt2" => (
            json!({"type": "BPE", "dropout": null, "unk_token": null, "continuing_subword_prefix": "",
                   "end_of_word_suffix": "", "fuse_unk": false, "byte_fallback": false, "ignore_merges": false,
                   "vocab": vocab, "merges": merges_json}),
            json!({"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": true}),
            json!({"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": true, "use_regex": true}),
            vec!["<|endoftext|>"],
        ),
        "llama" if matches!(architecture, "gemma" | "gemma2" | "gemma3" | "phi3") => {
            return Err(err(format!(
                "SentencePiece vocabularies of architecture `{architecture}` need transformers' special handling, \
                 which trustlens does not reproduce; use the model's tokenizer.json instead"
            )))
        }
        "llama" => (
            json!({"type": "BPE", "dropout": null, "unk_token": null, "continuing_subword_prefix": null,
                   "end_of_word_suffix": null, "fuse_unk": true, "byte_fallback": true, "ignore_merges": false,
                   "vocab": vocab, "merges": merges_json}),
            json!({"type": "Metaspace", "replacement": "\u{2581}", "prepend_scheme": "first", "split": false}),
            json!({"type": "Sequence", "decoders": [
                {"type": "Replace", "pattern": {"String": "\u{2581}"}, "content": " "},
                {"type": "ByteFallback"}, {"type": "Fuse"},
                {"type": "Strip", "content": " ", "start": 1, "stop": 0}]}),
            vec!["<unk>", "<s>", "</s>"],
        ),
        other => {
            return Err(err(format!(
                "tokenizer.ggml.model = {other:?} is not supported (supported: \"gpt2\" byte-level BPE, \"llama\" SentencePiece BPE)"
            )))
        }
    };
    let pre_tokenizer = match gguf.get("tokenizer.ggml.pre").and_then(GgufValue::as_str).and_then(split_regex) {
        Some(regex) => json!({"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": regex}, "behavior": "Isolated", "invert": false},
            {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": false}]}),
        None => pre_tokenizer,
    };

    // Added tokens: the class defaults, then CONTROL (3) tokens as special (for byte-level only those spelled in
    // the byte alphabet), then USER_DEFINED (4) tokens present in the vocabulary as plain added tokens.
    let mut added = Vec::new();
    let mut seen = HashSet::new();
    let mut add = |content: &str, special: bool, added: &mut Vec<Json>| {
        if let Some(&id) = vocab_ids.get(content) {
            if seen.insert(content.to_string()) {
                added.push(added_token(id, content, special));
            }
        }
    };
    for d in defaults {
        add(d, true, &mut added);
    }
    for (tok, &ty) in tokens.iter().zip(&types) {
        if ty == 3 && (!byte_level || in_alphabet(tok)) {
            add(tok, true, &mut added);
        }
    }
    for (tok, &ty) in tokens.iter().zip(&types) {
        if ty == 4 {
            add(tok, false, &mut added);
        }
    }

    let json = json!({
        "version": "1.0", "truncation": null, "padding": null, "added_tokens": added,
        "normalizer": null, "pre_tokenizer": pre_tokenizer, "post_processor": null, "decoder": decoder,
        "model": model_json,
    });

    let token_at = |key: &str| -> Option<String> {
        let id = gguf.get(key)?.as_u64()?;
        tokens.get(usize::try_from(id).ok()?).cloned()
    };
    let id_of = |key: &str| gguf.get(key).and_then(GgufValue::as_u64).and_then(|n| u32::try_from(n).ok());
    let add_bos = match gguf.get("tokenizer.ggml.add_bos_token").and_then(GgufValue::as_bool) {
        Some(b) => b,
        None => model == "llama",
    };
    let special = SpecialTokens {
        bos: token_at("tokenizer.ggml.bos_token_id"),
        eos: token_at("tokenizer.ggml.eos_token_id"),
        unk: token_at("tokenizer.ggml.unknown_token_id"),
        pad: token_at("tokenizer.ggml.padding_token_id"),
        add_bos: Some(add_bos),
        extra_eos_ids: ["tokenizer.ggml.eot_token_id", "tokenizer.ggml.eom_token_id"]
            .iter()
            .filter_map(|k| id_of(k))
            .collect(),
    };
    Ok(Built { json, special })
}

/// transformers' `generate_merges(vocab, vocab_scores)`: every split of every token into two vocabulary pieces,
/// ordered by the token's score (best first), then by the pieces' lengths (longest first).
fn generate_merges(tokens: &[String], scores: &[f64], vocab: &HashMap<String, u32>) -> Vec<(String, String)> {
    // dict(zip(tokens, scores)): first position, last score.
    let mut order: Vec<&str> = Vec::new();
    let mut score_of: HashMap<&str, f64> = HashMap::new();
    for (tok, &score) in tokens.iter().zip(scores) {
        if score_of.insert(tok.as_str(), score).is_none() {
            order.push(tok);
        }
    }
    let mut merges: Vec<(String, String, f64)> = Vec::new();
    for tok in order {
        let score = score_of[tok];
        let mut local: Vec<(String, String, f64)> = Vec::new();
        for (split, _) in tok.char_indices().skip(1) {
            let (l, r) = tok.split_at(split);
            if vocab.contains_key(l) && vocab.contains_key(r) {
                local.push((l.to_string(), r.to_string(), score));
            }
        }
        local.sort_by_key(|(l, r, _)| (vocab[l], vocab[r]));
        merges.extend(local);
    }
    // sorted(..., key=(score, len(l), len(r)), reverse=True) is stable: compare b to a.
    merges.sort_by(|a, b| {
        b.2.partial_cmp(&a.2)
            .unwrap_or(std::cmp::Ordering::Equal)
            .then(b.0.chars().count().cmp(&a.0.chars().count()))
            .then(b.1.chars().count().cmp(&a.1.chars().count()))
    });
    merges.into_iter().map(|(l, r, _)| (l, r)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn byte_table_matches_gpt2() {
        let t = bytes_to_unicode();
        assert_eq!(t[b' ' as usize], '\u{120}');
        assert_eq!(t[b'\n' as usize], '\u{10a}');
        assert_eq!(t[b'a' as usize], 'a');
        assert_eq!(t[0xad], '\u{143}');
    }
}
