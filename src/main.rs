//! The keisan command line: parses, calls the library, prints. Nothing else. `bench` and
//! `model` take one subcommand per solver, from the registry.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use clap::{Args, CommandFactory, FromArgMatches, Parser, Subcommand};

use keisan::checkpoint::Checkpoint;
use keisan::device::{self, Backend, Placement};
use keisan::error::{Error, Result};
use keisan::execute::{self, ExecuteOptions};
use keisan::precision::Precision;
use keisan::problem::{self, Overrides};
use keisan::solver::Report;
use keisan::solvers::REGISTRY;
use keisan::units::printable;

#[derive(Parser)]
#[command(
    name = "keisan",
    version,
    about = "GPU solvers for grid and particle simulations",
    after_help = "Also: `keisan bench <solver>` times a solver against the device ceilings \
                  measured in the same run; `keisan model <solver> PROBLEM` puts its \
                  performance model beside measurements."
)]
struct Cli {
    /// CPU threads for the CPU backend (default: all cores; at most the machine's).
    #[arg(long, global = true)]
    threads: Option<usize>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Solve a problem file (with none, the built-in seed benchmark).
    Run(Box<RunArgs>),
    /// CPU threads and CUDA devices; --probe measures copy bandwidth and FMA rate.
    Info {
        /// Measure each device's copy bandwidth and FMA rate (the ceilings benches divide by).
        #[arg(long)]
        probe: bool,
        /// Print the report as JSON on stdout.
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
    /// Decompose over CUDA devices: `all` or ordinals such as 0,1 (one slab each;
    /// an ordinal may repeat). Solvers that decompose: advection, heat (2D, 3D), jacobi,
    /// electrostatics.
    #[arg(long, value_name = "all|0,1,...")]
    devices: Option<String>,
    /// Number of slabs (default: one per device in --devices); on the CPU backend, the
    /// slabs share the thread pool.
    #[arg(long, value_name = "N")]
    subdomains: Option<usize>,
    /// How halo blocks travel between GPUs: auto = peer copies in one process; between
    /// ranks NCCL where every rank has a GPU of its own and NCCL loads, else MPI through
    /// host memory; mpi = that MPI path between ranks always; nccl = NCCL (loaded at run
    /// time, one GPU per slab).
    #[arg(long, value_enum, default_value_t = device::Halo::Auto)]
    halo: device::Halo,
}

#[derive(Args)]
struct RunArgs {
    /// Problem file (TOML). Without one, the seed benchmark (examples/jacobi-seed.toml),
    /// or with --restart the problem the checkpoint holds.
    problem: Option<PathBuf>,
    #[command(flatten)]
    dev: DeviceArgs,
    /// Floating-point precision, where the solver allows a choice.
    #[arg(long, value_enum)]
    precision: Option<Precision>,
    /// Override a problem-file value, e.g. --set jacobi.n=1024 (repeatable; relative
    /// paths in values are taken from the current folder).
    #[arg(long = "set", value_name = "KEY=VALUE")]
    set: Vec<String>,
    /// For the tests: fail like a full disk when publishing the output file of this name
    /// (to show a failed run leaves the previous one untouched).
    #[arg(long, hide = true, value_name = "FILE")]
    inject_write_failure: Option<String>,
    /// Output folder (overrides [output] dir).
    #[arg(long)]
    out: Option<PathBuf>,
    /// Device memory an out-of-core solver may use, e.g. 8GiB (overrides the problem file).
    #[arg(long)]
    device_memory: Option<String>,
    /// Write a checkpoint every K steps into the output folder (overrides
    /// [output] checkpoint_every).
    #[arg(long, value_name = "K")]
    checkpoint_every: Option<u64>,
    /// Continue from a checkpoint (the problem file, if given, must be the same problem).
    #[arg(long, value_name = "CHECKPOINT")]
    restart: Option<PathBuf>,
    /// Print a JSON summary on stdout.
    #[arg(long)]
    json: bool,
    /// No progress bar or notices; errors only.
    #[arg(long, short)]
    quiet: bool,
}

// Beside each solver's own `keisan bench` arguments (a plain comment: a doc comment
// would become the description of any bench subcommand that sets none).
#[derive(Args)]
struct BenchCommon {
    #[command(flatten)]
    dev: DeviceArgs,
    /// Print the report as JSON on stdout.
    #[arg(long)]
    json: bool,
}

// Beside each solver's own `keisan model` arguments (a plain comment, as above).
#[derive(Args)]
struct ModelCommon {
    /// Problem file (TOML) of this solver.
    problem: PathBuf,
    /// Override a problem-file value, as `keisan run --set` (repeatable).
    #[arg(long = "set", value_name = "KEY=VALUE")]
    set: Vec<String>,
    /// Floating-point precision, where the solver allows a choice.
    #[arg(long, value_enum)]
    precision: Option<Precision>,
    /// Device memory for an out-of-core run, e.g. 8GiB (overrides the problem file).
    #[arg(long)]
    device_memory: Option<String>,
    #[command(flatten)]
    dev: DeviceArgs,
    /// Print the report as JSON on stdout.
    #[arg(long)]
    json: bool,
}

/// The whole command line: the derived commands plus `bench` and `model` with one
/// subcommand per registered solver.
fn command() -> clap::Command {
    let mut bench = clap::Command::new("bench")
        .about("Time a solver against the device ceilings measured in the same run")
        .subcommand_required(true);
    let mut model = clap::Command::new("model")
        .about("A solver's performance model: predicted vs measured time")
        .subcommand_required(true);
    for s in REGISTRY {
        let cmd = clap::Command::new(s.name()).about(format!("{} benchmark cases", s.name()));
        bench = bench.subcommand(s.bench_args(BenchCommon::augment_args(cmd)));
        let cmd = clap::Command::new(s.name()).about(format!("{} performance model", s.name()));
        if let Some(m) = s.model_args(ModelCommon::augment_args(cmd)) {
            model = model.subcommand(m);
        }
    }
    Cli::command().subcommand(bench).subcommand(model)
}

fn main() -> ExitCode {
    let start = Instant::now();
    // Under mpirun (built with `mpi`): MPI lives until main returns.
    #[cfg(feature = "mpi")]
    let _universe = keisan::parallel::world::init();
    let matches = match command().try_get_matches() {
        Ok(m) => m,
        Err(e) => return command_line_error(e),
    };
    let result = dispatch(&matches, start);
    if let Err(e) = &result
        && wants_json(&matches)
        && keisan::parallel::World::current().is_none_or(|w| w.rank == 0)
    {
        keisan::out!(
            "{}",
            serde_json::to_string_pretty(&e.to_json()).expect("serialises")
        );
    }
    match result {
        Ok(()) => ExitCode::SUCCESS,
        // Every rank stops at the same step on a signal (they agree on it): each ends
        // normally, with the signal's code.
        Err(e @ Error::Interrupted { .. }) if keisan::parallel::World::current().is_some() => {
            if keisan::parallel::world::writes_files() {
                keisan::say!("keisan: {e}");
            }
            ExitCode::from(e.exit_code() as u8)
        }
        // One rank's failure ends every rank (none waits forever in a collective).
        Err(e) if keisan::parallel::World::current().is_some() => {
            let w = keisan::parallel::World::current().expect("checked");
            // A bad request is refused alike by every rank: rank 0's message, printed
            // before its abort ends the others, says it once (another rank's still
            // shows when it alone refused).
            if e.exit_code() == 2 && w.rank > 0 {
                std::thread::sleep(std::time::Duration::from_secs(2));
            }
            keisan::say!(
                "error (rank {} of {}): {}",
                w.rank,
                w.size,
                printable(&e.to_string())
            );
            keisan::parallel::world::abort(e.exit_code())
        }
        Err(e @ Error::Interrupted { .. }) => {
            keisan::say!("keisan: {e}");
            ExitCode::from(e.exit_code() as u8)
        }
        Err(e) => {
            keisan::say!("error: {}", printable(&e.to_string()));
            ExitCode::from(e.exit_code() as u8)
        }
    }
}

/// A command line clap refused (or `--help`, `--version`): clap's text on its stream, and
/// with `--json` among the arguments the error as a JSON object on stdout too, as for any
/// other error.
fn command_line_error(e: clap::Error) -> ExitCode {
    use clap::error::{ContextKind, ErrorKind};
    if matches!(e.kind(), ErrorKind::DisplayHelp | ErrorKind::DisplayVersion)
        || e.kind() == ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand
    {
        let _ = e.print();
        return ExitCode::from(e.exit_code() as u8);
    }
    if std::env::args_os().any(|a| a == "--json") {
        let message = e.render().to_string();
        let first = message
            .lines()
            .next()
            .unwrap_or("")
            .trim_start_matches("error: ");
        let mut v = serde_json::json!({ "error": first, "exit_code": 2 });
        if let Some(clap::error::ContextValue::String(arg)) = e.get(ContextKind::InvalidArg) {
            v["field"] = serde_json::json!(arg);
        }
        if let Some(clap::error::ContextValue::String(value)) = e.get(ContextKind::InvalidValue) {
            v["value"] = serde_json::json!(value);
        }
        keisan::out!("{}", serde_json::to_string_pretty(&v).expect("serialises"));
    }
    let _ = e.print();
    ExitCode::from(2)
}

/// Whether the command line asked for JSON on stdout (`--json` of run, info, bench or
/// model): its errors then come as a JSON object there too.
fn wants_json(m: &clap::ArgMatches) -> bool {
    let mut m = m;
    while let Some((_, sub)) = m.subcommand() {
        m = sub;
    }
    matches!(m.try_get_one::<bool>("json"), Ok(Some(true)))
}

fn usage(e: clap::Error) -> Error {
    Error::Parse(e.to_string())
}

fn dispatch(matches: &clap::ArgMatches, start: Instant) -> Result<()> {
    set_threads(matches.get_one::<usize>("threads").copied())?;
    match matches.subcommand() {
        Some(("bench", m)) => {
            let (name, m) = m.subcommand().expect("a solver subcommand is required");
            bench(name, m)
        }
        Some(("model", m)) => {
            let (name, m) = m.subcommand().expect("a solver subcommand is required");
            model(name, m)
        }
        _ => match Cli::from_arg_matches(matches).map_err(usage)?.command {
            Command::Run(args) => run(*args, start),
            Command::Info { probe, json } => info(probe, json),
        },
    }
}

fn set_threads(threads: Option<usize>) -> Result<()> {
    let Some(t) = threads else { return Ok(()) };
    let most = std::thread::available_parallelism().map_or(1, |n| n.get());
    if !(1..=most).contains(&t) {
        return Err(Error::invalid(
            "--threads",
            t,
            format!("this machine runs {most} threads at once; use 1 to {most}"),
        ));
    }
    rayon::ThreadPoolBuilder::new()
        .num_threads(t)
        .build_global()
        .map_err(|e| Error::Parse(format!("--threads: {e}")))
}

fn device_memory(flag: &Option<String>) -> Result<Option<u64>> {
    flag.as_deref()
        .map(|m| {
            keisan::units::parse_bytes(m).ok_or_else(|| {
                Error::invalid(
                    "--device-memory",
                    m,
                    "give a positive size such as 8GiB, 512MiB, 1.5GB or a number of bytes",
                )
            })
        })
        .transpose()
}

fn select(dev: &DeviceArgs, file: &problem::RunConfig, quiet: bool) -> Result<(Placement, f64)> {
    let t = Instant::now();
    let placement = device::place(
        dev.backend.unwrap_or(file.backend),
        dev.device.unwrap_or(file.device),
        dev.devices.as_deref(),
        dev.subdomains,
        &mut |msg| {
            if !quiet {
                keisan::say!("note: {msg}");
            }
        },
    )?
    .with_halo(dev.halo)?;
    Ok((placement, t.elapsed().as_secs_f64()))
}

/// With no GPU found, a problem sized for one would run on the CPU for a long while: say
/// so before it starts, with its floor at this host's copy bandwidth (measured when the
/// run's memory traffic makes it worth a second).
fn warn_of_a_long_cpu_run(problem: &problem::Problem) {
    /// Runs whose floor is below this are not worth a word.
    const LONG_S: f64 = 60.0;
    /// Traffic below this is quick on any host: not worth measuring the bandwidth.
    const FEW_BYTES: f64 = 2e11;
    let Some(values) = problem.spec.least_values_moved() else {
        return;
    };
    let bytes = values * problem.precision.bytes() as f64;
    if bytes < FEW_BYTES {
        return;
    }
    let rate = keisan::device::ceilings::measure_cpu().copy_bandwidth;
    let floor = bytes / rate;
    if floor >= LONG_S {
        keisan::say!(
            "note: on the CPU this run moves at least {} through memory{}: {} or more at \
             this host's {:.1} GB/s. A GPU run needs a CUDA device (see keisan info)",
            keisan::units::bytes(bytes as u128),
            match problem.spec.dt() {
                Some(_) => "",
                None => " by its iteration limit (less if it converges first)",
            },
            keisan::units::seconds(floor),
            rate * 1e-9
        );
    }
}

fn print_report(report: Report, json: bool) {
    if json {
        keisan::out!(
            "{}",
            serde_json::to_string_pretty(&report.json).expect("serialises")
        );
    } else {
        keisan::out_raw!("{}", report.human);
    }
}

fn bench(name: &str, m: &clap::ArgMatches) -> Result<()> {
    let solver = keisan::solvers::find(name).expect("subcommands come from the registry");
    let common = BenchCommon::from_arg_matches(m).map_err(usage)?;
    let (placement, _) = select(&common.dev, &problem::RunConfig::default(), common.json)?;
    print_report(solver.bench_placed(&placement, m)?, common.json);
    Ok(())
}

fn model(name: &str, m: &clap::ArgMatches) -> Result<()> {
    let solver = keisan::solvers::find(name).expect("subcommands come from the registry");
    let c = ModelCommon::from_arg_matches(m).map_err(usage)?;
    let o = Overrides {
        set: c.set,
        precision: c.precision,
        device_memory: device_memory(&c.device_memory)?,
        ..Default::default()
    };
    let problem = problem::load(&c.problem, &o)?;
    if problem.solver.name() != name {
        return Err(Error::invalid(
            "solver",
            problem.solver.name(),
            format!("keisan model {name} needs a problem with solver = \"{name}\""),
        ));
    }
    let (placement, _) = select(&c.dev, &problem.run, c.json)?;
    print_report(solver.model(&problem, &placement, m)?, c.json);
    Ok(())
}

/// A launcher's word that this process is one of several (Open MPI, MPICH/Intel MPI's
/// PMI, PMIx): the count of processes, when more than one.
fn launched_processes() -> Option<(String, u64)> {
    [
        "OMPI_COMM_WORLD_SIZE",
        "PMI_SIZE",
        "PMIX_SIZE",
        "MPI_LOCALNRANKS",
    ]
    .into_iter()
    .find_map(|v| {
        let n: u64 = std::env::var(v).ok()?.trim().parse().ok()?;
        (n > 1).then(|| (v.to_string(), n))
    })
}

/// Refuse to run as one of several processes of a launcher in a build without MPI: each
/// would run the whole problem into the same folder and checkpoint.
fn refuse_launch_without_mpi() -> Result<()> {
    if cfg!(feature = "mpi") {
        return Ok(());
    }
    match launched_processes() {
        Some((var, n)) => Err(Error::invalid(
            "mpirun",
            format!("{n} processes ({var} = {n})"),
            "this keisan was built without MPI, so every process would run the whole problem \
             into the same folder at once: build with `cargo build --release --features mpi` \
             to run one slab per rank, or run one process (--devices or --subdomains share a \
             node without MPI)",
        )),
        None => Ok(()),
    }
}

fn run(mut args: RunArgs, start: Instant) -> Result<()> {
    refuse_launch_without_mpi()?;
    // Under mpirun only rank 0 reports (and writes: see execute.rs).
    let speaks = keisan::parallel::world::writes_files();
    args.quiet |= !speaks;
    args.json &= speaks;
    keisan::signals::install().map_err(|e| Error::Parse(format!("signal handlers: {e}")))?;
    let mut o = Overrides {
        set: args.set,
        precision: args.precision,
        out: args.out,
        device_memory: device_memory(&args.device_memory)?,
        checkpoint_every: args.checkpoint_every,
    };
    let restart = args.restart.as_deref().map(Checkpoint::open).transpose()?;
    // A restart that names no folder continues the checkpoint's run where it wrote.
    let continued = match (&restart, &o.out) {
        (Some(c), None) => c.header.output_dir.clone(),
        _ => None,
    };
    if continued.is_some() {
        o.out = continued.clone();
    }
    let problem = match (&args.problem, &restart) {
        (Some(path), _) => problem::load(path, &o)?,
        (None, Some(c)) => problem::parse(
            &c.header.problem_toml,
            &format!("the problem in {}", c.path.display()),
            c.header.problem_base.as_deref(),
            &o,
        )?,
        (None, None) => problem::parse(
            problem::DEFAULT_PROBLEM,
            "built-in seed benchmark",
            None,
            &o,
        )?,
    };
    if let Some(dir) = &continued
        && !args.quiet
    {
        keisan::say!(
            "keisan: continuing the outputs in {} (the checkpoint's run's folder; --out \
             chooses another)",
            dir.display()
        );
    }
    if let Some(c) = &restart
        && problem.output.dir.is_none()
    {
        // The checkpoint does not say where its run wrote: the results must go somewhere.
        return Err(Error::invalid(
            "--out",
            "not given",
            format!(
                "{} does not say where its run wrote, so this restart's results would go \
                 nowhere: give --out DIR",
                c.path.display()
            ),
        ));
    }
    let (placement, context_s) = select(&args.dev, &problem.run, args.quiet)?;
    if !args.quiet
        && args.dev.backend.unwrap_or(problem.run.backend) == device::Backend::Auto
        && matches!(placement.first(), device::Device::Cpu { .. })
    {
        warn_of_a_long_cpu_run(&problem);
    }
    if !args.quiet {
        keisan::say!(
            "running {} on {}",
            printable(&problem.title),
            placement.describe()
        );
    }
    keisan::device::cuda::announce_compiles(!args.quiet);
    let summary = execute::execute_placed(
        &problem,
        &placement,
        &ExecuteOptions {
            quiet: args.quiet,
            context_s,
            process_start: Some(start),
            restart,
            inject_write_failure: args.inject_write_failure,
        },
    )?;
    if !args.quiet {
        keisan::say_raw!("{}", summary.human());
    }
    if args.json {
        keisan::out!(
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
    if devices.is_ok() {
        let nccl = keisan::parallel::nccl_version();
        report["nccl"] = serde_json::json!(nccl);
        text += &match nccl {
            Some(v) => format!("NCCL {v} (--halo nccl)\n"),
            None => format!(
                "NCCL: {} (only --halo nccl needs it)\n",
                keisan::parallel::NCCL_NOT_FOUND
            ),
        };
    }
    if devices.is_ok() {
        let cache = keisan::device::kernel_cache::dir();
        report["kernel_cache"] = serde_json::json!(cache);
        text += &match &cache {
            Some(dir) => {
                let (n, bytes) = keisan::device::kernel_cache::usage(dir);
                format!(
                    "compiled kernels: {} ({n} entries, {}; KEISAN_KERNEL_CACHE=off to bypass)\n",
                    dir.display(),
                    keisan::units::bytes(bytes as u128)
                )
            }
            None => "compiled kernels: not kept between runs (KEISAN_KERNEL_CACHE)\n".into(),
        };
    }
    if probe {
        let cpu = keisan::device::ceilings::measure_cpu();
        text += &format!("CPU {}", cpu.human().trim_start());
        report["cpu_ceilings"] = serde_json::to_value(cpu).expect("serialises");
        if let Ok(list) = &devices {
            let mut probes = Vec::new();
            for d in list {
                let gpu = device::Gpu::open(d.ordinal)?;
                let c = keisan::device::ceilings::measure_gpu(&gpu)?;
                text += &format!("CUDA device {} {}", d.ordinal, c.human().trim_start());
                probes.push(c);
            }
            report["cuda_ceilings"] = serde_json::to_value(probes).expect("serialises");
        }
    }
    if json {
        keisan::out!(
            "{}",
            serde_json::to_string_pretty(&report).expect("serialises")
        );
    } else {
        keisan::out_raw!("{text}");
    }
    Ok(())
}
