//! Every .cu compiles with NVRTC for sm_90 in both precisions. Needs libnvrtc only, no
//! GPU: CI installs the nvidia-cuda-nvrtc wheel and sets KEISAN_REQUIRE_NVRTC=1 so a
//! missing library fails instead of skipping.

use keisan::device::cuda::compile;
use keisan::precision::Precision;
use keisan::solvers::heat::step_kernel;
use keisan::solvers::kernel_sources as all_kernel_sources;

/// True (after saying so) when NVRTC cannot compile `src` and CI has not required it.
fn nvrtc_missing(src: &keisan::device::cuda::KernelSource) -> bool {
    if std::env::var_os("KEISAN_REQUIRE_NVRTC").is_some()
        || compile(src, Precision::F32, "sm_90", &[]).is_ok()
    {
        return false;
    }
    use std::io::Write;
    let _ = writeln!(std::io::stderr(), "skipped: NVRTC not available");
    true
}

#[test]
fn every_kernel_compiles_for_sm_90() {
    let required = std::env::var_os("KEISAN_REQUIRE_NVRTC").is_some();
    for src in all_kernel_sources() {
        for p in [Precision::F32, Precision::F64] {
            match compile(&src, p, "sm_90", &[]) {
                Ok(ptx) => assert!(
                    ptx.to_src().contains(".entry"),
                    "{} has no kernels",
                    src.name
                ),
                Err(keisan::Error::NoCudaDevice(why)) if !required => {
                    use std::io::Write;
                    let _ = writeln!(std::io::stderr(), "skipped: NVRTC not available ({why})");
                    return;
                }
                Err(e) => panic!("{} ({p}): {e}", src.name),
            }
        }
    }
}

/// The heat temporal-blocking kernel is compiled per tile and pass height; ptxas rejects a
/// tile whose shared memory is too large, so each default and each tallest allowed pass
/// is compiled here.
#[test]
fn heat_temporal_blocking_variants_compile() {
    if nvrtc_missing(&step_kernel::KERNELS) {
        return;
    }
    for (p, defines, kernel) in step_kernel::tb_variants() {
        let ptx = compile(&step_kernel::KERNELS, p, "sm_90", &defines)
            .unwrap_or_else(|e| panic!("{p} {defines:?}: {e}"));
        assert!(ptx.to_src().contains(kernel), "{p} {defines:?}");
    }
}

/// The N-body force kernel in each of its modes (f64 sums of the f32 terms, the
/// zero-separation guard, equal masses) and block shapes.
#[test]
fn nbody_force_variants_compile() {
    use keisan::solvers::nbody::cuda::KERNELS;
    // Every switch the engine sets, on and off, and an odd block shape.
    for (accurate, guard, equal, threads, ipt) in [
        (1, 0, 0, 128, 8),
        (0, 1, 0, 128, 8),
        (0, 0, 1, 128, 8),
        (1, 1, 1, 64, 3),
    ] {
        let defines = [
            ("NB_ACCURATE", accurate.to_string()),
            ("NB_GUARD", guard.to_string()),
            ("NB_EQUAL_MASS", equal.to_string()),
            ("NB_THREADS", threads.to_string()),
            ("NB_IPT", ipt.to_string()),
        ];
        match compile(&KERNELS, Precision::F64, "sm_90", &defines) {
            Ok(ptx) => assert!(ptx.to_src().contains("nbody_forces")),
            Err(keisan::Error::NoCudaDevice(_))
                if std::env::var_os("KEISAN_REQUIRE_NVRTC").is_none() => {}
            Err(e) => panic!("{e}"),
        }
    }
}

/// The staged electrostatics sweep is compiled only on request (ES_STAGED=1: its shared
/// rings need room the other kernels' shapes do not leave), in its default shapes; the
/// slabs' sweep with its residual plane range (ES_SUM_RANGE=1), also with its face nodes;
/// the sweep with the charge per node known at compile time (ES_QNODE, which the engine
/// always sets), with 4-bit class codes (ES_CBITS=4, both colours' in one byte), with its
/// colour's face nodes (ES_FACES=1, the per-colour engines' where the mesh has free face
/// nodes, with ES_XOFF=1 as they compile it) and compiled once per colour (ES_COLOUR_T=1,
/// the f32 large-mesh and persistent sweeps); the blocked kernel (compiled only with
/// ES_TB_T, its levels per pass) in the shapes its engine uses (cuda_blocked.rs), also
/// with a charge per node (ES_TB_Q) and without the residual sums (ES_TB_SUMS=0, the
/// passes between convergence tests).
#[test]
fn electrostatics_variants_compile() {
    use keisan::solvers::electrostatics::cuda::KERNELS;
    if nvrtc_missing(&KERNELS) {
        return;
    }
    const FACES: [(&str, &str); 2] = [("ES_FACES", "1"), ("ES_XOFF", "1")];
    const SLAB_FACES: [(&str, &str); 3] = [("ES_SUM_RANGE", "1"), FACES[0], FACES[1]];
    for (p, by, switches, kernel) in [
        (Precision::F32, "8", &[("ES_STAGED", "1")][..], "es_staged"),
        (Precision::F64, "4", &[("ES_STAGED", "1")], "es_staged"),
        (Precision::F32, "8", &[("ES_SUM_RANGE", "1")], "es_sweep"),
        (Precision::F64, "4", &[("ES_SUM_RANGE", "1")], "es_sweep"),
        (Precision::F32, "16", &SLAB_FACES, "es_sweep"),
        (Precision::F64, "4", &SLAB_FACES, "es_sweep"),
        (Precision::F32, "8", &[("ES_QNODE", "1")], "es_sweep"),
        (Precision::F64, "8", &[("ES_QNODE", "0")], "es_sweep"),
        (Precision::F32, "8", &[("ES_CBITS", "4")], "es_sweep"),
        (Precision::F64, "8", &[("ES_CBITS", "4")], "es_persist"),
        (Precision::F32, "8", &FACES, "es_sweep"),
        (Precision::F64, "4", &FACES, "es_sweep"),
        (Precision::F32, "16", &[("ES_COLOUR_T", "1")], "es_sweep"),
        (Precision::F32, "8", &[("ES_COLOUR_T", "1")], "es_persist"),
    ] {
        let mut defines = vec![("ES_BY", by.to_string())];
        defines.extend(switches.iter().map(|&(k, v)| (k, v.to_string())));
        let ptx = compile(&KERNELS, p, "sm_90", &defines).unwrap_or_else(|e| panic!("{p}: {e}"));
        assert!(ptx.to_src().contains(kernel), "{p} {switches:?}");
    }
    // The blocked kernel: passes of two iterations (4 levels) and of one (2), in f32's
    // shape and f64's, plain, with a charge per node and without the residual sums.
    for (p, r, w) in [(Precision::F32, "4", "12"), (Precision::F64, "2", "16")] {
        for levels in ["4", "2"] {
            for (q, sums) in [("0", "1"), ("1", "1"), ("0", "0"), ("1", "0")] {
                let defines = [
                    ("ES_BY", "8"),
                    ("ES_TB_T", levels),
                    ("ES_TB_R", r),
                    ("ES_TB_W", w),
                    ("ES_TB_Q", q),
                    ("ES_TB_SUMS", sums),
                ]
                .map(|(k, v)| (k, v.to_string()));
                let ptx = compile(&KERNELS, p, "sm_90", &defines)
                    .unwrap_or_else(|e| panic!("{p} {defines:?}: {e}"));
                assert!(ptx.to_src().contains("es_blocked"), "{p} {defines:?}");
            }
        }
    }
}

/// The advection kernels in the velocity modes, boundaries, steps per pass and columns
/// per thread the engine compiles (the separable kernels' paired rows need ADV_COLS even).
#[test]
fn advection_variants_compile() {
    use keisan::solvers::advection::cuda::KERNELS;
    if nvrtc_missing(&KERNELS) {
        return;
    }
    // Compile with `defines` (and the engine's padding before the grid, 2 + 128 bytes'
    // worth) in both precisions; each of `kernels` must be in the module.
    let check = |defines: &[(&str, String)], kernels: &[&str]| {
        for p in [Precision::F32, Precision::F64] {
            let mut defines = defines.to_vec();
            defines.push(("ADV_PAD", (2 + 128 / p.bytes()).to_string()));
            let ptx = compile(&KERNELS, p, "sm_90", &defines)
                .unwrap_or_else(|e| panic!("{p} {defines:?}: {e}"));
            for kernel in kernels {
                assert!(ptx.to_src().contains(kernel), "{p} {defines:?}: {kernel}");
            }
        }
    };
    for (mode, periodic, steps, cols, ty) in [
        (0, 0, 2, 1, 16),
        (0, 1, 3, 1, 12),
        (1, 0, 3, 2, 16),
        (2, 0, 2, 2, 16),
        (2, 1, 4, 2, 12),
        (2, 0, 2, 1, 16),
        (3, 1, 1, 2, 16),
    ] {
        let defines = [
            ("ADV_MODE", mode.to_string()),
            ("ADV_PERIODIC", periodic.to_string()),
            ("ADV_STEPS", steps.to_string()),
            ("ADV_COLS", cols.to_string()),
            ("ADV_TY", ty.to_string()),
        ];
        let kernels = [
            "adv_step_sep",
            "adv_pass_sep",
            "adv_step",
            "adv_pass",
            "adv_step_bulk",
        ];
        check(&defines, &kernels);
    }
    // adv_pass_w in the engine's shapes: its passes (three rows of cells a thread, f32's
    // default; two; one; four), its one-step form, both boundaries.
    for (periodic, steps, ty, tx, rows) in [
        (0, 3, 64, 56, 3),
        (1, 3, 64, 56, 3),
        (1, 3, 34, 40, 2),
        (0, 1, 63, 64, 3),
        (1, 4, 52, 48, 1),
        (0, 3, 56, 56, 4),
    ] {
        let defines = [
            ("ADV_MODE", "0".to_string()),
            ("ADV_PERIODIC", periodic.to_string()),
            ("ADV_STEPS", steps.to_string()),
            ("ADV_TY", ty.to_string()),
            ("ADV_WTX", tx.to_string()),
            ("ADV_WRQ", rows.to_string()),
        ];
        check(&defines, &["adv_pass_w"]);
    }
}

/// NVRTC gives machine code for a real architecture, which goes into the kernel cache
/// and comes back from it: the second compile of the same inputs is the cache's, a
/// changed define is not, and a damaged entry is passed over when asked for fresh.
#[test]
fn machine_code_is_cached_by_its_inputs() {
    use keisan::device::cuda::{ImageSource, compile_image};
    use keisan::device::kernel_cache;
    use keisan::solvers::jacobi::cuda::KERNELS;
    if nvrtc_missing(&KERNELS) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let cache = Some(dir.path());
    let a = [("JACOBI_PROBE", "1".to_string())];
    let b = [("JACOBI_PROBE", "2".to_string())];
    let from = |d: &[(&str, String)], fresh| {
        compile_image(&KERNELS, Precision::F32, "sm_90", d, cache, fresh)
            .unwrap()
            .1
    };
    assert_eq!(from(&a, false), ImageSource::Nvrtc);
    assert_eq!(kernel_cache::usage(dir.path()).0, 1);
    assert_eq!(from(&a, false), ImageSource::Cache);
    assert_eq!(from(&b, false), ImageSource::Nvrtc);
    assert_eq!(from(&a, true), ImageSource::Nvrtc);
    let (entries, bytes) = kernel_cache::usage(dir.path());
    assert_eq!(entries, 2);
    assert!(bytes > 1000, "{bytes} bytes of machine code");
    // A virtual architecture has no machine code: its PTX, uncached.
    let (ptx, virt) =
        compile_image(&KERNELS, Precision::F32, "compute_90", &a, cache, false).unwrap();
    assert_eq!(virt, ImageSource::Ptx);
    assert!(ptx.to_src().contains(".entry"));
    assert_eq!(kernel_cache::usage(dir.path()).0, 2);
}

/// Each kernel compiled alone (`KEISAN_ONLY`, as the engines load them): its module holds
/// that kernel and no other, for every kernel of every source's default build.
#[test]
fn each_kernel_compiles_alone() {
    let required = std::env::var_os("KEISAN_REQUIRE_NVRTC").is_some();
    let entries = |ptx: &str| -> Vec<String> {
        ptx.split(".entry ")
            .skip(1)
            .map(|s| s[..s.find('(').unwrap()].trim().to_string())
            .collect()
    };
    for src in all_kernel_sources() {
        let whole = match compile(&src, Precision::F32, "sm_90", &[]) {
            Ok(ptx) => entries(&ptx.to_src()),
            Err(keisan::Error::NoCudaDevice(_)) if !required => return,
            Err(e) => panic!("{}: {e}", src.name),
        };
        assert!(whole.len() > 1, "{}: {whole:?}", src.name);
        for name in &whole {
            let want = format!("KEISAN_WANT_{name}");
            let defines = [
                ("KEISAN_ONLY", "1".to_string()),
                (want.as_str(), "1".to_string()),
            ];
            let ptx = compile(&src, Precision::F32, "sm_90", &defines)
                .unwrap_or_else(|e| panic!("{name} alone: {e}"));
            assert_eq!(
                entries(&ptx.to_src()),
                std::slice::from_ref(name),
                "{}",
                src.name
            );
        }
    }
}

/// Without NVRTC, asking for a kernel image (the disk cache's key names NVRTC's version)
/// is a clear error, not a panic in the library loader. Runs where NVRTC is missing.
#[test]
fn without_nvrtc_an_image_is_a_clear_error() {
    use keisan::device::cuda::compile_image;
    use keisan::solvers::jacobi::cuda::KERNELS;
    if compile(&KERNELS, Precision::F32, "sm_90", &[]).is_ok() {
        use std::io::Write;
        let _ = writeln!(std::io::stderr(), "skipped: NVRTC is here");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let r = compile_image(
        &KERNELS,
        Precision::F32,
        "sm_90",
        &[],
        Some(dir.path()),
        false,
    );
    assert!(
        matches!(r, Err(keisan::Error::NoCudaDevice(_))),
        "{:?}",
        r.err()
    );
}
