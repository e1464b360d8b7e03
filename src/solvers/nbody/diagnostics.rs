//! What proves an N-body run: energies and their error, momenta, the virial ratio.

use serde::Serialize;

use super::{Gravity, Particles, cpu};

/// Conserved and monitored quantities of one state (f64 sums in particle order).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Measures {
    pub kinetic: f64,
    /// ½ Σ m_i φ_i with the run's softening.
    pub potential: f64,
    pub total: f64,
    pub momentum: [f64; 3],
    pub angular_momentum: [f64; 3],
    /// 2K/|W|: 1 in virial equilibrium.
    pub virial_ratio: f64,
}

impl Measures {
    /// With the potential summed on the host (the CPU reference's f64 direct sum).
    pub fn of(p: &Particles, grav: Gravity) -> Self {
        Self::with_potential(p, &cpu::accelerations(p, grav, true).1)
    }

    /// With `phi`, the potential per unit mass of every particle (from any engine).
    pub fn with_potential(p: &Particles, phi: &[f64]) -> Self {
        let potential = 0.5 * p.mass.iter().zip(phi).map(|(m, f)| m * f).sum::<f64>();
        let (mut kinetic, mut momentum, mut angular) = (0.0, [0.0; 3], [0.0; 3]);
        for ((x, v), &m) in p.pos.iter().zip(&p.vel).zip(&p.mass) {
            kinetic += 0.5 * m * (v[0] * v[0] + v[1] * v[1] + v[2] * v[2]);
            let l = [
                x[1] * v[2] - x[2] * v[1],
                x[2] * v[0] - x[0] * v[2],
                x[0] * v[1] - x[1] * v[0],
            ];
            for k in 0..3 {
                momentum[k] += m * v[k];
                angular[k] += m * l[k];
            }
        }
        Self {
            kinetic,
            potential,
            total: kinetic + potential,
            momentum,
            angular_momentum: angular,
            virial_ratio: if potential != 0.0 {
                2.0 * kinetic / potential.abs()
            } else {
                f64::NAN
            },
        }
    }

    /// |E − E₀|/|E₀|.
    pub fn energy_error(&self, start: &Measures) -> f64 {
        ((self.total - start.total) / start.total).abs()
    }
}
