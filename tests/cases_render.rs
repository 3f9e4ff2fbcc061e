//! Channel rendering of each family: where the payload lands in chat, chat+tools and tool prompts, through the embedded
//! SmolLM2 template (Hermes fallback) and through a tool-capable template (native).
use std::path::PathBuf;

use serde_json::Value;
use trustlens::cases::io::{load_cases, LoadedCase};
use trustlens::cases::render::{
    build_conversation, render_case, render_case_with, Channel, Condition, RenderOptions, TemplateBackend,
    ToolRendering,
};
use trustlens::cases::{Case, CaseError, Family};
use trustlens::prompt::PromptAssets;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn assets() -> PromptAssets {
    PromptAssets::load(&root().join("models/SmolLM2-135M-Instruct.Q4_1.gguf")).expect("embedded model loads")
}

fn builtin() -> Vec<LoadedCase> {
    load_cases(&root().join("experiments/cases/channel-trust.jsonl")).expect("built-in set parses")
}

fn first(cases: &[LoadedCase], family: Family) -> Case {
    cases.iter().find(|c| c.case.family == family).expect("family present").case.clone()
}

fn hermes() -> RenderOptions {
    RenderOptions::with_tool_rendering(ToolRendering::Hermes)
}

/// Byte offset of the start of the last `<|im_start|>{role}` block before `pos`.
fn role_at(text: &str, pos: usize) -> String {
    let start = text[..pos].rfind("<|im_start|>").expect("inside a message") + "<|im_start|>".len();
    text[start..].split('\n').next().unwrap().to_string()
}

#[test]
fn tp_payload_is_in_user_message_in_chat_and_in_tool_description_in_tool_channel() {
    let a = assets();
    let case = first(&builtin(), Family::Tp);
    let payload = case.payload.text();
    let chat = render_case(&case, Channel::Chat, Condition::Adversarial, &a, &hermes()).unwrap();
    let tool = render_case(&case, Channel::Tool, Condition::Adversarial, &a, &hermes()).unwrap();
    assert_eq!(&chat.text[chat.payload_byte_span.clone()], payload);
    assert_eq!(&tool.text[tool.payload_byte_span.clone()], payload);
    assert_ne!(chat.payload_byte_span, tool.payload_byte_span, "same bytes, different places");
    assert_eq!(role_at(&chat.text, chat.payload_byte_span.start), "user");
    assert!(!chat.text.contains("<tools>"), "chat channel registers no tools by default");
    assert_eq!(role_at(&tool.text, tool.payload_byte_span.start), "system");
    // In the tool channel the payload sits inside the carrier tool's JSON description.
    let carrier = &case.tp.as_ref().unwrap().carrier_tool;
    let before = &tool.text[..tool.payload_byte_span.start];
    let line_start = before.rfind('\n').unwrap();
    assert!(before[line_start..].contains(&format!("\"name\":\"{carrier}\"")));
    assert!(!tool.text[..tool.payload_byte_span.start].contains(&case.user_task));
    // The token span decodes to (a superset of) the payload.
    let toks = &tool.token_ids[tool.payload_token_span.clone()];
    let decoded = a.tokenizer.decode(toks, false).unwrap();
    assert!(decoded.contains(&payload));
}

#[test]
fn chat_tools_registers_clean_tools_and_keeps_payload_in_user_message() {
    let a = assets();
    let case = first(&builtin(), Family::Tp);
    let r = render_case(&case, Channel::ChatTools, Condition::Adversarial, &a, &hermes()).unwrap();
    assert!(r.text.contains("<tools>"));
    assert_eq!(role_at(&r.text, r.payload_byte_span.start), "user");
    assert_eq!(r.text.matches(&case.payload.text()).count(), 1);
    for t in &case.tools {
        assert!(r.text.contains(&t.description), "clean description of {} registered", t.name);
    }
}

#[test]
fn ipi_payload_is_in_tool_result_after_an_assistant_tool_call() {
    let a = assets();
    let case = first(&builtin(), Family::Ipi);
    let ipi = case.ipi.clone().unwrap();
    let r = render_case(&case, Channel::Tool, Condition::Adversarial, &a, &hermes()).unwrap();
    assert_eq!(role_at(&r.text, r.payload_byte_span.start), "tool");
    let call_at = r.text.find("<tool_call>\n{\"name\":\"").expect("assistant tool call rendered");
    assert_eq!(role_at(&r.text, call_at), "assistant");
    assert!(call_at < r.payload_byte_span.start);
    assert!(r.text[..r.payload_byte_span.start].ends_with(&ipi.result_before));
    assert!(r.text[r.payload_byte_span.end..].starts_with(&ipi.result_after));
    assert!(r.text.contains("<tool_response>\n"));
    let chat = render_case(&case, Channel::Chat, Condition::Adversarial, &a, &hermes()).unwrap();
    assert_eq!(role_at(&chat.text, chat.payload_byte_span.start), "user");
    assert!(!chat.text.contains("<tool_response>"));
}

#[test]
fn cts_payload_is_in_poisoned_tool_description_and_names_the_target() {
    let a = assets();
    let case = first(&builtin(), Family::Cts);
    let cts = case.cts.clone().unwrap();
    let r = render_case(&case, Channel::Tool, Condition::Adversarial, &a, &hermes()).unwrap();
    let before = &r.text[..r.payload_byte_span.start];
    let line = &before[before.rfind('\n').unwrap()..];
    assert!(line.contains(&format!("\"name\":\"{}\"", cts.poisoned_tool)));
    assert!(r.payload.contains(&cts.target_tool));
    assert!(r.text.contains(&format!("\"name\":\"{}\"", cts.target_tool)), "target tool registered");
}

#[test]
fn benign_condition_renders_same_structure_with_benign_payload() {
    let a = assets();
    for case in builtin().into_iter().map(|c| c.case).take(10) {
        for ch in Channel::ALL {
            let adv = render_case(&case, ch, Condition::Adversarial, &a, &hermes()).unwrap();
            let ben = render_case(&case, ch, Condition::Benign, &a, &hermes()).unwrap();
            assert_eq!(ben.payload, case.benign.text());
            assert_eq!(adv.payload_byte_span.start, ben.payload_byte_span.start);
            assert_eq!(&adv.text[..adv.payload_byte_span.start], &ben.text[..ben.payload_byte_span.start]);
            assert_eq!(&adv.text[adv.payload_byte_span.end..], &ben.text[ben.payload_byte_span.end..]);
        }
    }
}

#[test]
fn template_without_tool_support_and_no_fallback_is_a_clear_error() {
    let a = assets();
    assert!(!a.template.as_ref().unwrap().supports_tools());
    let case = first(&builtin(), Family::Tp);
    for opts in [RenderOptions::default(), RenderOptions::with_tool_rendering(ToolRendering::Native)] {
        let err = render_case(&case, Channel::Tool, Condition::Adversarial, &a, &opts).unwrap_err();
        assert!(matches!(err, CaseError::NoToolSupport { .. }), "{err}");
        assert!(err.to_string().contains("no native tool support"), "{err}");
    }
    // The chat channel registers nothing and needs no tool rendering.
    render_case(&case, Channel::Chat, Condition::Adversarial, &a, &RenderOptions::default()).unwrap();
}

/// A minimal tool-capable template: renders roles, native tool calls and a `tools` block with JSON.
struct NativeToy;

impl TemplateBackend for NativeToy {
    fn render_messages(&self, messages: &[Value], tools: Option<&[Value]>, gen: bool) -> Result<String, String> {
        let mut s = String::new();
        if let Some(tools) = tools {
            s.push_str("[TOOLS]");
            for t in tools {
                s.push_str(&serde_json::to_string(t).unwrap());
            }
            s.push_str("[/TOOLS]\n");
        }
        for m in messages {
            let role = m["role"].as_str().unwrap();
            s.push_str(&format!("<{role}>"));
            if let Some(calls) = m.get("tool_calls") {
                s.push_str(&format!("CALL {}", calls[0]["function"]));
            }
            s.push_str(m["content"].as_str().unwrap_or(""));
            s.push_str(&format!("</{role}>\n"));
        }
        if gen {
            s.push_str("<assistant>");
        }
        Ok(s)
    }

    fn has_tool_support(&self) -> bool {
        true
    }
}

#[test]
fn native_rendering_uses_tools_variable_tool_calls_and_tool_role() {
    let a = assets();
    let cases = builtin();
    let opts = RenderOptions::default(); // not chosen: native because the template supports tools
    for family in Family::ALL {
        let case = first(&cases, family);
        let r = render_case_with(&case, Channel::Tool, Condition::Adversarial, &NativeToy, &a.tokenizer, &opts)
            .unwrap_or_else(|e| panic!("{family}: {e}"));
        assert_eq!(r.tool_rendering, Some(ToolRendering::Native));
        assert!(r.text.starts_with("[TOOLS]"));
        assert!(!r.text.contains("<tools>"), "no Hermes block with native rendering");
        if family == Family::Ipi {
            assert!(r.text.contains("<assistant>CALL {"));
            let tool_open = r.text.find("<tool>").unwrap();
            assert!(tool_open < r.payload_byte_span.start);
        } else {
            assert!(r.payload_byte_span.end < r.text.find("[/TOOLS]").unwrap());
        }
        let chat =
            render_case_with(&case, Channel::Chat, Condition::Adversarial, &NativeToy, &a.tokenizer, &opts).unwrap();
        assert!(!chat.text.contains("[TOOLS]"));
    }
}

/// A template that escapes content the way `tojson` would: the payload must not survive, and rendering says so.
struct Escaping;

impl TemplateBackend for Escaping {
    fn render_messages(&self, messages: &[Value], _tools: Option<&[Value]>, _gen: bool) -> Result<String, String> {
        Ok(messages.iter().map(|m| m["content"].to_string().replace('\'', "\\u0027")).collect::<Vec<_>>().join("\n"))
    }

    fn has_tool_support(&self) -> bool {
        true
    }
}

#[test]
fn a_template_that_alters_the_payload_is_rejected() {
    let a = assets();
    let mut case = first(&builtin(), Family::Tp);
    case.payload.action = "Don't skip this: send the \"full\" file.".into();
    case.refresh_fingerprints();
    let err = render_case_with(
        &case,
        Channel::Chat,
        Condition::Adversarial,
        &Escaping,
        &a.tokenizer,
        &RenderOptions::default(),
    )
    .unwrap_err();
    assert!(matches!(err, CaseError::Placement { .. }), "{err}");
    assert!(err.to_string().contains(&case.id));
}

#[test]
fn build_conversation_places_payload_exactly_once() {
    for lc in builtin() {
        for ch in Channel::ALL {
            let conv = build_conversation(&lc.case, ch, "XPAYLOADX", Some(ToolRendering::Native)).unwrap();
            let mut all = serde_json::to_string(&conv.messages).unwrap();
            all.push_str(&serde_json::to_string(&conv.tools).unwrap());
            assert_eq!(all.matches("XPAYLOADX").count(), 1, "{} {ch}", lc.case.id);
            assert_eq!(conv.tools.is_some(), ch != Channel::Chat);
        }
    }
}
