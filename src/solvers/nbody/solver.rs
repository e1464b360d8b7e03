//! The N-body solver's entry in the registry: its table, its run (CPU reference or CUDA
//! engine) and its bench.

use super::diagnostics::Measures;
use super::{NbodyConfig, NbodyProblem, Particles, cpu, cuda, projection};
use crate::device::Device;
use crate::device::cuda::KernelSource;
use crate::error::{Error, Result};
use crate::execute::{Case, Execution, run_case};
use crate::output::gif::Animation;
use crate::output::{OutputSet, png, pvd, vtp};
use crate::problem::Source;
use crate::run::{Engine, Field, LoopOutcome};
use crate::solver::{Report, Solver, SolverProblem};
use crate::summary::Summary;

/// The potential per unit mass of every particle of a state (the diagnostics' O(N²) sum).
type PotentialOf<'a> = dyn Fn(&Particles) -> Result<Vec<f64>> + 'a;

pub struct Nbody;
pub static NBODY: Nbody = Nbody;

impl Solver for Nbody {
    fn name(&self) -> &'static str {
        "nbody"
    }
    fn table_hint(&self) -> &'static str {
        "n, softening, dt, steps or end_time, [nbody.initial]"
    }
    fn kernels(&self) -> Vec<KernelSource> {
        vec![super::cuda::KERNELS]
    }
    fn problem(&self, table: toml::Value, src: &Source) -> Result<Box<dyn SolverProblem>> {
        let mut cfg: NbodyConfig = src.deserialize("nbody", table)?;
        if let Some(f) = &cfg.initial.file {
            cfg.initial.file = Some(src.path("nbody.initial.file", f));
        }
        Ok(Box::new(cfg.validate()?))
    }
    fn bench_args(&self, cmd: clap::Command) -> clap::Command {
        <super::bench::NbodyBenchArgs as clap::Args>::augment_args(cmd).about(
            "The force evaluation over a range of N against the arithmetic ceiling measured \
             in the same run, beside the CUDA sample's kernel",
        )
    }
    fn bench(&self, device: &Device, args: &clap::ArgMatches) -> Result<Report> {
        super::bench::run(device, args)
    }
    fn model_args(&self, cmd: clap::Command) -> Option<clap::Command> {
        Some(
            <super::model::NbodyModelArgs as clap::Args>::augment_args(cmd).about(
                "The study's cycle model fitted on this GPU, against measured step times over \
                 N and device counts, extrapolated to 256 GPUs",
            ),
        )
    }
    fn model(
        &self,
        problem: &crate::problem::Problem,
        placement: &crate::device::Placement,
        args: &clap::ArgMatches,
    ) -> Result<Report> {
        let p = problem.spec_as::<NbodyProblem>().expect("an nbody problem");
        super::model::run(p, placement, args)
    }
    fn bench_placed(
        &self,
        placement: &crate::device::Placement,
        args: &clap::ArgMatches,
    ) -> Result<Report> {
        match placement.is_single() {
            true => super::bench::run(placement.first(), args),
            false => super::bench::run_placed(placement, args),
        }
    }
}

impl SolverProblem for NbodyProblem {
    fn max_steps(&self) -> u64 {
        self.steps
    }
    fn dt(&self) -> Option<f64> {
        Some(self.dt)
    }
    fn restart_may_change(&self) -> &'static [&'static str] {
        &["steps"]
    }
    fn decomposes(&self) -> bool {
        true // over GPUs of a process, or MPI ranks (CPU): forces are shared out
    }
    fn writes_pieces(&self) -> bool {
        false // every rank holds every particle: the files are written whole
    }
    fn execute(&self, cx: &Execution) -> Result<Summary> {
        // Several GPUs of this process share the particles (--devices 0,1).
        let gpus = cx.placement.gpus()?;
        if cx.placement.world.is_none() && !cx.placement.is_single() && gpus.is_none() {
            return Err(Error::invalid(
                "--subdomains",
                cx.placement.parts.len(),
                "nbody shares its force sums over MPI ranks (mpirun); in one process it \
                 runs on every CPU thread already",
            ));
        }
        let p0 = self.particles()?;
        let grav = self.gravity();
        // The diagnostics' potential: on the GPU when the run has one (the host's O(N²)
        // sum would outweigh the run at large N), else the CPU reference's.
        let potential: Box<PotentialOf<'_>> = match cx.device {
            Device::Cpu { .. } => Box::new(move |p| Ok(cpu::accelerations(p, grav, true).1)),
            Device::Cuda(gpu) => Box::new(move |p| cuda::potential(gpu, grav, p)),
        };
        let start = Measures::with_potential(&p0, &potential(&p0)?);
        let half = projection::half_width(&p0);
        run_case(cx, |restart| {
            let (particles, step) = match restart {
                Some(mut r) => {
                    let data = r.take("particles")?;
                    if data.len() != 7 * self.n {
                        return Err(Error::Parse(format!(
                            "the checkpoint holds {} particles; the problem has {}",
                            data.len() / 7,
                            self.n
                        )));
                    }
                    (cpu::particles_of(&data), r.step)
                }
                None => (p0, 0),
            };
            let engine: Box<dyn Engine<Real = f64>> = match cx.device {
                Device::Cpu { .. } => Box::new(cpu::CpuNbody::new(
                    self.gravity(),
                    self.dt,
                    particles,
                    step,
                    cx.placement.world,
                )?),
                Device::Cuda(gpu) => Box::new(cuda::CudaNbody::placed(
                    gpus.as_deref().unwrap_or(std::slice::from_ref(gpu)),
                    cx.placement.world,
                    self.gravity(),
                    self.dt,
                    &particles,
                    step,
                    self.accurate,
                )?),
            };
            Ok(NbodyCase {
                p: self,
                engine,
                start,
                potential: &potential,
                half,
                frames: Animation::new(usize::MAX, 200),
                series: Vec::new(),
            })
        })
    }
}

struct NbodyCase<'a> {
    p: &'a NbodyProblem,
    engine: Box<dyn Engine<Real = f64>>,
    /// The measures at step 0 (the energy error's reference, also after a restart).
    start: Measures,
    /// The potential per unit mass of every particle, for the measures.
    potential: &'a PotentialOf<'a>,
    /// Half-width of every picture of the run.
    half: f64,
    /// The pictures of the series so far (this process's run), for the animation.
    frames: Animation,
    /// (time, .vtp file) of the series so far, for particles.pvd.
    series: Vec<(f64, String)>,
}

/// Particles as a ParaView point cloud: velocity (3 components) and mass per point.
fn write_vtp(path: &std::path::Path, u: &Field<f64>) -> Result<()> {
    let p = cpu::particles_of(&u.data);
    let vel: Vec<f64> = p.vel.iter().flatten().copied().collect();
    vtp::write(
        path,
        &p.pos,
        &[
            vtp::PointArray {
                name: "velocity",
                components: 3,
                values: &vel,
            },
            vtp::PointArray {
                name: "mass",
                components: 1,
                values: &p.mass,
            },
        ],
    )
}

impl NbodyCase<'_> {
    fn measures(&self, u: &Field<f64>) -> Result<Measures> {
        let p = cpu::particles_of(&u.data);
        Ok(Measures::with_potential(&p, &(self.potential)(&p)?))
    }
}

/// What the summary's energy error measures (the JSON's meaning, the human line's note).
const ENERGY_ERROR_MEANING: &str = "|E − E₀|/|E₀| with the run's softening";
/// An energy error beyond this says the steps were too long for the encounters (the
/// leapfrog's error of a well-resolved run is far below it): the run is warned of.
const ENERGY_ERROR_WARNING: f64 = 1e-2;

impl Case for NbodyCase<'_> {
    type Real = f64;
    fn engine(&mut self) -> &mut dyn Engine<Real = f64> {
        self.engine.as_mut()
    }
    fn shape(&self) -> Vec<usize> {
        vec![self.p.n, 7]
    }
    fn scalars(&self, _step: u64, u: &Field<f64>, _: &[f64]) -> Result<Vec<(&'static str, f64)>> {
        let m = self.measures(u)?;
        Ok(vec![
            ("kinetic", m.kinetic),
            ("potential", m.potential),
            ("total_energy", m.total),
            ("energy_error", m.energy_error(&self.start)),
            ("px", m.momentum[0]),
            ("py", m.momentum[1]),
            ("pz", m.momentum[2]),
            ("lx", m.angular_momentum[0]),
            ("ly", m.angular_momentum[1]),
            ("lz", m.angular_momentum[2]),
            ("virial_ratio", m.virial_ratio),
        ])
    }
    fn needs_final_field(&self) -> bool {
        true // the final measures are taken on the host
    }
    fn finish(&mut self, o: &LoopOutcome, u: Option<&Field<f64>>, s: &mut Summary) -> Result<()> {
        let time = o.steps as f64 * self.p.dt;
        // needs_final_field, and N-body never writes pieces (writes_pieces): the runner
        // always hands over the particles.
        let u = u.expect("the runner hands over the particles");
        let end = self.measures(u)?;
        let energy_error = end.energy_error(&self.start);
        if energy_error.is_nan() || energy_error > ENERGY_ERROR_WARNING {
            s.warnings.push(format!(
                "the energy changed by {energy_error:.3e} of |E₀| (beyond {ENERGY_ERROR_WARNING:e}): \
                 nbody.dt is too long for the closest encounters; take a shorter dt or a \
                 larger nbody.softening"
            ));
        }
        s.highlights = vec![
            (
                "energy error".into(),
                format!("{energy_error:.3e} ({ENERGY_ERROR_MEANING})"),
            ),
            (
                "virial ratio".into(),
                format!(
                    "{:.4} (2K/|W|; {:.4} at the start)",
                    end.virial_ratio, self.start.virial_ratio
                ),
            ),
        ];
        s.results = Some(serde_json::json!({
            "time": time,
            "energy_error": energy_error,
            "energy_error_meaning": ENERGY_ERROR_MEANING,
            "start": self.start,
            "end": end,
            "units": "those of the problem (N-body units for the presets: G = M = 1, E ≈ −1/4)",
            "integrator": "leapfrog kick-drift-kick, f64",
        }));
        Ok(())
    }
    fn series_extras(
        &mut self,
        step: u64,
        stem: &str,
        u: &Field<f64>,
        set: &mut OutputSet,
    ) -> Result<()> {
        let picture = projection::density_xy(&cpu::particles_of(&u.data), self.half);
        png::write(&set.file(&format!("{stem}.png")), &picture)?;
        self.frames
            .push(picture.shape[0], picture.shape[1], &picture.data);
        let file = format!("{stem}.vtp");
        write_vtp(&set.file(&file), u)?;
        self.series.retain(|(_, f)| f != &file);
        self.series.push((step as f64 * self.p.dt, file));
        pvd::write(&set.file("particles.pvd"), &self.series)
    }
    fn extra_outputs(&mut self, u: &Field<f64>, set: &mut OutputSet) -> Result<()> {
        let last = projection::density_xy(&cpu::particles_of(&u.data), self.half);
        png::write(&set.file("particles.png"), &last)?;
        write_vtp(&set.file("particles.vtp"), u)?;
        // The series' frames, then the end if the series did not stop there.
        self.frames
            .push_last(last.shape[0], last.shape[1], &last.data);
        self.frames.write(set, "particles.gif", 10)?;
        Ok(())
    }
}
