//! The N-body CPU reference: a circular two-body orbit closes at second order, a Plummer
//! sphere's energy error stays bounded and scales as dt², momentum holds to round-off,
//! and the presets sample what they claim (N-body units, virial equilibrium).

use keisan::solvers::nbody::diagnostics::Measures;
mod common;

use keisan::solvers::nbody::{Gravity, Particles, cpu, presets};

const NEWTON: Gravity = Gravity {
    g: 1.0,
    softening: 0.0,
};

/// Two bodies of mass ½ on a circular orbit of separation 1: period 2π/√(G·M/d³) = 2π.
fn binary() -> Particles {
    // Each moves on a circle of radius ½ at speed √(G·m_other·r)/d = ½.
    Particles {
        pos: vec![[0.5, 0.0, 0.0], [-0.5, 0.0, 0.0]],
        vel: vec![[0.0, 0.5, 0.0], [0.0, -0.5, 0.0]],
        mass: vec![0.5, 0.5],
    }
}

/// The largest distance of a body from where it started after one period in `steps`.
fn orbit_miss(steps: u64) -> f64 {
    let mut p = binary();
    let start = p.pos.clone();
    let mut acc = cpu::accelerations(&p, NEWTON, false).0;
    cpu::leapfrog(
        &mut p,
        &mut acc,
        NEWTON,
        2.0 * std::f64::consts::PI / steps as f64,
        steps,
    );
    p.pos
        .iter()
        .zip(&start)
        .map(|(a, b)| {
            ((a[0] - b[0]).powi(2) + (a[1] - b[1]).powi(2) + (a[2] - b[2]).powi(2)).sqrt()
        })
        .fold(0.0, f64::max)
}

#[test]
fn a_circular_binary_returns_to_its_start_at_second_order() {
    let (coarse, fine) = (orbit_miss(500), orbit_miss(1000));
    // Leapfrog misses by O(d·(ω·dt)²) after one period: d = 1, ω·dt = 2π/500, so
    // 1.6e-4; twice that allows the constant.
    assert!(
        coarse < 3.2e-4,
        "miss {coarse:e} after one period in 500 steps"
    );
    let order = (coarse / fine).log2();
    assert!((1.9..2.1).contains(&order), "observed order {order}");
}

/// |ΔE/E₀| after every `every` steps of `dt`, and the momentum's largest drift.
fn energy_errors(p: &Particles, grav: Gravity, dt: f64, steps: u64, every: u64) -> (Vec<f64>, f64) {
    let mut p = p.clone();
    let start = Measures::of(&p, grav);
    let mut acc = cpu::accelerations(&p, grav, false).0;
    let (mut errors, mut drift) = (Vec::new(), 0.0f64);
    for _ in 0..steps / every {
        cpu::leapfrog(&mut p, &mut acc, grav, dt, every);
        let m = Measures::of(&p, grav);
        errors.push(m.energy_error(&start));
        for k in 0..3 {
            drift = drift.max((m.momentum[k] - start.momentum[k]).abs());
        }
    }
    (errors, drift)
}

#[test]
fn a_plummer_sphere_conserves_energy_at_second_order_and_momentum_to_round_off() {
    let p = presets::plummer(128, 1.0, presets::PLUMMER_A, 11);
    let grav = Gravity {
        g: 1.0,
        softening: 0.1,
    };
    // One crossing time (2√2 ≈ 181/64) at two step sizes.
    let (coarse, drift) = energy_errors(&p, grav, 1.0 / 64.0, 181, 181);
    let (fine, _) = energy_errors(&p, grav, 1.0 / 128.0, 362, 362);
    let ratio = coarse[0] / fine[0];
    assert!(coarse[0] < 1e-3, "|ΔE/E| {:e}", coarse[0]);
    assert!(
        (3.0..5.5).contains(&ratio),
        "dt halved: error ratio {ratio} (expected ≈ 4)"
    );
    assert!(drift < 1e-13, "momentum drift {drift:e}");
    // Bounded, not secular: over ten crossing times the error of the last five is not
    // larger than that of the first five (a drift would make it about three times).
    let (long, _) = energy_errors(&p, grav, 1.0 / 64.0, 1810, 181);
    let mean = |e: &[f64]| e.iter().sum::<f64>() / e.len() as f64;
    let growth = mean(&long[5..]) / mean(&long[..5]);
    assert!(
        growth < 2.0,
        "errors {long:?}: the second half {growth}× the first"
    );
}

#[test]
fn the_presets_sample_n_body_units_in_equilibrium() {
    let n = 4096;
    let p = presets::plummer(n, 1.0, presets::PLUMMER_A, 3);
    assert_eq!(p.len(), n);
    assert!((p.total_mass() - 1.0).abs() < 1e-12);
    let m = Measures::of(&p, NEWTON);
    // Sampling noise of 4096 particles: a few per cent.
    assert!((m.total + 0.25).abs() < 0.02, "E = {}", m.total);
    assert!(
        (m.virial_ratio - 1.0).abs() < 0.1,
        "2K/|W| = {}",
        m.virial_ratio
    );
    for k in 0..3 {
        assert!(m.momentum[k].abs() < 1e-12);
    }
    // The same seed gives the same particles; another seed others.
    assert_eq!(p, presets::plummer(n, 1.0, presets::PLUMMER_A, 3));
    assert_ne!(p.pos, presets::plummer(n, 1.0, presets::PLUMMER_A, 4).pos);

    let c = presets::cold_sphere(n, 5);
    let m = Measures::of(&c, NEWTON);
    assert_eq!(m.kinetic, 0.0);
    assert!((m.total + 0.25).abs() < 0.01, "cold sphere E = {}", m.total);
    let r = c
        .pos
        .iter()
        .map(|x| (x[0] * x[0] + x[1] * x[1] + x[2] * x[2]).sqrt());
    // Within the radius, up to the centre-of-mass shift (≈ R/√N).
    assert!(r.fold(0.0, f64::max) <= presets::COLD_SPHERE_RADIUS * (1.0 + 2.0 / (n as f64).sqrt()));

    let t = presets::two_plummers(1001, 9, 20.0, 1.0, 0.5);
    assert_eq!(t.len(), 1001);
    let m = Measures::of(&t, NEWTON);
    // Two bound spheres (−1/16 each for mass ½ at the unit-mass scale length), their
    // mutual energy −(½·½)/20 and the relative motion's ½·μ·v² = ½·⅛·¼.
    let expected = -2.0 / 16.0 - 0.25 / 20.0 + 0.5 * 0.125 * 0.25;
    assert!(
        (m.total - expected).abs() < 0.02,
        "E = {} vs {expected}",
        m.total
    );
}

#[test]
fn forces_do_not_depend_on_the_thread_count() {
    let p = presets::plummer(300, 1.0, presets::PLUMMER_A, 1);
    let grav = Gravity {
        g: 1.0,
        softening: 0.01,
    };
    let one = rayon::ThreadPoolBuilder::new()
        .num_threads(1)
        .build()
        .unwrap()
        .install(|| cpu::accelerations(&p, grav, true));
    let many = cpu::accelerations(&p, grav, true);
    assert_eq!(one, many);
}

const HEAD: &str = "solver = \"nbody\"\n[nbody]\n";

#[test]
fn bad_input_names_the_field() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let table = |body: &str| format!("{HEAD}{body}");
    let cases: Vec<(String, Vec<&str>)> = vec![
        (
            table("n = 0\nsoftening = 0.1\ndt = 0.1\nsteps = 3\n"),
            vec!["nbody.n", "at least 1"],
        ),
        (
            table("softening = 0.1\ndt = 0.1\nsteps = 3\n"),
            vec!["nbody.n", "preset needs"],
        ),
        (
            table("n = 8\nsoftening = -1\ndt = 0.1\nsteps = 3\n"),
            vec!["nbody.softening", "≥ 0"],
        ),
        (
            table("n = 8\nsoftening = 0.1\ndt = 0\nsteps = 3\n"),
            vec!["nbody.dt", "> 0"],
        ),
        (
            table("n = 8\nsoftening = 0.1\ndt = 0.1\n"),
            vec!["nbody.steps", "end_time"],
        ),
        (
            table("n = 8\nsoftening = 0.1\ndt = 0.1\nsteps = 3\nend_time = 1.0\n"),
            vec!["nbody.end_time", "not both"],
        ),
        (
            table("n = 8\nsoftening = 0.1\ndt = 0.1\nsteps = 3\ninitial = { preset = \"king\" }\n"),
            vec!["nbody.initial.preset", "plummer"],
        ),
        (
            table("n = 8\nsoftening = 0.1\ndt = 0.1\nsteps = 3\ninitial = { seed = -2 }\n"),
            vec!["nbody.initial.seed"],
        ),
        (
            table("n = 8\nsoftening = 0.1\ndt = 0.1\nsteps = 3\ninitial = { speed = 1.0 }\n"),
            vec!["nbody.initial", "two_plummers"],
        ),
        (
            table("softening = 0.1\ndt = 0.1\nsteps = 3\ninitial = { file = \"none.npy\" }\n"),
            vec!["nbody.initial.file", "none.npy"],
        ),
    ];
    for (toml, needles) in &cases {
        common::refuses(d, toml, needles);
    }
}

#[test]
fn particle_files_are_read_and_checked() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let run = |body: &str| {
        std::fs::write(d.join("p.toml"), format!("{HEAD}{body}")).unwrap();
        std::process::Command::new(common::keisan_bin())
            .current_dir(d)
            .args(["run", "p.toml", "--backend", "cpu", "-q", "--json"])
            .output()
            .unwrap()
    };
    // The circular binary from a CSV with a header line.
    std::fs::write(
        d.join("two.csv"),
        "x,y,z,vx,vy,vz,m\n0.5,0,0,0,0.5,0,0.5\n-0.5,0,0,0,-0.5,0,0.5\n",
    )
    .unwrap();
    let o = run("softening = 0\ndt = 0.01\nsteps = 10\ninitial = { file = \"two.csv\" }\n");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let s: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    // K = 2·½·½·¼ = 0.125, W = −¼: E = −0.125, conserved to O(dt²).
    let e = s["results"]["end"]["total"].as_f64().unwrap();
    assert!((e + 0.125).abs() < 1e-5, "E = {e}");
    // Coincident particles without softening, a negative mass, a short row: refused.
    for (csv, needles) in [
        (
            "0,0,0,0,0,0,1\n0,0,0,1,0,0,1\n",
            vec!["nbody.softening", "same place"],
        ),
        ("0,0,0,0,0,0,-1\n", vec!["nbody.initial.file", "particle 0"]),
        (
            "0,0,0,0,0,1\n",
            vec!["nbody.initial.file", "line 1", "7 numbers"],
        ),
    ] {
        std::fs::write(d.join("bad.csv"), csv).unwrap();
        common::refuses(
            d,
            &format!(
                "{HEAD}softening = 0\ndt = 0.01\nsteps = 3\ninitial = {{ file = \"bad.csv\" }}\n"
            ),
            &needles,
        );
    }
}

/// `keisan run p.toml` in `d` on the CPU into res/, with the JSON summary on stdout.
fn run_into_res(d: &std::path::Path, env: &[(&str, &str)]) -> std::process::Output {
    std::process::Command::new(common::keisan_bin())
        .current_dir(d)
        .args([
            "run",
            "p.toml",
            "--backend",
            "cpu",
            "-q",
            "--out",
            "res",
            "--json",
        ])
        .envs(env.iter().copied())
        .output()
        .unwrap()
}

#[test]
fn a_run_writes_particles_pictures_and_conserved_quantities() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::write(
        d.join("p.toml"),
        format!(
            "{HEAD}n = 200\nsoftening = 0.05\ndt = 0.01\nsteps = 40\n\
             initial = {{ preset = \"plummer\", seed = 4 }}\n[output]\nevery = 20\n"
        ),
    )
    .unwrap();
    let o = run_into_res(d, &[]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    for f in [
        "particles.npy",
        "particles_000020.npy",
        "particles_000040.png",
        "diagnostics.csv",
    ] {
        assert!(d.join("res").join(f).exists(), "{f} missing");
    }
    // An animation of the three snapshots (steps 0, 20, 40).
    let gif = std::fs::read(d.join("res/particles.gif")).unwrap();
    assert!(gif.starts_with(b"GIF89a"));
    assert_eq!(
        gif.windows(2).filter(|w| w == &[0x21, 0xF9]).count(),
        3,
        "3 frames"
    );
    // The point cloud for ParaView: 200 points, the positions of the .npy's rows first.
    let vtp = std::fs::read(d.join("res/particles.vtp")).unwrap();
    let text = String::from_utf8_lossy(&vtp);
    assert!(text.contains("NumberOfPoints=\"200\""));
    assert!(text.contains("Name=\"velocity\" NumberOfComponents=\"3\""));
    let at = vtp.windows(2).position(|w| w == b"\n_").unwrap() + 2;
    let word =
        |k: usize| f64::from_le_bytes(vtp[at + 8 + 8 * k..at + 16 + 8 * k].try_into().unwrap());
    assert_eq!(
        u64::from_le_bytes(vtp[at..at + 8].try_into().unwrap()),
        200 * 3 * 8
    );
    let npy = std::fs::read(d.join("res/particles.npy")).unwrap();
    let data = npy.len() - 200 * 7 * 8;
    let value =
        |k: usize| f64::from_le_bytes(npy[data + 8 * k..data + 8 * k + 8].try_into().unwrap());
    assert_eq!([word(0), word(1), word(2)], [value(0), value(1), value(2)]);
    let pvd = std::fs::read_to_string(d.join("res/particles.pvd")).unwrap();
    assert_eq!(pvd.matches("<DataSet").count(), 3, "{pvd}");
    // A table, not a grid: no VTK image of it.
    assert!(!d.join("res/particles.vti").exists());
    let npy = std::fs::read(d.join("res/particles.npy")).unwrap();
    assert!(String::from_utf8_lossy(&npy[..128]).contains("(200, 7, )"));
    let csv = std::fs::read_to_string(d.join("res/diagnostics.csv")).unwrap();
    assert!(csv.starts_with("step,time,kinetic,potential,total_energy,energy_error,px"));
    let s: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let err = s["results"]["energy_error"].as_f64().unwrap();
    assert!(err < 1e-4, "energy error {err}");
}

/// N-body's particles are a table every rank holds whole: they are never written in
/// pieces. A field "too large to gather" (the test's limit) is still gathered and measured
/// (it used to go the grids' piece path: an image index naming files it never wrote, and a
/// panic in the final measures), and `pieces = "per-rank"` is refused by name.
#[test]
fn particles_are_written_whole_never_in_pieces() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let toml = format!(
        "{HEAD}n = 64\nsoftening = 0.05\ndt = 0.01\nsteps = 4\n\
         initial = {{ preset = \"plummer\", seed = 4 }}\n[output]\nevery = 2\n"
    );
    std::fs::write(d.join("p.toml"), &toml).unwrap();
    let o = run_into_res(d, &[("KEISAN_GATHER_LIMIT_BYTES", "100")]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let s: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert!(s["results"]["energy_error"].as_f64().unwrap() < 1e-3, "{s}");
    assert!(s.get("pieces").is_none(), "{s}");
    for f in ["particles.npy", "particles.vtp", "particles_000002.vtp"] {
        assert!(d.join("res").join(f).is_file(), "{f}");
    }
    let names: Vec<String> = std::fs::read_dir(d.join("res"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert!(
        names
            .iter()
            .all(|n| !n.contains("_r0") && !n.ends_with(".pvti")),
        "{names:?}"
    );
    let fresh = tempfile::tempdir().unwrap();
    common::refuses(
        fresh.path(),
        &format!("{toml}pieces = \"per-rank\"\n"),
        &["output.pieces", "per-rank", "nbody"],
    );
}
