//! Every .cu compiles with NVRTC for sm_90 in both precisions. Needs libnvrtc only, no
//! GPU: CI installs the nvidia-cuda-nvrtc wheel and sets KEISAN_REQUIRE_NVRTC=1 so a
//! missing library fails instead of skipping.

use keisan::device::cuda::compile;
use keisan::precision::Precision;
use keisan::solvers::heat::step_kernel;
use keisan::solvers::kernel_sources as all_kernel_sources;

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
    if std::env::var_os("KEISAN_REQUIRE_NVRTC").is_none()
        && compile(&step_kernel::KERNELS, Precision::F32, "sm_90", &[]).is_err()
    {
        use std::io::Write;
        let _ = writeln!(std::io::stderr(), "skipped: NVRTC not available");
        return;
    }
    for (p, defines, kernel) in step_kernel::tb_variants() {
        let ptx = compile(&step_kernel::KERNELS, p, "sm_90", &defines)
            .unwrap_or_else(|e| panic!("{p} {defines:?}: {e}"));
        assert!(ptx.to_src().contains(kernel), "{p} {defines:?}");
    }
}

/// The N-body force kernel in its accurate mode (f64 sums of the f32 terms).
#[test]
fn nbody_accurate_mode_compiles() {
    use keisan::solvers::nbody::cuda::KERNELS;
    let defines = [("NB_ACCURATE".to_string(), "1".to_string())];
    let defines: Vec<(&str, String)> = defines
        .iter()
        .map(|(k, v)| (k.as_str(), v.clone()))
        .collect();
    match compile(&KERNELS, Precision::F64, "sm_90", &defines) {
        Ok(ptx) => assert!(ptx.to_src().contains("nbody_forces")),
        Err(keisan::Error::NoCudaDevice(_))
            if std::env::var_os("KEISAN_REQUIRE_NVRTC").is_none() => {}
        Err(e) => panic!("{e}"),
    }
}
