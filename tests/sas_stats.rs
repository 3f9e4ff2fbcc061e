//! SAS statistics (issue 8): the paper's Nemotron TP numbers, exact group dSAS, Spearman with ties, Cohen's kappa,
//! and bad input (unknown class, unmatched cases, empty group) through the library and the CLI.
use std::path::{Path, PathBuf};
use std::process::Command;

use trustlens::cases::{Channel, Condition, Family, TpSubtype};
use trustlens::sas::{
    build_report, cohen_kappa, compute, groups, parse_group, read_outcomes_located, spearman, write_outcomes,
    FamilySlice, LocatedRow, Outcome, OutcomeRow, ReportOptions, RowLocation, SasConfig, SasError,
};

fn row(model: &str, case: &str, family: Family, channel: Channel, outcome: Outcome) -> OutcomeRow {
    OutcomeRow {
        model: model.into(),
        case_id: case.into(),
        family,
        subtype: (family == Family::Tp).then_some(TpSubtype::P1),
        channel,
        condition: Condition::Adversarial,
        outcome,
        judge: Some("test".into()),
        rationale: None,
        output: None,
    }
}

fn located(rows: Vec<OutcomeRow>) -> Vec<LocatedRow> {
    rows.into_iter()
        .enumerate()
        .map(|(i, row)| LocatedRow { row, at: RowLocation { path: PathBuf::from("mem.jsonl"), line: i + 1 } })
        .collect()
}

/// `n` matched cases of one family for `model`, with `both` cases succeeding in both channels, `tool_only` only in
/// the tool channel, `chat_only` only in chat, the rest failing in both (IGNORED in tool, REFUSED in chat).
fn model_rows(
    model: &str,
    family: Family,
    n: usize,
    both: usize,
    tool_only: usize,
    chat_only: usize,
) -> Vec<OutcomeRow> {
    assert!(both + tool_only + chat_only <= n);
    let mut out = Vec::new();
    for i in 0..n {
        let case = format!("{}-{i:03}", family.as_str().to_lowercase());
        let (t, c) = if i < both {
            (true, true)
        } else if i < both + tool_only {
            (true, false)
        } else if i < both + tool_only + chat_only {
            (false, true)
        } else {
            (false, false)
        };
        let o = |s: bool, fail: Outcome| if s { Outcome::Success } else { fail };
        out.push(row(model, &case, family, Channel::Chat, o(c, Outcome::Refused)));
        out.push(row(model, &case, family, Channel::Tool, o(t, Outcome::Ignored)));
    }
    out
}

fn cfg(n_boot: usize) -> SasConfig {
    SasConfig { n_boot, ..SasConfig::default() }
}

/// The paper's Nemotron 3 Super 120B TP numbers: tool 34/50 SUCCESS (68 %), chat 11/50 (22 %), SAS_TP = +46 pp,
/// CI [28, 64].
///
/// The paper gives counts, not the per-case pairing, so the pairing is a choice. Its CI half-width (18 pp) matches
/// what a bootstrap of two *independent* arms gives: SE = sqrt(.68*.32/50 + .22*.78/50) = 8.8 pp -> +-17.3 pp. A
/// paired bootstrap reproduces that when the chat and tool successes overlap as much as independence predicts:
/// 34 * 11 / 50 = 7.5 cases; we use 7 cases that succeed in both channels, 27 tool-only, 4 chat-only, 12 in neither.
/// Then the per-case difference d in {-1, 0, +1} has mean 0.46 and variance 31/50 - 0.46^2 = 0.4084, so the paired
/// SE is sqrt(0.4084 / 50) = 9.0 pp and the 95 % percentile interval is about [28.3, 63.7].
#[test]
fn nemotron_tp_sas_and_ci() {
    let rows = located(model_rows("nemotron-3-super-120b", Family::Tp, 50, 7, 27, 4));
    let (models, warnings) = compute(&rows, &cfg(10_000)).unwrap();
    assert!(warnings.is_empty(), "{warnings:?}");
    let tp = models[0].cell(FamilySlice::Tp).unwrap();
    assert_eq!((tp.n, tp.success_tool, tp.success_chat), (50, 34, 11));
    assert!((tp.asr_tool.value - 68.0).abs() < 1e-9);
    assert!((tp.asr_chat.value - 22.0).abs() < 1e-9);
    assert!((tp.sas.value - 46.0).abs() < 1e-9, "{:?}", tp.sas);
    eprintln!("Nemotron SAS_TP = {:.1} pp, 95% CI [{:.1}, {:.1}]", tp.sas.value, tp.sas.lo, tp.sas.hi);
    assert!((tp.sas.lo - 28.0).abs() <= 3.0 && (tp.sas.hi - 64.0).abs() <= 3.0, "{:?}", tp.sas);
    // Same seed, same numbers; another seed moves the bounds by at most a little.
    let (again, _) = compute(&rows, &cfg(10_000)).unwrap();
    assert_eq!(again[0].cell(FamilySlice::Tp).unwrap().sas, tp.sas);
    let other = compute(&rows, &SasConfig { seed: 7, ..cfg(10_000) }).unwrap().0;
    let o = other[0].cell(FamilySlice::Tp).unwrap().sas;
    assert!((o.lo - tp.sas.lo).abs() <= 2.0 && (o.hi - tp.sas.hi).abs() <= 2.0, "{o:?} vs {:?}", tp.sas);

    // The bootstrap really is paired: with the same counts but every chat success also a tool success (11 both,
    // 23 tool-only), the per-case differences vary less (variance 0.2484) and the interval must be narrower
    // (about +-13.8 pp instead of +-17.7). An unpaired bootstrap would give the same interval for both layouts.
    let nested = located(model_rows("nested", Family::Tp, 50, 11, 23, 0));
    let (m2, _) = compute(&nested, &cfg(10_000)).unwrap();
    let s2 = m2[0].cell(FamilySlice::Tp).unwrap().sas;
    assert!((s2.value - 46.0).abs() < 1e-9);
    assert!(s2.hi - s2.lo < tp.sas.hi - tp.sas.lo - 4.0, "nested {s2:?} vs independent {:?}", tp.sas);
    assert!((s2.hi - s2.lo - 2.0 * 13.8).abs() < 3.0, "{s2:?}");
}

/// Two groups of three models with hand-made SAS values; group means and dSAS are recomputed exactly. The paper's
/// group numbers: agent-native mean +24.8 pp, general -5.6 pp, dSAS +30.4 pp.
#[test]
fn group_dsas_exact() {
    // (model, n, both, tool_only, chat_only) -> SAS = (tool_only - chat_only) / n * 100.
    let agent = [("nemotron", 50, 7, 27, 4), ("gpt-oss", 50, 5, 12, 3), ("kimi", 125, 10, 20, 7)];
    // SAS: 46.0, 18.0, 10.4 -> mean 74.4 / 3 = 24.8
    let general = [("llama", 50, 10, 3, 5), ("qwen", 50, 4, 0, 4), ("gemma", 125, 20, 4, 10)];
    // SAS: -4.0, -8.0, -4.8 -> mean -16.8 / 3 = -5.6
    let mut rows = Vec::new();
    for &(m, n, b, t, c) in agent.iter().chain(&general) {
        rows.extend(model_rows(m, Family::Tp, n, b, t, c));
    }
    let c = cfg(2000);
    let (models, _) = compute(&located(rows), &c).unwrap();
    let sas = |m: &str| models.iter().find(|r| r.model == m).unwrap().cell(FamilySlice::Tp).unwrap().sas.value;
    for (m, want) in [("nemotron", 46.0), ("gpt-oss", 18.0), ("kimi", 10.4), ("llama", -4.0), ("qwen", -8.0)] {
        assert!((sas(m) - want).abs() < 1e-9, "{m}: {}", sas(m));
    }
    let specs = vec![
        parse_group("agent=nemotron,gpt-oss,kimi").unwrap(),
        parse_group("general = llama, qwen, gemma,").unwrap(),
    ];
    let (gr, deltas) = groups(&models, &specs, &c).unwrap();
    let mean = |g: usize| gr[g].means.iter().find(|m| m.family == FamilySlice::Tp).unwrap().mean_sas;
    assert!((mean(0).value - 24.8).abs() < 1e-9, "{:?}", mean(0));
    assert!((mean(1).value - -5.6).abs() < 1e-9, "{:?}", mean(1));
    let d = deltas.iter().find(|d| d.family == FamilySlice::Tp).unwrap();
    assert_eq!((d.group_a.as_str(), d.group_b.as_str()), ("agent", "general"));
    assert!((d.dsas.value - 30.4).abs() < 1e-9, "{:?}", d.dsas);
    assert!(d.dsas.lo < 30.4 && 30.4 < d.dsas.hi, "{:?}", d.dsas);
    // ALL equals TP here (TP-only data); the TP-P1 slice holds the same cases too.
    assert!(deltas.iter().any(|d| d.family == FamilySlice::All && (d.dsas.value - 30.4).abs() < 1e-9));

    // Cases are resampled within each model and the models stay fixed: when every model's outcomes are constant
    // across its cases (SAS exactly 100, 0 or -100 on every draw), the group intervals collapse to the point.
    let mut rows = Vec::new();
    for (m, t, ch) in [("a1", 10, 0), ("a2", 0, 0), ("g1", 0, 10), ("g2", 0, 0)] {
        rows.extend(model_rows(m, Family::Ipi, 10, 0, t, ch));
    }
    let (models, _) = compute(&located(rows), &c).unwrap();
    let specs = vec![parse_group("a=a1,a2").unwrap(), parse_group("g=g1,g2").unwrap()];
    let (_, deltas) = groups(&models, &specs, &c).unwrap();
    let d = deltas.iter().find(|d| d.family == FamilySlice::Ipi).unwrap().dsas;
    assert_eq!((d.value, d.lo, d.hi), (100.0, 100.0, 100.0));
}

#[test]
fn spearman_with_ties_hand_example() {
    // ranks x: [1, 2.5, 2.5, 4]; ranks y: [1, 2, 3.5, 3.5]; both centred on 2.5:
    // sum dx*dy = 2.25 + 0 + 0 + 1.5 = 3.75; sum dx^2 = 4.5; sum dy^2 = 4.5 -> rho = 3.75 / 4.5 = 0.8333
    // (scipy.stats.spearmanr([1,2,2,3],[10,20,30,30]) = 0.8333333333333335).
    let rho = spearman(&[1.0, 2.0, 2.0, 3.0], &[10.0, 20.0, 30.0, 30.0]);
    assert!((rho - 3.75 / 4.5).abs() < 1e-12, "{rho}");
    assert!((spearman(&[1.0, 2.0, 3.0], &[3.0, 2.0, 1.0]) + 1.0).abs() < 1e-12);
    assert!(spearman(&[1.0, 1.0, 1.0], &[1.0, 2.0, 3.0]).is_nan());
}

#[test]
fn kappa_hand_example() {
    use Outcome::*;
    // Two judges, 8 items. Agreement on items 0, 1, 3, 4, 6 -> p_o = 5/8.
    // Marginals a: SUCCESS 3, REFUSED 3, AMBIGUOUS 2; b: SUCCESS 3, REFUSED 4, AMBIGUOUS 1.
    // p_e = (3*3 + 3*4 + 2*1) / 64 = 23/64; kappa = (40/64 - 23/64) / (41/64) = 17/41.
    let a = [Success, Success, Success, Refused, Refused, Refused, Ambiguous, Ambiguous];
    let b = [Success, Success, Refused, Refused, Refused, Success, Ambiguous, Refused];
    assert!((cohen_kappa(&a, &b) - 17.0 / 41.0).abs() < 1e-12, "{}", cohen_kappa(&a, &b));
}

fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p
}

fn cli(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_trustlens")).arg("sas").args(args).output().unwrap()
}

#[test]
fn bad_input_errors_name_the_rows() {
    let dir = tempfile::tempdir().unwrap();
    // Unknown class on line 2.
    let good = r#"{"model":"m","case_id":"tp-1","family":"TP","subtype":"P1","channel":"chat","outcome":"REFUSED"}"#;
    let bad = r#"{"model":"m","case_id":"tp-1","family":"TP","subtype":"P1","channel":"tool","outcome":"PWNED"}"#;
    let p = write(dir.path(), "bad.jsonl", &format!("{good}\n{bad}\n"));
    let err = read_outcomes_located(&p).unwrap_err().to_string();
    assert!(err.contains("bad.jsonl") && err.contains("line 2") && err.contains("\"PWNED\""), "{err}");
    assert!(err.contains("SUCCESS, IGNORED, REFUSED, DIRECT-EXECUTION, AMBIGUOUS, ERRORED"), "{err}");
    let out = cli(&[p.to_str().unwrap(), "--out", dir.path().join("o1").to_str().unwrap()]);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("line 2") && stderr.contains("PWNED"), "{stderr}");

    // Unmatched: tp-2 has only a tool row (line 3), ipi-1 only a chat row (line 4).
    let mut rows = model_rows("m", Family::Tp, 1, 0, 1, 0);
    rows.push(row("m", "tp-2", Family::Tp, Channel::Tool, Outcome::Success));
    rows.push(row("m", "ipi-1", Family::Ipi, Channel::Chat, Outcome::Refused));
    let p = dir.path().join("unmatched.jsonl");
    write_outcomes(&p, &rows).unwrap();
    let located = read_outcomes_located(&p).unwrap();
    let err = compute(&located, &cfg(10)).unwrap_err();
    assert!(matches!(err, SasError::Unmatched { ref problems } if problems.len() == 2), "{err}");
    let msg = err.to_string();
    assert!(msg.contains("\"tp-2\" has no chat row (has tool at") && msg.contains("unmatched.jsonl:3"), "{msg}");
    assert!(msg.contains("\"ipi-1\" has no tool row (has chat at") && msg.contains("unmatched.jsonl:4"), "{msg}");
    let out = cli(&[p.to_str().unwrap(), "--out", dir.path().join("o2").to_str().unwrap(), "--n-boot", "10"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("tp-2"));
    // With --drop-unmatched they are dropped with a warning and the rest is computed.
    let (models, warnings) = compute(&located, &SasConfig { drop_unmatched: true, ..cfg(10) }).unwrap();
    assert_eq!(models[0].n_matched, 1);
    assert!(warnings.iter().any(|w| w.contains("tp-2") && w.contains("ipi-1")), "{warnings:?}");

    // Duplicate rows name both lines.
    let dup = dir.path().join("dup.jsonl");
    std::fs::write(&dup, format!("{good}\n{good}\n")).unwrap();
    let err = compute(&read_outcomes_located(&dup).unwrap(), &cfg(10)).unwrap_err().to_string();
    assert!(err.contains("dup.jsonl:1") && err.contains("dup.jsonl:2"), "{err}");

    // Empty group and unknown model in a group.
    let err = parse_group("agent=").unwrap_err();
    assert!(matches!(err, SasError::EmptyGroup { ref name, .. } if name == "agent"), "{err}");
    assert!(err.to_string().contains("group \"agent\" has no models"), "{err}");
    let ok = dir.path().join("ok.jsonl");
    write_outcomes(&ok, &model_rows("m", Family::Tp, 4, 1, 1, 0)).unwrap();
    let out = cli(&[ok.to_str().unwrap(), "--out", dir.path().join("o3").to_str().unwrap(), "--group", "agent= , "]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("group \"agent\" has no models"));
    let rows = read_outcomes_located(&ok).unwrap();
    let (models, _) = compute(&rows, &cfg(10)).unwrap();
    let err = groups(&models, &[parse_group("g=m,ghost").unwrap()], &cfg(10)).unwrap_err().to_string();
    assert!(err.contains("\"ghost\"") && err.contains("models present: m"), "{err}");
}

#[test]
fn cli_writes_csv_and_json() {
    let dir = tempfile::tempdir().unwrap();
    let mut rows = model_rows("agent-a", Family::Tp, 50, 7, 27, 4);
    rows.extend(model_rows("agent-b", Family::Ipi, 24, 0, 1, 6));
    rows.extend(model_rows("agent-b", Family::Tp, 10, 2, 3, 1));
    rows.extend(model_rows("gen-c", Family::Tp, 10, 1, 0, 2));
    rows.extend(model_rows("gen-d", Family::Tp, 10, 0, 1, 1));
    let p = dir.path().join("outcomes.jsonl");
    write_outcomes(&p, &rows).unwrap();
    let reference = write(
        dir.path(),
        "mcptox.csv",
        "model,asr,notes\nagent-a,0.188,\"top, of list\"\ngen-c,0.037,\nagent-b,0.15,\ngen-d,0.05,\n",
    );
    let out_dir = dir.path().join("res");
    let out = cli(&[
        p.to_str().unwrap(),
        "--out",
        out_dir.to_str().unwrap(),
        "--n-boot",
        "500",
        "--group",
        "agent=agent-a,agent-b",
        "--group",
        "general=gen-c,gen-d",
        "--reference",
        reference.to_str().unwrap(),
    ]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}\n{stdout}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.contains("trust hierarchy") && stdout.contains("dSAS agent - general"), "{stdout}");
    let csv = std::fs::read_to_string(out_dir.join("sas.csv")).unwrap();
    let lines: Vec<&str> = csv.lines().collect();
    assert_eq!(lines[0], trustlens::sas::CSV_HEADER);
    assert!(
        lines.iter().any(|l| l.starts_with("agent-a,TP,50,22,") && l.contains(",68,") && l.contains(",46,")),
        "{csv}"
    );
    // agent-b has TP and IPI: ALL, TP, TP-P1, IPI rows; no CTS, TP-P2, TP-P3 rows (n = 0 omitted).
    assert_eq!(lines.iter().filter(|l| l.starts_with("agent-b,")).count(), 4, "{csv}");
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out_dir.join("sas.json")).unwrap()).unwrap();
    assert_eq!(json["config"]["n_boot"], 500);
    assert_eq!(json["rank_agreement"]["n"], 4);
    // Our tool TP ASR: agent-a 68, agent-b 50, gen-c 10, gen-d 10 (tie); reference 18.8, 15, 3.7, 5.
    // ranks ours [4, 3, 1.5, 1.5], theirs [4, 3, 1, 2] -> rho = 4.5 / sqrt(4.5 * 5) = 0.9487.
    let rho = json["rank_agreement"]["rho"].as_f64().unwrap();
    assert!((rho - 4.5 / (4.5f64 * 5.0).sqrt()).abs() < 1e-12, "{rho}");
    let hier = json["models"][1]["hierarchy"].as_array().unwrap();
    let routes: Vec<&str> = hier.iter().map(|r| r["route"].as_str().unwrap()).collect();
    // agent-b: description (TP tool) 5/10 = 50, chat 9/34 = 26.5, output (IPI tool) 1/24 = 4.2.
    assert_eq!(routes, ["description", "chat", "output"], "{hier:?}");

    // The library gives the same report as the CLI wrote.
    let r = build_report(
        vec![p.clone()],
        &read_outcomes_located(&p).unwrap(),
        &cfg(500),
        &ReportOptions { reference: Some(reference), ..ReportOptions::default() },
    )
    .unwrap();
    assert_eq!(r.to_csv(), csv);
}
