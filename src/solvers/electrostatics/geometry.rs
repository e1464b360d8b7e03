//! Shapes → the study's per-node indirection: `id_volt` (0 free, k an electrode of known
//! voltage) and `id_epsr` (0 vacuum, k a dielectric). Shapes apply in order, later ones
//! over earlier ones: an electrode shape marks its nodes as that electrode (keeping their
//! εr for the face averages: put dielectrics first), a dielectric shape makes its nodes
//! free with that εr. Box faces with a fixed voltage become electrodes of their own,
//! applied last.

use rayon::prelude::*;
use serde::{Deserialize, Serialize};

use super::{Charge, ElectrostaticsProblem, FACE_NAMES};
use crate::error::{Error, Result};

/// A shape as written in `[[electrostatics.shapes]]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ShapeConfig {
    /// "box", "sphere" or "cylinder".
    pub kind: String,
    #[serde(default)]
    pub min: Option<[f64; 3]>,
    #[serde(default)]
    pub max: Option<[f64; 3]>,
    /// Sphere: [x, y, z]; cylinder: the two coordinates across its axis.
    #[serde(default)]
    pub center: Option<Vec<f64>>,
    #[serde(default)]
    pub radius: Option<f64>,
    /// Cylinder: "x", "y" or "z".
    #[serde(default)]
    pub axis: Option<String>,
    /// Cylinder: its extent along the axis.
    #[serde(default)]
    pub range: Option<[f64; 2]>,
    #[serde(default)]
    pub electrode: Option<i64>,
    #[serde(default)]
    pub dielectric: Option<i64>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Body {
    Box {
        min: [f64; 3],
        max: [f64; 3],
    },
    Sphere {
        center: [f64; 3],
        radius: f64,
    },
    Cylinder {
        axis: usize,
        center: [f64; 2],
        radius: f64,
        range: [f64; 2],
    },
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Shape {
    pub body: Body,
    pub electrode: Option<u8>,
    pub dielectric: Option<u8>,
}

impl ShapeConfig {
    pub fn validate(
        &self,
        index: usize,
        nodes: &[Vec<f64>; 3],
        electrodes: usize,
        dielectrics: usize,
    ) -> Result<Shape> {
        let at = |key: &str| format!("electrostatics.shapes[{index}].{key}");
        let need = |key: &str| {
            Error::invalid(
                &at(key),
                "missing",
                format!("a {} needs `{key}`", self.kind),
            )
        };
        let finite = |key: &str, v: &[f64]| {
            if v.iter().all(|x| x.is_finite()) {
                Ok(())
            } else {
                Err(Error::invalid(&at(key), format!("{v:?}"), "must be finite"))
            }
        };
        // A sphere's or cylinder's centre (`dims` coordinates) and radius.
        let center_and_radius = |dims: usize, hint: &str| -> Result<(Vec<f64>, f64)> {
            let c = self.center.clone().ok_or_else(|| need("center"))?;
            let r = self.radius.ok_or_else(|| need("radius"))?;
            finite("center", &c)?;
            if c.len() != dims {
                return Err(Error::invalid(&at("center"), format!("{c:?}"), hint));
            }
            if !(r.is_finite() && r > 0.0) {
                return Err(Error::invalid(
                    &at("radius"),
                    crate::units::num(r),
                    "must be finite and > 0",
                ));
            }
            Ok((c, r))
        };
        let body = match self.kind.as_str() {
            "box" => {
                let (min, max) = (
                    self.min.ok_or_else(|| need("min"))?,
                    self.max.ok_or_else(|| need("max"))?,
                );
                finite("min", &min)?;
                finite("max", &max)?;
                if (0..3).any(|a| min[a] > max[a]) {
                    return Err(Error::invalid(
                        &at("max"),
                        format!("{max:?}"),
                        format!("each max must be ≥ the min {min:?}"),
                    ));
                }
                Body::Box { min, max }
            }
            "sphere" => {
                let (c, r) = center_and_radius(3, "give [x, y, z]")?;
                Body::Sphere {
                    center: [c[0], c[1], c[2]],
                    radius: r,
                }
            }
            "cylinder" => {
                let axis = match self.axis.as_deref() {
                    Some("x") => 0,
                    Some("y") => 1,
                    Some("z") => 2,
                    Some(a) => {
                        return Err(Error::invalid(&at("axis"), a, "\"x\", \"y\" or \"z\""));
                    }
                    None => return Err(need("axis")),
                };
                let (c, r) = center_and_radius(
                    2,
                    "give the two coordinates across the axis (for axis z: [x, y])",
                )?;
                let range = self.range.ok_or_else(|| need("range"))?;
                finite("range", &range)?;
                if range[0] > range[1] {
                    return Err(Error::invalid(
                        &at("range"),
                        format!("{range:?}"),
                        "give [lo, hi], lo ≤ hi",
                    ));
                }
                Body::Cylinder {
                    axis,
                    center: [c[0], c[1]],
                    radius: r,
                    range,
                }
            }
            k => {
                return Err(Error::invalid(
                    &at("kind"),
                    k,
                    "\"box\", \"sphere\" or \"cylinder\"",
                ));
            }
        };
        let (lo, hi) = body.bounds();
        let tol = |a: usize| 1e-9 * (nodes[a][nodes[a].len() - 1] - nodes[a][0]);
        if let Some(a) = (0..3).find(|&a| {
            lo[a] < nodes[a][0] - tol(a) || hi[a] > nodes[a][nodes[a].len() - 1] + tol(a)
        }) {
            return Err(Error::invalid(
                &at("kind"),
                &self.kind,
                format!(
                    "the {} reaches {:?}..{:?} along {}, outside the box [{}, {}]",
                    self.kind,
                    lo[a],
                    hi[a],
                    ["x", "y", "z"][a],
                    nodes[a][0],
                    nodes[a][nodes[a].len() - 1]
                ),
            ));
        }
        let (electrode, dielectric) = match (self.electrode, self.dielectric) {
            (Some(e), None) if (1..=electrodes as i64).contains(&e) => (Some(e as u8), None),
            (Some(e), None) => {
                return Err(Error::invalid(
                    &at("electrode"),
                    e,
                    format!(
                        "electrode ids run from 1 to the number of voltages given ({electrodes}); \
                         add its voltage to electrostatics.voltages"
                    ),
                ));
            }
            (None, Some(d)) if (0..=dielectrics as i64).contains(&d) => (None, Some(d as u8)),
            (None, Some(d)) => {
                return Err(Error::invalid(
                    &at("dielectric"),
                    d,
                    format!(
                        "dielectric ids run from 0 (vacuum) to the number of permittivities \
                         given ({dielectrics})"
                    ),
                ));
            }
            _ => {
                return Err(Error::invalid(
                    &at("electrode"),
                    "as given",
                    "mark the shape with exactly one of electrode = k or dielectric = k",
                ));
            }
        };
        Ok(Shape {
            body,
            electrode,
            dielectric,
        })
    }
}

impl Body {
    /// Bounding box (lo, hi) in x, y, z.
    fn bounds(&self) -> ([f64; 3], [f64; 3]) {
        match *self {
            Body::Box { min, max } => (min, max),
            Body::Sphere {
                center: c,
                radius: r,
            } => (
                [c[0] - r, c[1] - r, c[2] - r],
                [c[0] + r, c[1] + r, c[2] + r],
            ),
            Body::Cylinder {
                axis,
                center,
                radius,
                range,
            } => {
                let (mut lo, mut hi) = ([0.0; 3], [0.0; 3]);
                let across: Vec<usize> = (0..3).filter(|&a| a != axis).collect();
                lo[axis] = range[0];
                hi[axis] = range[1];
                for (k, &a) in across.iter().enumerate() {
                    lo[a] = center[k] - radius;
                    hi[a] = center[k] + radius;
                }
                (lo, hi)
            }
        }
    }

    /// Whether point p lies inside (boundary included, to a relative 1e-12).
    fn contains(&self, p: [f64; 3]) -> bool {
        const REL: f64 = 1e-12;
        match *self {
            Body::Box { min, max } => (0..3).all(|a| {
                let t = REL * (max[a] - min[a]).abs().max(p[a].abs());
                p[a] >= min[a] - t && p[a] <= max[a] + t
            }),
            Body::Sphere {
                center: c,
                radius: r,
            } => {
                let d2: f64 = (0..3).map(|a| (p[a] - c[a]).powi(2)).sum();
                d2 <= r * r * (1.0 + REL)
            }
            Body::Cylinder {
                axis,
                center,
                radius,
                range,
            } => {
                // The two axes across, in order (no allocation: this runs per node).
                let across = [(axis == 0) as usize, 2 - (axis == 2) as usize];
                let d2 = (p[across[0]] - center[0]).powi(2) + (p[across[1]] - center[1]).powi(2);
                let t = REL * (range[1] - range[0]).abs().max(p[axis].abs());
                d2 <= radius * radius * (1.0 + REL)
                    && p[axis] >= range[0] - t
                    && p[axis] <= range[1] + t
            }
        }
    }
}

/// The per-node tables the engines read.
#[derive(Debug, Clone)]
pub struct Geometry {
    pub counts: [usize; 3],
    /// 0: free; k: electrode k, at `volts[k]`.
    pub id_volt: Vec<u8>,
    /// 0: vacuum (εr 1); k: `epsr[k]`.
    pub id_epsr: Vec<u8>,
    /// Index 0 unused; the problem's electrodes, then the fixed faces.
    pub volts: Vec<f64>,
    pub epsr: Vec<f64>,
    /// What each electrode id is, for reports: "electrode 1", "face z_min".
    pub labels: Vec<String>,
    /// The charge term of the node equation, 2ρ/ε0: uniform, or per node (then
    /// `q_uniform` is 0).
    pub q_uniform: f64,
    pub q_node: Option<Vec<f64>>,
    /// Under mpirun, when the field is written in pieces: the z-planes this rank's slab
    /// holds, the only ones built (the arrays keep the whole mesh's size, the other planes
    /// zero and unmapped). None: every plane.
    pub held: Option<Vec<bool>>,
}

/// A counter-based uniform value in [−1, 1) for node `n` (splitmix64 of seed and index):
/// independent of the order nodes are visited in.
fn unit_random(seed: u64, n: u64) -> f64 {
    let mut z = seed
        .wrapping_mul(0x9E37_79B9_7F4A_7C15)
        .wrapping_add(n.wrapping_add(1).wrapping_mul(0xBF58_476D_1CE4_E5B9));
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^= z >> 31;
    (z >> 11) as f64 / (1u64 << 52) as f64 - 1.0
}

/// Ids from a file must name a voltage or a permittivity the problem gives; `ids` start
/// at node `first` (flat index).
fn check_ids(field: &str, ids: &[u8], most: usize, what: &str, first: usize) -> Result<()> {
    match ids.iter().position(|&v| v as usize > most) {
        None => Ok(()),
        Some(n) => Err(Error::invalid(
            field,
            ids[n],
            format!(
                "at node {} (flat index) names {what} {}, but only {most} are given",
                first + n,
                ids[n]
            ),
        )),
    }
}

impl Shape {
    /// Whether some node of the mesh lies in the shape (a shape thinner than the spacing
    /// between nodes, or outside the box, marks none and would be dropped silently).
    pub fn marks_a_node(&self, nodes: &[Vec<f64>; 3]) -> bool {
        let (lo, hi) = self.body.bounds();
        let [ri, rj, rk] = [0, 1, 2].map(|a| index_range(&nodes[a], lo[a], hi[a]));
        rk.into_par_iter().any(|k| {
            rj.clone().any(|j| {
                ri.clone()
                    .any(|i| self.body.contains([nodes[0][i], nodes[1][j], nodes[2][k]]))
            })
        })
    }
}

/// The indices of ascending `nodes` that may lie in [lo, hi]: a margin of 1e-9 of the
/// interval's scale keeps every node [`Body::contains`] admits (its tolerances are 1e-12).
fn index_range(nodes: &[f64], lo: f64, hi: f64) -> std::ops::Range<usize> {
    let m = 1e-9 * lo.abs().max(hi.abs()).max(hi - lo);
    let a = nodes.partition_point(|&x| x < lo - m);
    let b = nodes.partition_point(|&x| x <= hi + m);
    a..b.max(a)
}

impl Geometry {
    pub fn build(p: &ElectrostaticsProblem) -> Result<Self> {
        Self::build_planes(p, None)
    }

    /// Whether plane `k` was built.
    pub fn holds(&self, k: usize) -> bool {
        self.held.as_ref().is_none_or(|h| h[k])
    }

    /// The geometry of the planes `held` marks (None: all); only those planes are read
    /// from files.
    pub fn build_planes(p: &ElectrostaticsProblem, held: Option<Vec<bool>>) -> Result<Self> {
        let holds = |k: usize| held.as_ref().is_none_or(|h| h[k]);
        let counts = p.counts();
        let [nx, ny, _] = counts;
        let points = p.points();
        let mut volts = vec![0.0];
        volts.extend(&p.voltages);
        let mut labels = vec![String::new()];
        labels.extend((1..=p.voltages.len()).map(|k| format!("electrode {k}")));
        let mut face_ids = [0u8; 6];
        for (f, v) in p.faces.iter().enumerate() {
            if let Some(v) = v {
                volts.push(*v);
                labels.push(format!("face {}", FACE_NAMES[f]));
                face_ids[f] = (volts.len() - 1) as u8;
            }
        }
        let mut epsr = vec![1.0];
        epsr.extend(&p.permittivities);
        let grid = "the mesh's nodes (z, y, x)";
        let shape = p.shape();
        // Id arrays from files (checked against the tables they index), else all 0.
        let plane = nx * ny;
        // The held planes, when not all: only these are read from files.
        let planes: Option<Vec<usize>> = held
            .as_ref()
            .map(|h| (0..h.len()).filter(|&k| h[k]).collect());
        let ids = |path: &Option<std::path::PathBuf>, key: &str, most: usize, what: &str| {
            let Some(path) = path else {
                return Ok(vec![0u8; points]);
            };
            let field = format!("electrostatics.{key}");
            let Some(planes) = &planes else {
                let ids = crate::input::read_bytes(&field, path, &shape, grid)?;
                return check_ids(&field, &ids, most, what, 0).map(|_| ids);
            };
            let f = crate::input::open(&field, path, &shape, grid, crate::input::Kind::Byte)?;
            let read = crate::input::read_rows::<u8>(&field, path, f, plane, planes)?;
            let mut ids = vec![0u8; points];
            for (&k, values) in planes.iter().zip(read.chunks(plane)) {
                check_ids(&field, values, most, what, k * plane)?;
                ids[k * plane..(k + 1) * plane].copy_from_slice(values);
            }
            Ok(ids)
        };
        let mut id_volt = ids(
            &p.electrode_ids,
            "electrode_ids",
            p.voltages.len(),
            "electrode",
        )?;
        let mut id_epsr = ids(
            &p.dielectric_ids,
            "dielectric_ids",
            p.permittivities.len(),
            "dielectric",
        )?;
        // Each shape's nodes lie within its bounding box's index ranges; only those are
        // tested (a node per shape everywhere led the set-up's profile at 512³).
        let ranges: Vec<[std::ops::Range<usize>; 3]> = p
            .shapes
            .iter()
            .map(|s| {
                let (lo, hi) = s.body.bounds();
                [0, 1, 2].map(|a| index_range(&p.nodes[a], lo[a], hi[a]))
            })
            .collect();
        id_volt
            .par_chunks_mut(nx * ny)
            .zip(id_epsr.par_chunks_mut(nx * ny))
            .enumerate()
            .filter(|(k, _)| holds(*k))
            .for_each(|(k, (volt, eps))| {
                // Shape by shape, then the faces, each in order over the plane: every
                // node sees the same writes in the same order as shape by shape per node.
                for (s, [ri, rj, rk]) in p.shapes.iter().zip(&ranges) {
                    if !rk.contains(&k) {
                        continue;
                    }
                    for j in rj.clone() {
                        for i in ri.clone() {
                            let at = [p.nodes[0][i], p.nodes[1][j], p.nodes[2][k]];
                            if s.body.contains(at) {
                                let n = j * nx + i;
                                match (s.electrode, s.dielectric) {
                                    (Some(e), _) => volt[n] = e,
                                    (_, Some(d)) => {
                                        volt[n] = 0;
                                        eps[n] = d;
                                    }
                                    _ => {}
                                }
                            }
                        }
                    }
                }
                for (f, &id) in face_ids.iter().enumerate() {
                    if id == 0 {
                        continue;
                    }
                    let edge = |a: usize| if f % 2 == 1 { counts[a] - 1 } else { 0 };
                    match f / 2 {
                        0 => (0..ny).for_each(|j| volt[j * nx + edge(0)] = id),
                        1 => volt[edge(1) * nx..(edge(1) + 1) * nx].fill(id),
                        _ if k == edge(2) => volt.fill(id),
                        _ => {}
                    }
                }
            });
        let scale = 2.0 / super::EPSILON_0;
        let (q_uniform, q_node) = match &p.charge {
            Charge::None => (0.0, None),
            Charge::Uniform { density } => (scale * density, None),
            Charge::Random { amplitude, seed } => {
                let at = |n: usize| scale * amplitude * unit_random(*seed, n as u64);
                let q = match held {
                    None => crate::memory::try_from_fn(points, "the charge density", at)?,
                    Some(_) => {
                        // Zeroed memory is mapped lazily: only the planes held take pages.
                        let mut q = vec![0.0; points];
                        q.par_chunks_mut(plane)
                            .enumerate()
                            .filter(|(k, _)| holds(*k))
                            .for_each(|(k, q)| {
                                for (i, q) in q.iter_mut().enumerate() {
                                    *q = at(k * plane + i);
                                }
                            });
                        q
                    }
                };
                (0.0, Some(q))
            }
            Charge::File { path } => {
                let field = "electrostatics.charge_density.file";
                let f = crate::input::open(field, path, &shape, grid, crate::input::Kind::Float)?;
                let check = |q: &[f64], first: usize| match q
                    .iter()
                    .position(|r| !(r.is_finite() && r.abs() <= 1e30))
                {
                    None => Ok(()),
                    Some(n) => Err(Error::invalid(
                        field,
                        path.display(),
                        format!(
                            "holds {} at node {} (flat index); ρ must be finite and at most \
                             1e30 C/m³ in magnitude",
                            crate::units::num(q[n]),
                            first + n
                        ),
                    )),
                };
                let q = match &planes {
                    None => {
                        let mut q =
                            crate::memory::try_filled(points, 0.0f64, "the charge density")?;
                        crate::input::fill_floats(field, path, f, &mut q)?;
                        check(&q, 0)?;
                        q.par_iter_mut().for_each(|q| *q *= scale);
                        q
                    }
                    Some(planes) => {
                        let read = crate::input::read_float_rows(field, path, f, plane, planes)?;
                        let mut q = vec![0.0; points];
                        for (&k, values) in planes.iter().zip(read.chunks(plane)) {
                            check(values, k * plane)?;
                            for (q, &v) in q[k * plane..(k + 1) * plane].iter_mut().zip(values) {
                                *q = v * scale;
                            }
                        }
                        q
                    }
                };
                (0.0, Some(q))
            }
        };
        Ok(Self {
            counts,
            id_volt,
            id_epsr,
            volts,
            epsr,
            labels,
            q_uniform,
            q_node,
            held,
        })
    }

    /// The same mesh and materials with no charge (capacitance solves).
    pub fn without_charge(&self) -> Self {
        Self {
            counts: self.counts,
            id_volt: self.id_volt.clone(),
            id_epsr: self.id_epsr.clone(),
            volts: self.volts.clone(),
            epsr: self.epsr.clone(),
            labels: self.labels.clone(),
            q_uniform: 0.0,
            q_node: None,
            held: self.held.clone(),
        }
    }

    /// Electrode ids that mark at least one node.
    pub fn electrodes(&self) -> Vec<u8> {
        // By all threads, a plane each: a serial scan took about 50 ms at 512³, and a
        // run's outputs ask several times.
        let plane = self.counts[0] * self.counts[1];
        let seen = self
            .id_volt
            .par_chunks(plane.max(1))
            .map(|ids| {
                let mut seen = [false; 256];
                for &v in ids {
                    seen[v as usize] = true;
                }
                seen
            })
            .reduce(|| [false; 256], |a, b| std::array::from_fn(|k| a[k] | b[k]));
        (1..self.volts.len() as u8)
            .filter(|&k| seen[k as usize])
            .collect()
    }
}

#[cfg(test)]
mod tests {
    /// Shapes of every kind on a nonuniform mesh, some with faces on node coordinates,
    /// overlapping, and fixed box faces: the ids equal the rule applied node by node
    /// (every shape in order, then the faces in order), which is what the bounded scans
    /// must reproduce.
    #[test]
    fn shapes_scanned_within_their_bounds_mark_the_nodes_the_rule_marks() {
        let text = r#"
solver = "electrostatics"
[electrostatics]
x = { breakpoints = [0.0, 0.3, 0.35, 1.0], divisions = [12, 5, 13] }
y = { range = [0.0, 1.0], cells = 20 }
z = { breakpoints = [-1.0, 0.0, 2.0], divisions = [7, 16] }
voltages = [1.0, -1.0, 0.5]
permittivities = [2.0, 9.0]
max_iterations = 10
[electrostatics.faces]
x_min = 0.0
z_max = 2.0
y_min = 0.25
[[electrostatics.shapes]]
kind = "box"
min = [0.0, 0.0, -1.0]
max = [0.35, 1.0, 0.5]
dielectric = 1
[[electrostatics.shapes]]
kind = "sphere"
center = [0.5, 0.5, 1.0]
radius = 0.3
dielectric = 2
[[electrostatics.shapes]]
kind = "cylinder"
axis = "x"
center = [0.5, 0.0]
radius = 0.15
range = [0.1, 0.9]
electrode = 1
[[electrostatics.shapes]]
kind = "cylinder"
axis = "y"
center = [0.7, 1.5]
radius = 0.2
range = [0.25, 0.75]
electrode = 2
[[electrostatics.shapes]]
kind = "cylinder"
axis = "z"
center = [0.3, 0.5]
radius = 0.1
range = [-0.5, 1.5]
dielectric = 0
[[electrostatics.shapes]]
kind = "box"
min = [0.6, 0.6, 0.0]
max = [0.8, 0.8, 0.125]
electrode = 3
"#;
        let (p, g) = crate::solvers::electrostatics::problem_of(text);
        let [nx, ny, nz] = p.counts();
        let (mut marked, mut checked) = (0, 0);
        for k in 0..nz {
            for j in 0..ny {
                for i in 0..nx {
                    let at = [p.nodes[0][i], p.nodes[1][j], p.nodes[2][k]];
                    let (mut volt, mut eps) = (0u8, 0u8);
                    for s in &p.shapes {
                        if s.body.contains(at) {
                            match (s.electrode, s.dielectric) {
                                (Some(e), _) => volt = e,
                                (_, Some(d)) => (volt, eps) = (0, d),
                                _ => {}
                            }
                        }
                    }
                    // x_min, y_min, z_max in FACE_NAMES' order: ids 4, 5, 6 after 3 electrodes.
                    let faces = [(i == 0, 4), (j == 0, 5), (k == nz - 1, 6)];
                    for (on, id) in faces {
                        if on {
                            volt = id;
                        }
                    }
                    let n = (k * ny + j) * nx + i;
                    assert_eq!(
                        (g.id_volt[n], g.id_epsr[n]),
                        (volt, eps),
                        "node (i, j, k) = ({i}, {j}, {k})"
                    );
                    marked += (volt != 0 || eps != 0) as usize;
                    checked += 1;
                }
            }
        }
        assert!(
            marked > checked / 4 && marked < checked,
            "{marked} of {checked} nodes marked"
        );
    }
}
