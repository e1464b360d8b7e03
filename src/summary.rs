//! What a run reports: human text on stderr, JSON on stdout (`--json`).

use std::path::PathBuf;

use serde::Serialize;

use crate::run::Status;
use crate::units::seconds;

#[derive(Debug, Clone, Default, Serialize)]
pub struct Timings {
    /// CUDA context creation (0 on the CPU).
    pub context_s: f64,
    /// Allocation, field initialisation, kernel compilation.
    pub setup_s: f64,
    pub solve_s: f64,
    /// The solution-error check against the exact solution.
    pub check_s: f64,
    /// Copying the solution to the host (only when outputs are written).
    pub download_s: f64,
    /// Every output: the schedule's fields and the checkpoints written during the run,
    /// and the final set.
    pub write_s: f64,
    /// What the seed study timed: setup + solve + check + download, after the context.
    pub study_s: f64,
    /// The whole process so far.
    pub total_s: f64,
}

#[derive(Debug, Clone, Serialize)]
pub struct Summary {
    pub solver: &'static str,
    pub title: String,
    pub device: String,
    pub precision: String,
    /// Points per axis, slowest axis first (NumPy shape).
    pub shape: Vec<usize>,
    /// Iterations, or steps of a time-dependent solver (the same count in the JSON).
    pub iterations: u64,
    pub max_iterations: u64,
    /// A time-dependent run that took all its steps is `completed`; an iterative one
    /// that stopped at its limit, `iteration_limit`.
    pub status: Status,
    /// Whether the solver steps in time (heat, advection, N-body) rather than
    /// iterating to convergence: the human summary says "steps".
    #[serde(skip)]
    pub time_dependent: bool,
    /// Residual norm of the last iteration (iterative solvers).
    pub final_residual: Option<f64>,
    pub solution_error: Option<f64>,
    /// What `solution_error` measures: each solver has its own norm.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub solution_error_meaning: Option<&'static str>,
    pub time_per_iteration_s: f64,
    pub timings: Timings,
    pub outputs: Vec<PathBuf>,
    /// How the grid met the device (heat: in-core or the pyramid plan; electrostatics on
    /// CUDA: the kernel and its launch).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub layout: Option<serde_json::Value>,
    /// What the solver computed beyond the field (electrostatics: charges, capacitance).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub results: Option<serde_json::Value>,
    /// The results a user reads at the end of a run, as (label, text) lines of the human
    /// summary (electrostatics: charges and capacitance; advection: errors and mass;
    /// N-body: energy): the same numbers as `results`, which is what the JSON carries.
    #[serde(skip)]
    pub highlights: Vec<(String, String)>,
    /// What a user must not miss: a result that is not what it may look like (a stalled
    /// solve, a shape that marked no node, an energy error beyond a bound). Printed on
    /// stderr at the end of the summary and kept in the JSON.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
    /// The step a restart continued from.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub restarted_at_step: Option<u64>,
    /// The latest checkpoint this run wrote.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub checkpoint: Option<PathBuf>,
    /// Fields written one piece per rank (`output.pieces`): the index file ParaView
    /// opens, each rank's rows, and whether the whole-field measures were taken.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pieces: Option<serde_json::Value>,
}

impl Summary {
    pub fn human(&self) -> String {
        let mut s = String::new();
        let shape: Vec<String> = self.shape.iter().map(|x| x.to_string()).collect();
        s += &format!(
            "{} — {} on {}\n",
            crate::units::printable(&self.title),
            self.solver,
            self.device
        );
        // N-body's shape is its state array's (particles × position, velocity, mass).
        // A grid's shape is NumPy's, slowest axis first, which the line names: the study's
        // "8192 × 16384" (nx × ny) is a grid of 16384 × 8192 (y × x) here.
        let (what, size, axes) = match self.solver {
            "nbody" => ("particles", shape[0].clone(), ""),
            _ => (
                "grid",
                shape.join(" × "),
                match shape.len() {
                    1 => "x, ",
                    2 => "y × x, ",
                    3 => "z × y × x, ",
                    _ => "",
                },
            ),
        };
        s += &format!("  {what:<14}{size} ({axes}{})\n", self.precision);
        if let Some(k) = self.restarted_at_step {
            s += &format!("  restarted     from the checkpoint at step {k}\n");
        }
        let how = match self.status {
            Status::Converged => "converged",
            Status::Running => "iteration limit reached",
            Status::NonFinite => "stopped: non-finite value",
            Status::Completed => "done",
            Status::Stalled => "NOT CONVERGED: the iteration stalled",
        };
        let (steps, per) = match self.time_dependent {
            true => ("steps", "step"),
            false => ("iterations", "iteration"),
        };
        s += &format!(
            "  {steps:<14}{} of {} ({how})\n",
            self.iterations, self.max_iterations
        );
        if let Some(r) = self.final_residual {
            s += &format!("  residual      {r:.6e}\n");
        }
        if let Some(l) = &self.layout
            && let Some(s_) = l.get("strategy").and_then(|v| v.as_str())
            && s_ != "in-core"
        {
            s += &format!(
                "  layout        {s_}, {} decomposition, n = {}, {} tasks per pass, predicted {}\n",
                l["decomposition"].as_str().unwrap_or("?"),
                l["pyramid_height"],
                l["tasks"],
                seconds(l["predicted_s"].as_f64().unwrap_or(0.0)),
            );
        }
        if let Some(k) = self.layout.as_ref().and_then(|l| l.get("kernel")?.as_str()) {
            s += &format!("  kernel        {k}\n");
        }
        if let Some(e) = self.solution_error {
            s += &format!("  solution err  {e:.6e}");
            if let Some(m) = self.solution_error_meaning {
                s += &format!(" ({m})");
            }
            s += "\n";
        }
        for (label, text) in &self.highlights {
            s += &format!("  {label:<14}{text}\n");
        }
        for w in &self.warnings {
            s += &format!("  WARNING       {w}\n");
        }
        let t = &self.timings;
        s += &format!(
            "  time          solve {} ({} per {per}); setup {}, check {}, download {}, write {}\n",
            seconds(t.solve_s),
            seconds(self.time_per_iteration_s),
            seconds(t.setup_s),
            seconds(t.check_s),
            seconds(t.download_s),
            seconds(t.write_s),
        );
        s += &format!(
            "  wall          {} as the study timed it (after context creation, {}); process {}\n",
            seconds(t.study_s),
            seconds(t.context_s),
            seconds(t.total_s),
        );
        if let Some(c) = &self.checkpoint {
            s += &format!("  checkpoint    {}\n", c.display());
        }
        if self.outputs.is_empty() {
            s += "  outputs       none (name a folder with --out DIR or [output] dir)\n";
        } else if self.outputs.len() > 8 {
            let folder = self.outputs[0]
                .parent()
                .unwrap_or(std::path::Path::new("."));
            s += &format!(
                "  wrote         {} files in {} (summary.json lists them)\n",
                self.outputs.len(),
                folder.display()
            );
        } else {
            for o in &self.outputs {
                s += &format!("  wrote         {}\n", o.display());
            }
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn summary(layout: Option<serde_json::Value>) -> Summary {
        Summary {
            solver: "electrostatics",
            title: "t".into(),
            device: "d".into(),
            precision: "f32".into(),
            shape: vec![3, 3, 3],
            iterations: 1,
            max_iterations: 1,
            status: Status::Running,
            time_dependent: false,
            final_residual: None,
            solution_error: None,
            solution_error_meaning: None,
            time_per_iteration_s: 0.0,
            timings: Timings::default(),
            outputs: Vec::new(),
            layout,
            results: None,
            highlights: Vec::new(),
            warnings: Vec::new(),
            restarted_at_step: None,
            checkpoint: None,
            pieces: None,
        }
    }

    #[test]
    fn the_kernel_a_run_got_is_a_line_of_its_own() {
        let kernel = serde_json::json!({ "kernel": "persistent (blocks of 32×8 threads)" });
        let text = summary(Some(kernel)).human();
        assert!(
            text.contains("  kernel        persistent (blocks of 32×8 threads)\n"),
            "{text}"
        );
        assert!(!summary(None).human().contains("kernel"));
    }

    #[test]
    fn the_error_says_its_norm_and_the_highlights_follow_it() {
        let mut s = summary(None);
        s.solution_error = Some(0.25);
        assert!(s.human().contains("  solution err  2.500000e-1\n"));
        s.solution_error_meaning = Some("max |u − u_exact|");
        s.highlights = vec![
            ("charges".into(), "electrode 1 at 1 V: +1e-11 C".into()),
            (String::new(), "electrode 2 at 0 V: -1e-11 C".into()),
        ];
        let text = s.human();
        assert!(
            text.contains(
                "  solution err  2.500000e-1 (max |u − u_exact|)\n  \
                 charges       electrode 1 at 1 V: +1e-11 C\n                \
                 electrode 2 at 0 V: -1e-11 C\n  time"
            ),
            "{text}"
        );
        let json = serde_json::to_value(&s).unwrap();
        assert_eq!(json["solution_error_meaning"], "max |u − u_exact|");
        assert!(json.get("highlights").is_none());
    }

    #[test]
    fn the_grid_line_names_its_axes() {
        let mut s = summary(None);
        s.shape = vec![5, 97, 96];
        assert!(
            s.human()
                .contains("  grid          5 × 97 × 96 (z × y × x, f32)\n")
        );
        s.shape = vec![16384, 8192];
        assert!(
            s.human()
                .contains("  grid          16384 × 8192 (y × x, f32)\n")
        );
        s.shape = vec![1000];
        assert!(s.human().contains("  grid          1000 (x, f32)\n"));
    }

    #[test]
    fn a_time_dependent_run_counts_steps_and_says_done() {
        let mut s = summary(None);
        assert!(
            s.human()
                .contains("  iterations    1 of 1 (iteration limit reached)\n")
        );
        s.time_dependent = true;
        s.status = Status::Completed;
        let text = s.human();
        assert!(text.contains("  steps         1 of 1 (done)\n"), "{text}");
        assert!(text.contains(" per step)"), "{text}");
        let json = serde_json::to_value(&s).unwrap();
        assert_eq!(json["status"], "completed");
        assert!(json.get("time_dependent").is_none());
        s.solver = "nbody";
        s.shape = vec![256, 7];
        assert!(s.human().contains("  particles     256 (f32)\n"));
    }
}
