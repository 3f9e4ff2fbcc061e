//! The capture journal and the HDF5 writer/reader without a model: torn tails, damaged records, disk full,
//! deterministic bytes.
use ndarray::Array2;
use std::path::Path;
use trustlens::activations::journal::{Journal, JournalHeader, JournalRecord, JournalRow};
use trustlens::activations::{self, ActivationFile, Contents, RowMeta, RunAttrs};

fn header() -> JournalHeader {
    JournalHeader { run_fingerprint: "fp".into(), n_prompts: 6, n_positions: 2, values_per_row: 8 }
}

fn record(b: u32) -> JournalRecord {
    JournalRecord {
        batch: b,
        rows: (0..2)
            .map(|r| JournalRow {
                prompt: b * 2 + r,
                n_tokens: 10 + r,
                positions: vec![9 + r, 3],
                values: (0..8).map(|i| (b * 100 + r * 10 + i) as f32 * 0.5).collect(),
            })
            .collect(),
    }
}

#[test]
fn torn_and_damaged_tails_are_dropped_and_appending_continues() {
    let tmp = tempfile::tempdir().unwrap();
    let p = tmp.path().join("j");
    let mut j = Journal::create(&p, header()).unwrap();
    for b in 0..3 {
        j.append(&record(b)).unwrap();
    }
    drop(j);
    let full = std::fs::read(&p).unwrap();
    let (_, recs) = Journal::open(&p).unwrap().unwrap();
    assert_eq!(recs, vec![record(0), record(1), record(2)]);
    // Cut the file at every length: a prefix of whole records always survives, never a partial one.
    let rec_len = (full.len() - header_len(&full)) / 3;
    for cut in (0..full.len()).step_by(7) {
        std::fs::write(&p, &full[..cut]).unwrap();
        match Journal::open(&p).unwrap() {
            None => assert!(cut < header_len(&full), "header lost at {cut}"),
            Some((mut j, recs)) => {
                let whole = (cut - header_len(&full)) / rec_len;
                assert_eq!(recs.len(), whole, "cut at {cut}");
                assert_eq!(std::fs::metadata(&p).unwrap().len() as usize, header_len(&full) + whole * rec_len);
                // Appending after recovery gives a valid journal again.
                j.append(&record(7)).unwrap();
                drop(j);
                let (_, recs2) = Journal::open(&p).unwrap().unwrap();
                assert_eq!(recs2.len(), whole + 1);
                assert_eq!(recs2.last().unwrap(), &record(7));
            }
        }
    }
    // A flipped byte inside record 1 drops records 1 and 2.
    let mut bad = full.clone();
    let at = header_len(&full) + rec_len + 40;
    bad[at] ^= 0x55;
    std::fs::write(&p, &bad).unwrap();
    let (_, recs) = Journal::open(&p).unwrap().unwrap();
    assert_eq!(recs, vec![record(0)]);
}

fn header_len(full: &[u8]) -> usize {
    full.windows(8).position(|w| w == b"TLREC001").unwrap()
}

#[test]
fn disk_full_is_an_error_not_a_panic() {
    if !Path::new("/dev/full").exists() {
        return;
    }
    let e = Journal::create(Path::new("/dev/full"), header()).unwrap_err().to_string();
    assert!(e.contains("/dev/full") && e.to_lowercase().contains("space"), "{e}");
}

fn contents(n: usize, complete: bool) -> Contents {
    let d = 5;
    Contents {
        attrs: RunAttrs {
            model_path: "m.gguf".into(),
            model_sha256: "ab".repeat(32),
            dtype: "f32".into(),
            device: "cpu".into(),
            hook_point: "hook_resid_post".into(),
            experiment_config: "[capture]\n".into(),
            config_sha256: "cd".repeat(32),
            store_dtype: "f32".into(),
            shard: "all".into(),
            n_prompts_total: n,
            complete,
            d_model: d,
            n_layers_model: 4,
            ..Default::default()
        },
        layers: vec![1, 3],
        positions: vec!["last".into()],
        rows: (0..n)
            .map(|i| RowMeta {
                case_id: format!("c{i}"),
                family: "TP".into(),
                subtype: if i % 2 == 0 { Some("P1".into()) } else { None },
                channel: "chat".into(),
                condition: "benign".into(),
                n_tokens: 10 + i,
                last_index: 9 + i,
            })
            .collect(),
        prompt_index: (0..n as u64).collect(),
        position_index: vec![(0..n as u32).map(|i| 9 + i).collect()],
        data: vec![
            Array2::from_shape_fn((n, d), |(i, j)| (i * 10 + j) as f32),
            Array2::from_shape_fn((n, d), |(i, j)| -((i * 10 + j) as f32)),
        ],
    }
}

#[test]
fn writer_round_trips_and_is_deterministic() {
    let tmp = tempfile::tempdir().unwrap();
    let (a, b) = (tmp.path().join("a.h5"), tmp.path().join("b.h5"));
    activations::write_atomic(&a, &contents(4, true)).unwrap();
    std::thread::sleep(std::time::Duration::from_millis(1100));
    activations::write_atomic(&b, &contents(4, true)).unwrap();
    assert_eq!(std::fs::read(&a).unwrap(), std::fs::read(&b).unwrap(), "same contents, same bytes (no timestamps)");
    let f = ActivationFile::open(&a).unwrap();
    assert_eq!(f.rows, contents(4, true).rows);
    assert_eq!(f.read(3, "last").unwrap(), contents(4, true).data[1]);
    assert!(f.read(2, "last").is_err());
    assert!(f.read(1, "nope").is_err());
    // An empty checkpoint is readable too.
    activations::write_atomic(&a, &contents(0, false)).unwrap();
    let f = ActivationFile::open(&a).unwrap();
    assert_eq!(f.rows.len(), 0);
    assert!(!f.attrs.complete);
    assert_eq!(f.read(1, "last").unwrap().dim(), (0, 5));
    assert!(!tmp.path().join("a.h5.tmp").exists());
    // Not an activation file.
    std::fs::write(&b, "junk").unwrap();
    assert!(ActivationFile::open(&b).is_err());
}
