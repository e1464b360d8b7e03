//! A picture of a snapshot: the particles' surface density in the x–y plane.

use super::Particles;
use crate::run::Field;

/// Pixels per side of a projection of `n` particles: about 2√n (a few particles per
/// lit pixel where the system is dense), from 64 to 512.
fn pixels(n: usize) -> usize {
    (2.0 * (n as f64).sqrt()).clamp(64.0, 512.0) as usize
}

/// Half-width of the square every picture of a run shows: the run's first state, 1.2 ×
/// the 95th percentile of max(|x|, |y|) (so frames compare, and a few escapers do not
/// shrink the system to a dot).
pub fn half_width(p: &Particles) -> f64 {
    let mut r: Vec<f64> = p.pos.iter().map(|x| x[0].abs().max(x[1].abs())).collect();
    if r.is_empty() {
        return 1.0;
    }
    let k = (r.len() * 95 / 100).min(r.len() - 1);
    let (_, v, _) = r.select_nth_unstable_by(k, |a, b| a.total_cmp(b));
    let h = 1.2 * *v;
    if h > 0.0 && h.is_finite() { h } else { 1.0 }
}

/// log10(1 + Σ m per pixel / mean Σ m per pixel of the square) on a square grid of
/// [−h, h]², row j at y = −h + (j + ½)·cell (the PNG writer draws row 0 at the bottom).
pub fn density_xy(p: &Particles, h: f64) -> Field<f64> {
    let n = pixels(p.len());
    let mut grid = vec![0.0f64; n * n];
    let cell = 2.0 * h / n as f64;
    for (x, &m) in p.pos.iter().zip(&p.mass) {
        let (i, j) = ((x[0] + h) / cell, (x[1] + h) / cell);
        if (0.0..n as f64).contains(&i) && (0.0..n as f64).contains(&j) {
            grid[j as usize * n + i as usize] += m;
        }
    }
    let mean = p.total_mass() / (n * n) as f64;
    if mean > 0.0 {
        grid.iter_mut().for_each(|v| *v = (1.0 + *v / mean).log10());
    }
    Field {
        name: "surface_density",
        shape: vec![n, n],
        spacing: vec![cell, cell],
        origin: vec![-h, -h],
        coords: None,
        data: grid,
    }
}
