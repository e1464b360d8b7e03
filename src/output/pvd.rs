//! A ParaView collection (.pvd): opens numbered .vti files as one time series.

use std::path::Path;

use super::write_atomic;
use crate::error::Result;

/// `entries`: (time, file name relative to the .pvd), in time order.
pub fn write(path: &Path, entries: &[(f64, String)]) -> Result<()> {
    write_atomic(path, |w| {
        writeln!(w, "<?xml version=\"1.0\"?>")?;
        writeln!(
            w,
            "<VTKFile type=\"Collection\" version=\"0.1\" byte_order=\"LittleEndian\">\n<Collection>"
        )?;
        for (t, file) in entries {
            writeln!(
                w,
                "  <DataSet timestep=\"{t:e}\" part=\"0\" file=\"{file}\"/>"
            )?;
        }
        writeln!(w, "</Collection>\n</VTKFile>")
    })
}
