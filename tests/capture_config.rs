//! Experiment files: defaults, layer sets, unknown keys with suggestions, value checks.
use std::path::Path;
use trustlens::experiment::{Experiment, LayerSpec};

fn parse(text: &str) -> Result<Experiment, String> {
    Experiment::parse(text, Path::new("x.toml")).map_err(|e| e.to_string())
}

const MIN: &str = "[model]\npath = \"m.gguf\"\n[cases]\nfile = \"c.jsonl\"\n";

#[test]
fn defaults_and_the_demo_file() {
    let e = parse(MIN).unwrap();
    assert_eq!(e.capture.hook, "hook_resid_post");
    assert_eq!(e.capture.positions, vec!["last"]);
    assert_eq!(e.cases.channels, vec!["chat", "tool"]);
    assert_eq!(e.capture.layers.resolve(30).unwrap(), vec![6, 12, 18, 24]);
    assert_eq!(e.capture.layers.resolve(80).unwrap(), vec![16, 32, 48, 64]);
    assert_eq!(e.run_name(Path::new("experiments/foo.toml")), "foo");
    let demo = Experiment::load(&Path::new(env!("CARGO_MANIFEST_DIR")).join("experiments/channel-trust.toml")).unwrap();
    // The demo captures every block; the paper's depths are its patched set.
    assert_eq!(demo.capture.layers.resolve(30).unwrap(), (0..30).collect::<Vec<_>>());
    assert_eq!(demo.patch.sets, vec!["6+12+18+24".to_string()]);
    // The effective config round-trips through TOML.
    assert_eq!(parse(&demo.to_toml()).unwrap(), demo);
}

#[test]
fn layer_lists_and_fractions() {
    assert_eq!(LayerSpec::parse_arg("3,1,3").unwrap().resolve(4).unwrap(), vec![1, 3]);
    assert!(LayerSpec::parse_arg("4").unwrap().resolve(4).unwrap_err().to_string().contains("past the model's depth"));
    assert_eq!(LayerSpec::parse_arg("frac:1.0").unwrap().resolve(30).unwrap(), vec![29]);
    assert!(LayerSpec::parse_arg("frac:0").unwrap().resolve(30).is_err());
    assert!(LayerSpec::parse_arg("a,b").is_err());
    let e = parse(&format!("{MIN}[capture]\nlayers = [6, 12]\n")).unwrap();
    assert_eq!(e.capture.layers, LayerSpec::List(vec![6, 12]));
}

#[test]
fn unknown_keys_name_the_nearest_valid_key() {
    let err = parse(&format!("{MIN}[capture]\nlayrs = [1]\n")).unwrap_err();
    assert!(err.contains("unknown key `layrs` (did you mean `layers`?)") && err.contains("line 6"), "{err}");
    let err = parse("[model]\npath = \"m\"\ndtyp = \"f32\"\n[cases]\nfile = \"c\"\n").unwrap_err();
    assert!(err.contains("did you mean `dtype`"), "{err}");
    let err = parse(&format!("{MIN}[captur]\n")).unwrap_err();
    assert!(err.contains("did you mean `capture`"), "{err}");
    assert!(!err.contains('\n'), "one line: {err}");
}

#[test]
fn bad_values_are_refused() {
    for (extra, needle) in [
        ("[capture]\npositions = [\"lst\"]\n", "did you mean `last`"),
        ("[capture]\nhook = \"hook_resid_pots\"\n", "did you mean `hook_resid_post`"),
        ("[capture]\nbatch_size = 0\n", "batch_size"),
        ("[capture]\nstore = \"f8\"\n", "store"),
        ("[capture]\nrun = \"a/b\"\n", "plain name"),
        ("[capture]\nlayers = \"half\"\n", "frac:"),
    ] {
        let err = parse(&format!("{MIN}{extra}")).unwrap_err();
        assert!(err.contains(needle), "{extra}: {err}");
    }
    let err = parse("[model]\npath = \"m\"\ndtype = \"f64\"\n[cases]\nfile = \"c\"\n").unwrap_err();
    assert!(err.contains("dtype"), "{err}");
    let err = parse("[model]\npath = \"m\"\n[cases]\nfile = \"c\"\nchannels = [\"chatt\"]\n").unwrap_err();
    assert!(err.contains("did you mean `chat`"), "{err}");
}
