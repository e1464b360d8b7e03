//! One folder per solver — its problem table and validation, CPU and CUDA engines,
//! kernels, bench cases and model — and the registry through which the rest of keisan
//! reaches them. Adding a solver: a folder, one line in [`REGISTRY`], examples and tests.

pub mod advection;
pub mod electrostatics;
pub mod heat;
pub mod jacobi;
pub mod nbody;

use crate::device::cuda::KernelSource;
use crate::solver::Solver;

/// Every solver keisan offers, in the order `keisan --help` lists them.
pub static REGISTRY: &[&dyn Solver] = &[
    &jacobi::JACOBI,
    &heat::HEAT,
    &electrostatics::ELECTROSTATICS,
    &advection::ADVECTION,
    &nbody::NBODY,
];

/// The solver called `name` (`solver = "…"` in a problem file).
pub fn find(name: &str) -> Option<&'static dyn Solver> {
    REGISTRY.iter().copied().find(|s| s.name() == name)
}

/// Every kernel source keisan ships (the device's own probes and each solver's), for the
/// compile check in CI.
pub fn kernel_sources() -> Vec<KernelSource> {
    let mut all = vec![crate::device::ceilings::KERNELS];
    all.extend(REGISTRY.iter().flat_map(|s| s.kernels()));
    all
}
