//! The CPU reference: the f64 direct sum and the leapfrog that advances it.

use std::ops::Range;

use rayon::prelude::*;

use super::{Gravity, Particles};
use crate::error::Result;
use crate::parallel::{World, world};
use crate::run::{Diagnostics, Engine, Field, Status};

/// Accelerations of every particle, and with `potential` the potential per unit mass
/// φ_i = −Σ_{j≠i} G·m_j/√(r² + ε²). Each i sums over j in index order (the self term
/// contributes nothing: its separation is zero), so the result does not depend on the
/// thread count.
pub fn accelerations(p: &Particles, grav: Gravity, potential: bool) -> (Vec<[f64; 3]>, Vec<f64>) {
    accelerations_of(p, grav, potential, 0..p.len())
}

/// [`accelerations`] of the particles `of` only (each still summed over every j in
/// index order: a rank's share is the same bits as the whole run's).
pub fn accelerations_of(
    p: &Particles,
    grav: Gravity,
    potential: bool,
    of: Range<usize>,
) -> (Vec<[f64; 3]>, Vec<f64>) {
    let eps2 = grav.softening * grav.softening;
    let first = of.start;
    let rows: Vec<([f64; 3], f64)> = p.pos[of]
        .par_iter()
        .enumerate()
        .map(|(o, xi)| {
            let i = first + o;
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
    leapfrog_with(p, acc, dt, steps, |p| Ok(accelerations(p, grav, false).0))
        .expect("forces on one process do not fail");
}

/// [`leapfrog`] with the accelerations from `forces` (one process's sum, or the ranks'
/// shares gathered).
fn leapfrog_with(
    p: &mut Particles,
    acc: &mut Vec<[f64; 3]>,
    dt: f64,
    steps: u64,
    mut forces: impl FnMut(&Particles) -> Result<Vec<[f64; 3]>>,
) -> Result<()> {
    let half = 0.5 * dt;
    for _ in 0..steps {
        kick(p, acc, half);
        drift(p, dt);
        *acc = forces(p)?;
        kick(p, acc, half);
    }
    Ok(())
}

fn drift(p: &mut Particles, dt: f64) {
    p.pos.par_iter_mut().zip(&p.vel).for_each(|(x, v)| {
        for k in 0..3 {
            x[k] += v[k] * dt;
        }
    });
}

fn kick(p: &mut Particles, acc: &[[f64; 3]], h: f64) {
    p.vel.par_iter_mut().zip(acc).for_each(|(v, a)| {
        for k in 0..3 {
            v[k] += a[k] * h;
        }
    });
}

/// The CPU engine: particles in f64, one force evaluation per step. Under mpirun every
/// rank holds every particle and computes the forces on its share of them; an all-gather
/// (MPI's allgather: recursive doubling or a ring, the study's two schemes, chosen by the
/// library) hands every rank all forces, and every rank takes the same step — the same
/// bits as one process.
pub struct CpuNbody {
    p: Particles,
    acc: Vec<[f64; 3]>,
    grav: Gravity,
    dt: f64,
    steps: u64,
    status: Status,
    world: Option<World>,
}

impl CpuNbody {
    /// From `p` at step `step`; `world`: the ranks that share the force sums.
    pub fn new(
        grav: Gravity,
        dt: f64,
        p: Particles,
        step: u64,
        world: Option<World>,
    ) -> Result<Self> {
        Ok(Self {
            acc: forces(&p, grav, world)?,
            p,
            grav,
            dt,
            steps: step,
            status: Status::Running,
            world,
        })
    }
}

/// Rank `r`'s particles: an even share, the first n mod size one more.
pub fn share(n: usize, w: World, r: usize) -> Range<usize> {
    let (q, extra) = (n / w.size, n % w.size);
    let start = r * q + r.min(extra);
    start..start + q + usize::from(r < extra)
}

/// The accelerations of every particle: summed here, or under mpirun each rank's share
/// summed there and all gathered.
fn forces(p: &Particles, grav: Gravity, world: Option<World>) -> Result<Vec<[f64; 3]>> {
    let Some(w) = world else {
        return Ok(accelerations(p, grav, false).0);
    };
    let n = p.len();
    let mine = accelerations_of(p, grav, false, share(n, w, w.rank)).0;
    let counts: Vec<usize> = (0..w.size).map(|r| 24 * share(n, w, r).len()).collect();
    Ok(world::from_bytes(&world::all_gather(
        &world::to_bytes(&mine),
        &counts,
    )?))
}

impl Engine for CpuNbody {
    type Real = f64;

    fn advance(&mut self, steps: u64) -> Result<()> {
        if self.status != Status::Running {
            return Ok(());
        }
        let (grav, world) = (self.grav, self.world);
        leapfrog_with(&mut self.p, &mut self.acc, self.dt, steps, |p| {
            forces(p, grav, world)
        })?;
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
