//! Messages that say what is wrong and where: each names the option or the field that
//! caused it, with the exit code of a bad request (2) where the request is at fault; and
//! results whose physics is doubtful carry a warning. On the CPU build.

mod common;

use std::process::Command;

use common::{keisan_bin, keisan_in};

const JACOBI: &str = "solver = \"jacobi\"\n[jacobi]\nn = 12\nm = 10\ntolerance = 1e-6\n\
    max_iterations = 50\n";

fn in_folder(files: &[(&str, &str)]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    for (name, text) in files {
        std::fs::write(dir.path().join(name), text).unwrap();
    }
    dir
}

/// `keisan args` in `d`: exit code and stderr.
fn keisan(d: &std::path::Path, args: &[&str]) -> (i32, String) {
    let o = keisan_in(d, args);
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    assert!(!err.contains("panicked"), "{err}");
    (o.status.code().unwrap(), err)
}

#[test]
fn a_bad_request_is_named_and_exits_2() {
    let heat = std::fs::read_to_string("examples/heat-2d.toml").unwrap();
    let plates = std::fs::read_to_string("examples/electrostatics-plates.toml").unwrap();
    let dir = in_folder(&[("j.toml", JACOBI), ("h.toml", &heat), ("e.toml", &plates)]);
    let d = dir.path();
    let cpu = ["--backend", "cpu", "-q"];
    for (args, needles) in [
        // A malformed device list, before any device is looked for.
        (
            vec!["run", "j.toml", "--devices", "0,,x"],
            vec!["--devices", "ordinals"],
        ),
        // An unclosed inline table is not taken as a string.
        (
            [&["run", "j.toml", "--set", "jacobi={n="][..], &cpu[..]].concat(),
            vec!["--set jacobi={n=", "not a TOML value"],
        ),
        // The --set that reached into a table is blamed, not the file's line.
        (
            [
                &["run", "h.toml", "--set", "heat.initial.bogus=1"][..],
                &cpu[..],
            ]
            .concat(),
            vec!["--set heat.initial.bogus", "unknown field"],
        ),
        // The accepted values, not "no variant of untagged enum".
        (
            [
                &["run", "e.toml", "--set", "electrostatics.omega=\"fast\""][..],
                &cpu[..],
            ]
            .concat(),
            vec!["electrostatics.omega", "\"auto\"", "relaxation factor"],
        ),
        (
            [
                &[
                    "run",
                    "e.toml",
                    "--set",
                    "electrostatics.faces.x_min=\"open\"",
                ][..],
                &cpu[..],
            ]
            .concat(),
            vec!["x_min", "\"zero_field\"", "voltage"],
        ),
    ] {
        let (code, err) = keisan(d, &args);
        assert_eq!(code, 2, "{args:?}: {err}");
        assert!(!err.contains("untagged"), "{args:?}: {err}");
        for n in needles {
            assert!(err.contains(n), "{args:?}: no {n:?} in {err}");
        }
    }
}

#[test]
fn a_dangling_link_as_the_output_folder_is_named() {
    let dir = in_folder(&[("j.toml", JACOBI)]);
    let d = dir.path();
    std::os::unix::fs::symlink(d.join("nowhere/at/all"), d.join("res")).unwrap();
    let (code, err) = keisan(
        d,
        &["run", "j.toml", "--backend", "cpu", "-q", "--out", "res"],
    );
    assert_ne!(code, 0);
    assert!(
        err.contains("symbolic link") && err.contains("does not exist"),
        "{err}"
    );
    assert!(!err.contains("File exists"), "{err}");
}

#[test]
fn a_title_is_printed_with_its_control_characters_escaped() {
    let toml = format!("title = \"red \\u001b[31m alert\"\n{JACOBI}");
    let dir = in_folder(&[("j.toml", &toml)]);
    let o = Command::new(keisan_bin())
        .current_dir(dir.path())
        .args(["run", "j.toml", "--backend", "cpu"])
        .output()
        .unwrap();
    let all = [o.stdout, o.stderr].concat();
    assert!(o.status.success());
    assert!(!all.contains(&0x1b), "a raw escape reached the terminal");
    assert!(String::from_utf8_lossy(&all).contains("red \\u{1b}[31m alert"));
}

#[test]
fn out_of_core_heat_on_the_cpu_speaks_of_its_workspace_and_models() {
    let heat = std::fs::read_to_string("examples/heat-2d.toml").unwrap();
    let dir = in_folder(&[("h.toml", &heat)]);
    let d = dir.path();
    let small = ["--set", "heat.shape=[64,64]", "--set", "heat.steps=20"];
    let (code, err) = keisan(
        d,
        &[
            &[
                "run",
                "h.toml",
                "--backend",
                "cpu",
                "--set",
                "heat.strategy=\"pyramid\"",
            ][..],
            &small[..],
        ]
        .concat(),
    );
    assert_eq!(code, 0, "{err}");
    assert!(err.contains("box workspace"), "{err}");
    assert!(!err.contains("device budget") && !err.contains("pinned") && !err.contains("staged"));
    // The model sweeps heights on the CPU instead of blaming a device's free memory.
    let (code, err) = keisan(
        d,
        &[
            &[
                "model",
                "heat",
                "h.toml",
                "--backend",
                "cpu",
                "--heights",
                "1,2",
            ][..],
            &small[..],
        ]
        .concat(),
    );
    assert_eq!(code, 0, "{err}");
    assert!(!err.contains("free memory"), "{err}");
}

#[test]
fn an_nbody_run_whose_energy_is_lost_is_warned_of_and_recorded() {
    let plummer = std::fs::read_to_string("examples/nbody-plummer.toml").unwrap();
    let dir = in_folder(&[("n.toml", &plummer)]);
    let d = dir.path();
    let coarse = [
        "run",
        "n.toml",
        "--backend",
        "cpu",
        "--out",
        "res",
        "--set",
        "nbody.n=200",
        "--set",
        "nbody.softening=0.0",
        "--set",
        "nbody.dt=0.5",
        "--set",
        "nbody.end_time=20",
    ];
    let (code, err) = keisan(d, &coarse);
    assert_eq!(code, 0, "{err}");
    assert!(err.contains("WARNING") && err.contains("nbody.dt"), "{err}");
    let s: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(d.join("res/summary.json")).unwrap())
            .unwrap();
    assert!(
        s["warnings"][0].as_str().unwrap().contains("energy"),
        "{}",
        s["warnings"]
    );
    // A well-resolved run is not warned of.
    let (code, err) = keisan(
        d,
        &[
            "run",
            "n.toml",
            "--backend",
            "cpu",
            "--set",
            "nbody.n=200",
            "--set",
            "nbody.end_time=0.5",
        ],
    );
    assert_eq!(code, 0, "{err}");
    assert!(!err.contains("WARNING"), "{err}");
}

#[test]
fn nbody_presets_are_in_equilibrium_for_any_g() {
    let plummer = std::fs::read_to_string("examples/nbody-plummer.toml").unwrap();
    let dir = in_folder(&[("n.toml", &plummer)]);
    let d = dir.path();
    let start = |g: &str| -> serde_json::Value {
        let out = format!("g{g}");
        let set = format!("nbody.g={g}");
        let args = [
            "run",
            "n.toml",
            "--backend",
            "cpu",
            "-q",
            "--out",
            &out,
            "--set",
            "nbody.n=2000",
            "--set",
            &set,
            "--set",
            "nbody.end_time=0.005",
        ];
        let (code, err) = keisan(d, &args);
        assert_eq!(code, 0, "{err}");
        let s: serde_json::Value = serde_json::from_str(
            &std::fs::read_to_string(d.join(&out).join("summary.json")).unwrap(),
        )
        .unwrap();
        s["results"]["start"].clone()
    };
    let (one, other) = (start("1.0"), start("1.5"));
    let q = |s: &serde_json::Value| s["virial_ratio"].as_f64().unwrap();
    assert!((q(&one) - 1.0).abs() < 0.05, "{one}");
    assert!((q(&other) - q(&one)).abs() < 1e-9, "{one} vs {other}");
    // The same system with energies G times larger.
    let e = |s: &serde_json::Value| s["total"].as_f64().unwrap();
    assert!((e(&other) / e(&one) - 1.5).abs() < 1e-9);
}

#[test]
fn advection_mass_drift_is_relative_to_the_fields_total_size() {
    let toml = "solver = \"advection\"\n[advection]\nnx = 32\nny = 32\nsteps = 8\ncfl = 0.5\n\
        velocity = { kind = \"rotation\" }\ninitial = { preset = \"sine\", modes = [1, 1] }\n";
    let dir = in_folder(&[("a.toml", toml)]);
    let d = dir.path();
    let (code, err) = keisan(
        d,
        &["run", "a.toml", "--backend", "cpu", "-q", "--out", "res"],
    );
    assert_eq!(code, 0, "{err}");
    let s: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(d.join("res/summary.json")).unwrap())
            .unwrap();
    // A sine mode's mass is 0 up to rounding: its drift against Σ|f| stays small (against
    // the mass, itself near 0, it was enormous).
    let drift = s["results"]["mass_drift"].as_f64().unwrap();
    assert!(drift.abs() < 1e-2, "{}", s["results"]);
    let (code, err) = keisan(d, &["run", "a.toml", "--backend", "cpu"]);
    assert_eq!(code, 0);
    assert!(err.contains("of the initial Σ|f|"), "{err}");
}

#[test]
fn the_zalesak_disk_is_zalesaks() {
    let toml = "solver = \"advection\"\nprecision = \"f64\"\n[advection]\nnx = 200\nny = 200\n\
        steps = 1\ncfl = 0.01\nvelocity = { kind = \"rotation\" }\n\
        initial = { preset = \"zalesak\" }\n";
    let dir = in_folder(&[("z.toml", toml)]);
    let d = dir.path();
    let (code, err) = keisan(
        d,
        &[
            "run",
            "z.toml",
            "--backend",
            "cpu",
            "-q",
            "--out",
            "res",
            "--set",
            "output.every=1",
        ],
    );
    assert_eq!(code, 0, "{err}");
    let bytes = std::fs::read(d.join("res/f_000000.npy")).unwrap();
    let f = npy_f64(&bytes);
    // The column through the slot's middle (x = 0.5) from the disk's bottom (y = 0.6) to
    // its top (0.9): 0 in the slot up to y = 0.85, 1 in the bridge above it.
    let n = 200;
    let column: Vec<f64> = (0..n).map(|j| f[j * n + n / 2]).collect();
    let ones: Vec<usize> = (0..n).filter(|&j| column[j] == 1.0).collect();
    let h = 1.0 / n as f64;
    let bridge = ones.len() as f64 * h;
    assert!((bridge - 0.05).abs() <= 1.5 * h, "bridge {bridge}");
    let lowest = *ones.first().unwrap() as f64 * h;
    assert!((lowest - 0.85).abs() <= 1.5 * h, "slot top {lowest}");
}

/// The f64 values of a C-order .npy file.
fn npy_f64(bytes: &[u8]) -> Vec<f64> {
    let header = u16::from_le_bytes([bytes[8], bytes[9]]) as usize;
    bytes[10 + header..]
        .chunks_exact(8)
        .map(|c| f64::from_le_bytes(c.try_into().unwrap()))
        .collect()
}
