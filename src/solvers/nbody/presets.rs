//! Initial conditions in N-body (Hénon) units, G = M = 1 and E = −1/4 (up to sampling
//! noise, and for the Plummer spheres the truncation at ten scale lengths,
//! which makes E = −0.2601: no O(N²) rescaling, so the largest runs set up in O(N)); for
//! another G the problem scales the velocities by √G. Draws are counter
//! based — particle i's k-th draw is a hash of (seed, i, k) — so a seed gives the same
//! particles on any thread count and any version of keisan.

use rayon::prelude::*;

use super::Particles;

/// The Plummer scale length that makes E = −1/4 for G = M = 1.
pub const PLUMMER_A: f64 = 3.0 * std::f64::consts::PI / 16.0;
/// Radius of a uniform sphere with E = W = −3GM²/(5R) = −1/4.
pub const COLD_SPHERE_RADIUS: f64 = 2.4;
/// Plummer radii beyond this many scale lengths are drawn again (they hold 1.48 % of the
/// mass, 1 − 10³/101^{3/2}, and would set the box and the time step for nothing; the
/// truncated sphere's energy is −0.2601 instead of −1/4).
const PLUMMER_CUT: f64 = 10.0;

/// splitmix64's finaliser.
fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Particle `i`'s draws from `seed`, uniform in (0, 1).
struct Draws {
    key: u64,
    k: u64,
}

impl Draws {
    fn new(seed: u64, i: u64) -> Self {
        Self {
            key: mix(mix(seed.wrapping_add(0x9E37_79B9_7F4A_7C15)) ^ i),
            k: 0,
        }
    }

    fn next(&mut self) -> f64 {
        self.k += 1;
        let z = mix(self
            .key
            .wrapping_add(self.k.wrapping_mul(0x9E37_79B9_7F4A_7C15)));
        ((z >> 11) as f64 + 0.5) / (1u64 << 53) as f64
    }

    /// A direction uniform on the unit sphere.
    fn direction(&mut self) -> [f64; 3] {
        let c = 2.0 * self.next() - 1.0;
        let s = (1.0 - c * c).sqrt();
        let phi = 2.0 * std::f64::consts::PI * self.next();
        [s * phi.cos(), s * phi.sin(), c]
    }
}

/// A Plummer sphere of `n` equal particles of total `mass` and scale length `a` (G = 1),
/// sampled as Aarseth, Hénon & Wielen (1974), in its centre-of-mass frame.
pub fn plummer(n: usize, mass: f64, a: f64, seed: u64) -> Particles {
    let rows: Vec<([f64; 3], [f64; 3])> = (0..n)
        .into_par_iter()
        .map(|i| {
            let mut d = Draws::new(seed, i as u64);
            let r = loop {
                let x = d.next();
                let r = a / (x.powf(-2.0 / 3.0) - 1.0).sqrt();
                if r <= PLUMMER_CUT * a {
                    break r;
                }
            };
            // q from g(q) = q²(1 − q²)^{7/2} by rejection under 0.1 > max g ≈ 0.092.
            let q = loop {
                let q = d.next();
                if 0.1 * d.next() < q * q * (1.0 - q * q).powf(3.5) {
                    break q;
                }
            };
            let v = q * 2f64.sqrt() * (1.0 + r * r / (a * a)).powf(-0.25) * (mass / a).sqrt();
            let (ux, uv) = (d.direction(), d.direction());
            (ux.map(|c| r * c), uv.map(|c| v * c))
        })
        .collect();
    let mut p = Particles {
        pos: rows.iter().map(|r| r.0).collect(),
        vel: rows.iter().map(|r| r.1).collect(),
        mass: vec![mass / n as f64; n],
    };
    p.to_centre_of_mass_frame();
    p
}

/// A uniform cold sphere of `n` equal particles (total mass 1, radius 2.4: E = −1/4),
/// at rest: it collapses in about one free-fall time, π/2·√(R³/2GM) ≈ 4.1.
pub fn cold_sphere(n: usize, seed: u64) -> Particles {
    let pos: Vec<[f64; 3]> = (0..n)
        .into_par_iter()
        .map(|i| {
            let mut d = Draws::new(seed, i as u64);
            let r = COLD_SPHERE_RADIUS * d.next().cbrt();
            d.direction().map(|c| r * c)
        })
        .collect();
    let mut p = Particles {
        pos,
        vel: vec![[0.0; 3]; n],
        mass: vec![1.0 / n as f64; n],
    };
    p.to_centre_of_mass_frame();
    p
}

/// Two Plummer spheres of n/2 particles and mass 1/2 each (scale length a of the
/// N-body-unit sphere), centres `separation` apart along x with impact parameter
/// `impact` along y, approaching each other at relative speed `speed`.
pub fn two_plummers(n: usize, seed: u64, separation: f64, impact: f64, speed: f64) -> Particles {
    let first = n.div_ceil(2);
    let mut a = plummer(first, 0.5, PLUMMER_A, seed);
    let b = plummer(
        n - first,
        0.5,
        PLUMMER_A,
        seed.wrapping_add(0x5851_F42D_4C95_7F2D),
    );
    let place = |x: &mut [f64; 3], v: &mut [f64; 3], sign: f64| {
        x[0] += sign * 0.5 * separation;
        x[1] += sign * 0.5 * impact;
        v[0] -= sign * 0.5 * speed;
    };
    for (x, v) in a.pos.iter_mut().zip(&mut a.vel) {
        place(x, v, -1.0);
    }
    let mut b = b;
    for (x, v) in b.pos.iter_mut().zip(&mut b.vel) {
        place(x, v, 1.0);
    }
    a.pos.extend(b.pos);
    a.vel.extend(b.vel);
    a.mass.extend(b.mass);
    a.to_centre_of_mass_frame();
    a
}
