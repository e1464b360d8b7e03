//! Problem files: TOML → a validated [`Problem`]. The top level reads `title`, `solver`,
//! `precision`, `[run]` and `[output]`; the solver's own table goes to the solver named
//! in the registry ([`crate::solvers::REGISTRY`]). Unknown keys are errors, and every
//! error names the field — with the line, when it came from a file, or the `--set` that
//! gave it.
//!
//! Paths: a relative path written in a problem file is taken from the file's folder; one
//! given on the command line (`--set`, `--out`, `--restart`) from the current folder.

use std::path::{Path, PathBuf};

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::device::Backend;
use crate::error::{Error, Result};
use crate::precision::Precision;
use crate::solver::{Solver, SolverProblem};

/// The built-in default problem: the seed benchmark of the Jacobi study.
pub const DEFAULT_PROBLEM: &str = include_str!("../examples/jacobi-seed.toml");

/// Where and how to run, when the command line does not say.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RunConfig {
    #[serde(default)]
    pub backend: Backend,
    #[serde(default)]
    pub device: usize,
}

/// The `[output]` table as written.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct OutputTable {
    #[serde(default)]
    dir: Option<PathBuf>,
    #[serde(default)]
    every: Option<i64>,
    #[serde(default)]
    times: Option<Vec<f64>>,
    #[serde(default)]
    checkpoint_every: Option<i64>,
    #[serde(default)]
    pieces: Pieces,
}

/// How a decomposed run under mpirun writes its fields and checkpoints.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Pieces {
    /// Gathered into whole files while the field fits in every process's share of its
    /// node's memory (and one MPI gather); one piece per rank otherwise.
    #[default]
    Auto,
    /// Always gathered into whole files.
    Gather,
    /// One piece per rank (a .vti/.vtr and an .npy each, a .pvti/.pvtr that ParaView
    /// opens as one field) and one checkpoint file per rank, restartable on the same
    /// number of ranks.
    PerRank,
}

/// What to write, where and when.
#[derive(Debug, Clone, Default)]
pub struct Output {
    /// Folder for results; nothing is written without one.
    pub dir: Option<PathBuf>,
    /// Steps at which numbered fields and a diagnostics row are written (ascending).
    pub steps: Vec<u64>,
    /// `every = K`: the final step joins the series too.
    pub every: Option<u64>,
    pub checkpoint_every: Option<u64>,
    pub pieces: Pieces,
}

/// What the command line adds to a problem file.
#[derive(Debug, Clone, Default)]
pub struct Overrides {
    /// `--set key=value`, in order.
    pub set: Vec<String>,
    pub precision: Option<Precision>,
    pub out: Option<PathBuf>,
    pub device_memory: Option<u64>,
    pub checkpoint_every: Option<u64>,
}

/// A validated problem, ready to run.
#[derive(Debug)]
pub struct Problem {
    pub title: String,
    pub precision: Precision,
    pub run: RunConfig,
    pub output: Output,
    pub solver: &'static dyn Solver,
    pub spec: Box<dyn SolverProblem>,
    /// The problem as parsed, `--set` applied: what a checkpoint stores.
    pub table: toml::Table,
    /// The folder relative paths in the table are taken from.
    pub base: Option<PathBuf>,
    /// The files the problem reads (its dotted key, the path as resolved).
    pub inputs: Vec<(String, PathBuf)>,
}

impl std::fmt::Debug for dyn Solver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl Problem {
    /// The solver's own problem type, e.g. `problem.spec_as::<HeatProblem>()`.
    pub fn spec_as<P: 'static>(&self) -> Option<&P> {
        self.spec.as_any().downcast_ref()
    }
}

/// Where a problem's text came from, for messages and for resolving paths; handed to the
/// solver with its table.
pub struct Source<'a> {
    /// The file's path, or a description ("built-in seed benchmark").
    pub origin: &'a str,
    text: &'a str,
    base: Option<&'a Path>,
    /// Dotted keys set by `--set`.
    overridden: Vec<String>,
    pub precision: Precision,
    /// Every path resolved by [`Source::path`]: the problem's input files.
    inputs: std::cell::RefCell<Vec<(String, PathBuf)>>,
}

impl Source<'_> {
    /// Deserialize `value` (the table at dotted `key`) into `T`; an error names the key
    /// path and the line of the file, or the `--set` that gave the value.
    pub fn deserialize<T: DeserializeOwned>(&self, key: &str, value: toml::Value) -> Result<T> {
        serde_path_to_error::deserialize(value).map_err(|e| {
            let inner = e.path().to_string();
            let path = match inner.as_str() {
                "." | "" => key.to_string(),
                p if key.is_empty() => p.to_string(),
                p => format!("{key}.{p}"),
            };
            self.error_at(&path, &e.into_inner().to_string())
        })
    }

    /// An error about the value at dotted `path`, saying where that value came from.
    pub fn error_at(&self, path: &str, message: &str) -> Error {
        if let Some(o) = self.override_of(path) {
            return Error::Parse(format!("--set {o}…: {path}: {message}"));
        }
        match line_of(self.text, path) {
            Some(line) => Error::Parse(format!("{}, line {line}: {path}: {message}", self.origin)),
            None => Error::Parse(format!("{}: {path}: {message}", self.origin)),
        }
    }

    /// The `--set` that gave the value at `path`: one that set it or a table above it,
    /// or else one that set a key inside it (an error about a table, such as an unknown
    /// field, is then most likely that key's).
    fn override_of(&self, path: &str) -> Option<&str> {
        let above = |k: &String| {
            path == k.as_str()
                || path.starts_with(&format!("{k}."))
                || path.starts_with(&format!("{k}["))
        };
        let inside = |k: &String| k.starts_with(&format!("{path}."));
        (self.overridden.iter().find(|k| above(k)))
            .or_else(|| self.overridden.iter().find(|k| inside(k)))
            .map(|k| k.as_str())
    }

    /// A path written at dotted `key`, made usable: relative paths from a problem file are
    /// taken from its folder, those given by `--set` from the current folder.
    pub fn path(&self, key: &str, p: &Path) -> PathBuf {
        let path = match self.base {
            Some(base) if p.is_relative() && self.override_of(key).is_none() => base.join(p),
            _ => p.to_path_buf(),
        };
        self.inputs
            .borrow_mut()
            .push((key.to_string(), path.clone()));
        path
    }
}

/// The line (1-based) of the value at dotted `path` in `text`, or of the deepest table
/// on the way to it that the file holds.
fn line_of(text: &str, path: &str) -> Option<usize> {
    use toml::de::{DeTable, DeValue};
    let doc = DeTable::parse(text).ok()?;
    let mut table = doc.get_ref();
    let mut span = None;
    for seg in path.split('.') {
        let (name, index) = match seg.split_once('[') {
            Some((n, i)) => (n, i.trim_end_matches(']').parse::<usize>().ok()),
            None => (seg, None),
        };
        let Some(value) = table.get(name) else { break };
        span = Some(value.span());
        let mut v = value.get_ref();
        if let (Some(i), DeValue::Array(a)) = (index, v)
            && let Some(item) = a.get(i)
        {
            span = Some(item.span());
            v = item.get_ref();
        }
        match v {
            DeValue::Table(t) => table = t,
            _ => break,
        }
    }
    span_line(text, span)
}

fn span_line(text: &str, span: Option<std::ops::Range<usize>>) -> Option<usize> {
    let at = span?.start.min(text.len());
    Some(text[..at].matches('\n').count() + 1)
}

/// The largest problem file read: a TOML table of settings, never data.
pub const MAX_PROBLEM_BYTES: u64 = 16 << 20;

/// Read a problem file and validate it with the command line's overrides.
pub fn load(path: &Path, o: &Overrides) -> Result<Problem> {
    let cannot =
        |e: String| Error::Parse(format!("cannot read problem file {}: {e}", path.display()));
    let file = crate::input::open_regular(path, cannot)?;
    let mut bytes = Vec::new();
    use std::io::Read;
    file.take(MAX_PROBLEM_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| cannot(e.to_string()))?;
    if bytes.len() as u64 > MAX_PROBLEM_BYTES {
        return Err(cannot(format!(
            "it is larger than {} MiB, which no problem file is (arrays go in .npy files)",
            MAX_PROBLEM_BYTES >> 20
        )));
    }
    let text = String::from_utf8(bytes)
        .ok()
        .filter(|t| !t.contains('\0'))
        .ok_or_else(|| {
            Error::Parse(format!(
                "{} is not a problem file: it is not UTF-8 text (a TOML file is expected)",
                path.display()
            ))
        })?;
    // A file in the current folder has the empty parent: its paths need no prefix.
    let base = path.parent().filter(|p| !p.as_os_str().is_empty());
    parse(&text, &path.display().to_string(), base, o)
}

/// Validate a problem from TOML text. `base`: the folder relative paths in the text are
/// taken from (None: the current folder).
pub fn parse(text: &str, origin: &str, base: Option<&Path>, o: &Overrides) -> Result<Problem> {
    let mut table: toml::Table =
        toml::from_str(text).map_err(|e| Error::Parse(format!("{origin}: malformed TOML: {e}")))?;
    let mut overridden = Vec::new();
    for ov in &o.set {
        overridden.push(apply_override(&mut table, ov)?);
    }
    if let Some(p) = o.precision {
        table.insert("precision".into(), toml::Value::String(p.name().into()));
        overridden.push("precision".into());
    }
    let as_parsed = table.clone();
    let mut src = Source {
        origin,
        text,
        base,
        overridden,
        precision: Precision::F64,
        inputs: Default::default(),
    };
    let mut take = |key: &str| table.remove(key);

    let title = match take("title") {
        Some(v) => Some(src.deserialize::<String>("title", v)?),
        None => None,
    };
    let names: Vec<&str> = crate::solvers::REGISTRY.iter().map(|s| s.name()).collect();
    let solver_name: String = match take("solver") {
        Some(v) => src.deserialize("solver", v)?,
        None => {
            return Err(Error::Parse(format!(
                "{origin}: no `solver = \"…\"`; say which solver: {}",
                names.join(", ")
            )));
        }
    };
    let solver = crate::solvers::find(&solver_name).ok_or_else(|| {
        src.error_at(
            "solver",
            &format!(
                "unknown solver `{}`; expected one of {}",
                crate::units::clip(&solver_name),
                names.join(", ")
            ),
        )
    })?;
    if let Some(v) = take("precision") {
        src.precision = src.deserialize("precision", v)?;
    }
    let run: RunConfig = match take("run") {
        Some(v) => src.deserialize("run", v)?,
        None => RunConfig::default(),
    };
    let output_table: OutputTable = match take("output") {
        Some(v) => src.deserialize("output", v)?,
        None => OutputTable::default(),
    };
    let solver_table = take(solver.name());
    if let Some((other, _)) = table.iter().find(|(k, _)| names.contains(&k.as_str())) {
        return Err(src.error_at(
            other,
            &format!(
                "a [{other}] table in a problem with solver = \"{}\": remove it, or set \
                 solver = \"{other}\"",
                solver.name()
            ),
        ));
    }
    if let Some((k, _)) = table.iter().next() {
        return Err(src.error_at(
            k,
            &format!(
                "unknown field `{}`; expected one of title, solver, precision, run, output, {}",
                crate::units::clip(k),
                solver.name()
            ),
        ));
    }
    let solver_table = solver_table.ok_or_else(|| {
        Error::Parse(format!(
            "{origin}: solver = \"{0}\" needs a [{0}] table ({1})",
            solver.name(),
            solver.table_hint()
        ))
    })?;
    let mut spec = solver.problem(solver_table, &src)?;
    if let Some(bytes) = o.device_memory {
        spec.set_device_memory(bytes)?;
    }
    let output = validate_output(output_table, o, &src, spec.as_ref())?;
    Ok(Problem {
        title: title.unwrap_or_else(|| origin.to_string()),
        precision: src.precision,
        run,
        output,
        solver,
        spec,
        table: as_parsed,
        base: base.map(Path::to_path_buf),
        inputs: src.inputs.take(),
    })
}

/// Refuse, before any solving, paths a run could not record or would harm: an output
/// folder (or, with checkpoints, the problem's folder) whose path is not UTF-8 — the
/// summary and checkpoints record paths as JSON text — and an input file directly in the
/// output folder, where this run's outputs would replace it (and the same command run
/// again would read its own output).
pub fn check_paths(p: &Problem) -> Result<()> {
    let utf8 = |field: &str, path: &Path| match std::path::absolute(path)
        .ok()
        .and_then(|a| a.to_str().map(drop))
        .and(path.to_str())
    {
        Some(_) => Ok(()),
        None => Err(Error::invalid(
            field,
            path.display(),
            "is not valid UTF-8 (with the current folder): summary.json and checkpoints \
             record paths as JSON text; choose a folder whose path is",
        )),
    };
    let Some(out) = &p.output.dir else {
        return Ok(());
    };
    utf8("the output folder (--out or output.dir)", out)?;
    if let (Some(base), Some(_)) = (&p.base, p.output.checkpoint_every) {
        utf8("the problem file's folder", base)?;
    }
    let Ok(out) = out.canonicalize() else {
        return Ok(());
    };
    for (key, input) in &p.inputs {
        let folder = input
            .parent()
            .filter(|f| !f.as_os_str().is_empty())
            .unwrap_or(Path::new("."));
        if folder.canonicalize().is_ok_and(|f| f == out) {
            return Err(Error::invalid(
                key,
                input.display(),
                format!(
                    "is in the output folder {}, where this run's outputs go and may replace \
                     it: move the input out of that folder, or choose another --out",
                    out.display()
                ),
            ));
        }
    }
    Ok(())
}

fn validate_output(
    t: OutputTable,
    o: &Overrides,
    src: &Source,
    spec: &dyn SolverProblem,
) -> Result<Output> {
    let empty = |d: Option<&PathBuf>, field: &str| match d {
        Some(d) if d.as_os_str().is_empty() => Err(Error::invalid(
            field,
            "\"\"",
            "name a folder (it is created if needed), or leave it out to write nothing",
        )),
        _ => Ok(()),
    };
    empty(t.dir.as_ref(), "output.dir")?;
    empty(o.out.as_ref(), "--out")?;
    let dir = match (&o.out, t.dir) {
        (Some(out), _) => Some(out.clone()),
        (None, Some(d)) => Some(src.path("output.dir", &d)),
        (None, None) => None,
    };
    let positive = |field: &str, v: Option<i64>| -> Result<Option<u64>> {
        match v {
            Some(k) if k < 1 => Err(Error::invalid(field, k, "must be at least 1 (steps)")),
            k => Ok(k.map(|k| k as u64)),
        }
    };
    let every = positive("output.every", t.every)?;
    let checkpoint_every = match o.checkpoint_every {
        Some(0) => return Err(Error::invalid("--checkpoint-every", 0, "at least 1 step")),
        Some(k) => Some(k),
        None => positive("output.checkpoint_every", t.checkpoint_every)?,
    };
    let max = spec.max_steps();
    let mut steps = Vec::new();
    match (every, &t.times) {
        (Some(_), Some(_)) => {
            return Err(Error::invalid(
                "output.times",
                "given with output.every",
                "give one schedule: every = K steps, or times = [...]",
            ));
        }
        (Some(k), None) => {
            steps.extend((0..=max / k).map(|i| i * k));
            if !max.is_multiple_of(k) {
                steps.push(max);
            }
        }
        (None, Some(times)) => {
            let Some(dt) = spec.dt() else {
                return Err(Error::invalid(
                    "output.times",
                    format!("{times:?}"),
                    "this solver counts iterations, not time: use output.every = K",
                ));
            };
            for &time in times {
                let end = max as f64 * dt;
                if !(time.is_finite() && time >= 0.0 && time <= end * (1.0 + 1e-12)) {
                    return Err(Error::invalid(
                        "output.times",
                        crate::units::num(time),
                        format!(
                            "times must lie in [0, steps × dt] = [0, {}]",
                            crate::units::num(end)
                        ),
                    ));
                }
                steps.push(((time / dt).round() as u64).min(max));
            }
            steps.sort_unstable();
            steps.dedup();
        }
        (None, None) => {}
    }
    let output = Output {
        dir,
        steps,
        every,
        checkpoint_every,
        pieces: t.pieces,
    };
    if output.dir.is_none() {
        let field = if !output.steps.is_empty() {
            Some(if every.is_some() {
                "output.every"
            } else {
                "output.times"
            })
        } else if checkpoint_every.is_some() {
            Some("output.checkpoint_every")
        } else {
            None
        };
        if let Some(f) = field {
            return Err(Error::invalid(
                f,
                "given",
                "needs an output folder: [output] dir = \"…\" or --out DIR",
            ));
        }
    }
    Ok(output)
}

/// Apply one `--set key=value` to the table; the dotted key it set.
fn apply_override(table: &mut toml::Table, ov: &str) -> Result<String> {
    let shown = crate::units::clip(ov);
    let (key, raw) = ov.split_once('=').ok_or_else(|| {
        Error::Parse(format!(
            "--set {shown}: expected key=value, e.g. --set jacobi.n=1024"
        ))
    })?;
    if ov.chars().any(|c| c.is_control()) {
        return Err(Error::Parse(format!(
            "--set {shown}: a value is one line of text; it holds a newline or another \
             control character"
        )));
    }
    let key = key.trim();
    let parts: Vec<&str> = key.split('.').collect();
    if parts.iter().any(|p| p.is_empty()) {
        return Err(Error::Parse(format!(
            "--set {shown}: empty key segment in `{key}`"
        )));
    }
    // A TOML value (number, string, array, inline table); otherwise the text as a string
    // — unless it opens an array, a table or a quoted string, which must then parse.
    let text = raw.trim();
    let value = match text.parse::<toml::Value>() {
        Ok(v) => v,
        Err(e) if text.starts_with(['[', '{', '"', '\'']) => {
            let why = e.to_string();
            let why = why.lines().last().unwrap_or("").trim();
            return Err(Error::Parse(format!(
                "--set {shown}: `{}` is not a TOML value ({why}); e.g. --set \
                 heat.shape=[64,64] or --set 'heat.initial={{preset=\"sine\"}}'",
                crate::units::clip(text)
            )));
        }
        Err(_) => toml::Value::String(text.to_string()),
    };
    let (last, path) = parts.split_last().expect("split yields at least one part");
    let mut cur = table;
    for p in path {
        let entry = cur
            .entry(p.to_string())
            .or_insert_with(|| toml::Value::Table(toml::Table::new()));
        cur = entry
            .as_table_mut()
            .ok_or_else(|| Error::Parse(format!("--set {shown}: `{p}` is not a table")))?;
    }
    cur.insert(last.to_string(), value);
    Ok(key.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::solvers::jacobi::JacobiProblem;

    fn set(v: &[&str]) -> Overrides {
        Overrides {
            set: v.iter().map(|s| s.to_string()).collect(),
            ..Default::default()
        }
    }

    #[test]
    fn default_problem_is_the_seed_benchmark() {
        let p = parse(DEFAULT_PROBLEM, "default", None, &Overrides::default()).unwrap();
        let j = p.spec_as::<JacobiProblem>().unwrap();
        assert_eq!((j.n, j.m, j.max_iterations), (5120, 5000, 100));
        assert_eq!((j.alpha, j.relax, j.tolerance), (1.0, 0.5, 1e-13));
        assert_eq!(p.precision, Precision::F64);
    }

    #[test]
    fn overrides_replace_values_and_create_tables() {
        let o = set(&["jacobi.n=64", "precision=\"f32\"", "output.dir=res"]);
        let p = parse(DEFAULT_PROBLEM, "default", None, &o).unwrap();
        assert_eq!(p.spec_as::<JacobiProblem>().unwrap().n, 64);
        assert_eq!(p.precision, Precision::F32);
        assert_eq!(p.output.dir.as_deref(), Some(Path::new("res")));
    }

    #[test]
    fn override_without_equals_is_rejected() {
        let e = parse(DEFAULT_PROBLEM, "default", None, &set(&["jacobi.n"])).unwrap_err();
        assert!(e.to_string().contains("key=value"), "{e}");
    }

    #[test]
    fn type_errors_name_the_key_and_line() {
        let text = "solver = \"jacobi\"\n[jacobi]\nn = 16\nm = 16.5\nmax_iterations = 3\n";
        let e = parse(text, "p.toml", None, &Overrides::default()).unwrap_err();
        let s = e.to_string();
        assert!(s.contains("p.toml, line 4: jacobi.m"), "{s}");
        let e = parse(text, "p.toml", None, &set(&["jacobi.m=1.5"])).unwrap_err();
        assert!(e.to_string().contains("--set jacobi.m"), "{e}");
    }

    #[test]
    fn output_schedule_steps() {
        let o = set(&["jacobi.max_iterations=10", "output.every=4", "output.dir=x"]);
        let p = parse(DEFAULT_PROBLEM, "default", None, &o).unwrap();
        assert_eq!(p.output.steps, [0, 4, 8, 10]);
    }
}
