//! Electrostatics on the CPU: parallel plates with dielectric layers in series (exact on
//! uniform and nonuniform meshes), the concentric-sphere capacitance under refinement,
//! thread-count independence, and bad input.

mod common;

use std::path::Path;
use std::process::Command;

use common::keisan_bin;

const EPS0: f64 = 8.854_187_812_8e-12;

fn run(dir: &Path, file: &str, args: &[&str]) -> serde_json::Value {
    let o = Command::new(keisan_bin())
        .current_dir(dir)
        .args(["run", file, "--backend", "cpu", "-q", "--json"])
        .args(args)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    serde_json::from_slice(&o.stdout).unwrap()
}

fn example(name: &str) -> String {
    std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("examples")
            .join(name),
    )
    .unwrap()
}

/// Runs a parallel-plate problem (plates at x = 0, 1 V, and x = 1 mm, 0 V; the y and z
/// faces zero normal field) and checks it against the exact discrete solution: a constant
/// flux εf·ΔV/Δ through every x face, εf the mean of the two nodes' εr, so V is piecewise
/// linear through the layers in series; and the plates' charges by Gauss's law. `x`: the
/// mesh's x nodes, `eps`: εr at a node's x.
fn assert_plates_exact(d: &Path, toml: &str, x: &[f64], eps: impl Fn(f64) -> f64) {
    std::fs::write(d.join("p.toml"), toml).unwrap();
    let s = run(
        d,
        "p.toml",
        &["--out", "res", "--set", "electrostatics.tolerance=1e-15"],
    );
    assert_eq!(s["status"], "converged", "{s}");
    let resistance: Vec<f64> = x
        .windows(2)
        .map(|w| (w[1] - w[0]) / ((eps(w[0]) + eps(w[1])) / 2.0))
        .collect();
    let total: f64 = resistance.iter().sum();
    let mut exact = vec![1.0];
    for r in &resistance {
        exact.push(exact.last().unwrap() - r / total);
    }
    let v: Vec<f64> = npyz::NpyFile::new(std::fs::File::open(d.join("res/V.npy")).unwrap())
        .unwrap()
        .into_vec()
        .unwrap();
    assert_eq!(v.len(), 5 * 5 * x.len());
    for (n, got) in v.iter().enumerate() {
        let want = exact[n % x.len()];
        assert!((got - want).abs() < 1e-12, "node {n}: {got} vs {want}");
    }
    // Gauss's law on the plates: Q = ε0·A·ΔV/Σ(Δ/εf), equal and opposite.
    let q = &s["results"]["charges"];
    let area = 0.5e-3 * 0.5e-3;
    let c = EPS0 * area / total;
    let (q1, q2) = (
        q[0]["charge_c"].as_f64().unwrap(),
        q[1]["charge_c"].as_f64().unwrap(),
    );
    assert!((q1 - c).abs() < 1e-10 * c, "{q1} vs {c}");
    assert!((q2 + c).abs() < 1e-10 * c, "{q2} vs {}", -c);
}

/// The x nodes of examples/electrostatics-plates.toml: 8, 12 and 6 cells on its three
/// segments.
fn plates_x() -> Vec<f64> {
    let mut x = vec![0.0];
    for (a, b, n) in [(0.0, 0.4e-3, 8), (0.4e-3, 0.7e-3, 12), (0.7e-3, 1.0e-3, 6)] {
        for c in 1..=n {
            x.push(if c == n {
                b
            } else {
                a + (b - a) * c as f64 / n as f64
            });
        }
    }
    x
}

/// εr 4 in [0.4, 0.7] mm, 1 outside (the example's slab); a node on an interface takes the
/// slab's εr (its box is closed).
fn slab_eps(xv: f64) -> f64 {
    if (0.4e-3 - 1e-15..=0.7e-3 + 1e-15).contains(&xv) {
        4.0
    } else {
        1.0
    }
}

#[test]
fn parallel_plates_with_a_dielectric_slab_are_exact_on_a_nonuniform_mesh() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let x = plates_x();
    assert_eq!(x.len(), 27);
    assert_plates_exact(d, &example("electrostatics-plates.toml"), &x, slab_eps);
    for f in [
        "V.vtr",
        "E.vtr",
        "E.npy",
        "geometry.vtr",
        "electrode_id.npy",
        "charges.csv",
        "V.png",
        "E_magnitude.png",
    ] {
        assert!(d.join("res").join(f).exists(), "{f}");
    }
    // The geometry's first array is the electrode ids, a byte per node as in the .npy.
    let vtr = std::fs::read(d.join("res/geometry.vtr")).unwrap();
    let head = String::from_utf8_lossy(&vtr[..600]);
    assert!(
        head.contains("type=\"UInt8\" Name=\"electrode_id\""),
        "{head}"
    );
    let mark = b"<AppendedData encoding=\"raw\">\n_";
    let at = vtr.windows(mark.len()).position(|w| w == mark).unwrap() + mark.len();
    let n = u64::from_le_bytes(vtr[at..at + 8].try_into().unwrap()) as usize;
    let npy = std::fs::read(d.join("res/electrode_id.npy")).unwrap();
    let header = u16::from_le_bytes([npy[8], npy[9]]) as usize;
    assert_eq!(&vtr[at + 8..at + 8 + n], &npy[10 + header..]);
    assert!(npy[10 + header..].iter().any(|&id| id != 0));
}

/// The table form of the update (`update = "table"`: each stencil's weights made once) is
/// exact on the same plates, and stops at a multiple of its check interval (16 by
/// default), whose residuals alone residuals.csv lists.
#[test]
fn the_table_form_is_exact_on_the_plates_too() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let x = plates_x();
    let toml = example("electrostatics-plates.toml").replace(
        "[electrostatics]\n",
        "[electrostatics]\nupdate = \"table\"\n",
    );
    assert!(toml.contains("update = \"table\""));
    assert_plates_exact(d, &toml, &x, slab_eps);
    let s: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(d.join("res/summary.json")).unwrap())
            .unwrap();
    let steps = s["steps"].as_u64().or(s["iterations"].as_u64()).unwrap();
    assert_eq!(steps % 16, 0, "{s}");
    assert_eq!(s["results"]["check_every"], 16, "{s}");
    let csv = std::fs::read_to_string(d.join("res/residuals.csv")).unwrap();
    let rows: Vec<u64> = csv
        .lines()
        .skip(1)
        .map(|l| l.split(',').next().unwrap().parse().unwrap())
        .collect();
    let want: Vec<u64> = (1..=steps / 16).map(|k| 16 * k).collect();
    assert_eq!(rows, want, "{csv}");
    let last: f64 = csv
        .lines()
        .last()
        .unwrap()
        .split(',')
        .nth(1)
        .unwrap()
        .parse()
        .unwrap();
    assert_eq!(
        s["results"]["relative_residual"].as_f64(),
        Some(last),
        "{s}"
    );
}

/// `check_every = k` in the classic update: the run tests convergence at multiples of k
/// only, so it stops at the first multiple past the iteration whose residual met the
/// tolerance, and still lists every iteration's residual.
#[test]
fn check_every_tests_convergence_at_its_multiples() {
    let toml = example("electrostatics-plates.toml");
    let solve = |every: Option<u64>| {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        std::fs::write(d.join("p.toml"), &toml).unwrap();
        let mut args = vec!["--out".to_string(), "res".into()];
        args.extend(["--set".into(), "electrostatics.tolerance=1e-10".into()]);
        if let Some(k) = every {
            args.extend(["--set".into(), format!("electrostatics.check_every={k}")]);
        }
        let args: Vec<&str> = args.iter().map(|a| a.as_str()).collect();
        let s = run(d, "p.toml", &args);
        assert_eq!(s["status"], "converged", "{s}");
        let csv = std::fs::read_to_string(d.join("res/residuals.csv")).unwrap();
        let r: Vec<f64> = csv
            .lines()
            .skip(1)
            .map(|l| l.split(',').nth(1).unwrap().parse().unwrap())
            .collect();
        (s["iterations"].as_u64().unwrap(), r)
    };
    let (n1, r1) = solve(None);
    assert_eq!(r1.len() as u64, n1);
    for k in [3u64, 8] {
        let (n, r) = solve(Some(k));
        assert_eq!(n, n1.div_ceil(k) * k, "every {k}: {n} against {n1}");
        // The same iterations, so the same residuals up to where the default stopped.
        assert_eq!(r.len() as u64, n);
        assert_eq!(r[..n1 as usize], r1[..], "every {k}");
    }
}

#[test]
fn parallel_plates_with_dielectric_layers_in_series_are_exact_on_a_uniform_mesh() {
    // 20 cells of 0.05 mm: the interfaces at 0.4, 0.7 and 0.9 mm are nodes. A second layer
    // (εr 2.5 in [0.7, 0.9] mm) is given after the slab, so the node at 0.7 mm is its.
    let toml = example("electrostatics-plates.toml")
        .replace(
            "x = { breakpoints = [0.0, 0.4e-3, 0.7e-3, 1.0e-3], divisions = [8, 12, 6] }",
            "x = { range = [0.0, 1.0e-3], cells = 20 }",
        )
        .replace("permittivities = [4.0]", "permittivities = [4.0, 2.5]")
        + "[[electrostatics.shapes]]\nkind = \"box\"\nmin = [0.7e-3, 0.0, 0.0]\n\
           max = [0.9e-3, 0.5e-3, 0.5e-3]\ndielectric = 2\n";
    assert!(toml.contains("cells = 20") && toml.contains("[4.0, 2.5]"));
    let x: Vec<f64> = (0..=20).map(|c| 1.0e-3 * c as f64 / 20.0).collect();
    let eps = |xv: f64| {
        if (0.7e-3 - 1e-15..=0.9e-3 + 1e-15).contains(&xv) {
            2.5
        } else {
            slab_eps(xv)
        }
    };
    let dir = tempfile::tempdir().unwrap();
    assert_plates_exact(dir.path(), &toml, &x, eps);
}

#[test]
fn concentric_sphere_capacitance_converges_under_refinement() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::write(d.join("s.toml"), example("electrostatics-spheres.toml")).unwrap();
    let exact = 4.0 * std::f64::consts::PI * EPS0 * 0.4 * 0.8 / (0.8 - 0.4);
    let error = |cells: u32| {
        let c = cells.to_string();
        let set = |a: &str| format!("electrostatics.{a}.cells={c}");
        let (sx, sy, sz) = (set("x"), set("y"), set("z"));
        let s = run(
            d,
            "s.toml",
            &[
                "--set",
                &sx,
                "--set",
                &sy,
                "--set",
                &sz,
                "--set",
                "electrostatics.capacitance=true",
            ],
        );
        let c11 = s["results"]["capacitance_f"][0][0].as_f64().unwrap();
        let c12 = s["results"]["capacitance_f"][0][1].as_f64().unwrap();
        // The inner sphere's charge at 1 V, and the matrix's symmetry.
        let c21 = s["results"]["capacitance_f"][1][0].as_f64().unwrap();
        assert!((c12 - c21).abs() < 1e-3 * c11, "C12 {c12} vs C21 {c21}");
        (c11 - exact) / exact
    };
    // Observed (docs/VALIDATION.md): −15.7 % at 24 cells, −6.9 % at 48, −6.2 % at 64; the
    // staircase spheres converge at first order.
    let (coarse, fine) = (error(24), error(48));
    assert!(fine.abs() < 0.08, "48 cells: {fine}");
    assert!(fine.abs() < coarse.abs() / 2.0, "24: {coarse}, 48: {fine}");
}

/// The concentric-sphere example at 16 cells an axis, run in `d` on the CPU with `args`
/// more (its capacitance matrix on): the JSON summary and the human one (stderr).
fn spheres_at_16(d: &Path, args: &[&str]) -> (serde_json::Value, String) {
    std::fs::write(d.join("s.toml"), example("electrostatics-spheres.toml")).unwrap();
    let o = Command::new(keisan_bin())
        .current_dir(d)
        .args(["run", "s.toml", "--backend", "cpu", "--json"])
        .args([
            "--set",
            "electrostatics.x.cells=16",
            "--set",
            "electrostatics.y.cells=16",
        ])
        .args(["--set", "electrostatics.z.cells=16"])
        .args(args)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    assert!(o.status.success(), "{err}");
    (serde_json::from_slice(&o.stdout).unwrap(), err)
}

/// The run's human summary (stderr) shows the charges and the capacitance matrix, the
/// same numbers as the JSON to the printed digits.
#[test]
fn the_summary_prints_the_charges_and_the_capacitance_matrix() {
    let dir = tempfile::tempdir().unwrap();
    let (s, err) = spheres_at_16(dir.path(), &[]);
    let line = |label: &str| common::summary_line(&err, label);
    // The printed numbers: 7 significant digits of the JSON's.
    let close = |printed: &str, exact: f64| {
        let v: f64 = printed.trim().parse().unwrap();
        assert!(
            (v - exact).abs() <= 1e-6 * exact.abs(),
            "{printed} against {exact}: {err}"
        );
    };
    let r = &s["results"];
    let q1 = r["charges"][0]["charge_c"].as_f64().unwrap();
    let charge = line("charges");
    assert!(charge.starts_with("electrode 1 at 1 V: "), "{err}");
    close(
        charge
            .trim_start_matches("electrode 1 at 1 V: ")
            .trim_end_matches(" C"),
        q1,
    );
    assert!(
        line("capacitance").ends_with("electrode 1, electrode 2"),
        "{err}"
    );
    let at = err.find("\n  capacitance").unwrap();
    let rows: Vec<&str> = err[at + 1..].lines().skip(1).take(2).collect();
    for (i, row) in rows.iter().enumerate() {
        let values: Vec<&str> = row.split_whitespace().collect();
        assert_eq!(values.len(), 2, "{err}");
        for (j, v) in values.iter().enumerate() {
            close(v, r["capacitance_f"][i][j].as_f64().unwrap());
        }
    }
    let true_residual = line("true residual");
    close(
        true_residual.split(' ').next().unwrap(),
        r["true_relative_residual"].as_f64().unwrap(),
    );
}

/// Capacitance solves that stop at the iteration limit are reported as such, with the
/// main solve's field and every output still written (they used to fail the run and
/// write nothing).
#[test]
fn unconverged_capacitance_solves_are_reported_and_the_outputs_kept() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let (s, err) = spheres_at_16(
        d,
        &["--out", "res", "--set", "electrostatics.max_iterations=20"],
    );
    let r = &s["results"];
    assert_eq!(s["status"], "iteration_limit");
    assert_eq!(r["capacitance_converged"], false);
    let short = r["capacitance_short_solves"].as_array().unwrap();
    assert_eq!(short.len(), 2, "{r}");
    for (solve, name) in short.iter().zip(["electrode 1", "electrode 2"]) {
        assert_eq!(solve["electrode"], name);
        assert_eq!(solve["iterations"], 20);
        assert_eq!(solve["status"], "iteration_limit");
        assert!(solve["residual"].as_f64().unwrap() > 1e-10, "{solve}");
    }
    assert!(r["capacitance_f"][0][0].as_f64().unwrap() > 0.0);
    for f in [
        "V.npy",
        "E.vtr",
        "charges.csv",
        "capacitance.csv",
        "summary.json",
    ] {
        assert!(d.join("res").join(f).is_file(), "{f}");
    }
    let warning = common::summary_line(&err, "NOT CONVERGED");
    assert!(
        warning.starts_with("the solve with electrode 1 at 1 V did not converge in 20 iterations"),
        "{err}"
    );
    // Converged solves say so.
    let (s, _) = spheres_at_16(d, &[]);
    assert_eq!(s["results"]["capacitance_converged"], true);
    assert!(s["results"].get("capacitance_short_solves").is_none());
}

#[test]
fn the_result_does_not_depend_on_the_thread_count() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::write(d.join("s.toml"), example("electrostatics-spheres.toml")).unwrap();
    let mut files = Vec::new();
    for t in ["1", "2"] {
        let o = Command::new(keisan_bin())
            .current_dir(d)
            .args(["--threads", t, "run", "s.toml", "--backend", "cpu", "-q"])
            .args([
                "--set",
                "electrostatics.max_iterations=40",
                "--set",
                "electrostatics.capacitance=false",
            ])
            .args(["--out", &format!("t{t}")])
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        files.push(std::fs::read(d.join(format!("t{t}/V.npy"))).unwrap());
    }
    assert!(files[0] == files[1]);
}

fn rejects(body: &str, needles: &[&str]) {
    let dir = tempfile::tempdir().unwrap();
    // A body that gives its own x axis (first line) replaces the default one.
    let x = if body.starts_with("x = ") {
        ""
    } else {
        "x = { range = [0.0, 1.0], cells = 8 }\n"
    };
    let toml = format!(
        "solver = \"electrostatics\"\n[electrostatics]\n{x}\
         y = {{ range = [0.0, 1.0], cells = 8 }}\nz = {{ range = [0.0, 1.0], cells = 8 }}\n\
         max_iterations = 10\n{body}"
    );
    common::refuses(dir.path(), &toml, needles);
}

const SPHERE: &str =
    "[[electrostatics.shapes]]\nkind = \"sphere\"\ncenter = [0.5, 0.5, 0.5]\nradius = 0.2\n";

#[test]
fn bad_input_names_the_shape_and_field() {
    // The table form: not an unknown word.
    rejects("update = \"fast\"\n", &["update", "fast"]);
    for k in ["0", "-3", "2000000"] {
        rejects(
            &format!("check_every = {k}\nvoltages = [1.0]\n{SPHERE}electrode = 1\n"),
            &[
                &format!("electrostatics.check_every = {k}"),
                "convergence tests",
            ],
        );
    }
    rejects(
        &format!("{SPHERE}electrode = 1\n"),
        &["electrostatics.shapes[0].electrode = 1", "voltages"],
    );
    rejects(
        &format!(
            "voltages = [1.0]\n{}electrode = 1\n",
            SPHERE.replace("radius = 0.2", "radius = 0.7")
        ),
        &["electrostatics.shapes[0]", "outside the box"],
    );
    rejects(
        &format!("voltages = [1.0]\npermittivities = [0.0]\n{SPHERE}electrode = 1\n"),
        &["electrostatics.permittivities[0] = 0", "(0, 1e6]"],
    );
    rejects(
        &format!("voltages = [1.0]\nomega = 2.0\n{SPHERE}electrode = 1\n"),
        &["electrostatics.omega = 2", "[0.1, 2)"],
    );
    rejects("", &["nothing to solve"]);
    rejects(
        &format!(
            "x = {{ breakpoints = [0.0, 0.6, 0.5, 1.0], divisions = [2, 2, 2] }}\n\
             voltages = [1.0]\n{SPHERE}electrode = 1\n"
        ),
        &["electrostatics.x.breakpoints", "strictly increasing"],
    );
    rejects(
        &format!(
            "x = {{ range = [0.0, 1.0], cells = 1 }}\nvoltages = [1.0]\n{SPHERE}electrode = 1\n"
        ),
        &["electrostatics.x", "at least 3 nodes"],
    );
    rejects(
        &format!("charge_density = 1e-6\n{SPHERE}dielectric = 0\n"),
        &["electrostatics.faces", "not determined"],
    );
    rejects(
        &format!("voltages = [1.0]\n{SPHERE}electrode = 1\ndielectric = 0\n"),
        &["exactly one of electrode = k or dielectric = k"],
    );
}

/// Solve `toml` on the CPU in f64 with the library API; V and the iterations.
fn solve_cpu(
    toml: &str,
) -> (
    keisan::solvers::electrostatics::ElectrostaticsProblem,
    Vec<f64>,
) {
    use keisan::solvers::electrostatics::{ElectrostaticsProblem, Geometry, cpu};
    let problem = keisan::problem::parse(toml, "test", None, &Default::default()).unwrap();
    let p = problem.spec_as::<ElectrostaticsProblem>().unwrap().clone();
    let g = Geometry::build(&p).unwrap();
    let mut e = cpu::CpuElectrostatics::<f64>::new(&p, g, None).unwrap();
    let out = keisan::run::drive(
        &mut e,
        p.max_iterations,
        &keisan::run::progress_bar(0, true),
    )
    .unwrap();
    assert_eq!(out.status, keisan::run::Status::Converged, "{toml}");
    use keisan::run::Engine;
    (p, e.snapshot().unwrap().data)
}

#[test]
fn a_manufactured_solution_converges_at_second_order_on_a_nonuniform_mesh() {
    // V = sin(πx)·sin(πy)·sin(πz) on the unit cube, every face grounded, with the charge
    // ρ = 3π²ε0·V given per node from a .npy; the mesh is split at 0.3 with unequal
    // spacings on each side (the truncation error is first order at the kink nodes, the
    // global error second order).
    use std::f64::consts::PI;
    let dir = tempfile::tempdir().unwrap();
    let exact = |x: f64, y: f64, z: f64| (PI * x).sin() * (PI * y).sin() * (PI * z).sin();
    let error = |n: usize| {
        let axis = format!(
            "{{ breakpoints = [0.0, 0.3, 1.0], divisions = [{n}, {}] }}",
            n * 3 / 2
        );
        let head = format!(
            "solver = \"electrostatics\"\nprecision = \"f64\"\n[electrostatics]\nx = {axis}\ny = {axis}\nz = {axis}\n\
             tolerance = 1e-13\nmax_iterations = 100000\n"
        );
        let faces = "[electrostatics.faces]\nx_min = 0.0\nx_max = 0.0\ny_min = 0.0\ny_max = 0.0\nz_min = 0.0\nz_max = 0.0\n";
        // The mesh first, then ρ at its nodes.
        let mesh =
            keisan::problem::parse(&format!("{head}{faces}"), "mesh", None, &Default::default())
                .unwrap();
        let p = mesh
            .spec_as::<keisan::solvers::electrostatics::ElectrostaticsProblem>()
            .unwrap();
        let [xs, ys, zs] = &p.nodes;
        let mut rho = Vec::new();
        for &z in zs {
            for &y in ys {
                for &x in xs {
                    rho.push(3.0 * PI * PI * EPS0 * exact(x, y, z));
                }
            }
        }
        let file = dir.path().join(format!("rho{n}.npy"));
        keisan::output::npy::write(&file, &[zs.len(), ys.len(), xs.len()], &rho).unwrap();
        let toml = format!(
            "{head}charge_density = {{ file = \"{}\" }}\n{faces}",
            file.display()
        );
        let (p, v) = solve_cpu(&toml);
        let [xs, ys, zs] = &p.nodes;
        let mut worst: f64 = 0.0;
        for (k, &z) in zs.iter().enumerate() {
            for (j, &y) in ys.iter().enumerate() {
                for (i, &x) in xs.iter().enumerate() {
                    let n = (k * ys.len() + j) * xs.len() + i;
                    worst = worst.max((v[n] - exact(x, y, z)).abs());
                }
            }
        }
        worst
    };
    let e = [error(4), error(8), error(16)];
    let orders = [(e[0] / e[1]).log2(), (e[1] / e[2]).log2()];
    eprintln!("manufactured solution: max errors {e:?}, observed orders {orders:?}");
    // Observed (docs/VALIDATION.md): 7.9e-3, 2.0e-3, … : order 2.0.
    for o in orders {
        assert!(
            (1.8..2.3).contains(&o),
            "max errors {e:?}: orders {orders:?}"
        );
    }
}

#[test]
fn coax_capacitance_per_length_converges_under_refinement() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::write(d.join("c.toml"), example("electrostatics-coax.toml")).unwrap();
    let per_length = 2.0 * std::f64::consts::PI * EPS0 * 2.1 / (1.75f64 / 0.5).ln();
    let error = |cells: u32| {
        let c = cells.to_string();
        let (sx, sy) = (
            format!("electrostatics.x.cells={c}"),
            format!("electrostatics.y.cells={c}"),
        );
        let s = run(d, "c.toml", &["--set", &sx, "--set", &sy]);
        let q = s["results"]["charges"][0]["charge_c"].as_f64().unwrap();
        // 1 V on the inner conductor, over a line of 1 mm.
        (q / 1e-3 - per_length) / per_length
    };
    // Observed (docs/VALIDATION.md): −9.6 % at 32 cells, −6.0 % at 48, −5.4 % at 64,
    // −4.2 % at 96, −2.9 % at 128; the staircase conductors converge at about first
    // order, not monotonically.
    let (coarse, fine) = (error(32), error(128));
    assert!(fine.abs() < 0.035, "128 cells: {fine}");
    assert!(fine.abs() < coarse.abs() / 2.5, "32: {coarse}, 128: {fine}");
}

#[test]
fn a_random_charge_is_the_same_for_any_thread_count_and_is_reported_with_its_true_residual() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let toml = example("electrostatics-poisson-128.toml");
    std::fs::write(d.join("p.toml"), toml).unwrap();
    let mut files = Vec::new();
    for t in ["1", "2"] {
        let o = Command::new(keisan_bin())
            .current_dir(d)
            .args([
                "--threads",
                t,
                "run",
                "p.toml",
                "--backend",
                "cpu",
                "-q",
                "--json",
            ])
            .args([
                "--set",
                "electrostatics.x.cells=17",
                "--set",
                "electrostatics.y.cells=17",
            ])
            .args(["--set", "electrostatics.z.cells=17"])
            .args(["--out", &format!("t{t}")])
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let s: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        let r = s["results"]["true_relative_residual"].as_f64().unwrap();
        assert!(r > 0.0 && r < 1e-7, "true residual {r}");
        files.push(std::fs::read(d.join(format!("t{t}/V.npy"))).unwrap());
    }
    assert!(files[0] == files[1]);
}

#[test]
fn bad_charge_and_id_files_are_named() {
    // 9 nodes per axis in `rejects`.
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let wrong_shape = d.join("rho-wrong.npy");
    keisan::output::npy::write(&wrong_shape, &[9, 9, 8], &vec![0.0f64; 9 * 9 * 8]).unwrap();
    let ids = d.join("ids.npy");
    let mut id = vec![0u8; 729];
    id[100] = 3;
    keisan::output::npy::write_any(&ids, &[9, 9, 9], &id).unwrap();
    let floats = d.join("floats.npy");
    keisan::output::npy::write(&floats, &[9, 9, 9], &vec![0.0f32; 729]).unwrap();
    let faces = "[electrostatics.faces]\nz_min = 0.0\n";
    for (body, needles) in [
        (
            format!(
                "charge_density = {{ file = \"{}\" }}\n",
                wrong_shape.display()
            ),
            vec![
                "electrostatics.charge_density.file",
                "shape [9, 9, 8]",
                "[9, 9, 9]",
            ],
        ),
        (
            "charge_density = { file = \"missing.npy\" }\n".to_string(),
            vec!["electrostatics.charge_density.file", "missing.npy"],
        ),
        (
            "charge_density = { random = 1e-9, seed = -1 }\n".to_string(),
            vec!["electrostatics.charge_density.seed", "≥ 0"],
        ),
        (
            "charge_density = { random = 1e-9, colour = 1 }\n".to_string(),
            vec!["electrostatics.charge_density", "random = A"],
        ),
        (
            "charge_density = \"lots\"\n".to_string(),
            vec!["electrostatics.charge_density", "give a number"],
        ),
        (
            format!(
                "voltages = [1.0]\nelectrode_ids = \"{}\"\n{faces}",
                ids.display()
            ),
            vec![
                "electrostatics.electrode_ids",
                "names electrode 3",
                "only 1",
            ],
        ),
        (
            format!("dielectric_ids = \"{}\"\n{faces}", floats.display()),
            vec!["electrostatics.dielectric_ids", "uint8"],
        ),
    ] {
        rejects(&body, &needles);
    }
}

/// The mesh lines of `cells` uniform cells along x, y and z.
fn cube(cells: usize) -> [String; 3] {
    ["x", "y", "z"].map(|a| format!("{a} = {{ range = [0.0, 1.0], cells = {cells} }}"))
}

/// A problem in f32 on the mesh `axes` (plates at x = 0 and 1, a dielectric slab), 4
/// iterations, with `extra` lines in its `[electrostatics]` table: its summary and
/// what keisan said.
fn run_large(axes: &[String; 3], extra: &str) -> (serde_json::Value, String) {
    let dir = tempfile::tempdir().unwrap();
    let [x, y, z] = axes;
    let toml = format!(
        "solver = \"electrostatics\"\nprecision = \"f32\"\n[electrostatics]\n{extra}\n\
         {x}\n{y}\n{z}\n\
         permittivities = [4.0]\nmax_iterations = 4\n\
         [electrostatics.faces]\nx_min = 1.0\nx_max = 0.0\n\
         [[electrostatics.shapes]]\nkind = \"box\"\nmin = [0.3, 0.0, 0.0]\n\
         max = [0.6, 1.0, 1.0]\ndielectric = 1\n"
    );
    std::fs::write(dir.path().join("p.toml"), toml).unwrap();
    let o = Command::new(keisan_bin())
        .current_dir(dir.path())
        .args(["run", "p.toml", "--backend", "cpu", "--json"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    assert!(o.status.success(), "{err}");
    (serde_json::from_slice(&o.stdout).unwrap(), err)
}

/// Cells per axis, x, y, z, over the unit cube.
fn mesh(cells: [usize; 3]) -> [String; 3] {
    let mut i = cells.into_iter();
    ["x", "y", "z"].map(|a| {
        let c = i.next().unwrap();
        format!("{a} = {{ range = [0.0, 1.0], cells = {c} }}")
    })
}

/// `update = "auto"` (the default) takes the table form from 2²² nodes (256 × 128 × 128
/// here), where it measured faster, and says so; the classic below that, silently, and
/// where asked.
#[test]
fn auto_takes_the_table_form_on_large_meshes_and_says_so() {
    let (s, err) = run_large(&mesh([255, 127, 127]), "");
    assert_eq!(s["results"]["update"], "table", "{s}");
    assert_eq!(s["results"]["update_chosen"], true, "{s}");
    assert!(
        err.contains("update = \"table\" for this mesh of 256 × 128 × 128 nodes"),
        "{err}"
    );
    assert!(
        s["layout"]["kernel"]
            .as_str()
            .unwrap()
            .contains("table form"),
        "{s}"
    );

    let (s, err) = run_large(&mesh([255, 127, 127]), "update = \"classic\"");
    assert_eq!(s["results"]["update"], "classic", "{s}");
    assert_eq!(s["results"]["update_chosen"], false, "{s}");
    assert!(!err.contains("update ="), "{err}");

    let (s, err) = run_large(&mesh([254, 127, 127]), "");
    assert_eq!(s["results"]["update"], "classic", "{s}");
    assert_eq!(s["results"]["update_chosen"], true, "{s}");
    assert!(!err.contains("update ="), "{err}");
}

/// On a mesh whose spacings differ from node to node along x and y, the stencils are
/// more than a GPU's table holds: "auto" takes the classic update and says why.
#[test]
fn auto_keeps_the_classic_update_where_the_table_would_not_fit() {
    // 255 cells along x and y over [0, 1], of growing widths: every node its own spacings.
    let graded = |a: &str| {
        let b: Vec<String> = (0..=255)
            .map(|i| {
                let at = |i: f64| i + 0.002 * i * i;
                format!("{:.12}", at(i as f64) / at(255.0))
            })
            .collect();
        format!(
            "{a} = {{ breakpoints = [{}], divisions = [{}] }}",
            b.join(", "),
            vec!["1"; 255].join(", ")
        )
    };
    let [_, _, z] = cube(255);
    let (s, err) = run_large(&[graded("x"), graded("y"), z], "");
    assert_eq!(s["results"]["update"], "classic", "{s}");
    assert!(err.contains("update = \"classic\""), "{err}");
    assert!(err.contains("distinct stencils"), "{err}");
}
