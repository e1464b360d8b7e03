//! Plain CSV histories, one header line.

use std::path::Path;

use super::write_atomic;
use crate::error::Result;

/// `iteration,residual` rows, iterations counted from 1.
pub fn write_residuals(path: &Path, residuals: &[f64]) -> Result<()> {
    write_atomic(path, |w| {
        writeln!(w, "iteration,residual")?;
        for (k, r) in residuals.iter().enumerate() {
            writeln!(w, "{},{:.17e}", k + 1, r)?;
        }
        Ok(())
    })
}
