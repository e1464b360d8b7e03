//! Decomposed runs under mpirun (cargo feature `mpi`; CI installs Open MPI): 1, 2 and 4
//! ranks on the CPU backend write the same files as one process, bit for bit (residual
//! histories and the stopping iteration included; N-body force sums shared out), restart
//! from a checkpoint of another rank count, and a request no rank can carry out ends
//! every rank with the error instead of hanging.
#![cfg(feature = "mpi")]

mod common;

use std::path::Path;
use std::process::{Command, Output};

const ADVECTION: &str = "solver = \"advection\"\n[advection]\nnx = 40\nny = 31\nsteps = 12\n\
    cfl = 0.9\nvelocity = { kind = \"rotation\" }\ninitial = { preset = \"zalesak\" }\n\
    [output]\nevery = 4\n";
const HEAT: &str = "solver = \"heat\"\n[heat]\nshape = [30, 17, 24]\ndt = 1e-4\nsteps = 9\n\
    initial = { preset = \"hot_box\" }\n[output]\nevery = 3\n";
const HEAT_2D: &str = "solver = \"heat\"\n[heat]\nshape = [41, 33]\ndt = 1e-4\nsteps = 8\n\
    initial = { preset = \"gaussian\", width = 0.2 }\n[output]\nevery = 4\n";

const JACOBI: &str = "solver = \"jacobi\"\n[jacobi]\nn = 30\nm = 23\ntolerance = 1e-6\n\
    max_iterations = 2000\n[output]\nevery = 100\n";

const ELECTROSTATICS: &str = "solver = \"electrostatics\"\n[electrostatics]\n\
    x = { range = [0.0, 1.0], cells = 10 }\ny = { range = [0.0, 1.0], cells = 9 }\n\
    z = { range = [0.0, 1.0], cells = 16 }\nvoltages = [1.0, 0.0]\npermittivities = [4.0]\n\
    tolerance = 1e-8\nmax_iterations = 3000\ncapacitance = true\n\
    [[electrostatics.shapes]]\nkind = \"box\"\nmin = [0.0, 0.0, 0.3]\nmax = [1.0, 1.0, 0.6]\n\
    dielectric = 1\n[[electrostatics.shapes]]\nkind = \"sphere\"\ncenter = [0.5, 0.5, 0.2]\n\
    radius = 0.15\nelectrode = 1\n[[electrostatics.shapes]]\nkind = \"box\"\n\
    min = [0.2, 0.2, 0.8]\nmax = [0.8, 0.8, 0.9]\nelectrode = 2\n";

const NBODY: &str = "solver = \"nbody\"\n[nbody]\nn = 101\nsoftening = 0.05\ndt = 0.01\n\
    steps = 20\ninitial = { preset = \"two_plummers\", separation = 3.0 }\n[output]\nevery = 10\n";

fn mpirun(dir: &Path, ranks: usize, args: &[&str]) -> Output {
    mpirun_with(dir, ranks, &[], args)
}

/// [`mpirun`] with environment variables for every rank.
fn mpirun_with(dir: &Path, ranks: usize, env: &[(&str, &str)], args: &[&str]) -> Output {
    let mut cmd = Command::new("mpirun");
    cmd.current_dir(dir)
        .env("OMPI_ALLOW_RUN_AS_ROOT", "1")
        .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
        .args(["-np", &ranks.to_string(), "--oversubscribe"]);
    for (k, v) in env {
        cmd.env(k, v).args(["-x", k]);
    }
    let o = cmd
        .arg(common::keisan_bin())
        .args(args)
        .output()
        .expect("mpirun (Open MPI) on the PATH");
    assert!(!String::from_utf8_lossy(&o.stderr).contains("panicked"));
    o
}

/// `keisan run file` on `ranks` CPU ranks, quiet, into `out`, with `extra` arguments.
fn on_ranks(dir: &Path, ranks: usize, file: &str, out: &str, extra: &[&str]) -> Output {
    let mut args = vec!["run", file, "--backend", "cpu", "-q", "--out", out];
    args.extend_from_slice(extra);
    mpirun(dir, ranks, &args)
}

fn alone(dir: &Path, args: &[&str]) {
    let o = Command::new(common::keisan_bin())
        .current_dir(dir)
        .args(args)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
}

/// The .npy and .csv files of run folder `a`, each equal in `b`.
fn same_files(dir: &Path, a: &str, b: &str) {
    let mut n = 0;
    for e in std::fs::read_dir(dir.join(a)).unwrap() {
        let name = e.unwrap().file_name().into_string().unwrap();
        if name.ends_with(".npy") || name.ends_with(".csv") {
            let x = std::fs::read(dir.join(a).join(&name)).unwrap();
            let y = std::fs::read(dir.join(b).join(&name))
                .unwrap_or_else(|_| panic!("{b} lacks {name}"));
            assert!(x == y, "{name} differs between {a} and {b}");
            n += 1;
        }
    }
    assert!(n >= 4, "{a} holds only {n} field files");
}

#[test]
fn ranks_write_what_one_process_writes() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let es_table = table_form(ELECTROSTATICS);
    for (name, problem) in [
        ("adv", ADVECTION),
        ("heat", HEAT),
        ("heat2d", HEAT_2D),
        ("jacobi", JACOBI),
        ("es", ELECTROSTATICS),
        ("es-table", es_table.as_str()),
        ("nbody", NBODY),
    ] {
        let file = format!("{name}.toml");
        std::fs::write(d.join(&file), problem).unwrap();
        let one = format!("{name}-alone");
        alone(d, &["run", &file, "--backend", "cpu", "-q", "--out", &one]);
        for ranks in [1, 2, 4] {
            let out = format!("{name}-{ranks}");
            let o = mpirun(d, ranks, &["run", &file, "--backend", "cpu", "--out", &out]);
            assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
            same_files(d, &one, &out);
        }
    }
}

#[test]
fn a_checkpoint_of_one_rank_count_restarts_on_another() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::write(d.join("adv.toml"), ADVECTION).unwrap();
    alone(
        d,
        &[
            "run",
            "adv.toml",
            "--backend",
            "cpu",
            "-q",
            "--out",
            "straight",
        ],
    );
    let o = mpirun(
        d,
        4,
        &[
            "run",
            "adv.toml",
            "--backend",
            "cpu",
            "--out",
            "first",
            "--set",
            "advection.steps=6",
            "--checkpoint-every",
            "6",
        ],
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let o = mpirun(
        d,
        2,
        &[
            "run",
            "adv.toml",
            "--backend",
            "cpu",
            "--out",
            "second",
            "--restart",
            "first/checkpoint.keisan",
        ],
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let read = |run: &str| std::fs::read(d.join(run).join("f.npy")).unwrap();
    assert_eq!(read("straight"), read("second"));
}

#[test]
fn a_request_no_rank_can_take_ends_every_rank() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::write(d.join("adv.toml"), ADVECTION).unwrap();
    // Too many ranks for 31 rows with halos of 2: refused on every rank, none hangs.
    let o = mpirun(
        d,
        20,
        &["run", "adv.toml", "--backend", "cpu", "--out", "x"],
    );
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success());
    // Named by what set the count, once (every rank refuses alike).
    assert!(
        err.contains("rank") && err.contains("mpirun -np = 20"),
        "{err}"
    );
    assert_eq!(err.matches("mpirun -np = 20").count(), 1, "{err}");
    // Per-process placement options are refused under mpirun.
    let o = mpirun(
        d,
        2,
        &[
            "run",
            "adv.toml",
            "--backend",
            "cpu",
            "--out",
            "y",
            "--subdomains",
            "2",
        ],
    );
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("every rank takes one subdomain"));
}

/// The values of an .npy file (its bytes after the header).
fn npy_payload(bytes: &[u8]) -> &[u8] {
    let header = u16::from_le_bytes([bytes[8], bytes[9]]) as usize;
    &bytes[10 + header..]
}

/// The first array of a .vti/.vtr written by keisan (raw appended data).
fn vtk_first_array(bytes: &[u8]) -> &[u8] {
    let mark = b"<AppendedData encoding=\"raw\">\n_";
    let at = bytes
        .windows(mark.len())
        .position(|w| w == mark)
        .expect("appended data")
        + mark.len();
    let n = u64::from_le_bytes(bytes[at..at + 8].try_into().unwrap()) as usize;
    &bytes[at + 8..at + 8 + n]
}

/// The (first, last) rows of the slowest axis and the file of each piece an index lists.
fn index_pieces(text: &str, axis: usize) -> Vec<(usize, usize, String)> {
    text.lines()
        .filter(|l| l.starts_with("<Piece Extent="))
        .map(|l| {
            let ext: Vec<usize> = l
                .split('"')
                .nth(1)
                .unwrap()
                .split(' ')
                .map(|v| v.parse().unwrap())
                .collect();
            let file = l.split('"').nth(3).unwrap().to_string();
            (ext[2 * axis], ext[2 * axis + 1], file)
        })
        .collect()
}

/// Run `name` (a problem file in `d`) alone, gathered, and under `ranks` ranks in pieces:
/// the pieces' .npy files put together are the whole field's, bit for bit, and every
/// VTK piece the index lists holds its rows and shares its last row with the next piece.
/// `name`'s field written in pieces by `ranks` ranks equals one process's, in the .npy
/// pieces and in the VTK pieces the index names. `gathered`: whether the ranks may also
/// gather it for the whole-field measures; if not (a gather limit of 1 byte), each rank
/// builds only its slab's part of the problem.
fn pieces_equal_whole(
    d: &Path,
    name: &str,
    field: &str,
    ranks: usize,
    (index, axis): (&str, usize),
    gathered: bool,
) {
    let file = format!("{name}.toml");
    let whole = format!("{name}-whole");
    alone(
        d,
        &["run", &file, "--backend", "cpu", "-q", "--out", &whole],
    );
    let out = format!("{name}-pieces-{ranks}-{gathered}");
    let env: &[(&str, &str)] = if gathered {
        &[]
    } else {
        &[("KEISAN_GATHER_LIMIT_BYTES", "1")]
    };
    let o = mpirun_with(
        d,
        ranks,
        env,
        &[
            "run",
            &file,
            "--backend",
            "cpu",
            "-q",
            "--out",
            &out,
            "--set",
            "output.pieces=\"per-rank\"",
        ],
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let read = |run: &str, f: &str| {
        std::fs::read(d.join(run).join(f)).unwrap_or_else(|_| panic!("{run}/{f}"))
    };
    assert!(
        !d.join(&out).join(format!("{field}.npy")).exists(),
        "no whole file in pieces"
    );
    let whole_npy = read(&whole, &format!("{field}.npy"));
    let all = npy_payload(&whole_npy);
    let mut joined = Vec::new();
    for r in 0..ranks {
        joined.extend_from_slice(npy_payload(&read(&out, &format!("{field}_r{r:04}.npy"))));
    }
    assert!(
        joined == all,
        "{name}: the pieces' .npy differ from the whole field"
    );
    let text = String::from_utf8(read(&out, &format!("{field}.{index}"))).unwrap();
    let pieces = index_pieces(&text, axis);
    assert_eq!(pieces.len(), ranks, "{text}");
    let rows = pieces.last().unwrap().1 + 1;
    let row_bytes = all.len() / rows;
    for (r, (lo, hi, src)) in pieces.iter().enumerate() {
        assert_eq!(src, &format!("{field}_r{r:04}.{}", &index[1..]));
        if r == 0 {
            assert_eq!(*lo, 0);
        } else {
            assert_eq!(*lo, pieces[r - 1].1, "pieces share their boundary points");
        }
        let piece = read(&out, src);
        assert!(
            vtk_first_array(&piece) == &all[lo * row_bytes..(hi + 1) * row_bytes],
            "{name}: {src} does not hold rows {lo}..={hi}"
        );
    }
    let summary: serde_json::Value = serde_json::from_slice(&read(&out, "summary.json")).unwrap();
    assert_eq!(summary["pieces"]["ranks"], ranks);
    assert_eq!(summary["pieces"]["whole_field_measures"], gathered);
}

#[test]
fn per_rank_pieces_put_together_are_the_whole_field() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    // A grounded box with a random charge per node (a Poisson problem).
    let rho = "solver = \"electrostatics\"\n[electrostatics]\n\
        x = { range = [0.0, 1.0], cells = 8 }\ny = { range = [0.0, 1.0], cells = 7 }\n\
        z = { range = [0.0, 1.0], cells = 13 }\ntolerance = 1e-9\nmax_iterations = 3000\n\
        charge_density = { random = 1e-9, seed = 3 }\n\
        faces = { x_min = 0.0, x_max = 0.0, y_min = 0.0, y_max = 0.0, z_min = 0.0, z_max = 0.0 }\n";
    // Advection from files: each rank reads only its rows (a smooth field, a shear flow).
    let cell = |n: usize| ((n % 40) as f64 / 40.0, (n / 40) as f64 / 31.0);
    for (file, value) in [
        (
            "f0.npy",
            (|x: f64, y: f64| (6.0 * x).sin() * (4.0 * y).cos()) as fn(f64, f64) -> f64,
        ),
        ("u.npy", |_, y| 0.5 + 0.3 * y),
        ("v.npy", |x, _| -0.2 + 0.4 * x),
    ] {
        let data: Vec<f64> = (0..31 * 40).map(|n| value(cell(n).0, cell(n).1)).collect();
        keisan::output::npy::write(&d.join(file), &[31, 40], &data).unwrap();
    }
    let from_files = ADVECTION
        .replace(
            "velocity = { kind = \"rotation\" }",
            "velocity = { kind = \"file\", u = \"u.npy\", v = \"v.npy\" }",
        )
        .replace(
            "initial = { preset = \"zalesak\" }",
            "initial = { preset = \"file\", path = \"f0.npy\" }",
        );
    // Heat from a file: each rank reads only its layers.
    let u0: Vec<f64> = (0..30 * 17 * 24)
        .map(|n| ((n * 7919) % 1000) as f64 / 1000.0)
        .collect();
    keisan::output::npy::write(&d.join("u0.npy"), &[30, 17, 24], &u0).unwrap();
    let heat_file = HEAT.replace(
        "initial = { preset = \"hot_box\" }",
        "initial = { preset = \"file\", path = \"u0.npy\" }",
    );
    // Electrostatics from files (ids and ρ per node): each rank reads only its planes.
    let nodes = 17 * 10 * 11;
    let electrode: Vec<u8> = (0..nodes)
        .map(|n| match n / 110 {
            0 => 2,
            16 => 1,
            _ => 0,
        })
        .collect();
    let dielectric: Vec<u8> = (0..nodes)
        .map(|n| u8::from((5..9).contains(&(n / 110))))
        .collect();
    let density: Vec<f64> = (0..nodes)
        .map(|n| 1e-9 * (((n * 37) % 13) as f64 - 6.0))
        .collect();
    let z = [17, 10, 11];
    keisan::output::npy::write_any(&d.join("eid.npy"), &z, &electrode).unwrap();
    keisan::output::npy::write_any(&d.join("did.npy"), &z, &dielectric).unwrap();
    keisan::output::npy::write(&d.join("rho.npy"), &z, &density).unwrap();
    let es_files = "solver = \"electrostatics\"\n[electrostatics]\n\
        x = { range = [0.0, 1.0], cells = 10 }\ny = { range = [0.0, 1.0], cells = 9 }\n\
        z = { range = [0.0, 1.0], cells = 16 }\nvoltages = [1.0, 0.0]\npermittivities = [4.0]\n\
        tolerance = 1e-9\nmax_iterations = 3000\nelectrode_ids = \"eid.npy\"\n\
        dielectric_ids = \"did.npy\"\ncharge_density = { file = \"rho.npy\" }\n";
    let rho_table = table_form(rho);
    for (name, problem) in [
        ("adv", ADVECTION),
        ("adv-file", from_files.as_str()),
        ("es-file", es_files),
        ("heat-file", heat_file.as_str()),
        ("heat", HEAT),
        ("es", ELECTROSTATICS),
        ("es-rho", rho),
        ("es-rho-table", rho_table.as_str()),
    ] {
        std::fs::write(d.join(format!("{name}.toml")), problem).unwrap();
    }
    pieces_equal_whole(d, "adv", "f", 2, ("pvti", 1), true);
    pieces_equal_whole(d, "adv", "f", 3, ("pvti", 1), false);
    pieces_equal_whole(d, "adv-file", "f", 3, ("pvti", 1), false);
    pieces_equal_whole(d, "heat", "u", 4, ("pvti", 2), true);
    pieces_equal_whole(d, "heat-file", "u", 3, ("pvti", 2), false);
    pieces_equal_whole(d, "es", "V", 3, ("pvtr", 2), true);
    // Each rank builds only its slab's planes of the geometry (and charge density).
    pieces_equal_whole(d, "es", "V", 3, ("pvtr", 2), false);
    pieces_equal_whole(d, "es-rho", "V", 2, ("pvtr", 2), false);
    pieces_equal_whole(d, "es-file", "V", 3, ("pvtr", 2), false);
    // The table form's slabs (halos of four planes) from their ranks' planes alone.
    pieces_equal_whole(d, "es-rho-table", "V", 2, ("pvtr", 2), false);
}

/// `update = "auto"` on ranks that each hold only their slab's planes of the geometry
/// decides as one process does: on the whole mesh's stencils, gathered from the ranks.
/// Here each rank's planes hold fewer stencils than a GPU's table takes in f64 (x graded,
/// z in four segments of their own spacing, a rank's planes meeting five of the seven
/// z-classes), but the whole mesh more: every rank takes the classic update, and the run
/// ends with one process's residual, bit for bit.
#[test]
fn auto_chooses_on_ranks_holding_their_planes_as_one_process_does() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let at = |i: f64| i + 0.002 * i * i;
    let x: Vec<String> = (0..=255)
        .map(|i| format!("{:.12}", at(i as f64) / at(255.0)))
        .collect();
    let problem = format!(
        "solver = \"electrostatics\"\nprecision = \"f64\"\n[electrostatics]\n\
         x = {{ breakpoints = [{}], divisions = [{}] }}\n\
         y = {{ range = [0.0, 1.0], cells = 255 }}\n\
         z = {{ breakpoints = [0.0, 0.2, 0.45, 0.75, 1.0], divisions = [64, 64, 64, 63] }}\n\
         max_iterations = 6\nfaces = {{ x_min = 1.0, x_max = 0.0 }}\n",
        x.join(", "),
        vec!["1"; 255].join(", ")
    );
    std::fs::write(d.join("big.toml"), problem).unwrap();
    let json = |o: &Output| -> serde_json::Value {
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(o.status.success(), "{err}");
        assert!(
            err.contains("update = \"classic\" (more than the 1568 distinct stencils"),
            "{err}"
        );
        serde_json::from_slice(&o.stdout).unwrap()
    };
    let args = ["run", "big.toml", "--backend", "cpu", "--json"];
    let one = json(
        &Command::new(common::keisan_bin())
            .current_dir(d)
            .args(args)
            .output()
            .unwrap(),
    );
    let ranks = json(&mpirun_with(
        d,
        2,
        &[("KEISAN_GATHER_LIMIT_BYTES", "1")],
        &args,
    ));
    for s in [&one, &ranks] {
        assert_eq!(s["results"]["update"], "classic", "{s}");
        assert_eq!(s["iterations"], 6, "{s}");
    }
    // No charges: the ranks held their planes only, and never the whole field.
    assert!(ranks["results"]["charges"].is_null(), "{ranks}");
    assert!(!one["results"]["charges"].is_null(), "{one}");
    assert_eq!(one["final_residual"], ranks["final_residual"]);
}

/// `problem` with the table form of the electrostatics update.
fn table_form(problem: &str) -> String {
    problem.replace(
        "[electrostatics]\n",
        "[electrostatics]\nupdate = \"table\"\n",
    )
}

#[test]
fn per_rank_checkpoints_restart_on_the_same_rank_count_only() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    // Stopped after 60 iterations: no capacitance solves (they would stop there too).
    let problem = ELECTROSTATICS.replace("capacitance = true\n", "");
    std::fs::write(d.join("es.toml"), problem).unwrap();
    alone(
        d,
        &[
            "run",
            "es.toml",
            "--backend",
            "cpu",
            "-q",
            "--out",
            "straight",
        ],
    );
    let pieces = "output.pieces=\"per-rank\"";
    let o = on_ranks(
        d,
        3,
        "es.toml",
        "first",
        &[
            "--set",
            pieces,
            "--set",
            "electrostatics.max_iterations=60",
            "--checkpoint-every",
            "30",
        ],
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    // Only the latest checkpoint's pieces remain beside its main file.
    let mut names: Vec<String> = std::fs::read_dir(d.join("first"))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n.starts_with("checkpoint"))
        .collect();
    names.sort();
    assert_eq!(
        names,
        [
            "checkpoint.keisan",
            "checkpoint.s60.r0000.keisan",
            "checkpoint.s60.r0001.keisan",
            "checkpoint.s60.r0002.keisan"
        ]
    );
    let o = on_ranks(
        d,
        3,
        "es.toml",
        "second",
        &["--restart", "first/checkpoint.keisan"],
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    for f in ["V.npy", "residuals.csv", "charges.csv"] {
        let read = |run: &str| std::fs::read(d.join(run).join(f)).unwrap();
        assert!(
            read("straight") == read("second"),
            "{f} differs after the restart"
        );
    }
    let o = on_ranks(
        d,
        2,
        "es.toml",
        "third",
        &["--restart", "first/checkpoint.keisan"],
    );
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("written in pieces by 3 rank(s)"), "{err}");
    assert!(!d.join("third").join("V.npy").exists());
}

#[test]
fn a_field_too_large_to_gather_is_written_in_pieces() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::write(d.join("es.toml"), ELECTROSTATICS).unwrap();
    let o = mpirun_with(
        d,
        2,
        &[("KEISAN_GATHER_LIMIT_BYTES", "4096")],
        &["run", "es.toml", "--backend", "cpu", "--out", "big"],
    );
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{err}");
    assert!(err.contains("does not fit one process"), "{err}");
    let at = d.join("big");
    assert!(at.join("V.pvtr").exists() && at.join("V_r0001.vtr").exists());
    assert!(!at.join("V.npy").exists() && !at.join("E.vtr").exists());
    let s: serde_json::Value =
        serde_json::from_slice(&std::fs::read(at.join("summary.json")).unwrap()).unwrap();
    assert_eq!(s["pieces"]["whole_field_measures"], false);
    assert!(s["results"]["charges"].is_null(), "{}", s["results"]);
    assert!(s["results"]["capacitance_f"].is_null(), "{}", s["results"]);
    assert!(s["results"]["converged"].as_bool().unwrap());
}

#[test]
fn a_signal_to_one_rank_stops_every_rank_at_the_same_step() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    // A tolerance no run reaches: it stops for the signal only, most likely at an output
    // step (every 50) that is no checkpoint step (every 200): the checkpoint is then
    // written there, by every rank together.
    let problem = JACOBI
        .replace("n = 30\nm = 23", "n = 300\nm = 300")
        .replace("tolerance = 1e-6", "tolerance = 1e-300")
        .replace("every = 100", "every = 50");
    std::fs::write(d.join("p.toml"), problem).unwrap();
    let child = Command::new("mpirun")
        .current_dir(d)
        .env("OMPI_ALLOW_RUN_AS_ROOT", "1")
        .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
        .args(["-np", "2", "--oversubscribe"])
        .arg(common::keisan_bin())
        .args(["run", "p.toml", "-q", "--backend", "cpu", "--out", "res"])
        .args([
            "--set",
            "jacobi.max_iterations=100000000",
            "--checkpoint-every",
            "200",
        ])
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let ckpt = d.join("res/checkpoint.keisan");
    common::wait_for(&ckpt, 60);
    // The ranks are mpirun's children: interrupt the last one only.
    let kids = Command::new("pgrep")
        .args(["-P", &child.id().to_string()])
        .output()
        .unwrap();
    let pids: Vec<String> = String::from_utf8_lossy(&kids.stdout)
        .split_whitespace()
        .map(str::to_string)
        .collect();
    assert_eq!(pids.len(), 2, "two ranks: {pids:?}");
    Command::new("kill")
        .args(["-INT", &pids[1]])
        .status()
        .unwrap();
    // Every rank must stop (no rank left waiting in a collective): give it a minute.
    let t = std::time::Instant::now();
    let mut child = child;
    while child.try_wait().unwrap().is_none() {
        if t.elapsed().as_secs() > 60 {
            let _ = child.kill();
            panic!("a rank still runs a minute after the signal");
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let o = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(130), "{err}");
    // Every rank that reports stopped at one step, and the checkpoint holds that step.
    let steps: Vec<u64> = err
        .split("interrupted by SIGINT at step ")
        .skip(1)
        .map(|t| t.split(';').next().unwrap().parse().unwrap())
        .collect();
    assert!(!steps.is_empty(), "{err}");
    let header = keisan::checkpoint::Checkpoint::open(&ckpt).unwrap().header;
    assert!(
        steps.iter().all(|&k| k == header.step),
        "{steps:?} vs the checkpoint's {}: {err}",
        header.step
    );
    // The checkpoint continues to the same bits as a straight run to that step + 10.
    let target = format!("jacobi.max_iterations={}", header.step + 10);
    alone(
        d,
        &[
            "run",
            "p.toml",
            "-q",
            "--backend",
            "cpu",
            "--out",
            "a",
            "--set",
            &target,
        ],
    );
    let o = mpirun(
        d,
        2,
        &[
            "run",
            "p.toml",
            "-q",
            "--backend",
            "cpu",
            "--out",
            "b",
            "--set",
            &target,
            "--restart",
            "res/checkpoint.keisan",
        ],
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let read = |run: &str| std::fs::read(d.join(run).join("u.npy")).unwrap();
    assert!(read("a") == read("b"));
}

#[test]
fn gathers_in_rounds_give_the_same_files() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::write(d.join("es.toml"), ELECTROSTATICS).unwrap();
    alone(
        d,
        &["run", "es.toml", "--backend", "cpu", "-q", "--out", "one"],
    );
    // Gathers of at most 1000 bytes at a time: the field (17 KB) travels in many rounds.
    let o = mpirun_with(
        d,
        3,
        &[("KEISAN_MPI_GATHER_BYTES", "1000")],
        &[
            "run",
            "es.toml",
            "--backend",
            "cpu",
            "-q",
            "--out",
            "rounds",
        ],
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    same_files(d, "one", "rounds");
}

/// GPU ranks (two GPUs, skipped without): two ranks write one GPU's field bit for bit, by
/// `--halo nccl` (halos and residual sums device to device), `--halo mpi` (page-locked
/// host blocks) and `--halo auto` (NCCL for these iterative solvers where it loads), with
/// the same residual history by every path
/// (slabs add their sums per slab, so the history matches one GPU's to rounding only), for
/// the electrostatics update of either form and Jacobi's iterations.
#[test]
fn gpu_ranks_write_one_gpus_files_by_nccl_and_by_mpi() {
    if common::two_gpus_or_skip("GPU ranks by NCCL and MPI", None).is_none() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let jacobi = "solver = \"jacobi\"\n[jacobi]\nn = 64\nm = 50\nmax_iterations = 30\n\
                  tolerance = 0.0\n";
    let es = ELECTROSTATICS.replace("capacitance = true\n", "");
    let es_table = table_form(&es);
    for (name, problem, field, history) in [
        ("es", es.as_str(), "V.npy", "residuals.csv"),
        ("es-table", es_table.as_str(), "V.npy", "residuals.csv"),
        ("jacobi", jacobi, "u.npy", "residuals.csv"),
    ] {
        let file = format!("{name}.toml");
        std::fs::write(d.join(&file), problem).unwrap();
        let one = format!("{name}-one");
        alone(d, &["run", &file, "-q", "--out", &one]);
        let read = |run: &str, f: &str| std::fs::read(d.join(run).join(f)).unwrap();
        for halo in ["auto", "mpi", "nccl"] {
            let out = format!("{name}-{halo}");
            let o = mpirun(d, 2, &["run", &file, "--halo", halo, "--out", &out]);
            let err = String::from_utf8_lossy(&o.stderr);
            if halo == "nccl" && err.contains("the NCCL library was not found") {
                common::skip(&format!("{name} on GPU ranks by NCCL: {err}"));
                continue;
            }
            assert!(o.status.success(), "{name} --halo {halo}: {err}");
            assert!(
                read(&one, field) == read(&out, field),
                "{name} --halo {halo}: {field} differs from one GPU's"
            );
            let s: serde_json::Value = serde_json::from_slice(&read(&out, "summary.json")).unwrap();
            let device = s["device"].as_str().unwrap();
            let by = match halo {
                "mpi" => "halos by MPI",
                "nccl" => "halos by NCCL",
                _ => "halos by",
            };
            assert!(device.contains(by), "{name} --halo {halo}: {device}");
            eprintln!("{name} on 2 GPU ranks, {device}: {field} one GPU's bytes");
        }
        for halo in ["auto", "nccl"] {
            let out = format!("{name}-{halo}");
            if d.join(&out).join(history).exists() {
                assert!(
                    read(&out, history) == read(&format!("{name}-mpi"), history),
                    "{name}: {history} differs between --halo {halo} and --halo mpi"
                );
            }
        }
    }
}

#[test]
fn a_rerun_on_fewer_ranks_leaves_no_pieces_of_the_last() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::write(d.join("heat.toml"), HEAT).unwrap();
    let per_rank = ["--set", "output.pieces=\"per-rank\""];
    for ranks in [3, 2] {
        let o = on_ranks(d, ranks, "heat.toml", "res", &per_rank);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    }
    let names = common::names(&d.join("res"));
    assert!(names.iter().any(|n| n.contains("_r0001")), "{names:?}");
    assert!(!names.iter().any(|n| n.contains("_r0002")), "{names:?}");
    common::consistent(&d.join("res"), &[]);
}
