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
