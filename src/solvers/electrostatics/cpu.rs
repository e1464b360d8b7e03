//! CPU reference engine: red-black SOR over z-planes with rayon. Within one colour every
//! update reads only nodes of the other colour (and its own), so planes run in parallel
//! and the result does not depend on the thread count; residual sums are added plane by
//! plane in order.

use std::ops::Range;
use std::sync::Arc;

use cudarc::driver::CudaStream;
use rayon::prelude::*;

use super::{ElectrostaticsProblem, Geometry};
use crate::error::Result;
use crate::memory::try_from_fn;
use crate::parallel::{Partials, Rows, Subdomain, Window, row_totals, slab_of};
use crate::precision::Real;
use crate::run::{Diagnostics, Engine, Field, Iterations, Restart, Status};

/// `RXp[i] = 1/(Δ⁺·(Δ⁺+Δ⁻)/2)`, `RXm[i] = 1/(Δ⁻·(Δ⁺+Δ⁻)/2)` at interior nodes (0 on faces).
pub fn axis_coefficients(nodes: &[f64]) -> (Vec<f64>, Vec<f64>) {
    let n = nodes.len();
    let (mut rp, mut rm) = (vec![0.0; n], vec![0.0; n]);
    for i in 1..n - 1 {
        let (dp, dm) = (nodes[i + 1] - nodes[i], nodes[i] - nodes[i - 1]);
        rp[i] = 1.0 / (dp * (dp + dm) / 2.0);
        rm[i] = 1.0 / (dm * (dp + dm) / 2.0);
    }
    (rp, rm)
}

/// The per-node charge term in the engine's precision, when ρ varies.
pub fn charge_per_node<T: Real>(g: &Geometry) -> Option<Vec<T>> {
    g.q_node
        .as_ref()
        .map(|q| q.par_iter().map(|&x| T::lit(x)).collect())
}

/// [`charge_per_node`] of the planes a slab's buffer holds.
pub fn charge_of_window<T: Real>(g: &Geometry, window: &Window) -> Option<Vec<T>> {
    let plane = g.counts[0] * g.counts[1];
    g.q_node.as_ref().map(|q| {
        slab_of(window, q, plane)
            .par_iter()
            .map(|&x| T::lit(x))
            .collect()
    })
}

/// ‖b − Av‖₂/‖b‖₂ of the node equations at the interior free nodes, in f64: b holds the
/// charge term and what held neighbours contribute, Av the rest. Face nodes enter with
/// the values they hold. The figure of merit a solve is judged by, unlike the SOR update
/// norm the iteration stops on.
pub fn true_residual<T: Real>(p: &ElectrostaticsProblem, g: &Geometry, v: &[T]) -> f64 {
    let [nx, ny, nz] = g.counts;
    let (ni, nj, nk) = (1usize, nx, nx * ny);
    let coefficients: Vec<(Vec<f64>, Vec<f64>)> =
        (0..3).map(|a| axis_coefficients(&p.nodes[a])).collect();
    let (r2, b2) = (1..nz - 1)
        .into_par_iter()
        .map(|k| {
            let (mut r2, mut b2) = (0.0f64, 0.0f64);
            for j in 1..ny - 1 {
                for i in 1..nx - 1 {
                    let n = k * nk + j * nj + i;
                    if g.id_volt[n] != 0 {
                        continue;
                    }
                    let e = g.epsr[g.id_epsr[n] as usize];
                    let (mut b, mut av) = (g.q_node.as_ref().map_or(g.q_uniform, |q| q[n]), 0.0);
                    let at = [i, j, k];
                    for (a, step) in [ni, nj, nk].into_iter().enumerate() {
                        let (rp, rm) = &coefficients[a];
                        for (m, r) in [(n + step, rp[at[a]]), (n - step, rm[at[a]])] {
                            let c = (e + g.epsr[g.id_epsr[m] as usize]) * r;
                            av += c * v[n].as_f64();
                            if g.id_volt[m] != 0 {
                                b += c * v[m].as_f64();
                            } else {
                                av -= c * v[m].as_f64();
                            }
                        }
                    }
                    r2 += (b - av) * (b - av);
                    b2 += b * b;
                }
            }
            (r2, b2)
        })
        .collect::<Vec<_>>()
        .iter()
        .fold((0.0, 0.0), |(a, b), (c, d)| (a + c, b + d));
    if b2 > 0.0 {
        (r2 / b2).sqrt()
    } else {
        r2.sqrt()
    }
}

/// The potential with every electrode at its voltage and every free node at 0.
pub fn initial_potential<T: Real>(g: &Geometry) -> Result<Vec<T>> {
    let volt = |id: u8| T::lit(g.volts[id as usize]);
    if g.held.is_none() {
        return try_from_fn(g.id_volt.len(), "the potential", |n| volt(g.id_volt[n]));
    }
    // Zeroed memory is mapped lazily: only the planes written take pages.
    let plane = g.counts[0] * g.counts[1];
    let mut v = vec![T::zero(); g.id_volt.len()];
    v.par_chunks_mut(plane)
        .zip(g.id_volt.par_chunks(plane))
        .enumerate()
        .filter(|(k, _)| g.holds(*k))
        .for_each(|(_, (v, ids))| {
            for (v, &id) in v.iter_mut().zip(ids) {
                *v = volt(id);
            }
        });
    Ok(v)
}

/// The potential an engine starts from, with its iteration count and status: a
/// checkpoint's V, or [`initial_potential`].
pub fn starting_state<T: Real>(
    g: &Geometry,
    restart: Option<Restart<T>>,
) -> Result<(Vec<T>, u64, Status)> {
    Ok(match restart {
        Some(mut r) => (r.take("V")?, r.step, r.status),
        None => (initial_potential(g)?, 0, Status::Running),
    })
}

/// A colour sweep's array shared by its threads (also stencil_table.rs's CPU engine).
#[derive(Clone, Copy)]
pub(super) struct Shared<T>(pub(super) *mut T);
// SAFETY: red-black colouring keeps the writes of one sweep (nodes of its colour) apart
// from its reads of other nodes (see `sweep`).
unsafe impl<T> Send for Shared<T> {}
unsafe impl<T> Sync for Shared<T> {}

impl<T> Shared<T> {
    // A method, so closures capture the Send + Sync wrapper, not its raw field.
    pub(super) fn ptr(self) -> *mut T {
        self.0
    }
}

pub struct CpuElectrostatics<T> {
    p: ElectrostaticsProblem,
    counts: [usize; 3],
    /// The z-planes updated and the planes the arrays below hold (the whole mesh, or a
    /// slab with two halo planes each side: see `compute`).
    window: Window,
    v: Vec<T>,
    id_volt: Vec<u8>,
    id_epsr: Vec<u8>,
    rp: [Vec<T>; 3],
    rm: [Vec<T>; 3],
    /// εr by class byte: any u8 indexes it, so the sweep's lookups need no bounds check.
    epsr: [T; 256],
    /// 2ρ/ε0: the charge term of the node equation, uniform or per node.
    q: T,
    q_node: Option<Vec<T>>,
    it: Iterations,
    /// Per owned plane of the iteration being computed: Σ res² and Σ V² of its red
    /// nodes, then of its black ones.
    partial: Vec<f64>,
}

/// Sums kept per plane (see `CpuElectrostatics::partial`).
pub(super) const PER_PLANE: usize = 4;

/// A CPU slab's iteration of the owned planes `rows` (the first owned plane `own`): each
/// plane's red sums (from `reds`, the red sweep's planes from `red_start`) and black sums
/// (`blacks`, over `rows`) into its PER_PLANE slots of `partial`.
pub(super) fn store_plane_sums(
    partial: &mut [f64],
    own: usize,
    rows: Range<usize>,
    red_start: usize,
    reds: &[(f64, f64)],
    blacks: &[(f64, f64)],
) {
    for (o, k) in rows.enumerate() {
        let (r, b) = (reds[k - red_start], blacks[o]);
        let at = PER_PLANE * (k - own);
        partial[at..at + PER_PLANE].copy_from_slice(&[r.0, r.1, b.0, b.1]);
    }
}

/// Refuse a mesh whose potential and id arrays this machine could never hold: what the
/// CPU engine keeps, and what every engine keeps on the host.
pub fn ensure_host_holds<T: Real>(p: &ElectrostaticsProblem) -> Result<()> {
    crate::memory::ensure_host_fits(
        (p.points() * (std::mem::size_of::<T>() + 2)) as u128,
        "the potential and the id arrays",
    )
}

impl<T: Real> CpuElectrostatics<T> {
    pub fn new(
        p: &ElectrostaticsProblem,
        g: Geometry,
        restart: Option<Restart<T>>,
    ) -> Result<Self> {
        ensure_host_holds::<T>(p)?;
        let (v, steps, status) = starting_state(&g, restart)?;
        let window = Window::whole(g.counts[2], false);
        Self::on_window(p, &g, window, &v, steps, status)
    }

    /// An engine for the z-planes `window` owns (two halo planes each side), from the
    /// whole potential `v` after `step` iterations in `status`.
    pub fn on_window(
        p: &ElectrostaticsProblem,
        g: &Geometry,
        window: Window,
        v: &[T],
        step: u64,
        status: Status,
    ) -> Result<Self> {
        let coefficients = |a: usize| {
            let (rp, rm) = axis_coefficients(&p.nodes[a]);
            (
                rp.iter().map(|&x| T::lit(x)).collect::<Vec<T>>(),
                rm.iter().map(|&x| T::lit(x)).collect::<Vec<T>>(),
            )
        };
        let [(xp, xm), (yp, ym), (zp, zm)] = [coefficients(0), coefficients(1), coefficients(2)];
        let plane = g.counts[0] * g.counts[1];
        Ok(Self {
            epsr: std::array::from_fn(|c| g.epsr.get(c).map_or(T::zero(), |&e| T::lit(e))),
            q: T::lit(g.q_uniform),
            q_node: charge_of_window::<T>(g, &window),
            p: p.clone(),
            counts: g.counts,
            v: slab_of(&window, v, plane),
            id_volt: slab_of(&window, &g.id_volt, plane),
            id_epsr: slab_of(&window, &g.id_epsr, plane),
            rp: [xp, yp, zp],
            rm: [xm, ym, zm],
            it: Iterations::new(step, status),
            partial: vec![0.0; PER_PLANE * window.own.len()],
            window,
        })
    }

    /// One colour's sweep (`oe` = (i + j + k) mod 2) over the grid planes `planes`;
    /// returns (Σ res², Σ V² of the updated interior nodes) per plane, each added in node
    /// order.
    fn sweep(&mut self, oe: usize, planes: Range<usize>) -> Vec<(f64, f64)> {
        let [nx, ny, nz] = self.counts;
        let (nj, nk) = (nx, nx * ny);
        let base = self.window.base;
        let v = Shared(self.v.as_mut_ptr());
        let (idv, ide, epsr) = (&self.id_volt, &self.id_epsr, &self.epsr);
        let (rp, rm, q, q_node) = (&self.rp, &self.rm, self.q, self.q_node.as_deref());
        let omega = T::lit(self.p.omega);
        planes
            .into_par_iter()
            .map(|k| {
                // SAFETY (every access below): this closure writes only nodes of colour
                // `oe` in plane k and reads nodes of the other colour (any plane) or the
                // node it writes; no other thread writes those during this sweep.
                let at = |n: usize| unsafe { *v.ptr().add(n) };
                let set = |n: usize, x: T| unsafe { *v.ptr().add(n) = x };
                // Zero normal field on the box faces: a free face node copies its inner
                // neighbour (the study's order: x faces, then y, then z).
                let face = |n: usize, i: usize, j: usize| {
                    if idv[n] != 0 {
                        return;
                    }
                    let from = if i == 0 {
                        n + 1
                    } else if i == nx - 1 {
                        n - 1
                    } else if j == 0 {
                        n + nj
                    } else if j == ny - 1 {
                        n - nj
                    } else if k == 0 {
                        n + nk
                    } else {
                        n - nk
                    };
                    set(n, at(from));
                };
                let (mut res2, mut v2) = (0.0f64, 0.0f64);
                let first = (k as isize - base) as usize * nk;
                for j in 0..ny {
                    let i0 = (oe + j + k) % 2;
                    let row = first + j * nj;
                    if j == 0 || j == ny - 1 || k == 0 || k == nz - 1 {
                        for i in (i0..nx).step_by(2) {
                            face(row + i, i, j);
                        }
                        continue;
                    }
                    if i0 == 0 {
                        face(row, 0, j);
                    }
                    // The row's interior nodes of colour oe, in order (their sums too).
                    // Their class bytes and those of the rows around, as slices a row long
                    // indexed by i < nx - 1, so the compiler can drop the bounds checks.
                    let class_row = |r: usize| &ide[r..r + nx];
                    let (c, ym, yp) = (class_row(row), class_row(row - nj), class_row(row + nj));
                    let (zm, zp) = (class_row(row - nk), class_row(row + nk));
                    let (held, xp, xm) = (&idv[row..row + nx], &rp[0][..nx], &rm[0][..nx]);
                    let e_of = |b: u8| epsr[b as usize];
                    let (ryp, rym, rzp, rzm) = (rp[1][j], rm[1][j], rp[2][k], rm[2][k]);
                    let mut i = if i0 == 0 { 2 } else { 1 };
                    while i < nx - 1 {
                        let n = row + i;
                        if held[i] == 0 {
                            let e = e_of(c[i]);
                            let axp = (e + e_of(c[i + 1])) * xp[i];
                            let axm = (e + e_of(c[i - 1])) * xm[i];
                            let ayp = (e + e_of(yp[i])) * ryp;
                            let aym = (e + e_of(ym[i])) * rym;
                            let azp = (e + e_of(zp[i])) * rzp;
                            let azm = (e + e_of(zm[i])) * rzm;
                            let sum = axp * at(n + 1)
                                + axm * at(n - 1)
                                + ayp * at(n + nj)
                                + aym * at(n - nj)
                                + azp * at(n + nk)
                                + azm * at(n - nk);
                            let den = axp + axm + ayp + aym + azp + azm;
                            let old = at(n);
                            let q = q_node.map_or(q, |a| a[n]);
                            // A reciprocal and a product, as the CUDA kernels
                            // (kernels.cu sor_residual): the same bits on both.
                            let res = omega * ((sum + q) * (T::one() / den) - old);
                            let new = old + res;
                            set(n, new);
                            res2 += res.as_f64() * res.as_f64();
                            v2 += new.as_f64() * new.as_f64();
                        }
                        i += 2;
                    }
                    if (nx - 1 + j + k) % 2 == oe {
                        face(row + nx - 1, nx - 1, j);
                    }
                }
                (res2, v2)
            })
            .collect()
    }
}

impl<T: Real> Engine for CpuElectrostatics<T> {
    type Real = T;

    fn advance(&mut self, steps: u64) -> Result<()> {
        for _ in 0..steps {
            if !self.it.running() {
                break;
            }
            self.compute(1, self.window.own.clone(), None)?;
            self.commit(1);
            let totals = row_totals(&self.take_partial(), PER_PLANE);
            self.record_total(&totals);
        }
        Ok(())
    }

    fn diagnostics(&mut self) -> Result<Diagnostics> {
        Ok(self.it.diagnostics())
    }

    fn snapshot(&mut self) -> Result<Field<T>> {
        let data = self.owned()?;
        Ok(field_of(&self.p, "V", data))
    }
}

impl<T: Real> Subdomain for CpuElectrostatics<T> {
    fn window(&self) -> &Window {
        &self.window
    }
    fn row_len(&self) -> usize {
        self.counts[0] * self.counts[1]
    }
    fn field(&mut self) -> Rows<'_, T> {
        Rows::Host(&mut self.v)
    }
    fn steps_per_exchange(&self) -> u64 {
        1
    }
    /// One red-black iteration of the owned planes `rows`. The red nodes of the planes
    /// next to them are updated too (from the halo's black nodes, as their owner updates
    /// them), so the black sweep reads the red values of this iteration without a second
    /// exchange: a halo of two planes serves one iteration.
    fn compute(
        &mut self,
        steps: u64,
        rows: Range<usize>,
        _: Option<&Arc<CudaStream>>,
    ) -> Result<()> {
        assert_eq!(
            steps, 1,
            "the CPU engine takes one iteration between exchanges"
        );
        if !self.it.running() {
            return Ok(());
        }
        let red = super::red_planes(&self.window, &rows);
        let (reds, blacks) = (self.sweep(0, red.clone()), self.sweep(1, rows.clone()));
        let own = self.window.own.start;
        store_plane_sums(&mut self.partial, own, rows, red.start, &reds, &blacks);
        Ok(())
    }
    fn commit(&mut self, _steps: u64) {}
    fn partials(&mut self) -> Partials {
        Partials::Host { per_row: PER_PLANE }
    }
    fn take_partial(&mut self) -> Vec<f64> {
        let zeros = vec![0.0; self.partial.len()];
        std::mem::replace(&mut self.partial, zeros)
    }
    fn record_total(&mut self, t: &[f64]) {
        if self.it.running() {
            // The study's order: the red sums, then the black ones.
            let (res, norm) = ((t[0] + t[2]).sqrt(), (t[1] + t[3]).sqrt());
            let test = self.p.tests_after(self.it.steps + 1);
            let rel = if norm > 0.0 { res / norm } else { res };
            self.it.record_where(rel, self.p.tolerance, test);
        }
    }
    fn running(&self) -> bool {
        self.it.running()
    }
}

/// A field on the problem's mesh.
pub fn field_of<T>(p: &ElectrostaticsProblem, name: &'static str, data: Vec<T>) -> Field<T> {
    let coords = p.coords();
    Field {
        name,
        shape: p.shape(),
        spacing: coords.iter().map(|c| c[1] - c[0]).collect(),
        origin: coords.iter().map(|c| c[0]).collect(),
        coords: Some(coords),
        data,
    }
}
