//! Wrong answers never reported as success: a run that went non-finite, stalled, or was
//! asked for numbers the arithmetic cannot carry ends with the right status or exit code,
//! naming the field, on the CPU build (the CUDA engines share the checks: advection_cuda).

mod common;

use common::{keisan_in, write_npy};

const ADVECTION: &str = r#"solver = "advection"
precision = "f32"
[advection]
nx = 32
ny = 32
steps = 40
cfl = 0.5
[advection.velocity]
kind = "uniform"
u = 1.0
v = 0.5
[advection.initial]
preset = "zalesak"
"#;

/// Run `toml` (with `args`) in a fresh folder holding `big.npy` (an f32 field of 32 × 32
/// with a block of 3e38, whose interpolation overflows); the exit code and stderr.
fn run_advection(toml: &str, args: &[&str]) -> (i32, String, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let mut f = vec![0.0f32; 32 * 32];
    for j in 10..16 {
        for i in 10..16 {
            f[j * 32 + i] = 3e38;
        }
    }
    write_npy(&dir.path().join("big.npy"), &[32, 32], &f);
    std::fs::write(dir.path().join("p.toml"), toml).unwrap();
    let mut all = vec!["run", "p.toml", "--backend", "cpu", "-q"];
    all.extend_from_slice(args);
    let o = keisan_in(dir.path(), &all);
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    (o.status.code().unwrap(), err, dir)
}

#[test]
fn advection_that_goes_non_finite_stops_and_writes_nothing() {
    let toml = ADVECTION.replace(
        "preset = \"zalesak\"",
        "preset = \"file\"\npath = \"big.npy\"",
    );
    for extra in [&[][..], &["--subdomains", "2"][..]] {
        let mut args = vec!["--out", "res"];
        args.extend_from_slice(extra);
        let (code, err, dir) = run_advection(&toml, &args);
        assert_eq!(code, 1, "{extra:?}: {err}");
        assert!(err.contains("non-finite"), "{err}");
        let res = dir.path().join("res");
        assert!(
            !res.join("f.npy").exists() && !res.join("summary.json").exists(),
            "outputs of a non-finite run were written"
        );
    }
}

#[test]
fn advection_derived_values_that_overflow_are_refused() {
    for (set, field) in [
        // dt = cfl / rate overflows
        ("advection.velocity.u=1e-320", "advection.cfl"),
        ("advection.velocity.u=1e308", "advection.velocity"),
        (
            "advection.initial={preset=\"sine\",modes=[16,1]}",
            "advection.initial.modes",
        ),
        (
            "advection.initial={preset=\"sine\",modes=[0,1]}",
            "advection.initial.modes",
        ),
    ] {
        let (code, err, _dir) = run_advection(
            &ADVECTION.replace("v = 0.5", "v = 0.0"),
            &["--set", set, "--out", "res"],
        );
        assert_eq!(code, 2, "{set}: {err}");
        assert!(err.contains(field), "{set}: {err}");
    }
}

const PLATES: &str = r#"solver = "electrostatics"
precision = "f64"
[electrostatics]
x = { breakpoints = [0.0, 0.4e-3, 0.7e-3, 1.0e-3], divisions = [8, 12, 6] }
y = { range = [0.0, 0.5e-3], cells = 4 }
z = { range = [0.0, 0.5e-3], cells = 4 }
permittivities = [4.0]
max_iterations = 20000
tolerance = 1e-4
omega = 0.1
[electrostatics.faces]
x_min = 1.0
x_max = 0.0
[[electrostatics.shapes]]
kind = "box"
min = [0.4e-3, 0.0, 0.0]
max = [0.7e-3, 0.5e-3, 0.5e-3]
dielectric = 1
"#;

fn run_json(toml: &str, args: &[&str]) -> (i32, serde_json::Value, String) {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("p.toml"), toml).unwrap();
    let mut all = vec!["run", "p.toml", "--backend", "cpu", "--json"];
    all.extend_from_slice(args);
    let o = keisan_in(dir.path(), &all);
    let json = serde_json::from_slice(&o.stdout).unwrap_or(serde_json::Value::Null);
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    (o.status.code().unwrap(), json, err)
}

/// Under-relaxed SOR meets ‖ΔV‖/‖V‖ ≤ 1e-4 at a true residual of about 4.6e-2: a stall,
/// which must not be called converged. Over-relaxed, the same problem converges.
#[test]
fn a_stalled_sor_is_not_reported_converged() {
    let (code, s, err) = run_json(PLATES, &[]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(s["status"], "stalled", "{s}");
    assert_eq!(s["results"]["converged"], false);
    let r = s["results"]["true_relative_residual"].as_f64().unwrap();
    assert!(r > 100.0 * 1e-4, "the stall's true residual {r}");
    assert!(
        err.contains("NOT CONVERGED") && err.contains("stalled"),
        "{err}"
    );
    assert!(s["warnings"][0].as_str().unwrap().contains("true residual"));

    let (code, s, err) = run_json(PLATES, &["--set", "electrostatics.omega=1.8"]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(s["status"], "converged", "{s}");
    let r = s["results"]["true_relative_residual"].as_f64().unwrap();
    assert!(r <= 100.0 * 1e-4, "{r}");
}

#[test]
fn electrostatics_numerically_meaningless_requests_are_refused() {
    for (set, field) in [
        ("electrostatics.omega=1e-300", "electrostatics.omega"),
        (
            "electrostatics.x={breakpoints=[0.0,0.4e-3,0.400000000001e-3,1e-3],divisions=[8,2,6]}",
            "electrostatics.x",
        ),
        (
            "electrostatics.y={range=[-1e308,1e308],cells=4}",
            "electrostatics.y",
        ),
        (
            "electrostatics.faces.x_min=1e300",
            "electrostatics.faces.x_min",
        ),
        (
            "electrostatics.voltages=[1e200]",
            "electrostatics.voltages[0]",
        ),
    ] {
        let (code, _, err) = run_json(PLATES, &["--set", set]);
        assert_eq!(code, 2, "{set}: {err}");
        assert!(err.contains(field), "{set}: {err}");
    }
}

#[test]
fn nbody_derived_values_that_overflow_are_refused() {
    let toml = "solver = \"nbody\"\n[nbody]\nn = 8\ndt = 0.01\nsteps = 2\nsoftening = 0.01\n\
                initial = { preset = \"plummer\" }\n";
    for (sets, field) in [
        (
            &["nbody.end_time=1e300", "nbody.dt=1e-300"][..],
            "nbody.end_time",
        ),
        (&["nbody.softening=1e300"][..], "nbody.softening"),
        (&["nbody.steps=9223372036854775807"][..], "nbody.steps"),
    ] {
        let mut toml = toml.to_string();
        if sets[0].starts_with("nbody.end_time") {
            toml = toml.replace("steps = 2\n", "");
        }
        let mut args = Vec::new();
        for s in sets {
            args.extend(["--set", s]);
        }
        let (code, _, err) = run_json(&toml, &args);
        assert_eq!(code, 2, "{sets:?}: {err}");
        assert!(err.contains(field), "{sets:?}: {err}");
    }
}

/// A sphere electrode smaller than the spacing between nodes marks none: refused naming
/// the shape, not dropped with V ≡ 0 "converged".
#[test]
fn a_shape_that_marks_no_node_is_refused_by_name() {
    let toml = PLATES
        .replace("omega = 0.1\n", "voltages = [2.0]\n")
        .to_string()
        + "[[electrostatics.shapes]]\nkind = \"sphere\"\ncenter = [0.51e-3, 0.26e-3, 0.26e-3]\n\
           radius = 1e-6\nelectrode = 1\n";
    let (code, _, err) = run_json(&toml, &[]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("electrostatics.shapes[1]") && err.contains("no node"),
        "{err}"
    );
    // Large enough to hold a node, the same sphere is an electrode.
    let (code, s, err) = run_json(&toml.replace("radius = 1e-6", "radius = 6e-5"), &[]);
    assert_eq!(code, 0, "{err}");
    assert!(
        s["results"]["charges"].to_string().contains("electrode 1"),
        "{s}"
    );
}
