//! Problem files: TOML → typed, validated [`Problem`]. Unknown keys are errors, and every
//! check names the field and the range it accepts.

use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::device::Backend;
use crate::error::{Error, Result};
use crate::precision::Precision;
use crate::solvers::heat::{HeatConfig, HeatProblem};
use crate::solvers::jacobi::{JacobiConfig, JacobiProblem};

/// The built-in default problem: the seed benchmark of the Jacobi study.
pub const DEFAULT_PROBLEM: &str = include_str!("../examples/jacobi-seed.toml");

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SolverName {
    Jacobi,
    Heat,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ProblemFile {
    #[serde(default)]
    title: Option<String>,
    solver: SolverName,
    #[serde(default)]
    precision: Option<Precision>,
    #[serde(default)]
    run: RunConfig,
    #[serde(default)]
    output: OutputConfig,
    #[serde(default)]
    jacobi: Option<JacobiConfig>,
    #[serde(default)]
    heat: Option<HeatConfig>,
}

/// Where and how to run, when the command line does not say.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RunConfig {
    #[serde(default)]
    pub backend: Backend,
    #[serde(default)]
    pub device: usize,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OutputConfig {
    /// Folder for the solution and histories; nothing is written when absent.
    #[serde(default)]
    pub dir: Option<PathBuf>,
}

#[derive(Debug, Clone)]
pub enum SolverProblem {
    Jacobi(JacobiProblem),
    Heat(HeatProblem),
}

/// A validated problem, ready to plan.
#[derive(Debug, Clone)]
pub struct Problem {
    pub title: String,
    pub precision: Precision,
    pub run: RunConfig,
    pub output: OutputConfig,
    pub solver: SolverProblem,
}

/// Read a problem from TOML text, applying `key=value` overrides (dotted keys, TOML
/// values; a value that is not valid TOML is taken as a string) before validation.
pub fn parse(text: &str, origin: &str, overrides: &[String]) -> Result<Problem> {
    let mut table: toml::Table =
        toml::from_str(text).map_err(|e| Error::Parse(format!("{origin}: malformed TOML: {e}")))?;
    for ov in overrides {
        apply_override(&mut table, ov)?;
    }
    let file: ProblemFile = table
        .try_into()
        .map_err(|e: toml::de::Error| Error::Parse(format!("{origin}: {}", e.message())))?;
    validate(file, origin)
}

pub fn load(path: &Path, overrides: &[String]) -> Result<Problem> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| Error::Parse(format!("cannot read problem file {}: {e}", path.display())))?;
    let mut problem = parse(&text, &path.display().to_string(), overrides)?;
    if let SolverProblem::Heat(h) = &mut problem.solver {
        let base = path.parent().unwrap_or(Path::new("."));
        h.initial.resolve_relative_to(base);
        crate::solvers::heat::initial::check(h)?;
    }
    Ok(problem)
}

fn apply_override(table: &mut toml::Table, ov: &str) -> Result<()> {
    let (key, raw) = ov.split_once('=').ok_or_else(|| {
        Error::Parse(format!(
            "--set {ov}: expected key=value, e.g. --set jacobi.n=1024"
        ))
    })?;
    let key = key.trim();
    let parts: Vec<&str> = key.split('.').collect();
    if parts.iter().any(|p| p.is_empty()) {
        return Err(Error::Parse(format!(
            "--set {ov}: empty key segment in `{key}`"
        )));
    }
    let value = toml::from_str::<toml::Table>(&format!("v = {}", raw.trim()))
        .ok()
        .and_then(|mut t| t.remove("v"))
        .unwrap_or_else(|| toml::Value::String(raw.trim().to_string()));
    let (last, path) = parts.split_last().expect("split yields at least one part");
    let mut cur = table;
    for p in path {
        let entry = cur
            .entry(p.to_string())
            .or_insert_with(|| toml::Value::Table(toml::Table::new()));
        cur = entry
            .as_table_mut()
            .ok_or_else(|| Error::Parse(format!("--set {ov}: `{p}` is not a table")))?;
    }
    cur.insert(last.to_string(), value);
    Ok(())
}

fn validate(file: ProblemFile, origin: &str) -> Result<Problem> {
    let solver = match file.solver {
        SolverName::Jacobi => {
            let cfg = file.jacobi.ok_or_else(|| {
                Error::Parse(format!(
                    "{origin}: solver = \"jacobi\" needs a [jacobi] table (n, m, alpha, relax, \
                     tolerance, max_iterations)"
                ))
            })?;
            SolverProblem::Jacobi(cfg.validate()?)
        }
        SolverName::Heat => {
            let cfg = file.heat.ok_or_else(|| {
                Error::Parse(format!(
                    "{origin}: solver = \"heat\" needs a [heat] table (shape, dt, steps, \
                     diffusivity, [heat.initial])"
                ))
            })?;
            SolverProblem::Heat(cfg.validate()?)
        }
    };
    Ok(Problem {
        title: file.title.unwrap_or_else(|| origin.to_string()),
        precision: file.precision.unwrap_or(Precision::F64),
        run: file.run,
        output: file.output,
        solver,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_problem_is_the_seed_benchmark() {
        let p = parse(DEFAULT_PROBLEM, "default", &[]).unwrap();
        let SolverProblem::Jacobi(j) = p.solver else {
            panic!("not jacobi")
        };
        assert_eq!((j.n, j.m, j.max_iterations), (5120, 5000, 100));
        assert_eq!((j.alpha, j.relax, j.tolerance), (1.0, 0.5, 1e-13));
        assert_eq!(p.precision, Precision::F64);
    }

    #[test]
    fn overrides_replace_values_and_create_tables() {
        let p = parse(
            DEFAULT_PROBLEM,
            "default",
            &[
                "jacobi.n=64".into(),
                "precision=f32".into(),
                "output.dir=res".into(),
            ],
        )
        .unwrap();
        let SolverProblem::Jacobi(j) = p.solver else {
            panic!("not jacobi")
        };
        assert_eq!(j.n, 64);
        assert_eq!(p.precision, Precision::F32);
        assert_eq!(p.output.dir.as_deref(), Some(Path::new("res")));
    }

    #[test]
    fn override_without_equals_is_rejected() {
        let e = parse(DEFAULT_PROBLEM, "default", &["jacobi.n".into()]).unwrap_err();
        assert!(e.to_string().contains("key=value"), "{e}");
    }
}
