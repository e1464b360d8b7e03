//! The `[nbody]` table: what a user writes, and its validation into a problem.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::{Gravity, Particles, presets};
use crate::error::{Error, Result};

/// The `[nbody]` table of a problem file, as written.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NbodyConfig {
    /// Particles of a preset (a file gives its own count).
    #[serde(default)]
    pub n: Option<i64>,
    #[serde(default = "one")]
    pub g: f64,
    pub softening: f64,
    pub dt: f64,
    #[serde(default)]
    pub steps: Option<i64>,
    #[serde(default)]
    pub end_time: Option<f64>,
    #[serde(default)]
    pub initial: InitialConfig,
    /// CUDA: sum each particle's f32 force terms in f64.
    #[serde(default)]
    pub accurate: bool,
}

fn one() -> f64 {
    1.0
}

/// `initial = { preset = "plummer", seed = 1 }`, `{ preset = "cold_sphere" }`,
/// `{ preset = "two_plummers", separation = 20, impact = 1, speed = 0.5 }` or
/// `{ file = "ics.npy" }` (N × 7: x y z vx vy vz m; .npy or .csv).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InitialConfig {
    #[serde(default)]
    pub preset: Option<String>,
    #[serde(default)]
    pub seed: Option<i64>,
    #[serde(default)]
    pub separation: Option<f64>,
    #[serde(default)]
    pub impact: Option<f64>,
    #[serde(default)]
    pub speed: Option<f64>,
    #[serde(default)]
    pub file: Option<PathBuf>,
}

/// Where the particles start.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Initial {
    Plummer {
        seed: u64,
    },
    ColdSphere {
        seed: u64,
    },
    TwoPlummers {
        seed: u64,
        separation: f64,
        impact: f64,
        speed: f64,
    },
    File {
        path: PathBuf,
    },
}

/// A validated N-body problem.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct NbodyProblem {
    pub n: usize,
    pub g: f64,
    pub softening: f64,
    pub dt: f64,
    pub steps: u64,
    pub initial: Initial,
    pub accurate: bool,
}

impl NbodyProblem {
    pub fn gravity(&self) -> Gravity {
        Gravity {
            g: self.g,
            softening: self.softening,
        }
    }

    /// The particles at step 0 (a file is read and checked again: it may have changed).
    pub fn particles(&self) -> Result<Particles> {
        // Positions, velocities and masses (7 values a particle), refused before they are
        // sampled when the machine could never hold them.
        crate::memory::ensure_host_fits_or(
            self.n as u128 * 7 * 8,
            "the particles' positions, velocities and masses",
            "use fewer particles (nbody.n)",
        )?;
        let p = match &self.initial {
            Initial::Plummer { seed } => presets::plummer(self.n, 1.0, presets::PLUMMER_A, *seed),
            Initial::ColdSphere { seed } => presets::cold_sphere(self.n, *seed),
            &Initial::TwoPlummers {
                seed,
                separation,
                impact,
                speed,
            } => presets::two_plummers(self.n, seed, separation, impact, speed),
            Initial::File { path } => read_particles(path)?,
        };
        // The presets are drawn for G = 1; for another G the same system is in
        // equilibrium with every velocity scaled by √G (time runs 1/√G as fast).
        let mut p = p;
        if !matches!(self.initial, Initial::File { .. }) && self.g != 1.0 {
            let s = self.g.sqrt();
            p.vel.iter_mut().flatten().for_each(|v| *v *= s);
        }
        check_particles(&p, self.softening, "nbody.initial.file")?;
        Ok(p)
    }
}

/// The most steps a run may take (about 30 years of 1 µs steps): more is a mistake in
/// end_time or dt, and step counts beyond 2^53 stop being exact in the time column.
pub const MAX_STEPS: u64 = 1 << 50;

/// The largest softening length: ε² stays finite in f32.
pub const MAX_SOFTENING: f64 = 1e18;

fn positive(field: &str, v: f64, what: &str) -> Result<f64> {
    if v > 0.0 && v.is_finite() {
        Ok(v)
    } else {
        Err(Error::invalid(field, v, what))
    }
}

impl NbodyConfig {
    pub fn validate(self) -> Result<NbodyProblem> {
        let g = positive("nbody.g", self.g, "G must be a finite number > 0")?;
        // ε² is added to every squared separation (in f32 on the GPU): it must stay a
        // number there.
        if !(self.softening >= 0.0 && self.softening <= MAX_SOFTENING) {
            return Err(Error::invalid(
                "nbody.softening",
                self.softening,
                format!(
                    "the softening length ε must be a number ≥ 0 and at most {MAX_SOFTENING:e} \
                     (ε² must stay finite in f32)"
                ),
            ));
        }
        let dt = positive(
            "nbody.dt",
            self.dt,
            "the time step must be a finite number > 0",
        )?;
        let steps = match (self.steps, self.end_time) {
            (Some(_), Some(_)) => {
                return Err(Error::invalid(
                    "nbody.end_time",
                    "given with steps",
                    "give steps or end_time, not both",
                ));
            }
            (Some(s), None) if (1..=MAX_STEPS as i64).contains(&s) => s as u64,
            (Some(s), None) => {
                return Err(Error::invalid(
                    "nbody.steps",
                    s,
                    format!("must be in [1, {MAX_STEPS}]"),
                ));
            }
            (None, Some(t)) => {
                let t = positive(
                    "nbody.end_time",
                    t,
                    "the end time must be a finite number > 0",
                )?;
                let steps = (t / dt).round().max(1.0);
                if steps > MAX_STEPS as f64 {
                    return Err(Error::invalid(
                        "nbody.end_time",
                        crate::units::num(t),
                        format!(
                            "with dt = {dt:e} that is {steps:e} steps, more than the {MAX_STEPS:e} \
                             a run may take: raise dt or shorten end_time"
                        ),
                    ));
                }
                steps as u64
            }
            (None, None) => {
                return Err(Error::invalid(
                    "nbody.steps",
                    "missing",
                    "give steps (or end_time, which sets steps = end_time/dt)",
                ));
            }
        };
        let i = self.initial;
        let seed = match i.seed {
            Some(s) if s < 0 => {
                return Err(Error::invalid(
                    "nbody.initial.seed",
                    s,
                    "a seed is an integer ≥ 0",
                ));
            }
            Some(s) => s as u64,
            None => 1,
        };
        let (initial, n) = match (i.preset.as_deref(), &i.file) {
            (Some(_), Some(_)) => {
                return Err(Error::invalid(
                    "nbody.initial",
                    "preset and file",
                    "give a preset or a file, not both",
                ));
            }
            (None, Some(path)) => {
                if self.n.is_some() {
                    return Err(Error::invalid(
                        "nbody.n",
                        self.n.unwrap_or(0),
                        "the file gives the particle count; leave n out",
                    ));
                }
                let p = read_particles(path)?;
                check_particles(&p, self.softening, "nbody.initial.file")?;
                (Initial::File { path: path.clone() }, p.len())
            }
            (preset, None) => {
                let n = match self.n {
                    Some(n) if n >= 1 => n as usize,
                    Some(n) => return Err(Error::invalid("nbody.n", n, "at least 1 particle")),
                    None => {
                        return Err(Error::invalid(
                            "nbody.n",
                            "missing",
                            "a preset needs the particle count n",
                        ));
                    }
                };
                let initial = match preset.unwrap_or("plummer") {
                    "plummer" => Initial::Plummer { seed },
                    "cold_sphere" => Initial::ColdSphere { seed },
                    "two_plummers" => Initial::TwoPlummers {
                        seed,
                        separation: positive(
                            "nbody.initial.separation",
                            i.separation.unwrap_or(20.0),
                            "the centres' distance must be a finite number > 0",
                        )?,
                        impact: i.impact.unwrap_or(1.0),
                        speed: i.speed.unwrap_or(0.5),
                    },
                    other => {
                        return Err(Error::invalid(
                            "nbody.initial.preset",
                            other,
                            "one of plummer, cold_sphere, two_plummers (or give file)",
                        ));
                    }
                };
                if let Initial::TwoPlummers { impact, speed, .. } = initial {
                    for (f, v) in [("impact", impact), ("speed", speed)] {
                        if !v.is_finite() {
                            return Err(Error::invalid(
                                &format!("nbody.initial.{f}"),
                                v,
                                "must be a finite number",
                            ));
                        }
                    }
                }
                (initial, n)
            }
        };
        let two_plummer_keys = i.separation.is_some() || i.impact.is_some() || i.speed.is_some();
        if two_plummer_keys && !matches!(initial, Initial::TwoPlummers { .. }) {
            return Err(Error::invalid(
                "nbody.initial",
                "separation/impact/speed",
                "these set up the two_plummers preset only",
            ));
        }
        Ok(NbodyProblem {
            n,
            g,
            softening: self.softening,
            dt,
            steps,
            initial,
            accurate: self.accurate,
        })
    }
}

/// Particles from an .npy of shape (N, 7) (f64 or f32) or a .csv of 7 columns x y z vx
/// vy vz m (a header line is skipped).
pub fn read_particles(path: &Path) -> Result<Particles> {
    let field = "nbody.initial.file";
    let rows: Vec<[f64; 7]> = match path.extension().and_then(|e| e.to_str()) {
        Some("npy") => {
            let shape = crate::input::shape_of(field, path)?;
            let n = shape.first().copied().unwrap_or(0);
            let grid = "the particle table (N, 7): x y z vx vy vz m";
            let f = crate::input::open(field, path, &[n, 7], grid, crate::input::Kind::Float)?;
            let mut data = vec![0.0f64; 7 * n];
            crate::input::fill_floats(field, path, f, &mut data)?;
            data.chunks(7)
                .map(|c| std::array::from_fn(|k| c[k]))
                .collect()
        }
        Some("csv") => {
            let shown = path.display();
            let mut text = String::new();
            use std::io::Read;
            crate::input::open_regular(path, |why| Error::invalid(field, &shown, why))?
                .read_to_string(&mut text)
                .map_err(|e| Error::io(path, e))?;
            // A header is decided by rule: the first non-empty line, when none of its
            // cells is a number (a byte-order mark before it is dropped). Every other
            // line must hold 7 numbers, or the file is refused naming the line.
            let text = text.strip_prefix('\u{feff}').unwrap_or(&text);
            let mut rows = Vec::new();
            let mut first = true;
            for (l, line) in text.lines().enumerate() {
                if line.trim().is_empty() {
                    continue;
                }
                let cells: Vec<&str> = line.split(',').map(str::trim).collect();
                let header = first
                    && cells
                        .iter()
                        .all(|c| !c.is_empty() && c.parse::<f64>().is_err());
                first = false;
                if header {
                    continue;
                }
                let v: Vec<f64> = cells.iter().filter_map(|c| c.parse().ok()).collect();
                if cells.len() != 7 || v.len() != 7 {
                    return Err(Error::invalid(
                        field,
                        path.display(),
                        format!(
                            "line {}: expected 7 numbers x,y,z,vx,vy,vz,m, found {:?} (a header \
                             line is allowed first, with no number in it)",
                            l + 1,
                            line
                        ),
                    ));
                }
                rows.push(std::array::from_fn(|k| v[k]));
            }
            rows
        }
        _ => {
            return Err(Error::invalid(
                field,
                path.display(),
                "give an .npy of shape (N, 7) or a .csv of x,y,z,vx,vy,vz,m",
            ));
        }
    };
    Ok(Particles {
        pos: rows.iter().map(|r| [r[0], r[1], r[2]]).collect(),
        vel: rows.iter().map(|r| [r[3], r[4], r[5]]).collect(),
        mass: rows.iter().map(|r| r[6]).collect(),
    })
}

/// Finite values, masses ≥ 0, at least one particle, and with ε = 0 no two particles
/// at the same place (their force would be 0/0).
pub fn check_particles(p: &Particles, softening: f64, field: &str) -> Result<()> {
    if p.is_empty() {
        return Err(Error::invalid(field, "no particles", "at least 1 particle"));
    }
    for i in 0..p.len() {
        let finite = p.pos[i].iter().chain(&p.vel[i]).all(|v| v.is_finite());
        if !(finite && p.mass[i] >= 0.0 && p.mass[i].is_finite()) {
            return Err(Error::invalid(
                field,
                format!("particle {i}"),
                "positions and velocities must be finite and masses finite and ≥ 0",
            ));
        }
    }
    if softening == 0.0 {
        let mut order: Vec<usize> = (0..p.len()).collect();
        order.sort_unstable_by(|&a, &b| p.pos[a].partial_cmp(&p.pos[b]).expect("finite"));
        if let Some(w) = order.windows(2).find(|w| p.pos[w[0]] == p.pos[w[1]]) {
            return Err(Error::invalid(
                "nbody.softening",
                0,
                format!(
                    "particles {} and {} sit at the same place, where an unsoftened force \
                     is 0/0; set a softening length ε > 0",
                    w[0].min(w[1]),
                    w[0].max(w[1])
                ),
            ));
        }
    }
    Ok(())
}
