//! Direct gravitational N-body (seed 001): a_i = Σ_j G·m_j·(x_j − x_i)/(|x_j − x_i|² + ε²)^{3/2},
//! integrated by leapfrog kick-drift-kick. So far the CPU reference: f64 direct sum
//! (rayon over i-particles, each j-sum in index order, so the result does not depend on
//! the thread count), the `[nbody]` table, the initial-condition presets in N-body units
//! and the diagnostics that prove a run (energies, momenta, virial ratio). The CUDA
//! engine, two GPUs, MPI and the cycle model come next (issue 14).

pub mod bench;
pub mod cpu;
pub mod cuda;
pub mod diagnostics;
pub mod model;
pub mod presets;
pub mod problem;
mod projection;
mod solver;

pub use problem::{Initial, NbodyConfig, NbodyProblem};
pub use solver::NBODY;

/// Particles in f64: positions, velocities, masses (structure of arrays, the order of
/// the study's x y z vx vy vz m columns).
#[derive(Debug, Clone, PartialEq)]
pub struct Particles {
    pub pos: Vec<[f64; 3]>,
    pub vel: Vec<[f64; 3]>,
    pub mass: Vec<f64>,
}

impl Particles {
    pub fn len(&self) -> usize {
        self.mass.len()
    }

    pub fn is_empty(&self) -> bool {
        self.mass.is_empty()
    }

    pub fn total_mass(&self) -> f64 {
        self.mass.iter().sum()
    }

    /// Shift positions and velocities so the centre of mass rests at the origin.
    pub fn to_centre_of_mass_frame(&mut self) {
        let m = self.total_mass();
        if m <= 0.0 {
            return;
        }
        for field in [&mut self.pos, &mut self.vel] {
            let mut c = [0.0; 3];
            for (x, &mi) in field.iter().zip(&self.mass) {
                for a in 0..3 {
                    c[a] += mi * x[a];
                }
            }
            for x in field.iter_mut() {
                for a in 0..3 {
                    x[a] -= c[a] / m;
                }
            }
        }
    }
}

/// Gravity as a run sees it: the constant and the Plummer softening length.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Gravity {
    pub g: f64,
    pub softening: f64,
}
