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
    // Blocks of LANES particles, each block's j loop run once for all of them (a vector
    // lane a particle); the last block may be short.
    let blocks: Vec<([[f64; 3]; LANES], [f64; LANES])> = p.pos[of.clone()]
        .par_chunks(LANES)
        .enumerate()
        .map(|(b, xi)| {
            let i0 = first + b * LANES;
            match (xi.len() == LANES, potential) {
                (true, true) => lane_block::widest::<true>(p, eps2, i0),
                (true, false) => lane_block::widest::<false>(p, eps2, i0),
                (false, _) => {
                    let (mut a, mut phi) = ([[0.0; 3]; LANES], [0.0; LANES]);
                    for (l, xi) in xi.iter().enumerate() {
                        (a[l], phi[l]) = one_particle(p, eps2, potential, i0 + l, xi);
                    }
                    (a, phi)
                }
            }
        })
        .collect();
    let n = of.len();
    let acc: Vec<[f64; 3]> = blocks
        .iter()
        .flat_map(|(a, _)| a.iter())
        .take(n)
        .map(|a| a.map(|v| grav.g * v))
        .collect();
    let phi = match potential {
        true => blocks
            .iter()
            .flat_map(|(_, f)| f.iter())
            .take(n)
            .map(|&f| grav.g * f)
            .collect(),
        false => Vec::new(),
    };
    (acc, phi)
}

/// Particles per block of [`lane_block`]: a vector of f64 on AVX-512.
const LANES: usize = 8;

/// Σ_j over every j ≠ i in index order of particle i: the sums before the factor G.
fn one_particle(
    p: &Particles,
    eps2: f64,
    potential: bool,
    i: usize,
    xi: &[f64; 3],
) -> ([f64; 3], f64) {
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
    (a, phi)
}

/// [`one_particle`] of particles i0 .. i0 + LANES at once: each lane does its particle's
/// operations in its order (sqrt and division are exact IEEE operations in every
/// width), so the same bits. Lane i's own term j = i adds an exact +0 instead of being
/// skipped: its sums start at +0 and a sum of finite terms is never −0, so adding +0
/// leaves them as they are.
#[inline(always)]
fn lanes_of<const P: bool>(
    p: &Particles,
    eps2: f64,
    i0: usize,
) -> ([[f64; 3]; LANES], [f64; LANES]) {
    let xi: [[f64; LANES]; 3] = std::array::from_fn(|k| std::array::from_fn(|l| p.pos[i0 + l][k]));
    let (mut ax, mut ay, mut az, mut phi) =
        ([0.0f64; LANES], [0.0; LANES], [0.0; LANES], [0.0; LANES]);
    for (j, (xj, &mj)) in p.pos.iter().zip(&p.mass).enumerate() {
        for l in 0..LANES {
            let own = j == i0 + l;
            let (dx, dy, dz) = (xj[0] - xi[0][l], xj[1] - xi[1][l], xj[2] - xi[2][l]);
            let r2 = eps2 + dx * dx + dy * dy + dz * dz;
            let inv = 1.0 / r2.sqrt();
            let s = mj * inv * inv * inv;
            ax[l] += if own { 0.0 } else { s * dx };
            ay[l] += if own { 0.0 } else { s * dy };
            az[l] += if own { 0.0 } else { s * dz };
            if P {
                phi[l] -= if own { 0.0 } else { mj * inv };
            }
        }
    }
    (std::array::from_fn(|l| [ax[l], ay[l], az[l]]), phi)
}

crate::vector::vector_forms! {
    /// [`lanes_of`] for SSE2, AVX2 and AVX-512 (`widest`: the widest this CPU runs).
    mod lane_block = lanes_of [const P: bool] [P]
        (p: &Particles, eps2: f64, i0: usize) -> ([[f64; 3]; LANES], [f64; LANES]);
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

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};

    fn random_particles(n: usize, seed: u64) -> Particles {
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        let mut v = || std::array::from_fn(|_| rng.random_range(-1.0..1.0));
        let pos: Vec<[f64; 3]> = (0..n).map(|_| v()).collect();
        let vel = (0..n).map(|_| v()).collect();
        let mass = (0..n).map(|i| 0.5 + (i % 7) as f64 * 0.1).collect();
        Particles { pos, vel, mass }
    }

    /// Every compiled form of a block of lanes: the bits of the particle-by-particle sums,
    /// with and without softening (no softening: the own term is infinite and must not
    /// reach the sums).
    #[test]
    fn lane_blocks_are_the_particle_sums_bit_for_bit() {
        let p = random_particles(3 * LANES + 5, 7);
        for eps2 in [0.0, 1e-4] {
            for i0 in [0, LANES, 2 * LANES + 3] {
                let want: Vec<([f64; 3], f64)> = (0..LANES)
                    .map(|l| one_particle(&p, eps2, true, i0 + l, &p.pos[i0 + l]))
                    .collect();
                let bits = |(a, phi): ([[f64; 3]; LANES], [f64; LANES])| {
                    (0..LANES)
                        .map(|l| (a[l].map(f64::to_bits), phi[l].to_bits()))
                        .collect::<Vec<_>>()
                };
                let want = bits((
                    std::array::from_fn(|l| want[l].0),
                    std::array::from_fn(|l| want[l].1),
                ));
                for form in crate::vector::Form::ALL {
                    match lane_block::form::<true>(form, &p, eps2, i0) {
                        Some(got) => assert_eq!(bits(got), want, "{form:?}"),
                        None => crate::say!("{form:?} does not run on this CPU: not checked"),
                    }
                }
                // Without the potential: the same accelerations.
                let (a, _) = lane_block::widest::<false>(&p, eps2, i0);
                assert_eq!(
                    bits((a, [0.0; LANES]))
                        .iter()
                        .map(|x| x.0)
                        .collect::<Vec<_>>(),
                    want.iter().map(|x| x.0).collect::<Vec<_>>()
                );
            }
        }
    }
}
