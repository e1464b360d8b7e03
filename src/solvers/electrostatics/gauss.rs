//! What users ask of a potential: the charge on each electrode by Gauss's law and the
//! node-centred field E = −∇V.
//!
//! The closed surface around electrode k is the boundary of the control volumes (dual
//! cells) of its nodes: through each face between a node of k and a node that is not,
//! the flux of ε0·εr·E is ε0·(εr_n + εr_m)/2·(V_n − V_m)/Δ times the dual face's area —
//! the same face terms the solver balances, so the charges of a converged solution are
//! consistent with its equations (and the capacitance of a parallel-plate capacitor is
//! exact on any mesh).

use rayon::prelude::*;

use super::{EPSILON_0, ElectrostaticsProblem, Geometry};
use crate::precision::Real;

/// Widths of the dual cells along one axis: (Δ⁻ + Δ⁺)/2, one side only at the ends.
fn dual_widths(nodes: &[f64]) -> Vec<f64> {
    let n = nodes.len();
    (0..n)
        .map(|i| {
            let dm = if i > 0 { nodes[i] - nodes[i - 1] } else { 0.0 };
            let dp = if i + 1 < n {
                nodes[i + 1] - nodes[i]
            } else {
                0.0
            };
            (dm + dp) / 2.0
        })
        .collect()
}

/// Charge (C) on each electrode id (index 0 unused), summed plane by plane in order.
pub fn charges<T: Real>(p: &ElectrostaticsProblem, g: &Geometry, v: &[T]) -> Vec<f64> {
    let [nx, ny, nz] = g.counts;
    let w = [
        dual_widths(&p.nodes[0]),
        dual_widths(&p.nodes[1]),
        dual_widths(&p.nodes[2]),
    ];
    let stride = [1, nx, nx * ny];
    let ids = g.volts.len();
    let planes: Vec<Vec<f64>> = (0..nz)
        .into_par_iter()
        .map(|k| {
            let mut q = vec![0.0; ids];
            for j in 0..ny {
                for i in 0..nx {
                    let n = (k * ny + j) * nx + i;
                    let id = g.id_volt[n];
                    if id == 0 {
                        continue;
                    }
                    let ijk = [i, j, k];
                    let e = g.epsr[g.id_epsr[n] as usize];
                    for a in 0..3 {
                        // Area of the dual face across axis a.
                        let area =
                            w[(a + 1) % 3][ijk[(a + 1) % 3]] * w[(a + 2) % 3][ijk[(a + 2) % 3]];
                        for up in [false, true] {
                            let c = ijk[a];
                            if (!up && c == 0) || (up && c + 1 == g.counts[a]) {
                                continue;
                            }
                            let m = if up { n + stride[a] } else { n - stride[a] };
                            if g.id_volt[m] == id {
                                continue;
                            }
                            let nb = if up { c + 1 } else { c - 1 };
                            let d = (p.nodes[a][nb] - p.nodes[a][c]).abs();
                            let ef = (e + g.epsr[g.id_epsr[m] as usize]) / 2.0;
                            q[id as usize] +=
                                EPSILON_0 * ef * (v[n].as_f64() - v[m].as_f64()) / d * area;
                        }
                    }
                }
            }
            q
        })
        .collect();
    let mut total = vec![0.0; ids];
    for plane in &planes {
        for (t, q) in total.iter_mut().zip(plane) {
            *t += q;
        }
    }
    total
}

/// E = −∇V at every node (central differences on the mesh, one-sided on the faces),
/// interleaved (Ex, Ey, Ez) per node, and |E|.
pub fn field<T: Real>(p: &ElectrostaticsProblem, v: &[T]) -> (Vec<T>, Vec<T>) {
    let counts = p.counts();
    let [nx, ny, _] = counts;
    let stride = [1, nx, nx * ny];
    let mut e = vec![T::zero(); 3 * v.len()];
    let mut mag = vec![T::zero(); v.len()];
    // A row of nodes per task: its j and k without a division per node.
    e.par_chunks_mut(3 * nx)
        .zip(mag.par_chunks_mut(nx))
        .enumerate()
        .for_each(|(row, (e, mag))| {
            let (j, k) = (row % ny, row / ny);
            for (i, (out, m)) in e.chunks_exact_mut(3).zip(mag.iter_mut()).enumerate() {
                let (n, ijk) = (row * nx + i, [i, j, k]);
                let mut s = 0.0;
                for a in 0..3 {
                    let c = ijk[a];
                    let lo = if c > 0 { c - 1 } else { c };
                    let hi = if c + 1 < counts[a] { c + 1 } else { c };
                    let (vl, vh) = (
                        v[n - (c - lo) * stride[a]].as_f64(),
                        v[n + (hi - c) * stride[a]].as_f64(),
                    );
                    let g = -(vh - vl) / (p.nodes[a][hi] - p.nodes[a][lo]);
                    out[a] = T::lit(g);
                    s += g * g;
                }
                *m = T::lit(s.sqrt());
            }
        });
    (e, mag)
}
