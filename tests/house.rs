//! Checks that keep the house clean, grep-level: every `KEISAN_*` variable the code reads
//! is listed in docs/TUNING.md and every listed one is read; README.md and
//! docs/PERFORMANCE.md stay within their lengths.

use std::collections::BTreeSet;
use std::path::Path;

/// Names in src/ of the `KEISAN_*` form that are not environment variables: an NVRTC
/// define, and the tuning module's own unit-test variables.
fn not_a_knob(name: &str) -> bool {
    name == "KEISAN_ONLY" || name.starts_with("KEISAN_TEST_TUNING_")
}

/// Every `"KEISAN_…"` string literal under `dir`.
fn literals(dir: &Path, found: &mut BTreeSet<String>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            literals(&p, found);
        } else if p.extension().is_some_and(|x| x == "rs") {
            let text = std::fs::read_to_string(&p).unwrap();
            for part in text.split("\"KEISAN_").skip(1) {
                let name: String = part
                    .chars()
                    .take_while(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || *c == '_')
                    .collect();
                if part[name.len()..].starts_with('"') {
                    found.insert(format!("KEISAN_{name}"));
                }
            }
        }
    }
}

#[test]
fn every_tuning_knob_is_listed() {
    let mut code = BTreeSet::new();
    literals(Path::new("src"), &mut code);
    code.retain(|n| !not_a_knob(n));
    let doc = std::fs::read_to_string("docs/TUNING.md").unwrap();
    let listed: BTreeSet<String> = doc
        .lines()
        .filter_map(|l| l.strip_prefix("| `KEISAN_"))
        .map(|l| format!("KEISAN_{}", l.split('`').next().unwrap()))
        .collect();
    let unlisted: Vec<_> = code.difference(&listed).collect();
    let stale: Vec<_> = listed.difference(&code).collect();
    assert!(
        unlisted.is_empty() && stale.is_empty(),
        "read but not in docs/TUNING.md: {unlisted:?}; listed but not read: {stale:?}"
    );
}

#[test]
fn readme_and_performance_stay_short() {
    for (file, most) in [("README.md", 250), ("docs/PERFORMANCE.md", 400)] {
        let lines = std::fs::read_to_string(file).unwrap().lines().count();
        assert!(lines <= most, "{file}: {lines} lines, at most {most}");
    }
}
