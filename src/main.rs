//! The keisan command line: parses, calls the library, prints. Nothing else.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use clap::{Args, Parser, Subcommand};

use keisan::device::{self, Backend, Device};
use keisan::error::{Error, Result};
use keisan::execute::{self, ExecuteOptions};
use keisan::precision::Precision;
use keisan::problem;

#[derive(Parser)]
#[command(
    name = "keisan",
    version,
    about = "GPU solvers for grid and particle simulations"
)]
struct Cli {
    /// CPU threads for the CPU backend (default: all cores).
    #[arg(long, global = true)]
    threads: Option<usize>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Solve a problem file (with none, the built-in seed benchmark).
    Run(RunArgs),
    /// CPU threads and CUDA devices; --probe measures copy bandwidth and FMA rate.
    Info {
        #[arg(long)]
        probe: bool,
        #[arg(long)]
        json: bool,
    },
    /// Time a solver against the device ceilings measured in the same run.
    Bench {
        #[command(subcommand)]
        which: BenchCommand,
    },
    /// Predicted vs measured time of an out-of-core run for a sweep of pyramid heights.
    Model {
        #[command(subcommand)]
        which: ModelCommand,
    },
}

#[derive(Subcommand)]
enum ModelCommand {
    /// The heat problem's pyramid run, for each height (and decomposition).
    Heat {
        /// Problem file (TOML) with solver = "heat".
        problem: PathBuf,
        /// Pyramid heights to try.
        #[arg(long, value_delimiter = ',', default_values_t = [1usize, 2, 4, 8, 12, 16, 24, 32, 48, 64])]
        heights: Vec<usize>,
        /// Device memory for the pyramid, e.g. 8GiB (overrides heat.device_memory).
        #[arg(long)]
        device_memory: Option<String>,
        #[arg(long = "set", value_name = "KEY=VALUE")]
        set: Vec<String>,
        #[arg(long, value_enum)]
        precision: Option<Precision>,
        #[command(flatten)]
        dev: DeviceArgs,
        #[arg(long)]
        json: bool,
    },
}

#[derive(Args)]
struct DeviceArgs {
    /// auto = CUDA if a device is usable, else the CPU.
    #[arg(long, value_enum)]
    backend: Option<Backend>,
    /// CUDA device ordinal.
    #[arg(long)]
    device: Option<usize>,
}

#[derive(Args)]
struct RunArgs {
    /// Problem file (TOML). Without one, the seed benchmark (examples/jacobi-seed.toml).
    problem: Option<PathBuf>,
    #[command(flatten)]
    dev: DeviceArgs,
    /// Floating-point precision, where the solver allows a choice.
    #[arg(long, value_enum)]
    precision: Option<Precision>,
    /// Override a problem-file value, e.g. --set jacobi.n=1024 (repeatable).
    #[arg(long = "set", value_name = "KEY=VALUE")]
    set: Vec<String>,
    /// Output folder (overrides [output] dir).
    #[arg(long)]
    out: Option<PathBuf>,
    /// Device memory an out-of-core solver may use, e.g. 8GiB (overrides the problem file).
    #[arg(long)]
    device_memory: Option<String>,
    /// Print a JSON summary on stdout.
    #[arg(long)]
    json: bool,
    /// No progress bar or notices; errors only.
    #[arg(long, short)]
    quiet: bool,
}

#[derive(Subcommand)]
enum BenchCommand {
    /// Jacobi sweeps (default: the seed case, 5120x5000, 100 iterations).
    Jacobi {
        #[arg(long, default_value = "5120x5000", value_parser = parse_size)]
        size: (usize, usize),
        #[arg(long, default_value_t = 100)]
        iterations: u64,
        #[arg(long, default_value_t = 7)]
        repetitions: usize,
        #[arg(long, value_enum, default_value_t = Precision::F64)]
        precision: Precision,
        #[command(flatten)]
        dev: DeviceArgs,
        #[arg(long)]
        json: bool,
    },
    /// Heat: in-core 3D and 2D single pass and temporal blocking, out-of-core pyramid vs
    /// trivial (f32).
    Heat {
        #[arg(long, value_enum, default_value_t = Precision::F32)]
        precision: Precision,
        /// In-core 3D grid, e.g. 512x512x512 (empty to skip).
        #[arg(long, default_value = "512x512x512")]
        size_3d: String,
        /// In-core 2D grid.
        #[arg(long, default_value = "16384x16384")]
        size_2d: String,
        #[arg(long, default_value_t = 100)]
        steps: u64,
        #[arg(long, default_value_t = 5)]
        repetitions: usize,
        /// Out-of-core 3D grid.
        #[arg(long, default_value = "1024x1024x1024")]
        ooc_size: String,
        #[arg(long, default_value_t = 64)]
        ooc_steps: u64,
        /// Device budget = grid bytes / this.
        #[arg(long, default_value_t = 8)]
        budget_divisor: u64,
        #[arg(long, default_value_t = 2)]
        trivial_steps: u64,
        #[arg(long)]
        skip_out_of_core: bool,
        /// Steps per pass of the temporal-blocked in-core cases (default: the engine's).
        #[arg(long)]
        temporal_block: Option<usize>,
        #[command(flatten)]
        dev: DeviceArgs,
        #[arg(long)]
        json: bool,
    },
}

/// "512x512x512" → [512, 512, 512]; "" → [] (skip).
fn parse_shape(s: &str) -> std::result::Result<Vec<usize>, String> {
    if s.trim().is_empty() {
        return Ok(Vec::new());
    }
    let v: Option<Vec<usize>> = s
        .split(['x', 'X'])
        .map(|t| t.trim().parse::<usize>().ok().filter(|v| *v >= 3))
        .collect();
    v.filter(|v| (1..=3).contains(&v.len()))
        .ok_or_else(|| format!("`{s}`: expected 1 to 3 extents ≥ 3, e.g. 512x512x512"))
}

fn parse_size(s: &str) -> std::result::Result<(usize, usize), String> {
    let (a, b) = s
        .split_once(['x', 'X'])
        .ok_or_else(|| format!("`{s}`: expected NxM, e.g. 5120x5000"))?;
    let parse = |t: &str| {
        t.trim()
            .parse::<usize>()
            .ok()
            .filter(|v| *v >= 3)
            .ok_or_else(|| format!("`{s}`: each extent must be an integer ≥ 3"))
    };
    Ok((parse(a)?, parse(b)?))
}

fn main() -> ExitCode {
    let start = Instant::now();
    let cli = Cli::parse();
    match dispatch(cli, start) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(e.exit_code() as u8)
        }
    }
}

fn dispatch(cli: Cli, start: Instant) -> Result<()> {
    if let Some(t) = cli.threads {
        if t == 0 {
            return Err(Error::invalid("--threads", t, "at least 1 thread"));
        }
        rayon::ThreadPoolBuilder::new()
            .num_threads(t)
            .build_global()
            .map_err(|e| Error::Parse(format!("--threads: {e}")))?;
    }
    match cli.command {
        Command::Run(args) => run(args, start),
        Command::Info { probe, json } => info(probe, json),
        Command::Bench { which } => bench(which),
        Command::Model { which } => model(which),
    }
}

fn device_memory_override(v: &Option<String>) -> Option<String> {
    v.as_ref()
        .map(|m| format!("heat.device_memory=\"{}\"", m.replace('"', "")))
}

fn model(which: ModelCommand) -> Result<()> {
    let ModelCommand::Heat {
        problem: path,
        heights,
        device_memory,
        mut set,
        precision,
        dev,
        json,
    } = which;
    set.extend(device_memory_override(&device_memory));
    let problem = problem::load(&path, &set)?;
    let problem::SolverProblem::Heat(p) = &problem.solver else {
        return Err(Error::invalid(
            "solver",
            "jacobi",
            "keisan model heat needs a problem with solver = \"heat\"",
        ));
    };
    if heights.is_empty() || heights.contains(&0) {
        return Err(Error::invalid(
            "--heights",
            "0",
            "heights must be at least 1",
        ));
    }
    let (device, _) = select(&dev, &problem.run, json)?;
    let precision = precision.unwrap_or(problem.precision);
    if !json {
        println!(
            "{:>4} {:>6} {:>6} {:>12} {:>12} {:>9}  bound",
            "dec", "n", "tasks", "predicted", "measured", "deviation"
        );
    }
    let show = |m: &keisan::heat_bench::ModelPoint| {
        if !json {
            println!(
                "{:>4} {:>6} {:>6} {:>12} {:>12} {:>8.1}%  {}",
                m.decomposition.label(),
                m.pyramid_height,
                m.tasks,
                keisan::units::seconds(m.predicted_s),
                keisan::units::seconds(m.measured_s),
                100.0 * m.deviation,
                m.bound
            );
        }
    };
    let points = match precision {
        Precision::F32 => keisan::heat_bench::model_sweep::<f32>(&device, p, &heights, &show)?,
        Precision::F64 => keisan::heat_bench::model_sweep::<f64>(&device, p, &heights, &show)?,
    };
    if points.is_empty() {
        return Err(Error::invalid(
            "--heights",
            format!("{heights:?}"),
            "no height fits the device budget; try smaller heights or more device memory",
        ));
    }
    let mean = points.iter().map(|m| m.deviation.abs()).sum::<f64>() / points.len() as f64;
    if json {
        println!(
            "{}",
            serde_json::to_string_pretty(&serde_json::json!({
                "device": device.describe(), "points": points, "mean_abs_deviation": mean
            }))
            .expect("serialises")
        );
    } else {
        println!(
            "mean |deviation| {:.1} % over {} runs",
            100.0 * mean,
            points.len()
        );
    }
    Ok(())
}

fn select(dev: &DeviceArgs, file: &problem::RunConfig, quiet: bool) -> Result<(Device, f64)> {
    let t = Instant::now();
    let device = device::select(
        dev.backend.unwrap_or(file.backend),
        dev.device.unwrap_or(file.device),
        &mut |msg| {
            if !quiet {
                eprintln!("note: {msg}");
            }
        },
    )?;
    Ok((device, t.elapsed().as_secs_f64()))
}

fn run(mut args: RunArgs, start: Instant) -> Result<()> {
    args.set.extend(device_memory_override(&args.device_memory));
    let mut problem = match &args.problem {
        Some(path) => problem::load(path, &args.set)?,
        None => problem::parse(
            problem::DEFAULT_PROBLEM,
            "built-in seed benchmark",
            &args.set,
        )?,
    };
    if let Some(p) = args.precision {
        problem.precision = p;
    }
    if let Some(out) = args.out {
        problem.output.dir = Some(out);
    }
    let (device, context_s) = select(&args.dev, &problem.run, args.quiet)?;
    if !args.quiet {
        eprintln!("running {} on {}", problem.title, device.describe());
    }
    let summary = execute::execute(
        &problem,
        &device,
        &ExecuteOptions {
            quiet: args.quiet,
            context_s,
            process_start: Some(start),
        },
    )?;
    if !args.quiet {
        eprint!("{}", summary.human());
    }
    if args.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&summary).expect("summary serialises")
        );
    }
    Ok(())
}

fn info(probe: bool, json: bool) -> Result<()> {
    let threads = rayon::current_num_threads();
    let devices = device::list_cuda_devices();
    let mut report = serde_json::json!({ "cpu_threads": threads });
    let mut text = format!("CPU: {threads} threads\n");
    match &devices {
        Ok(list) => {
            report["cuda_devices"] = serde_json::to_value(list).expect("serialises");
            for d in list {
                text += &format!(
                    "CUDA device {}: {}, compute capability {}, {} SMs, {} ({} free)\n",
                    d.ordinal,
                    d.name,
                    d.compute_capability,
                    d.multiprocessors,
                    keisan::units::bytes(d.total_memory_bytes as u128),
                    keisan::units::bytes(d.free_memory_bytes as u128),
                );
            }
        }
        Err(e) => {
            report["cuda_devices"] = serde_json::json!([]);
            report["cuda_unavailable"] = serde_json::json!(e.to_string());
            text += &format!("CUDA: {e}\n");
        }
    }
    if probe {
        let cpu = keisan::device::ceilings::measure_cpu();
        text += &format!(
            "CPU copy bandwidth: {:.1} GB/s\n",
            cpu.copy_bandwidth * 1e-9
        );
        report["cpu_ceilings"] = serde_json::to_value(cpu).expect("serialises");
        if let Ok(list) = &devices {
            let mut probes = Vec::new();
            for d in list {
                let gpu = device::Gpu::open(d.ordinal)?;
                let c = keisan::device::ceilings::measure_gpu(&gpu)?;
                text += &format!(
                    "CUDA device {}: copy {:.1} GB/s, FMA f32 {:.1} TFLOP/s, f64 {:.1} TFLOP/s\n",
                    d.ordinal,
                    c.copy_bandwidth * 1e-9,
                    c.fma_f32 * 1e-12,
                    c.fma_f64 * 1e-12
                );
                probes.push(c);
            }
            report["cuda_ceilings"] = serde_json::to_value(probes).expect("serialises");
        }
    }
    if json {
        println!(
            "{}",
            serde_json::to_string_pretty(&report).expect("serialises")
        );
    } else {
        print!("{text}");
    }
    Ok(())
}

fn bench(which: BenchCommand) -> Result<()> {
    match which {
        BenchCommand::Jacobi {
            size: (n, m),
            iterations,
            repetitions,
            precision,
            dev,
            json,
        } => {
            if iterations == 0 || repetitions == 0 {
                return Err(Error::invalid(
                    "--iterations/--repetitions",
                    0,
                    "both must be at least 1",
                ));
            }
            let (device, _) = select(&dev, &problem::RunConfig::default(), json)?;
            let report = keisan::bench::jacobi(
                &device,
                &keisan::bench::JacobiBenchOptions {
                    n,
                    m,
                    iterations,
                    repetitions,
                    precision,
                },
            )?;
            if json {
                println!(
                    "{}",
                    serde_json::to_string_pretty(&report).expect("serialises")
                );
            } else {
                print!("{}", keisan::bench::jacobi_human(&report));
            }
            Ok(())
        }
        BenchCommand::Heat {
            precision,
            size_3d,
            size_2d,
            steps,
            repetitions,
            ooc_size,
            ooc_steps,
            budget_divisor,
            trivial_steps,
            skip_out_of_core,
            temporal_block,
            dev,
            json,
        } => {
            let most = keisan::solvers::heat::MAX_TEMPORAL_BLOCK;
            if let Some(t) = temporal_block.filter(|t| !(1..=most).contains(t)) {
                return Err(Error::invalid(
                    "--temporal-block",
                    t,
                    format!("steps per pass must be in [1, {most}]"),
                ));
            }
            if steps == 0 || repetitions == 0 || ooc_steps == 0 || trivial_steps == 0 {
                return Err(Error::invalid(
                    "--steps/--repetitions/--ooc-steps/--trivial-steps",
                    0,
                    "each must be at least 1",
                ));
            }
            if budget_divisor == 0 {
                return Err(Error::invalid("--budget-divisor", 0, "at least 1"));
            }
            let shape =
                |flag: &str, v: &str| parse_shape(v).map_err(|why| Error::invalid(flag, v, why));
            let (size_3d, size_2d) = (shape("--size-3d", &size_3d)?, shape("--size-2d", &size_2d)?);
            let ooc_size = shape("--ooc-size", &ooc_size)?;
            let (device, _) = select(&dev, &problem::RunConfig::default(), json)?;
            let report = keisan::heat_bench::heat(
                &device,
                &keisan::heat_bench::HeatBenchOptions {
                    precision,
                    shape_3d: size_3d,
                    shape_2d: size_2d,
                    steps,
                    repetitions,
                    ooc_shape: ooc_size,
                    ooc_steps,
                    budget_divisor,
                    trivial_steps,
                    skip_out_of_core,
                    temporal_block,
                },
            )?;
            if json {
                println!(
                    "{}",
                    serde_json::to_string_pretty(&report).expect("serialises")
                );
            } else {
                print!("{}", report.human());
            }
            Ok(())
        }
    }
}
