//! Figures from small synthetic tables: every figure type is rendered, its PNG decodes with the expected size, its
//! SVG is well-formed with the expected size and carries the title (text as outlines, no font references), the
//! CSV behind it has the plotted rows; bad tables give errors naming the file and column.
use std::path::{Path, PathBuf};

use trustlens::plot::{self, render_run, FigureMeta, ProbeMetric};

const SCALE: f64 = 1.5;

fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p
}

/// 2 positions x 3 layers x 3 methods x train {chat, tool, pooled} x test {chat, tool}.
fn probes_csv() -> String {
    let mut s = String::from(
        "layer,position,method,train,test,n_test_rows,n_test_cases,accuracy,accuracy_lo,accuracy_hi,auroc,auroc_lo,\
         auroc_hi,accuracy_fold_mean,auroc_fold_mean,p_value,n_permutations,c_values\n",
    );
    for position in ["last", "payload_last"] {
        for (li, layer) in [2, 4, 6].into_iter().enumerate() {
            for (mi, method) in ["logistic", "rbf", "diffmeans"].into_iter().enumerate() {
                for train in ["chat", "tool", "pooled"] {
                    for test in ["chat", "tool"] {
                        let base = if train == test { 0.8 } else { 0.55 } + 0.03 * li as f64 - 0.02 * mi as f64;
                        let auroc = base + 0.05;
                        s.push_str(&format!(
                            "{layer},{position},{method},{train},{test},40,20,{base:.4},{:.4},{:.4},{auroc:.4},{:.4},\
                             {:.4},{base:.4},{auroc:.4},0.05,20,0.1;0.1\n",
                            base - 0.05,
                            base + 0.05,
                            auroc - 0.04,
                            (auroc + 0.04).min(1.0)
                        ));
                    }
                }
            }
        }
    }
    s
}

fn patching_csv() -> String {
    let mut s = String::from(
        "layers,direction,channel,family,n,shift,shift_lo,shift_hi,recovery,recovery_lo,recovery_hi,random_shift,\
         random_lo,random_hi\n",
    );
    for layers in ["2", "4", "6", "2+6", "4..6"] {
        for direction in ["forward", "reverse"] {
            for channel in ["chat", "tool"] {
                for (family, n) in [("TP", 10), ("all", 20)] {
                    let v = if channel == "chat" { 0.004 } else { 0.0002 } * layers.len() as f64;
                    s.push_str(&format!(
                        "{layers},{direction},{channel},{family},{n},{v:.6},{:.6},{:.6},0.5,0.4,0.6,-0.3,-0.4,-0.2\n",
                        v * 0.8,
                        v * 1.2
                    ));
                }
            }
        }
    }
    s
}

fn sas_csv() -> String {
    let mut s = String::from(
        "model,family,n,asr_chat,asr_chat_lo,asr_chat_hi,asr_tool,asr_tool_lo,asr_tool_hi,sas,sas_lo,sas_hi\n",
    );
    for (model, d) in [("model-a", 1.0), ("\"model, b\"", -1.0)] {
        for (family, n, sas) in [("ALL", 20, 12.0), ("TP", 10, 20.0), ("IPI", 5, -8.0), ("CTS", 5, 4.0)] {
            let sas = sas * d;
            s.push_str(&format!(
                "{model},{family},{n},30,20,40,{},{},{},{sas},{},{}\n",
                30.0 + sas,
                20.0 + sas,
                40.0 + sas,
                sas - 9.0,
                sas + 9.0
            ));
        }
    }
    s
}

/// (width, height) from a PNG's signature + IHDR, after decoding the whole image.
fn png_size(path: &Path) -> (u32, u32) {
    let bytes = std::fs::read(path).unwrap();
    assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n", "{}: not a PNG", path.display());
    assert_eq!(&bytes[12..16], b"IHDR");
    let w = u32::from_be_bytes(bytes[16..20].try_into().unwrap());
    let h = u32::from_be_bytes(bytes[20..24].try_into().unwrap());
    let decoder = png::Decoder::new(std::io::Cursor::new(bytes));
    let mut reader = decoder.read_info().unwrap();
    let mut buf = vec![0; reader.output_buffer_size()];
    let info = reader.next_frame(&mut buf).unwrap();
    assert_eq!((info.width, info.height), (w, h));
    let px = &buf[..info.buffer_size()];
    // Something dark was drawn (text, axes) and the background is white.
    assert!(px.iter().filter(|&&v| v < 80).count() > 1000, "{}: nearly blank", path.display());
    assert_eq!(&px[..3], &[255, 255, 255]);
    (w, h)
}

fn attr(tag: &str, name: &str) -> u32 {
    let key = format!(" {name}=\"");
    let at = tag.find(&key).unwrap_or_else(|| panic!("no {name} in {tag}")) + key.len();
    tag[at..].split('"').next().unwrap().parse().unwrap()
}

/// Checks the SVG is well-formed enough (balanced tags, one root), has no text elements or font references,
/// carries `title`, and returns its (width, height).
fn svg_size(path: &Path, title: &str) -> (u32, u32) {
    let text = std::fs::read_to_string(path).unwrap();
    let start = text.trim_start();
    assert!(start.starts_with("<svg") || start.starts_with("<?xml"), "{}", path.display());
    let root = &text[text.find("<svg").unwrap()..];
    let root_tag = &root[..root.find('>').unwrap()];
    let mut stack: Vec<String> = Vec::new();
    let mut rest = text.as_str();
    while let Some(i) = rest.find('<') {
        let end = rest[i..].find('>').expect("unclosed tag") + i;
        let tag = &rest[i + 1..end];
        rest = &rest[end + 1..];
        if tag.starts_with('?') || tag.starts_with('!') {
            continue;
        }
        if let Some(name) = tag.strip_prefix('/') {
            assert_eq!(stack.pop().as_deref(), Some(name.trim()), "{}: mismatched </{name}>", path.display());
        } else if !tag.ends_with('/') {
            stack.push(tag.split_whitespace().next().unwrap().to_string());
        }
    }
    assert!(stack.is_empty(), "{}: unclosed {stack:?}", path.display());
    assert!(!text.contains("<text") && !text.contains("font-family"), "{}: font-dependent text", path.display());
    assert!(text.contains(&format!("aria-label=\"{title}")), "{}: title {title:?} missing", path.display());
    (attr(root_tag, "width"), attr(root_tag, "height"))
}

fn csv_rows(path: &Path) -> (String, usize) {
    let text = std::fs::read_to_string(path).unwrap();
    let mut lines = text.lines();
    (lines.next().unwrap().to_string(), lines.count())
}

#[test]
fn every_figure_renders_from_synthetic_tables() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "probes.csv", &probes_csv());
    write(dir.path(), "patching.csv", &patching_csv());
    write(dir.path(), "sas.csv", &sas_csv());
    let meta = FigureMeta { png_scale: SCALE, ..FigureMeta::new("TestModel-1B") };
    let written = render_run(dir.path(), &meta).unwrap();
    assert_eq!(written.len(), 18, "{written:?}");

    // (figure, title prefix, expected SVG width: columns x panel width + 2 x 18 margin).
    let expected = [
        ("probe_accuracy", "Probe accuracy by layer \u{2014} TestModel-1B", 2 * 450 + 36),
        ("probe_auroc", "Probe AUROC by layer \u{2014} TestModel-1B", 2 * 450 + 36),
        ("transfer", "Cross-channel transfer of the logistic probe \u{2014} TestModel-1B", 2 * 420 + 36),
        ("patching_shift", "Activation patching by layer \u{2014} TestModel-1B", 2 * 450 + 36),
        ("sas_by_family", "Safety Asymmetry Score by attack family \u{2014} model-a, model, b", 792 + 36),
        ("summary", "Channel trust at a glance \u{2014} TestModel-1B", 2 * 460 + 36),
    ];
    for (name, title, width) in expected {
        let stem = dir.path().join(name);
        for ext in ["png", "svg", "csv"] {
            assert!(written.contains(&stem.with_extension(ext)), "{name}.{ext} not reported");
        }
        let (sw, sh) = svg_size(&stem.with_extension("svg"), title);
        assert_eq!(sw, width, "{name}: SVG width");
        assert!((300..3000).contains(&sh), "{name}: SVG height {sh}");
        let (pw, ph) = png_size(&stem.with_extension("png"));
        assert_eq!(
            (pw, ph),
            ((f64::from(sw) * SCALE).round() as u32, (f64::from(sh) * SCALE).round() as u32),
            "{name}"
        );
    }

    // The tables behind the figures hold exactly the plotted rows.
    let (h, n) = csv_rows(&dir.path().join("probe_auroc.csv"));
    assert_eq!(h, "metric,position,channel,method,layer,n_cases,value,lo,hi");
    assert_eq!(n, 2 * 2 * 3 * 3, "positions x channels x methods x layers (in-channel only)");
    let (_, n) = csv_rows(&dir.path().join("transfer.csv"));
    assert_eq!(n, 2 * 4 * 3, "positions x channel pairs x layers (logistic, no pooled)");
    let (h, n) = csv_rows(&dir.path().join("patching_shift.csv"));
    assert!(h.starts_with("family,channel,direction,layer,n,shift,shift_lo,shift_hi"));
    assert_eq!(n, 2 * 2 * 3, "channels x directions x single layers (family all, multi-layer sets skipped)");
    let (_, n) = csv_rows(&dir.path().join("sas_by_family.csv"));
    assert_eq!(n, 8);
    let text = std::fs::read_to_string(dir.path().join("sas_by_family.csv")).unwrap();
    assert!(text.contains("\"model, b\",IPI,5,8.000000,"), "{text}");
    // The input tables are left alone.
    assert_eq!(std::fs::read_to_string(dir.path().join("patching.csv")).unwrap(), patching_csv());

    // Rendering is deterministic.
    let first = std::fs::read(dir.path().join("summary.svg")).unwrap();
    render_run(dir.path(), &meta).unwrap();
    assert_eq!(first, std::fs::read(dir.path().join("summary.svg")).unwrap());
    assert!(!std::fs::read_dir(dir.path()).unwrap().any(|e| e.unwrap().path().extension().is_some_and(|x| x == "tmp")));
}

#[test]
fn in_memory_api_and_options() {
    let dir = tempfile::tempdir().unwrap();
    let probes = plot::read_probes(&write(dir.path(), "p.csv", &probes_csv())).unwrap();
    let out = dir.path().join("out");
    let meta = FigureMeta { positions: vec!["payload_last".into()], png_scale: 1.0, ..FigureMeta::new("M") };
    let paths = plot::probe_figure(&probes, ProbeMetric::Auroc, &meta, &out).unwrap();
    assert_eq!(paths.len(), 3);
    let (_, n) = csv_rows(&out.join("probe_auroc.csv"));
    assert_eq!(n, 2 * 3 * 3, "one position only");
    let (w, _) = svg_size(&out.join("probe_auroc.svg"), "Probe AUROC by layer \u{2014} M");
    assert_eq!(png_size(&out.join("probe_auroc.png")).0, w);

    // Options that name something absent are refused with what is there.
    let bad = FigureMeta { positions: vec!["middle".into()], ..FigureMeta::new("M") };
    let err = plot::probe_figure(&probes, ProbeMetric::Auroc, &bad, &out).unwrap_err().to_string();
    assert!(err.contains("\"middle\"") && err.contains("last, payload_last"), "{err}");
    let patches = plot::read_patching(&write(dir.path(), "x.csv", &patching_csv())).unwrap();
    let bad = FigureMeta { patch_family: "IPI".into(), ..FigureMeta::new("M") };
    let err = plot::patching_figure(&patches, &bad, &out).unwrap_err().to_string();
    assert!(err.contains("\"IPI\"") && err.contains("all, TP"), "{err}");
    let one_family = FigureMeta { patch_family: "TP".into(), png_scale: 1.0, ..FigureMeta::new("M") };
    plot::patching_figure(&patches, &one_family, &out).unwrap();

    // Summary from probes alone: two panels.
    plot::summary_figure(Some(&probes), None, &FigureMeta { png_scale: 1.0, ..FigureMeta::new("M") }, &out).unwrap();
    let (_, n) = csv_rows(&out.join("summary.csv"));
    assert_eq!(n, 2 * 2 * 3 + 4 * 3, "(a) channels x {{logistic, rbf}} x layers + (b) pairs x layers");
}

#[test]
fn model_name_falls_back_to_patching_json() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "patching.csv", &patching_csv());
    write(dir.path(), "patching.json", r#"{"config": {"model": "models/Tiny-Model.Q4_1.gguf"}, "summary": []}"#);
    let written = render_run(dir.path(), &FigureMeta { png_scale: 1.0, ..FigureMeta::default() }).unwrap();
    assert_eq!(written.len(), 6, "patching_shift and summary only: {written:?}");
    svg_size(&dir.path().join("patching_shift.svg"), "Activation patching by layer \u{2014} Tiny-Model.Q4_1");
}

#[test]
fn bad_tables_name_file_and_column() {
    let dir = tempfile::tempdir().unwrap();
    let probes = probes_csv().replacen("auroc_lo,", "auroc_low,", 1);
    let path = write(dir.path(), "probes.csv", &probes);
    let err = render_run(dir.path(), &FigureMeta::new("M")).unwrap_err().to_string();
    assert!(err.contains(&path.display().to_string()) && err.contains("missing column `auroc_lo`"), "{err}");

    let probes = probes_csv().replacen("\n2,last,logistic", "\nsix,last,logistic", 1);
    write(dir.path(), "probes.csv", &probes);
    let err = render_run(dir.path(), &FigureMeta::new("M")).unwrap_err().to_string();
    assert!(err.contains("probes.csv: line 2, column `layer`: \"six\""), "{err}");

    let empty = tempfile::tempdir().unwrap();
    let err = render_run(empty.path(), &FigureMeta::new("M")).unwrap_err().to_string();
    assert!(err.contains("nothing to plot"), "{err}");
}

#[test]
fn cli_writes_figures_and_reports_bad_input() {
    let bin = env!("CARGO_BIN_EXE_trustlens");
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "patching.csv", &patching_csv());
    let out = std::process::Command::new(bin)
        .args(["plot", dir.path().to_str().unwrap(), "--model", "CliModel", "--png-scale", "1"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.lines().any(|l| l.ends_with("patching_shift.png")), "{stdout}");
    svg_size(&dir.path().join("summary.svg"), "Channel trust at a glance \u{2014} CliModel");

    write(dir.path(), "sas.csv", "model,family\nm,TP\n");
    let out = std::process::Command::new(bin).args(["plot", dir.path().to_str().unwrap()]).output().unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("sas.csv: missing column `n`"), "{stderr}");
}
