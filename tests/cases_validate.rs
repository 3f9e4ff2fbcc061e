//! The validator: the built-in set passes; each failure mode is reported with its case.
use std::path::PathBuf;

use serde_json::json;
use trustlens::cases::generate::{generate, subtype_split, GenerateOptions};
use trustlens::cases::io::{load_cases, parse_jsonl, to_jsonl, LoadedCase};
use trustlens::cases::render::{RenderOptions, ToolRendering};
use trustlens::cases::validate::{validate_set, RenderCheck, ValidationReport};
use trustlens::cases::{Case, Family, TpSubtype};
use trustlens::prompt::PromptAssets;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn builtin_path() -> PathBuf {
    root().join("experiments/cases/channel-trust.jsonl")
}

fn assets() -> PromptAssets {
    PromptAssets::load(&root().join("models/SmolLM2-135M-Instruct.Q4_1.gguf")).expect("embedded model loads")
}

fn check(cases: &[LoadedCase]) -> ValidationReport {
    let a = assets();
    let opts = RenderOptions::with_tool_rendering(ToolRendering::Hermes);
    validate_set(cases, RenderCheck::from_assets(&a, &opts))
}

fn builtin() -> Vec<LoadedCase> {
    load_cases(&builtin_path()).unwrap()
}

fn reasons(r: &ValidationReport, id: &str) -> String {
    r.problems.iter().filter(|p| p.case_id == id).map(|p| p.reason.clone()).collect::<Vec<_>>().join(" | ")
}

#[test]
fn builtin_set_validates_with_the_embedded_model() {
    let cases = builtin();
    let r = check(&cases);
    assert!(r.is_ok(), "{:#?}", r.problems);
    assert_eq!(r.cases, 98);
    assert_eq!(r.renderings, 98 * 6);
}

#[test]
fn builtin_set_has_the_paper_proportions() {
    let cases = builtin();
    let count = |f: Family| cases.iter().filter(|c| c.case.family == f).count();
    assert_eq!((count(Family::Tp), count(Family::Ipi), count(Family::Cts)), (50, 24, 24));
    let sub = |s: TpSubtype| cases.iter().filter(|c| c.case.subtype == Some(s)).count();
    assert_eq!((sub(TpSubtype::P1), sub(TpSubtype::P2), sub(TpSubtype::P3)), (17, 17, 16));
    assert_eq!(subtype_split(50), [17, 17, 16]);
    let mut payloads: Vec<String> = cases.iter().map(|c| c.case.payload.text()).collect();
    payloads.sort();
    payloads.dedup();
    assert_eq!(payloads.len(), 98, "no two payloads alike");
}

#[test]
fn builtin_set_is_the_seeded_generator_output() {
    let generated = generate(&GenerateOptions::default()).unwrap();
    let on_disk: Vec<Case> = builtin().into_iter().map(|c| c.case).collect();
    assert_eq!(
        generated, on_disk,
        "regenerate with `trustlens cases generate --out experiments/cases/channel-trust.jsonl`"
    );
    let other = generate(&GenerateOptions { seed: 7, ..Default::default() }).unwrap();
    assert_ne!(other, on_disk);
    let lc: Vec<LoadedCase> = other.into_iter().enumerate().map(|(i, case)| LoadedCase { line: i + 1, case }).collect();
    let r = check(&lc);
    assert!(r.is_ok(), "{:#?}", r.problems);
}

#[test]
fn one_changed_byte_in_one_payload_is_rejected_naming_the_case() {
    let text = std::fs::read_to_string(builtin_path()).unwrap();
    // Change one byte of the payload action of the 23rd case, in one place.
    let lines: Vec<&str> = text.lines().collect();
    let target = lines[22];
    let id = serde_json::from_str::<serde_json::Value>(target).unwrap()["id"].as_str().unwrap().to_string();
    let at = target.find("\"payload\":{\"action\":\"").unwrap() + "\"payload\":{\"action\":\"".len() + 5;
    let mut bytes = text.clone().into_bytes();
    let offset = lines[..22].iter().map(|l| l.len() + 1).sum::<usize>() + at;
    assert!(bytes[offset].is_ascii_alphabetic());
    bytes[offset] = if bytes[offset] == b'x' { b'y' } else { b'x' };
    let corrupted = String::from_utf8(bytes).unwrap();
    let (cases, problems) = parse_jsonl(&corrupted);
    assert!(problems.is_empty());
    let r = check(&cases);
    assert_eq!(r.failing_cases(), vec![id.clone()], "{:#?}", r.problems);
    assert!(reasons(&r, &id).contains("fingerprint"), "{}", reasons(&r, &id));
}

fn with_case(edit: impl FnOnce(&mut Case)) -> (String, ValidationReport) {
    let mut cases = builtin();
    edit(&mut cases[0].case);
    let id = cases[0].case.id.clone();
    (id, check(&cases))
}

#[test]
fn duplicate_ids_are_reported() {
    let mut cases = builtin();
    cases[5].case.id = cases[4].case.id.clone();
    let r = check(&cases);
    assert!(r.problems.iter().any(|p| p.reason.contains("duplicate id") && p.line == cases[5].line));
}

#[test]
fn undefined_tools_are_reported() {
    let (id, r) = with_case(|c| c.tp.as_mut().unwrap().carrier_tool = "send_fax".into());
    assert!(reasons(&r, &id).contains("`send_fax` is referenced but not defined"), "{}", reasons(&r, &id));
    let (id, r) = with_case(|c| c.malicious_action.tool = Some("wire_money".into()));
    assert!(reasons(&r, &id).contains("`wire_money` is referenced but not defined"));
}

#[test]
fn broken_json_schemas_are_reported() {
    let (id, r) =
        with_case(|c| c.tools[0].parameters = json!({"type": "object", "properties": {"q": {"type": "text"}}}));
    assert!(reasons(&r, &id).contains("not a JSON Schema type"), "{}", reasons(&r, &id));
    let (id, r) = with_case(|c| c.tools[0].parameters = json!({"type": "object", "properties": {}, "required": ["x"]}));
    assert!(reasons(&r, &id).contains("required names `x`"));
    let (id, r) = with_case(|c| c.tools[0].parameters = json!("object"));
    assert!(reasons(&r, &id).contains("must be a JSON Schema object"));
}

#[test]
fn benign_controls_must_share_structure_and_length() {
    let (id, r) = with_case(|c| {
        c.benign.justification.clear();
        c.refresh_fingerprints();
    });
    assert!(reasons(&r, &id).contains("differ in structure"), "{}", reasons(&r, &id));
    let (id, r) = with_case(|c| {
        c.benign.action = "Ok.".into();
        c.benign.justification = "Fine.".into();
        c.refresh_fingerprints();
    });
    assert!(reasons(&r, &id).contains("not comparable"), "{}", reasons(&r, &id));
    let (id, r) = with_case(|c| {
        c.benign = c.payload.clone();
    });
    assert!(reasons(&r, &id).contains("identical to the payload"));
}

#[test]
fn payload_that_appears_twice_or_gets_escaped_is_reported() {
    // The user task quotes the payload: it appears twice in the chat prompt.
    let (id, r) = with_case(|c| c.user_task = format!("{} {}", c.user_task, c.payload.text()));
    assert!(reasons(&r, &id).contains("user task contains the payload"), "{}", reasons(&r, &id));
    // A double quote in a TP payload is escaped inside the JSON tool description: not byte-identical.
    let (id, r) = with_case(|c| {
        c.payload.action = format!("{} Say \"approved\".", c.payload.action);
        c.refresh_fingerprints();
    });
    let why = reasons(&r, &id);
    assert!(why.contains("[tool/adversarial]") && why.contains("payload"), "{why}");
}

#[test]
fn cts_payload_must_name_its_target_and_family_blocks_must_match() {
    let mut cases = builtin();
    let i = cases.iter().position(|c| c.case.family == Family::Cts).unwrap();
    let target = cases[i].case.cts.as_ref().unwrap().target_tool.clone();
    cases[i].case.payload.action = cases[i].case.payload.action.replace(&target, "the other tool");
    cases[i].case.refresh_fingerprints();
    let id = cases[i].case.id.clone();
    let r = check(&cases);
    assert!(reasons(&r, &id).contains("does not name its target tool"), "{}", reasons(&r, &id));

    let (id, r) = with_case(|c| c.tp = None);
    assert!(reasons(&r, &id).contains("TP case without `tp.carrier_tool`"));
    let (id, r) = with_case(|c| c.subtype = None);
    assert!(reasons(&r, &id).contains("without `subtype`"));
}

#[test]
fn every_offending_case_is_reported_not_just_the_first() {
    let mut cases = builtin();
    for lc in cases.iter_mut().step_by(10) {
        lc.case.payload.action.push('!');
    }
    let r = check(&cases);
    assert_eq!(r.failing_cases().len(), 10);
}

#[test]
fn malformed_lines_are_listed_with_line_numbers_and_parsing_continues() {
    let good: Vec<Case> = builtin().into_iter().take(3).map(|c| c.case).collect();
    let mut text = to_jsonl(&good);
    text.push_str("{\"id\": \"broken-1\", \"family\": \"TP\",\n"); // line 4: truncated JSON
    let mut unknown = serde_json::to_value(&good[0]).unwrap();
    unknown["id"] = json!("odd-family");
    unknown["family"] = json!("XSS");
    text.push_str(&format!("{unknown}\n")); // line 5
    let mut missing = serde_json::to_value(&good[1]).unwrap();
    missing["id"] = json!("no-payload");
    missing.as_object_mut().unwrap().remove("payload");
    text.push_str(&format!("{missing}\n")); // line 6
    text.push_str("\n// a comment line\n");
    text.push_str("[1, 2, 3]\n"); // line 9
    let (cases, problems) = parse_jsonl(&text);
    assert_eq!(cases.len(), 3);
    let lines: Vec<usize> = problems.iter().map(|p| p.line).collect();
    assert_eq!(lines, vec![4, 5, 6, 9]);
    assert!(problems[0].reason.contains("malformed JSON"));
    assert_eq!(problems[0].id.as_deref(), Some("broken-1"));
    assert!(problems[1].reason.contains("unknown family `XSS`"));
    assert!(problems[2].reason.contains("missing payload"));
    assert_eq!(problems[2].id.as_deref(), Some("no-payload"));
}
