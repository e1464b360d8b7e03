//! The blocked kernel's form of the SOR update (kernels.cu `es_blocked`): each node has
//! a 16-bit id that indexes a table of eight weights per distinct stencil, made once here.
//! For a free interior node the weights are its six face coefficients already divided by
//! their sum and multiplied by ω, the charge term likewise, and 1 − ω, so an update is
//!
//! ```text
//! V' = O·V + B + Axm·Vxm + Axp·Vxp + Aym·Vym + Ayp·Vyp + Azm·Vzm + Azp·Vzp
//! ```
//!
//! as seven multiply-adds in that order (no εr lookups, no division: 29 instructions an
//! update against the per-colour sweep's 95, docs/PERFORMANCE.md). The weights are
//! computed in f64 and rounded once, so V differs from the per-colour engines' in the last
//! bits; [`iterate`] is this form's CPU reference, which the kernel matches bit for bit.
//!
//! Ids: 0 for held nodes (A = B = 0, O = 1: V' = V), 1–6 for free face nodes (a copy of the
//! inner neighbour, as the other engines do it: A = 1 on that face, O = 0; the x faces
//! first, then y, then z), then the interior stencils, in the order of their keys. Values
//! outside the mesh read as 0; rows are padded to an even pitch with held zeros.

use super::cpu::{self, PER_PLANE, Shared, axis_coefficients};
use super::{ElectrostaticsProblem, Geometry, Update};
use crate::error::{Error, Result};
use crate::parallel::{Partials, Rows, Subdomain, Window, row_totals, slab_view};
use crate::precision::Real;
use crate::run::{Diagnostics, Engine, Field, Iterations, Restart, Status};
use cudarc::driver::CudaStream;
use rayon::prelude::*;
use std::borrow::Cow;
use std::collections::{BTreeSet, HashMap};
use std::ops::Range;
use std::sync::Arc;

/// Table entries a 16-bit id can index (a GPU's shared memory holds fewer: cuda_blocked.rs).
pub const MAX_ENTRIES: usize = 1 << 16;
/// Weights per entry: Axm, Axp, Aym, Ayp, Azm, Azp, B, O.
pub const WEIGHTS: usize = 8;
/// Ids before the interior stencils: held, then a face copy per face.
pub const FIRST_FREE: u16 = 7;

#[derive(Debug)]
pub struct StencilTable<T> {
    /// Node (i, j, k) at `(k·ny + j)·pitch + i`.
    pub ids: Vec<u16>,
    pub table: Vec<T>,
    pub pitch: usize,
    /// With a charge per node: each node's charge term (ω·q/Σc, 0 off the free interior),
    /// laid out as `ids`, taking the place of the table's B.
    pub charge: Option<Vec<T>>,
}

impl<T: Copy> StencilTable<T> {
    pub fn entries(&self) -> usize {
        self.table.len() / WEIGHTS
    }

    /// The table with the ids and charge terms of the planes `window`'s buffer holds
    /// (`ny` rows a plane).
    pub fn of_window(&self, window: &Window, ny: usize) -> Self {
        let (ids, charge) = self.window_view(window, ny);
        Self {
            ids: ids.into_owned(),
            table: self.table.clone(),
            pitch: self.pitch,
            charge: charge.map(Cow::into_owned),
        }
    }

    /// The ids and charge terms of the planes `window`'s buffer holds, borrowed where
    /// they lie in order in the mesh's (a device engine uploads them as they are).
    pub fn window_view(
        &self,
        window: &Window,
        ny: usize,
    ) -> (Cow<'_, [u16]>, Option<Cow<'_, [T]>>) {
        let plane = self.pitch * ny;
        (
            slab_view(window, &self.ids, plane),
            self.charge.as_ref().map(|c| slab_view(window, c, plane)),
        )
    }
}

/// A hash of the keys' bits (the default SipHash costs more than the lookups it serves).
#[derive(Default)]
struct KeyHasher(u64);

impl std::hash::Hasher for KeyHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0.rotate_left(5) ^ b as u64).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
        }
    }
    fn write_u128(&mut self, v: u128) {
        let x = (v as u64) ^ ((v >> 64) as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        self.0 = (self.0 ^ x)
            .wrapping_mul(0x51_7c_c1_b7_27_22_0a_95)
            .rotate_left(29);
    }
}

type KeyMap = HashMap<u128, u16, std::hash::BuildHasherDefault<KeyHasher>>;

/// Each index of an axis: the index of its (r+, r−) pair among the axis's distinct pairs.
/// Pairs within a relative 1e-12 of one found before count as it (a uniform mesh's node
/// coordinates differ in their last bits), so a uniform mesh has one and the table's
/// weights use that one's values.
fn axis_classes(nodes: &[f64]) -> AxisClasses {
    let (rp, rm) = axis_coefficients(nodes);
    let near = |a: f64, b: f64| (a - b).abs() <= 1e-12 * a.abs().max(b.abs());
    let mut pairs: Vec<(f64, f64)> = Vec::new();
    let classes = (0..nodes.len())
        .map(|i| {
            let found = pairs
                .iter()
                .position(|&(p, m)| near(p, rp[i]) && near(m, rm[i]));
            found.unwrap_or_else(|| {
                pairs.push((rp[i], rm[i]));
                pairs.len() - 1
            }) as u32
        })
        .collect();
    (classes, pairs)
}

/// An interior free node's stencil key: the class bytes of it and its six neighbours,
/// then the axis classes of its i, j, k.
type Key = u128;

/// An axis's class per node index and its distinct (r+, r−) pairs (`axis_classes`).
type AxisClasses = (Vec<u32>, Vec<(f64, f64)>);

/// Each axis's classes and pairs (see `axis_classes`), or why a key cannot hold them (24
/// bits of class per axis).
fn mesh_axes(p: &ElectrostaticsProblem) -> std::result::Result<[AxisClasses; 3], String> {
    let axes = [0, 1, 2].map(|a| axis_classes(&p.nodes[a]));
    if axes.iter().any(|(_, pairs)| pairs.len() >= 1 << 24) {
        return Err("too many distinct mesh spacings".into());
    }
    Ok(axes)
}

/// The keys of the free interior nodes of the planes `plane` admits, or why there are
/// none to count. Past `most` keys it stops: then it gives `most` + 1 of them.
fn stencil_keys(
    p: &ElectrostaticsProblem,
    g: &Geometry,
    plane: impl Fn(usize) -> bool + Sync,
    most: usize,
) -> std::result::Result<BTreeSet<Key>, String> {
    let [nx, ny, nz] = g.counts;
    let (nj, nk) = (nx, nx * ny);
    let axes = mesh_axes(p)?;
    let keys: BTreeSet<Key> = (1..nz.saturating_sub(1))
        .into_par_iter()
        .filter(|&k| plane(k))
        .map(|k| {
            let mut set = BTreeSet::new();
            // Neighbouring nodes mostly share a key: insert only a change (set-up time).
            let mut last = None;
            for j in 1..ny - 1 {
                for i in 1..nx - 1 {
                    let n = k * nk + j * nj + i;
                    if g.id_volt[n] == 0 {
                        let key = key_of(g, &axes, n, i, j, k);
                        if last != Some(key) {
                            last = Some(key);
                            set.insert(key);
                            if set.len() > most {
                                return set;
                            }
                        }
                    }
                }
            }
            set
        })
        .reduce(BTreeSet::new, |mut a, mut b| {
            a.append(&mut b);
            a
        });
    Ok(keys.into_iter().take(most + 1).collect())
}

fn key_of(g: &Geometry, axes: &[AxisClasses; 3], n: usize, i: usize, j: usize, k: usize) -> Key {
    let [nx, ny, _] = g.counts;
    let (nj, nk) = (nx, nx * ny);
    let c = &g.id_epsr;
    let mut bytes = 0u64;
    for m in [n, n - 1, n + 1, n - nj, n + nj, n - nk, n + nk] {
        bytes = bytes << 8 | c[m] as u64;
    }
    bytes as Key
        | (axes[0].0[i] as Key) << 56
        | (axes[1].0[j] as Key) << 80
        | (axes[2].0[k] as Key) << 104
}

/// The number of entries the table of `p`'s mesh with the geometry `g` would have, up to
/// `most` (more: `most` + 1), or why it has none. It stops counting past `most`, so a
/// mesh whose every node has a stencil of its own costs no more than one that fits.
/// Under mpirun with each rank holding its slab's planes of the geometry, the ranks' keys
/// are gathered: every rank gets the whole mesh's count.
pub fn count_entries(
    p: &ElectrostaticsProblem,
    g: &Geometry,
    most: usize,
) -> Result<std::result::Result<usize, String>> {
    // Planes whose neighbours are held too: a rank's owned planes and the inner halo,
    // whose union over the ranks is every plane.
    let known = |k: usize| g.holds(k - 1) && g.holds(k) && g.holds(k + 1);
    let most_keys = most.saturating_sub(FIRST_FREE as usize);
    let keys = match stencil_keys(p, g, known, most_keys) {
        Ok(keys) => keys,
        Err(why) => return Ok(Err(why)),
    };
    let keys = match (&g.held, crate::parallel::world::World::current()) {
        (Some(_), Some(w)) => {
            use crate::parallel::world::{all_gather, from_bytes, to_bytes};
            let mine: Vec<Key> = keys.into_iter().collect();
            let lens = all_gather(&to_bytes(&[mine.len() as u64]), &vec![8; w.size])?;
            let counts: Vec<usize> = from_bytes::<u64>(&lens)
                .iter()
                .map(|&n| n as usize * size_of::<Key>())
                .collect();
            let all = all_gather(&to_bytes(&mine), &counts)?;
            from_bytes::<Key>(&all).into_iter().collect()
        }
        _ => keys,
    };
    Ok(Ok((FIRST_FREE as usize + keys.len()).min(most + 1)))
}

/// The stencil table of `p`'s mesh with the geometry `g`, or why there is none: more
/// distinct stencils than a 16-bit id indexes.
pub fn build<T: Real>(
    p: &ElectrostaticsProblem,
    g: &Geometry,
) -> std::result::Result<StencilTable<T>, String> {
    let [nx, ny, nz] = g.counts;
    let (nj, nk) = (nx, nx * ny);
    // Under mpirun a rank may hold only its slab's planes of the geometry (g.held).
    let most = MAX_ENTRIES - FIRST_FREE as usize;
    let too_many = || {
        format!(
            "more than {most} distinct stencils (εr and mesh spacings around a node), the \
             most a 16-bit id indexes"
        )
    };
    let axes = mesh_axes(p)?;
    // One scan of the keys (each costs seven neighbour loads): every plane's ids, its
    // free interior nodes numbered by their key's first sight in the plane (from
    // FIRST_FREE), and those keys; then the planes' numbers become the table's ids, which
    // follow the keys' order over the whole mesh.
    let pitch = nx + (nx & 1);
    let mut ids = vec![0u16; pitch * ny * nz];
    let plane_keys: Vec<Option<Vec<Key>>> = ids
        .par_chunks_mut(pitch * ny)
        .enumerate()
        .map(|(k, plane)| {
            let mut keys: Vec<Key> = Vec::new();
            if !g.holds(k) {
                return Some(keys);
            }
            let mut seen = KeyMap::default();
            // The last key looked up and its number: neighbours mostly share it.
            let mut last: Option<(Key, u16)> = None;
            for j in 0..ny {
                for i in 0..nx {
                    let n = k * nk + j * nj + i;
                    if g.id_volt[n] != 0 {
                        continue;
                    }
                    plane[j * pitch + i] = if i == 0 {
                        2 // copy from x + 1
                    } else if i == nx - 1 {
                        1
                    } else if j == 0 {
                        4
                    } else if j == ny - 1 {
                        3
                    } else if k == 0 {
                        6
                    } else if k == nz - 1 {
                        5
                    } else {
                        let key = key_of(g, &axes, n, i, j, k);
                        match last {
                            Some((was, id)) if was == key => id,
                            _ => {
                                let id = match seen.get(&key) {
                                    Some(&id) => id,
                                    None if keys.len() == most => return None,
                                    None => {
                                        keys.push(key);
                                        let id = FIRST_FREE + (keys.len() - 1) as u16;
                                        seen.insert(key, id);
                                        id
                                    }
                                };
                                last = Some((key, id));
                                id
                            }
                        }
                    };
                }
            }
            Some(keys)
        })
        .collect();
    let Some(plane_keys) = plane_keys.into_iter().collect::<Option<Vec<_>>>() else {
        return Err(too_many());
    };
    let keys: BTreeSet<Key> = plane_keys.iter().flatten().copied().collect();
    if keys.len() > most {
        return Err(too_many());
    }
    let entries = FIRST_FREE as usize + keys.len();
    let ids_of: KeyMap = keys
        .iter()
        .enumerate()
        .map(|(r, &key)| (key, FIRST_FREE + r as u16))
        .collect();
    ids.par_chunks_mut(pitch * ny)
        .zip(&plane_keys)
        .filter(|(_, keys)| !keys.is_empty())
        .for_each(|(plane, keys)| {
            let id: Vec<u16> = keys.iter().map(|key| ids_of[key]).collect();
            for v in plane.iter_mut().filter(|v| **v >= FIRST_FREE) {
                *v = id[(*v - FIRST_FREE) as usize];
            }
        });

    let mut table = vec![T::zero(); WEIGHTS * entries];
    table[WEIGHTS - 1] = T::one(); // held: O = 1
    for f in 0..6 {
        // A face copy from face neighbour f (Axm, Axp, Aym, Ayp, Azm, Azp), O = 0.
        table[WEIGHTS * (1 + f) + f] = T::one();
    }
    let omega = p.omega;
    // Σc per interior stencil, for a per-node charge's terms.
    let mut dens = vec![0.0f64; entries];
    for (&key, &id) in &ids_of {
        let class = |slot: u32| (key >> (8 * (6 - slot)) & 0xff) as usize;
        let e = g.epsr[class(0)];
        let pair = |a: usize, shift: u32| axes[a].1[(key >> shift & 0xff_ffff) as usize];
        let [(xp, xm), (yp, ym), (zp, zm)] = [pair(0, 56), pair(1, 80), pair(2, 104)];
        let c = [
            (e + g.epsr[class(1)]) * xm,
            (e + g.epsr[class(2)]) * xp,
            (e + g.epsr[class(3)]) * ym,
            (e + g.epsr[class(4)]) * yp,
            (e + g.epsr[class(5)]) * zm,
            (e + g.epsr[class(6)]) * zp,
        ];
        let den: f64 = c.iter().sum();
        dens[id as usize] = den;
        let t = &mut table[WEIGHTS * id as usize..WEIGHTS * (id as usize + 1)];
        for f in 0..6 {
            t[f] = T::lit(omega * c[f] / den);
        }
        t[6] = T::lit(omega * g.q_uniform / den);
        t[7] = T::lit(1.0 - omega);
    }

    // The same formula as the table's B, with the node's charge.
    let charge = g.q_node.as_ref().map(|q| {
        let mut b = vec![T::zero(); ids.len()];
        b.par_chunks_mut(pitch * ny)
            .enumerate()
            .filter(|(k, _)| g.holds(*k))
            .for_each(|(k, plane)| {
                for j in 0..ny {
                    for i in 0..nx {
                        let id = ids[(k * ny + j) * pitch + i];
                        if id >= FIRST_FREE {
                            let n = k * nk + j * nj + i;
                            plane[j * pitch + i] = T::lit(omega * q[n] / dens[id as usize]);
                        }
                    }
                }
            });
        b
    });
    Ok(StencilTable {
        ids,
        table,
        pitch,
        charge,
    })
}

/// `v` (`counts`, x fastest, unpadded) in the table's padded layout, and back.
pub fn pad<T: Real>(v: &[T], counts: [usize; 3], pitch: usize) -> Vec<T> {
    pad_window(v, counts, &Window::whole(counts[2], false), pitch)
}

/// The planes `window`'s buffer holds of `v` (`counts`, unpadded), padded: a plane per
/// thread, straight from `v` (set-up time on large meshes).
pub fn pad_window<T: Real>(v: &[T], counts: [usize; 3], window: &Window, pitch: usize) -> Vec<T> {
    let [nx, ny, _] = counts;
    let mut out = vec![T::zero(); pitch * ny * window.rows];
    out.par_chunks_mut(pitch * ny)
        .enumerate()
        .for_each(|(l, plane)| {
            let k = window.grid_row(l);
            let src = &v[k * nx * ny..(k + 1) * nx * ny];
            for (row, src) in plane.chunks_mut(pitch).zip(src.chunks(nx)) {
                // −0 held values become +0, as the table's update of a held node makes them.
                for (o, &s) in row.iter_mut().zip(src) {
                    *o = s + T::zero();
                }
            }
        });
    out
}

pub fn unpad<T: Real>(v: &[T], counts: [usize; 3], pitch: usize) -> Vec<T> {
    let nx = counts[0];
    let mut out = vec![T::zero(); v.len() / pitch * nx];
    out.par_chunks_mut(nx)
        .zip(v.par_chunks(pitch))
        .for_each(|(o, row)| o.copy_from_slice(&row[..nx]));
    out
}

/// The update of one node from its table entry `w`, its charge term `b` (the entry's B, or
/// the node's own), its value and its neighbours' (x−, x+, y−, y+, z−, z+): the kernel's
/// operations in the kernel's order.
#[inline]
pub fn update<T: Real>(w: &[T], b: T, v: T, nb: [T; 6]) -> T {
    let mut s = w[7].mul_add(v, b);
    for f in 0..6 {
        s = w[f].mul_add(nb[f], s);
    }
    s
}

/// The refusal of the table form for `p` (a problem of `update = "table"`, or the tuning
/// knob `KEISAN_ES_KERNEL=blocked` on a classic one), saying why.
pub fn refusal(p: &ElectrostaticsProblem, why: &str) -> Error {
    match p.update {
        Update::Table => Error::invalid(
            "electrostatics.update",
            "table",
            format!("{why}; use update = \"classic\""),
        ),
        Update::Classic | Update::Auto => Error::invalid(
            "KEISAN_ES_KERNEL",
            "blocked",
            format!("the blocked kernel does not take this problem: {why}"),
        ),
    }
}

/// [`build`], or its [`refusal`].
pub fn build_or_refuse<T: Real>(
    p: &ElectrostaticsProblem,
    g: &Geometry,
) -> Result<StencilTable<T>> {
    build(p, g).map_err(|why| refusal(p, &format!("this problem has no stencil table: {why}")))
}

/// One colour's update of grid plane `k` of `v` (padded layout, `counts` unpadded, its
/// plane 0 the grid's plane `base`, as `t`'s ids); its free interior nodes' (Σ res², Σ V²)
/// in node order. Values outside the mesh read as 0.
///
/// # Safety
/// `v` holds the table's layout and the planes k − 1 ..= k + 1 within the mesh; no other
/// thread writes plane k's nodes of `colour` or reads them, nor writes any node of the
/// other colour, meanwhile.
unsafe fn sweep_plane<T: Real>(
    v: Shared<T>,
    t: &StencilTable<T>,
    counts: [usize; 3],
    colour: usize,
    k: usize,
    base: usize,
) -> (f64, f64) {
    // The multiply-adds as instructions where the CPU has them, not calls to libm's fma
    // (the same rounding: 2.5× the throughput on the 2-core development machine).
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("fma") {
        // SAFETY: the CPU has FMA; the rest as the caller promises.
        return unsafe { sweep_plane_fma(v, t, counts, colour, k, base) };
    }
    // SAFETY: as the caller promises.
    unsafe { sweep_plane_with(v, t, counts, colour, k, base) }
}

/// [`sweep_plane`] compiled with FMA instructions.
///
/// # Safety
/// As [`sweep_plane`]'s, on a CPU with FMA.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "fma")]
unsafe fn sweep_plane_fma<T: Real>(
    v: Shared<T>,
    t: &StencilTable<T>,
    counts: [usize; 3],
    colour: usize,
    k: usize,
    base: usize,
) -> (f64, f64) {
    // SAFETY: as the caller promises.
    unsafe { sweep_plane_with(v, t, counts, colour, k, base) }
}

/// [`sweep_plane`]'s body: rows on the mesh's faces and each row's end nodes with their
/// neighbours tested against the mesh, the rest without.
///
/// # Safety
/// As [`sweep_plane`]'s.
#[inline(always)]
unsafe fn sweep_plane_with<T: Real>(
    v: Shared<T>,
    t: &StencilTable<T>,
    counts: [usize; 3],
    colour: usize,
    k: usize,
    base: usize,
) -> (f64, f64) {
    let [nx, ny, nz] = counts;
    let (pitch, pj, pk) = (t.pitch, t.pitch, t.pitch * ny);
    // SAFETY: as the caller promises, for every access below.
    let at = |n: usize| unsafe { *v.ptr().add(n) };
    let (mut res2, mut v2) = (0.0f64, 0.0f64);
    let mut node = |n: usize, i: usize, nb: [T; 6]| {
        let id = t.ids[n] as usize;
        let old = at(n);
        let w = &t.table[WEIGHTS * id..WEIGHTS * (id + 1)];
        let b = t.charge.as_ref().map_or(w[6], |c| c[n]);
        let new = update(w, b, old, nb);
        unsafe { *v.ptr().add(n) = new };
        if id >= FIRST_FREE as usize && i < nx {
            let r = (new - old).as_f64();
            res2 += r * r;
            v2 += new.as_f64() * new.as_f64();
        }
    };
    let checked = |n: usize, i: usize, j: usize| {
        [
            if i > 0 { at(n - 1) } else { T::zero() },
            if i + 1 < pitch { at(n + 1) } else { T::zero() },
            if j > 0 { at(n - pj) } else { T::zero() },
            if j + 1 < ny { at(n + pj) } else { T::zero() },
            if k > 0 { at(n - pk) } else { T::zero() },
            if k + 1 < nz { at(n + pk) } else { T::zero() },
        ]
    };
    for j in 0..ny {
        let row = (k - base) * pk + j * pj;
        let first = (colour + j + k) % 2;
        if j == 0 || j + 1 == ny || k == 0 || k + 1 == nz {
            for i in (first..pitch).step_by(2) {
                node(row + i, i, checked(row + i, i, j));
            }
            continue;
        }
        // Columns 1 ..= pitch − 2 have all six neighbours in the mesh's buffer.
        let mut i = first;
        if i == 0 {
            node(row, 0, checked(row, 0, j));
            i = 2;
        }
        while i + 1 < pitch {
            let n = row + i;
            let nb = [
                at(n - 1),
                at(n + 1),
                at(n - pj),
                at(n + pj),
                at(n - pk),
                at(n + pk),
            ];
            node(n, i, nb);
            i += 2;
        }
        if i < pitch {
            node(row + i, i, checked(row + i, i, j));
        }
    }
    (res2, v2)
}

/// `iterations` red-black iterations of the table form on `v` (padded layout), plane after
/// plane; the reference the blocked kernel equals bit for bit. Returns per iteration the
/// sums (Σ res², Σ V²) over its free interior nodes, red then black, added plane by plane.
pub fn iterate<T: Real>(
    v: &mut [T],
    t: &StencilTable<T>,
    counts: [usize; 3],
    iterations: usize,
) -> Vec<[f64; 4]> {
    let shared = Shared(v.as_mut_ptr());
    (0..iterations)
        .map(|_| {
            let mut s = [0.0; 4];
            for colour in 0..2 {
                for k in 0..counts[2] {
                    // SAFETY: one plane at a time, on this thread.
                    let (r, n) = unsafe { sweep_plane(shared, t, counts, colour, k, 0) };
                    s[2 * colour] += r;
                    s[2 * colour + 1] += n;
                }
            }
            s
        })
        .collect()
}

/// The CPU engine of the table form (`update = "table"`): the blocked kernel's arithmetic
/// node for node (its V bit for bit), rayon over z-planes, and its stopping rule: a run
/// tests convergence at multiples of the problem's check interval (an even number) only,
/// and its history holds the residuals the GPU engine measures. On a slab of a decomposed run (halos of four
/// planes; it needs two) an iteration is red over the owned planes and one beyond each end, then
/// black over the owned ones, as the classic CPU engine's; its per-plane sums, added in
/// plane order over all slabs, give the one-slab engine's bit for bit.
pub struct CpuTable<T> {
    p: ElectrostaticsProblem,
    counts: [usize; 3],
    /// The ids (and charge terms) of the window's planes.
    t: StencilTable<T>,
    window: Window,
    v: Vec<T>,
    it: Iterations,
    /// Per owned plane of the iteration being computed: Σ res², Σ V² of its red nodes,
    /// then of its black ones.
    partial: Vec<f64>,
}

impl<T: Real> CpuTable<T> {
    pub fn new(
        p: &ElectrostaticsProblem,
        g: &Geometry,
        restart: Option<Restart<T>>,
    ) -> Result<Self> {
        let t = build_or_refuse::<T>(p, g)?;
        let (v0, step, status) = cpu::starting_state(g, restart)?;
        let window = Window::whole(g.counts[2], false);
        Ok(Self::on_window(p, &t, g.counts, window, &v0, step, status))
    }

    /// An engine for the z-planes `window` owns, with the whole mesh's table `t`, from the
    /// whole potential `v` (unpadded) after `step` iterations in `status`.
    pub fn on_window(
        p: &ElectrostaticsProblem,
        t: &StencilTable<T>,
        counts: [usize; 3],
        window: Window,
        v: &[T],
        step: u64,
        status: Status,
    ) -> Self {
        let padded = pad_window(v, counts, &window, t.pitch);
        Self {
            v: padded,
            t: t.of_window(&window, counts[1]),
            p: p.as_table(),
            counts,
            it: Iterations::new(step, status),
            partial: vec![0.0; PER_PLANE * window.own.len()],
            window,
        }
    }

    /// One colour's sweep over the grid planes `planes`: per plane, (Σ res², Σ V²) of its
    /// free interior nodes in node order.
    fn sweep(&mut self, colour: usize, planes: Range<usize>) -> Vec<(f64, f64)> {
        let (t, counts, base) = (&self.t, self.counts, self.window.base as usize);
        let v = Shared(self.v.as_mut_ptr());
        planes
            .into_par_iter()
            // SAFETY: each thread updates its own planes' nodes of `colour` and reads
            // only nodes of the other colour besides them (red-black colouring); the
            // window holds one plane beyond every swept one within the mesh.
            .map(|k| unsafe { sweep_plane(v, t, counts, colour, k, base) })
            .collect()
    }
}

impl<T: Real> Engine for CpuTable<T> {
    type Real = T;

    fn advance(&mut self, steps: u64) -> Result<()> {
        for _ in 0..steps {
            if !self.it.running() {
                break;
            }
            self.compute(1, self.window.own.clone(), None)?;
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
        Ok(cpu::field_of(&self.p, "V", data))
    }

    fn describe(&self) -> Option<String> {
        Some(format!(
            "table form ({} stencils), rayon over z-planes",
            self.t.entries()
        ))
    }
}

impl<T: Real> Subdomain for CpuTable<T> {
    fn window(&self) -> &Window {
        &self.window
    }
    fn row_len(&self) -> usize {
        self.t.pitch * self.counts[1]
    }
    fn field(&mut self) -> Rows<'_, T> {
        Rows::Host(&mut self.v)
    }
    fn steps_per_exchange(&self) -> u64 {
        1
    }
    /// One red-black iteration of the owned planes `rows`: red over them and one plane
    /// beyond each end, black over them (see the classic CPU engine's `compute`).
    fn compute(
        &mut self,
        steps: u64,
        rows: Range<usize>,
        _: Option<&Arc<CudaStream>>,
    ) -> Result<()> {
        assert_eq!(
            steps, 1,
            "the table form takes one iteration between exchanges"
        );
        if !self.it.running() {
            return Ok(());
        }
        let red = super::red_planes(&self.window, &rows);
        let (reds, blacks) = (self.sweep(0, red.clone()), self.sweep(1, rows.clone()));
        let own = self.window.own.start;
        cpu::store_plane_sums(&mut self.partial, own, rows, red.start, &reds, &blacks);
        Ok(())
    }
    fn commit(&mut self, _steps: u64) {}
    fn owned_row_len(&self) -> usize {
        self.counts[0] * self.counts[1]
    }
    fn owned(&mut self) -> Result<Vec<T>> {
        let plane = self.row_len();
        let own = self.window.own_in_buffer();
        Ok(unpad(
            &self.v[own.start * plane..own.end * plane],
            self.counts,
            self.t.pitch,
        ))
    }
    fn partials(&mut self) -> Partials {
        Partials::Host { per_row: PER_PLANE }
    }
    fn take_partial(&mut self) -> Vec<f64> {
        let zeros = vec![0.0; self.partial.len()];
        std::mem::replace(&mut self.partial, zeros)
    }
    fn record_total(&mut self, t: &[f64]) {
        if self.it.running() {
            // The iterations the GPU engine measures, with the same sums (which cost
            // little here).
            let done = self.it.steps + 1;
            if !self.p.measures_after(done) {
                self.it.skip();
                return;
            }
            // Red's sums, then black's, as the blocked kernel adds them.
            let (res, norm) = ((t[0] + t[2]).sqrt(), (t[1] + t[3]).sqrt());
            let rel = if norm > 0.0 { res / norm } else { res };
            self.it
                .record_where(rel, self.p.tolerance, self.p.tests_after(done));
        }
    }
    fn running(&self) -> bool {
        self.it.running()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::run::Engine;
    use crate::solvers::electrostatics::cpu::CpuElectrostatics;

    use crate::solvers::electrostatics::problem_of as problem;

    const PLATES: &str = r#"
        solver = "electrostatics"
        [electrostatics]
        x = { range = [0.0, 1.0], cells = 10 }
        y = { range = [0.0, 1.0], cells = 7 }
        z = { range = [0.0, 1.0], cells = 12 }
        voltages = [1.0]
        permittivities = [4.0]
        omega = 1.5
        max_iterations = 100000
        tolerance = 1e-12
        [electrostatics.faces]
        z_min = 1.0
        z_max = 0.0
        [[electrostatics.shapes]]
        kind = "box"
        min = [0.0, 0.0, 0.3]
        max = [1.0, 1.0, 0.6]
        dielectric = 1
    "#;

    #[test]
    fn ids_put_held_faces_and_interior_stencils_apart() {
        let (p, g) = problem(PLATES);
        let t = build::<f64>(&p, &g).unwrap();
        let [nx, ny, nz] = g.counts;
        assert_eq!(t.pitch, nx + (nx & 1));
        // The z faces are held; an x face node copies its inner neighbour; the interior
        // has the vacuum, the slab, and on each interface plane the nodes on either side: 6
        // stencils.
        let at = |i: usize, j: usize, k: usize| t.ids[(k * ny + j) * t.pitch + i];
        assert_eq!(at(3, 3, 0), 0);
        assert_eq!(at(0, 3, 5), 2);
        assert_eq!(at(nx - 1, 3, 5), 1);
        assert_eq!(at(4, 0, 5), 4);
        assert_eq!(at(4, ny - 1, 5), 3);
        assert!(at(4, 3, 5) >= FIRST_FREE);
        assert_eq!(t.entries(), FIRST_FREE as usize + 6);
        assert!(nz > 2);
    }

    #[test]
    fn the_table_form_agrees_with_the_per_colour_update_to_rounding() {
        let (p, g) = problem(PLATES);
        let t = build::<f64>(&p, &g).unwrap();
        let mut cpu = CpuElectrostatics::<f64>::new(&p, g.clone(), None).unwrap();
        let v0 = super::super::cpu::initial_potential::<f64>(&g).unwrap();
        let mut v = pad(&v0, g.counts, t.pitch);
        iterate(&mut v, &t, g.counts, 30);
        cpu.advance(30).unwrap();
        let classic = cpu.snapshot().unwrap().data;
        let table = unpad(&v, g.counts, t.pitch);
        for (a, b) in classic.iter().zip(&table) {
            assert!((a - b).abs() <= 1e-13 * a.abs().max(1.0), "{a} vs {b}");
        }
        // And it moved: the potential is not the start's.
        assert!(classic.iter().zip(&v0).any(|(a, b)| (a - b).abs() > 1e-3));
    }

    #[test]
    fn the_cpu_engine_equals_the_reference_and_tests_at_its_interval() {
        let (mut p, g) = problem(PLATES);
        let t = build::<f64>(&p, &g).unwrap();
        let mut v = pad(
            &super::super::cpu::initial_potential::<f64>(&g).unwrap(),
            g.counts,
            t.pitch,
        );
        iterate(&mut v, &t, g.counts, 9);
        let mut e = CpuTable::<f64>::new(&p, &g, None).unwrap();
        e.advance(4).unwrap();
        e.advance(5).unwrap();
        let got = e.snapshot().unwrap().data;
        let want = unpad(&v, g.counts, t.pitch);
        assert!(
            got.iter()
                .zip(&want)
                .all(|(a, b)| a.to_bits() == b.to_bits())
        );
        assert_eq!(e.diagnostics().unwrap().new_residuals.len(), 9);
        // To a tolerance: it stops at a multiple of the interval (an odd check_every
        // counts twice), and measures only there.
        p.tolerance = 1e-6;
        for (every, interval) in [
            (None, super::super::TABLE_CHECK_EVERY),
            (Some(3), 6),
            (Some(1), 2),
        ] {
            p.check_every = every;
            assert_eq!(p.as_table().check_interval(), interval);
            let mut e = CpuTable::<f64>::new(&p, &g, None).unwrap();
            e.advance(100_000).unwrap();
            let d = e.diagnostics().unwrap();
            assert_eq!(d.status, Status::Converged);
            assert_eq!(d.steps % interval, 0, "{}", d.steps);
            let h = &d.new_residuals;
            for (k, r) in h.iter().enumerate() {
                assert_eq!(
                    crate::run::is_measured(*r),
                    (k as u64 + 1).is_multiple_of(interval)
                );
            }
            let n = h.len();
            let before = h[n - 1 - interval as usize];
            assert!(h[n - 1] <= 1e-6 && before > 1e-6, "{} {before}", h[n - 1]);
        }
    }

    #[test]
    fn a_per_node_charge_equal_everywhere_gives_the_uniform_charges_bits() {
        let (p, mut g) = problem(PLATES);
        g.q_uniform = 2.5e-2;
        let uniform = build::<f64>(&p, &g).unwrap();
        assert!(uniform.charge.is_none());
        g.q_node = Some(vec![2.5e-2; g.id_volt.len()]);
        g.q_uniform = 0.0;
        let per_node = build::<f64>(&p, &g).unwrap();
        let run = |t: &StencilTable<f64>| {
            let v0 = super::super::cpu::initial_potential::<f64>(&g).unwrap();
            let mut v = pad(&v0, g.counts, t.pitch);
            iterate(&mut v, t, g.counts, 11);
            v
        };
        let (a, b) = (run(&uniform), run(&per_node));
        assert!(a.iter().zip(&b).all(|(x, y)| x.to_bits() == y.to_bits()));
        assert!(a.iter().any(|&x| x != 0.0));
    }

    #[test]
    fn too_many_stencils_have_no_table() {
        // Random classes on 48³ nodes: about as many stencils as interior nodes, more
        // than a 16-bit id indexes.
        let (p, mut g) = problem(
            &PLATES
                .replace("cells = 10", "cells = 47")
                .replace("cells = 7", "cells = 47")
                .replace("cells = 12", "cells = 47"),
        );
        g.epsr = (0..256).map(|c| 1.0 + c as f64).collect();
        let mut x = 1u64;
        for c in g.id_epsr.iter_mut() {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            *c = (x >> 56) as u8;
        }
        let err = build::<f32>(&p, &g).unwrap_err();
        assert!(err.contains("distinct stencils"), "{err}");
    }
}
