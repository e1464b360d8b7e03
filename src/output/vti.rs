//! VTK XML ImageData (.vti) for ParaView: one point-data array in raw appended binary.

use std::path::Path;

use super::write_atomic;
use crate::error::Result;
use crate::precision::{Precision, Real};
use crate::run::Field;

/// Write a 2D or 3D field; its axes are in (z,) y, x order, x fastest, as in memory.
pub fn write<T: Real>(path: &Path, field: &Field<T>) -> Result<()> {
    write_at(path, field, 0)
}

/// Write rows of a larger grid whose first row is row `first` of the slowest axis:
/// `field.origin` is the whole grid's, and the extent starts at `first` (a piece of a
/// .pvti).
pub fn write_at<T: Real>(path: &Path, field: &Field<T>, first: usize) -> Result<()> {
    let rank = field.shape.len();
    assert!(rank == 2 || rank == 3, "vti holds 2D or 3D fields");
    // VTK wants x, y, z; our axes run slowest first.
    let rev = |v: &[usize]| -> [usize; 3] {
        let mut a = [1usize; 3];
        for (k, x) in v.iter().rev().enumerate() {
            a[k] = *x;
        }
        a
    };
    let revf = |v: &[f64], fill: f64| -> [f64; 3] {
        let mut a = [fill; 3];
        for (k, x) in v.iter().rev().enumerate() {
            a[k] = *x;
        }
        a
    };
    let ext = rev(&field.shape);
    let mut lo = [0usize; 3];
    lo[rank - 1] = first;
    let extent = format!(
        "{} {} {} {} {} {}",
        lo[0],
        lo[0] + ext[0] - 1,
        lo[1],
        lo[1] + ext[1] - 1,
        lo[2],
        lo[2] + ext[2] - 1
    );
    let sp = revf(&field.spacing, 1.0);
    let or = revf(&field.origin, 0.0);
    let vtk_type = match T::PRECISION {
        Precision::F32 => "Float32",
        Precision::F64 => "Float64",
    };
    let payload = (field.data.len() * std::mem::size_of::<T>()) as u64;
    write_atomic(path, |w| {
        write!(
            w,
            "<?xml version=\"1.0\"?>\n\
             <VTKFile type=\"ImageData\" version=\"1.0\" byte_order=\"LittleEndian\" header_type=\"UInt64\">\n\
             <ImageData WholeExtent=\"{extent}\" Origin=\"{} {} {}\" Spacing=\"{} {} {}\">\n\
             <Piece Extent=\"{extent}\">\n\
             <PointData Scalars=\"{name}\">\n\
             <DataArray type=\"{vtk_type}\" Name=\"{name}\" format=\"appended\" offset=\"0\"/>\n\
             </PointData>\n</Piece>\n</ImageData>\n\
             <AppendedData encoding=\"raw\">\n_",
            or[0],
            or[1],
            or[2],
            sp[0],
            sp[1],
            sp[2],
            name = field.name,
        )?;
        w.write_all(&payload.to_le_bytes())?;
        let mut bytes = Vec::with_capacity(1 << 20);
        for chunk in field.data.chunks(1 << 16) {
            bytes.clear();
            chunk.iter().for_each(|v| v.push_le_bytes(&mut bytes));
            w.write_all(&bytes)?;
        }
        write!(w, "\n</AppendedData>\n</VTKFile>\n")
    })
}
