//! Halo blocks over NCCL (`--halo nccl`): the same bytes as peer copies for every solver
//! that decomposes, and placements NCCL cannot serve refused by name.

mod common;

/// Small problems of each decomposing solver and the field file each writes.
const PROBLEMS: [(&str, &str, &str); 4] = [
    (
        "heat",
        "solver = \"heat\"\n[heat]\nshape = [20, 18, 40]\ndt = 1e-5\nsteps = 9\n",
        "u.npy",
    ),
    (
        "advection",
        "solver = \"advection\"\n[advection]\nnx = 40\nny = 31\nsteps = 6\ncfl = 0.9\n\
         boundary = \"periodic\"\nvelocity = { kind = \"rotation\" }\n\
         initial = { preset = \"zalesak\" }\n",
        "f.npy",
    ),
    (
        "electrostatics",
        "solver = \"electrostatics\"\n[electrostatics]\nx = { range = [0.0, 1.0], cells = 12 }\n\
         y = { range = [0.0, 1.0], cells = 10 }\nz = { range = [0.0, 1.0], cells = 20 }\n\
         permittivities = [4.0]\nmax_iterations = 300\ntolerance = 1e-30\n\
         [electrostatics.faces]\nz_min = 1.0\nz_max = 0.0\n\
         [[electrostatics.shapes]]\nkind = \"sphere\"\ncenter = [0.5, 0.5, 0.5]\n\
         radius = 0.3\ndielectric = 1\n",
        "V.npy",
    ),
    (
        "jacobi",
        "solver = \"jacobi\"\n[jacobi]\nn = 64\nm = 50\nmax_iterations = 30\ntolerance = 0.0\n",
        "u.npy",
    ),
];

#[test]
fn halos_over_nccl_are_the_same_bytes_as_peer_copies() {
    if common::two_gpus_or_skip("halos over NCCL", None).is_none() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    for (name, toml, field) in PROBLEMS {
        std::fs::write(d.join(format!("{name}.toml")), toml).unwrap();
        let problem = format!("{name}.toml");
        let mut outs = Vec::new();
        for halo in ["auto", "nccl"] {
            let out = format!("{name}-{halo}");
            let o = common::keisan_in(
                d,
                &[
                    "run",
                    &problem,
                    "-q",
                    "--devices",
                    "0,1",
                    "--halo",
                    halo,
                    "--out",
                    &out,
                ],
            );
            let err = String::from_utf8_lossy(&o.stderr);
            if halo == "nccl" && err.contains("the NCCL library was not found") {
                common::skip(&format!("halos over NCCL: {err}"));
                return;
            }
            assert!(o.status.success(), "{name}, --halo {halo}: {err}");
            outs.push(std::fs::read(d.join(&out).join(field)).unwrap());
        }
        assert_eq!(outs[0], outs[1], "{name}: {field} differs with --halo nccl");
        eprintln!("{name}: {field} the same bytes over NCCL");
    }
}

#[test]
fn placements_nccl_cannot_serve_are_refused_by_name() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::write(d.join("h.toml"), PROBLEMS[0].1).unwrap();
    let mut cases: Vec<(&[&str], &str)> = vec![(
        &["--backend", "cpu", "--subdomains", "2"],
        "this run is on the CPU backend",
    )];
    if common::gpu_or_skip("--halo nccl on slabs sharing a GPU").is_some() {
        cases.push((&["--devices", "0,0"], "these slabs share a GPU"));
    }
    for (args, needle) in cases {
        let mut a = vec!["run", "h.toml", "-q", "--halo", "nccl", "--out", "res"];
        a.extend_from_slice(args);
        let o = common::keisan_in(d, &a);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
        assert!(
            err.contains("--halo") && err.contains(needle),
            "{args:?}: {err}"
        );
        assert!(!d.join("res").exists());
    }
}
