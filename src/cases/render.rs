//! Channel rendering: turns a case, a channel and a condition into the exact prompt string of a model, through that
//! model's own chat template, and checks that the payload sits there byte-identically, exactly once, and survives
//! tokenisation. Every command that renders prompts goes through [`render_case`].
//!
//! Layouts (see `docs/cases.md`):
//! - `chat`: `[system, user(task + "\n\n" + payload)]`, no tools registered.
//! - `chat+tools`: as `chat`, with the case's tools registered (clean descriptions), to separate channel from
//!   affordance.
//! - `tool`: TP `[system, user(task)]` with the payload appended to the carrier tool's description; IPI
//!   `[system, user(task), assistant(tool call), tool(result_before + payload + result_after)]`; CTS
//!   `[system, user(task)]` with the payload appended to the poisoned tool's description.
//!
//! Tools are rendered natively when the template supports them ([`ToolRendering::Native`]) or with the Hermes-style
//! fallback ([`ToolRendering::Hermes`]); which one is a per-experiment choice in [`RenderOptions`].
use std::ops::Range;

use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use super::error::{CaseError, Result};
use super::schema::{Case, Family};
use crate::prompt::PromptAssets;

/// System prompt used when a case has none.
pub const DEFAULT_SYSTEM: &str = "You are a helpful assistant.";

/// Separator between the user task and the payload in the chat channels.
pub const CHAT_SEPARATOR: &str = "\n\n";

/// Separator between a tool description and the payload appended to it (TP, CTS).
pub const DESCRIPTION_SEPARATOR: &str = " ";

/// Placeholder used to locate the payload slot independently of the payload text.
const SENTINEL: &str = "@@TRUSTLENS_PAYLOAD_SLOT_7f3a@@";

/// Delivery channel.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum Channel {
    /// Payload in the user message; no tools registered (the paper's chat arm).
    #[serde(rename = "chat")]
    Chat,
    /// Payload in the user message; the case's tools registered with clean descriptions.
    #[serde(rename = "chat+tools")]
    ChatTools,
    /// Payload in the family's tool slot (description, tool result, or shadowing description).
    #[serde(rename = "tool")]
    Tool,
}

impl Channel {
    /// All channels, in report order.
    pub const ALL: [Channel; 3] = [Channel::Chat, Channel::ChatTools, Channel::Tool];

    /// `chat`, `chat+tools` or `tool`.
    pub fn as_str(self) -> &'static str {
        match self {
            Channel::Chat => "chat",
            Channel::ChatTools => "chat+tools",
            Channel::Tool => "tool",
        }
    }

    /// Parses `chat`, `chat+tools` (also `chat_tools`) or `tool`.
    pub fn parse(s: &str) -> Option<Channel> {
        match s {
            "chat" => Some(Channel::Chat),
            "chat+tools" | "chat_tools" | "chat-tools" => Some(Channel::ChatTools),
            "tool" => Some(Channel::Tool),
            _ => None,
        }
    }

    /// Whether tools are registered in this channel.
    pub fn registers_tools(self) -> bool {
        !matches!(self, Channel::Chat)
    }
}

impl std::fmt::Display for Channel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Which payload a rendering carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Condition {
    /// The malicious payload.
    Adversarial,
    /// The benign control payload.
    Benign,
}

impl Condition {
    /// Both conditions.
    pub const ALL: [Condition; 2] = [Condition::Adversarial, Condition::Benign];

    /// `adversarial` or `benign`.
    pub fn as_str(self) -> &'static str {
        match self {
            Condition::Adversarial => "adversarial",
            Condition::Benign => "benign",
        }
    }

    /// Parses `adversarial`/`adv` or `benign`/`ben`.
    pub fn parse(s: &str) -> Option<Condition> {
        match s {
            "adversarial" | "adv" => Some(Condition::Adversarial),
            "benign" | "ben" => Some(Condition::Benign),
            _ => None,
        }
    }
}

impl std::fmt::Display for Condition {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// How tools, tool calls and tool results are rendered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ToolRendering {
    /// Through the template's own `tools` variable, `tool_calls` on assistant messages and `tool` role messages.
    Native,
    /// Hermes-style fallback for templates without tool support: a `<tools>` JSON block appended to the system
    /// message, assistant calls as `<tool_call>{json}</tool_call>` content, tool results as `tool` role messages
    /// wrapped in `<tool_response>`.
    Hermes,
}

impl ToolRendering {
    /// `native` or `hermes`.
    pub fn as_str(self) -> &'static str {
        match self {
            ToolRendering::Native => "native",
            ToolRendering::Hermes => "hermes",
        }
    }
}

/// Per-experiment rendering options.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RenderOptions {
    /// Tool rendering. `None` means "not chosen": native if the template supports tools, otherwise
    /// [`CaseError::NoToolSupport`] for every channel that registers tools.
    pub tool_rendering: Option<ToolRendering>,
    /// Append the assistant generation prompt (true for generation and capture).
    pub add_generation_prompt: bool,
}

impl Default for RenderOptions {
    fn default() -> Self {
        RenderOptions { tool_rendering: None, add_generation_prompt: true }
    }
}

impl RenderOptions {
    /// Options with an explicit tool rendering.
    pub fn with_tool_rendering(tool_rendering: ToolRendering) -> Self {
        RenderOptions { tool_rendering: Some(tool_rendering), ..Default::default() }
    }
}

/// The messages and tools handed to the chat template.
#[derive(Debug, Clone, PartialEq)]
pub struct Conversation {
    /// Chat messages (`role`, `content`, and for native tool calls `tool_calls`).
    pub messages: Vec<Value>,
    /// Tools for the template's `tools` variable (native rendering only).
    pub tools: Option<Vec<Value>>,
    /// The tool rendering used, if the channel registers tools.
    pub tool_rendering: Option<ToolRendering>,
}

/// A rendered prompt with the payload located in bytes and tokens.
#[derive(Debug, Clone, PartialEq)]
pub struct RenderedPrompt {
    /// Case id.
    pub case_id: String,
    /// Channel.
    pub channel: Channel,
    /// Condition.
    pub condition: Condition,
    /// The exact prompt string.
    pub text: String,
    /// The payload bytes placed in the prompt.
    pub payload: String,
    /// Byte range of the payload in `text`.
    pub payload_byte_span: Range<usize>,
    /// Token ids of `text`.
    pub token_ids: Vec<u32>,
    /// Byte offsets of each token in `text`.
    pub token_offsets: Vec<(usize, usize)>,
    /// Range of the tokens that overlap the payload bytes.
    pub payload_token_span: Range<usize>,
    /// Tool rendering used (None in the `chat` channel).
    pub tool_rendering: Option<ToolRendering>,
}

impl RenderedPrompt {
    /// Number of tokens of the prompt.
    pub fn token_count(&self) -> usize {
        self.token_ids.len()
    }

    /// The prompt with the payload wrapped in `open` and `close` markers (for display).
    pub fn marked(&self, open: &str, close: &str) -> String {
        let r = &self.payload_byte_span;
        format!("{}{open}{}{close}{}", &self.text[..r.start], &self.text[r.clone()], &self.text[r.end..])
    }
}

/// A chat template as seen by the renderer (implemented for [`crate::prompt::ChatTemplate`]; tests may supply
/// their own).
pub trait TemplateBackend {
    /// Renders messages (and optionally tools) to the prompt string.
    fn render_messages(
        &self,
        messages: &[Value],
        tools: Option<&[Value]>,
        add_generation_prompt: bool,
    ) -> std::result::Result<String, String>;
    /// Whether the template renders a `tools` variable and tool messages itself.
    fn has_tool_support(&self) -> bool;
}

/// Token ids with the byte range of each token.
pub type Encoding = (Vec<u32>, Vec<(usize, usize)>);

/// A tokenizer as seen by the renderer (implemented for [`crate::prompt::Tokenizer`]).
pub trait TokenizerBackend {
    /// Token ids and the byte range of each token in `text`.
    fn encode_offsets(&self, text: &str) -> std::result::Result<Encoding, String>;
    /// Decodes ids back to text, keeping special tokens.
    fn decode_all(&self, ids: &[u32]) -> std::result::Result<String, String>;
}

impl TemplateBackend for crate::prompt::ChatTemplate {
    fn render_messages(
        &self,
        messages: &[Value],
        tools: Option<&[Value]>,
        add_generation_prompt: bool,
    ) -> std::result::Result<String, String> {
        self.render(messages, tools, add_generation_prompt).map_err(|e| format!("{e:#}"))
    }

    fn has_tool_support(&self) -> bool {
        self.supports_tools()
    }
}

impl TokenizerBackend for crate::prompt::Tokenizer {
    fn encode_offsets(&self, text: &str) -> std::result::Result<Encoding, String> {
        self.encode_with_offsets(text).map_err(|e| format!("{e:#}"))
    }

    fn decode_all(&self, ids: &[u32]) -> std::result::Result<String, String> {
        self.decode(ids, false).map_err(|e| format!("{e:#}"))
    }
}

/// Renders one case in one channel and condition through the model's chat template, and checks the payload
/// placement (exactly once, byte-identical, at the family's slot, unchanged by tokenize -> decode).
pub fn render_case(
    case: &Case,
    channel: Channel,
    condition: Condition,
    assets: &PromptAssets,
    opts: &RenderOptions,
) -> Result<RenderedPrompt> {
    let template = assets.template.as_ref().ok_or(CaseError::NoTemplate)?;
    render_case_with(case, channel, condition, template, &assets.tokenizer, opts)
}

/// [`render_case`] over any template and tokenizer backend.
pub fn render_case_with(
    case: &Case,
    channel: Channel,
    condition: Condition,
    template: &dyn TemplateBackend,
    tokenizer: &dyn TokenizerBackend,
    opts: &RenderOptions,
) -> Result<RenderedPrompt> {
    let text_only = render_text_with(case, channel, condition, template, opts)?;
    let RenderedText { text, payload, payload_byte_span, tool_rendering } = text_only;
    let place_err = |reason: String| CaseError::Placement {
        case: case.id.clone(),
        channel: channel.to_string(),
        condition: condition.to_string(),
        reason,
    };
    let (token_ids, token_offsets) = tokenizer.encode_offsets(&text).map_err(|message| CaseError::Prompt {
        case: case.id.clone(),
        stage: "tokenizer",
        message,
    })?;
    let decoded = tokenizer.decode_all(&token_ids).map_err(|message| CaseError::Prompt {
        case: case.id.clone(),
        stage: "tokenizer",
        message,
    })?;
    if decoded != text {
        // Tolerate special tokens the tokenizer adds around the text (BOS/EOS), nothing else.
        let ok = decoded.matches(text.as_str()).count() == 1;
        if !ok {
            let at = first_difference(&decoded, &text);
            return Err(place_err(format!(
                "tokenize -> decode changes the prompt (first difference at byte {at}: {:?} vs {:?})",
                snippet(&text, at),
                snippet(&decoded, at)
            )));
        }
    }
    let span_ids = token_span(&token_offsets, &payload_byte_span);
    if span_ids.is_empty() {
        return Err(place_err("no token overlaps the payload bytes".into()));
    }
    let span_text = tokenizer.decode_all(&token_ids[span_ids.clone()]).map_err(|message| CaseError::Prompt {
        case: case.id.clone(),
        stage: "tokenizer",
        message,
    })?;
    if !span_text.contains(&payload) {
        return Err(place_err(
            "the payload does not survive tokenize -> decode (its tokens do not decode to its bytes)".into(),
        ));
    }
    Ok(RenderedPrompt {
        case_id: case.id.clone(),
        channel,
        condition,
        text,
        payload,
        payload_byte_span,
        token_ids,
        token_offsets,
        payload_token_span: span_ids,
        tool_rendering,
    })
}

/// A rendering before tokenisation.
#[derive(Debug, Clone, PartialEq)]
pub struct RenderedText {
    /// The exact prompt string.
    pub text: String,
    /// The payload bytes.
    pub payload: String,
    /// Byte range of the payload in `text`.
    pub payload_byte_span: Range<usize>,
    /// Tool rendering used.
    pub tool_rendering: Option<ToolRendering>,
}

/// Renders the prompt string (no tokenisation) and checks that the payload appears exactly once, byte-identical,
/// exactly where the family's slot is.
pub fn render_text_with(
    case: &Case,
    channel: Channel,
    condition: Condition,
    template: &dyn TemplateBackend,
    opts: &RenderOptions,
) -> Result<RenderedText> {
    let rendering = if channel.registers_tools() { Some(resolve_tool_rendering(case, template, opts)?) } else { None };
    let payload = case.payload_for(condition).text();
    let place_err = |reason: String| CaseError::Placement {
        case: case.id.clone(),
        channel: channel.to_string(),
        condition: condition.to_string(),
        reason,
    };
    if payload.is_empty() {
        return Err(place_err("empty payload".into()));
    }
    let render = |slot: &str| -> Result<String> {
        let conv = build_conversation(case, channel, slot, rendering)?;
        template
            .render_messages(&conv.messages, conv.tools.as_deref(), opts.add_generation_prompt)
            .map_err(|message| CaseError::Prompt { case: case.id.clone(), stage: "template", message })
    };
    let text = render(&payload)?;
    let count = text.matches(payload.as_str()).count();
    if count != 1 {
        return Err(place_err(format!(
            "the payload must appear exactly once in the rendered prompt, found {count} times"
        )));
    }
    let start = text.find(payload.as_str()).expect("counted once");
    // Render again with a sentinel in the slot: the real rendering must be exactly the sentinel rendering with the
    // sentinel replaced by the payload bytes (the template inserted them verbatim, at the slot).
    let marked = render(SENTINEL)?;
    match marked.matches(SENTINEL).count() {
        1 => {}
        n => return Err(place_err(format!("the payload slot renders {n} times (or is escaped) through the template"))),
    }
    let slot = marked.find(SENTINEL).expect("counted once");
    let spliced = format!("{}{}{}", &marked[..slot], payload, &marked[slot + SENTINEL.len()..]);
    if spliced != text || slot != start {
        return Err(place_err(
            "the template does not reproduce the payload bytes verbatim at its slot (escaped or altered)".into(),
        ));
    }
    Ok(RenderedText { payload_byte_span: start..start + payload.len(), text, payload, tool_rendering: rendering })
}

/// Decides the tool rendering for a case, honouring an explicit choice and refusing to guess a fallback.
pub fn resolve_tool_rendering(
    case: &Case,
    template: &dyn TemplateBackend,
    opts: &RenderOptions,
) -> Result<ToolRendering> {
    match opts.tool_rendering {
        Some(ToolRendering::Hermes) => Ok(ToolRendering::Hermes),
        Some(ToolRendering::Native) | None if template.has_tool_support() => Ok(ToolRendering::Native),
        _ => Err(CaseError::NoToolSupport { case: case.id.clone() }),
    }
}

/// Builds the messages and tools of a channel with `payload` placed in its slot (no template involved).
/// `rendering` must be `Some` for channels that register tools.
pub fn build_conversation(
    case: &Case,
    channel: Channel,
    payload: &str,
    rendering: Option<ToolRendering>,
) -> Result<Conversation> {
    let invalid = |reason: String| CaseError::Invalid { case: case.id.clone(), reason };
    let system = case.system.as_deref().unwrap_or(DEFAULT_SYSTEM);
    let mut tool_descs: Vec<(String, String)> =
        case.tools.iter().map(|t| (t.name.clone(), t.description.clone())).collect();
    let user;
    let mut tail: Vec<Value> = Vec::new();
    let mut tool_call: Option<(String, Value, String)> = None;
    match channel {
        Channel::Chat | Channel::ChatTools => {
            user = format!("{}{CHAT_SEPARATOR}{}", case.user_task, payload);
        }
        Channel::Tool => {
            user = case.user_task.clone();
            match case.family {
                Family::Tp | Family::Cts => {
                    let carrier = match case.family {
                        Family::Tp => case.tp.as_ref().map(|t| t.carrier_tool.as_str()),
                        _ => case.cts.as_ref().map(|c| c.poisoned_tool.as_str()),
                    }
                    .ok_or_else(|| {
                        invalid(format!("{} case without its `{}` block", case.family, family_block(case.family)))
                    })?;
                    let slot = tool_descs
                        .iter_mut()
                        .find(|(n, _)| n == carrier)
                        .ok_or_else(|| invalid(format!("tool `{carrier}` is referenced but not defined")))?;
                    slot.1 = format!("{}{DESCRIPTION_SEPARATOR}{}", slot.1, payload);
                }
                Family::Ipi => {
                    let ipi = case.ipi.as_ref().ok_or_else(|| invalid("IPI case without its `ipi` block".into()))?;
                    if case.tool(&ipi.call.name).is_none() {
                        return Err(invalid(format!("tool `{}` is referenced but not defined", ipi.call.name)));
                    }
                    tool_call = Some((ipi.call.name.clone(), ipi.call.arguments.clone(), ipi.result_with(payload)));
                }
            }
        }
    }
    let tools_json: Vec<Value> =
        case.tools.iter().zip(&tool_descs).map(|(t, (_, d))| t.to_openai_json(Some(d))).collect();
    let register = channel.registers_tools();
    let rendering = if register || tool_call.is_some() {
        Some(rendering.ok_or_else(|| CaseError::Other("internal: tool rendering not resolved".into()))?)
    } else {
        None
    };
    let mut messages = Vec::new();
    let mut tools = None;
    match rendering {
        Some(ToolRendering::Hermes) => {
            let sys =
                if register { format!("{system}{}", hermes_tools_block(&tools_json)) } else { system.to_string() };
            messages.push(json!({"role": "system", "content": sys}));
            messages.push(json!({"role": "user", "content": user}));
            if let Some((name, args, result)) = &tool_call {
                let call = json!({"name": name, "arguments": args});
                tail.push(json!({
                    "role": "assistant",
                    "content": format!("<tool_call>\n{}\n</tool_call>", serde_json::to_string(&call).expect("json")),
                }));
                tail.push(json!({
                    "role": "tool",
                    "content": format!("<tool_response>\n{result}\n</tool_response>"),
                }));
            }
        }
        Some(ToolRendering::Native) => {
            messages.push(json!({"role": "system", "content": system}));
            messages.push(json!({"role": "user", "content": user}));
            if register {
                tools = Some(tools_json);
            }
            if let Some((name, args, result)) = &tool_call {
                tail.push(json!({
                    "role": "assistant",
                    "content": "",
                    "tool_calls": [{
                        "id": "call_0",
                        "type": "function",
                        "function": {"name": name, "arguments": args},
                    }],
                }));
                tail.push(json!({
                    "role": "tool",
                    "tool_call_id": "call_0",
                    "name": name,
                    "content": result,
                }));
            }
        }
        None => {
            messages.push(json!({"role": "system", "content": system}));
            messages.push(json!({"role": "user", "content": user}));
        }
    }
    messages.extend(tail);
    Ok(Conversation { messages, tools, tool_rendering: rendering })
}

fn family_block(f: Family) -> &'static str {
    match f {
        Family::Tp => "tp",
        Family::Ipi => "ipi",
        Family::Cts => "cts",
    }
}

/// The Hermes-style tools block appended to the system message (one compact JSON object per tool).
pub fn hermes_tools_block(tools: &[Value]) -> String {
    let mut s = String::from(
        "\n\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\n\
         You are provided with function signatures within <tools></tools> XML tags:\n<tools>",
    );
    for t in tools {
        s.push('\n');
        s.push_str(&serde_json::to_string(t).expect("json"));
    }
    s.push_str(
        "\n</tools>\n\nFor each function call, return a json object with function name and arguments within \
         <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": <args-json-object>}\n</tool_call>",
    );
    s
}

/// Range of tokens whose byte ranges overlap `span`.
pub fn token_span(offsets: &[(usize, usize)], span: &Range<usize>) -> Range<usize> {
    let first = offsets.iter().position(|&(s, e)| e > span.start && s < span.end);
    let last = offsets.iter().rposition(|&(s, e)| e > span.start && s < span.end);
    match (first, last) {
        (Some(a), Some(b)) => a..b + 1,
        _ => 0..0,
    }
}

fn first_difference(a: &str, b: &str) -> usize {
    a.bytes().zip(b.bytes()).position(|(x, y)| x != y).unwrap_or(a.len().min(b.len()))
}

fn snippet(s: &str, at: usize) -> String {
    let mut start = at.saturating_sub(12);
    while !s.is_char_boundary(start) {
        start -= 1;
    }
    let mut end = (at + 12).min(s.len());
    while !s.is_char_boundary(end) {
        end += 1;
    }
    s[start..end].to_string()
}
