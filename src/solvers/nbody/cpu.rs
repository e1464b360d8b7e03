//! The CPU reference: the f64 direct sum and the leapfrog that advances it.

use rayon::prelude::*;

use super::{Gravity, Particles};
use crate::error::Result;
use crate::run::{Diagnostics, Engine, Field, Status};

/// Accelerations of every particle, and with `potential` the potential per unit mass
/// φ_i = −Σ_{j≠i} G·m_j/√(r² + ε²). Each i sums over j in index order (the self term
/// contributes nothing: its separation is zero), so the result does not depend on the
/// thread count.
pub fn accelerations(p: &Particles, grav: Gravity, potential: bool) -> (Vec<[f64; 3]>, Vec<f64>) {
    let eps2 = grav.softening * grav.softening;
    let rows: Vec<([f64; 3], f64)> = p
        .pos
        .par_iter()
        .enumerate()
        .map(|(i, xi)| {
            let (mut a, mut phi) = ([0.0f64; 3], 0.0f64);
            for (j, (xj, &mj)) in p.pos.iter().zip(&p.mass).enumerate() {
                if j == i {
                    continue;
                }
                let d = [xj[0] - xi[0], xj[1] - xi[1], xj[2] - xi[2]];
                let r2 = eps2 + d[0] * d[0] + d[1] * d[1] + d[2] * d[2];
                let inv = 1.0 / r2.sqrt();
                let s = mj * inv * inv * inv;
                for k in 0..3 {
                    a[k] += s * d[k];
                }
                if potential {
                    phi -= mj * inv;
                }
            }
            (a.map(|v| grav.g * v), grav.g * phi)
        })
        .collect();
    let (acc, phi): (Vec<_>, Vec<_>) = rows.into_iter().unzip();
    (acc, if potential { phi } else { Vec::new() })
}

/// Leapfrog kick-drift-kick with fixed `dt`: symplectic and time-reversible, so the
/// energy error stays bounded and scales as dt². `acc` holds the accelerations at the
/// current positions (from [`accelerations`]) and is left at the new ones, so a run pays
/// one force evaluation per step.
pub fn leapfrog(p: &mut Particles, acc: &mut Vec<[f64; 3]>, grav: Gravity, dt: f64, steps: u64) {
    let half = 0.5 * dt;
    for _ in 0..steps {
        kick(p, acc, half);
        p.pos.par_iter_mut().zip(&p.vel).for_each(|(x, v)| {
            for k in 0..3 {
                x[k] += v[k] * dt;
            }
        });
        *acc = accelerations(p, grav, false).0;
        kick(p, acc, half);
    }
}

fn kick(p: &mut Particles, acc: &[[f64; 3]], h: f64) {
    p.vel.par_iter_mut().zip(acc).for_each(|(v, a)| {
        for k in 0..3 {
            v[k] += a[k] * h;
        }
    });
}

/// The CPU engine: particles in f64, one force evaluation per step.
pub struct CpuNbody {
    p: Particles,
    acc: Vec<[f64; 3]>,
    grav: Gravity,
    dt: f64,
    steps: u64,
    status: Status,
}

impl CpuNbody {
    /// From `p` at step `step`.
    pub fn new(grav: Gravity, dt: f64, p: Particles, step: u64) -> Self {
        let acc = accelerations(&p, grav, false).0;
        Self {
            p,
            acc,
            grav,
            dt,
            steps: step,
            status: Status::Running,
        }
    }
}

impl Engine for CpuNbody {
    type Real = f64;

    fn advance(&mut self, steps: u64) -> Result<()> {
        if self.status != Status::Running {
            return Ok(());
        }
        leapfrog(&mut self.p, &mut self.acc, self.grav, self.dt, steps);
        self.steps += steps;
        if !self.p.vel.iter().flatten().all(|v| v.is_finite()) {
            self.status = Status::NonFinite;
        }
        Ok(())
    }

    fn diagnostics(&mut self) -> Result<Diagnostics> {
        Ok(Diagnostics::steps_only(self.steps, self.status))
    }

    fn snapshot(&mut self) -> Result<Field<f64>> {
        Ok(particles_field(&self.p))
    }
}

/// Particles as a table of N rows x y z vx vy vz m (written as an (N, 7) .npy; a table,
/// not a grid: no spacing).
pub fn particles_field(p: &Particles) -> Field<f64> {
    let data = (0..p.len())
        .flat_map(|i| {
            let (x, v) = (p.pos[i], p.vel[i]);
            [x[0], x[1], x[2], v[0], v[1], v[2], p.mass[i]]
        })
        .collect();
    Field {
        name: "particles",
        shape: vec![p.len(), 7],
        spacing: Vec::new(),
        origin: Vec::new(),
        coords: None,
        data,
    }
}

/// The particles of a table written by [`particles_field`].
pub fn particles_of(data: &[f64]) -> Particles {
    let rows = data.chunks(7);
    Particles {
        pos: rows.clone().map(|r| [r[0], r[1], r[2]]).collect(),
        vel: rows.clone().map(|r| [r[3], r[4], r[5]]).collect(),
        mass: rows.map(|r| r[6]).collect(),
    }
}
