//! VTK XML ImageData (.vti) for ParaView: one point-data array in raw appended binary.

use std::path::Path;

use super::write_atomic;
use crate::error::Result;
use crate::precision::Real;
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
    let rows = field.shape[0];
    let extent = super::extent(&field.shape, first..=first + rows - 1);
    let sp = super::xyz(&field.spacing, 1.0);
    let or = super::xyz(&field.origin, 0.0);
    let vtk_type = super::vtk_type(T::PRECISION);
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
