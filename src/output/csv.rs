//! Plain CSV tables, one header line.

use std::path::Path;

use super::write_atomic;
use crate::error::Result;

/// `iteration,residual` rows, iterations counted from 1.
pub fn write_residuals(path: &Path, residuals: &[f64]) -> Result<()> {
    write_atomic(path, |w| {
        writeln!(w, "iteration,residual")?;
        // Iterations whose residual was not computed have no row.
        for (k, r) in residuals.iter().enumerate() {
            if crate::run::is_measured(*r) {
                writeln!(w, "{},{:.17e}", k + 1, r)?;
            }
        }
        Ok(())
    })
}

/// A header line and rows of numbers (integers print without a fraction).
pub fn write_table(path: &Path, header: &[String], rows: &[Vec<f64>]) -> Result<()> {
    write_atomic(path, |w| {
        writeln!(w, "{}", header.join(","))?;
        for row in rows {
            let cells: Vec<String> = row
                .iter()
                .map(|v| {
                    if v.fract() == 0.0 && v.abs() < 1e15 {
                        format!("{v:.0}")
                    } else {
                        format!("{v:.17e}")
                    }
                })
                .collect();
            writeln!(w, "{}", cells.join(","))?;
        }
        Ok(())
    })
}
