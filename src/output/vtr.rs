//! VTK XML RectilinearGrid (.vtr) for ParaView: a grid with its node coordinates per
//! axis (nonuniform meshes), point-data arrays of 1 or 3 components, raw appended binary.

use std::path::Path;

use super::write_atomic;
use crate::error::Result;
use crate::precision::Real;

/// One point-data array: `components` values per point, points in memory order.
pub struct Array<'a, T> {
    pub name: &'a str,
    pub components: usize,
    pub data: &'a [T],
}

impl<'a, T> Array<'a, T> {
    pub fn scalar(name: &'a str, data: &'a [T]) -> Self {
        Self {
            name,
            components: 1,
            data,
        }
    }
}

/// `coords`: node coordinates per axis, slowest axis first (z, y, x or y, x); x fastest
/// in memory, as keisan stores fields.
pub fn write<T: Real>(path: &Path, coords: &[Vec<f64>], arrays: &[Array<T>]) -> Result<()> {
    write_at(path, coords, 0, arrays)
}

/// Rows of a larger grid whose first row is row `first` of the slowest axis (`coords`
/// are the rows' own): the extent starts at `first` (a piece of a .pvtr).
pub fn write_at<T: Real>(
    path: &Path,
    coords: &[Vec<f64>],
    first: usize,
    arrays: &[Array<T>],
) -> Result<()> {
    let shape: Vec<usize> = coords.iter().map(|c| c.len()).collect();
    let extent = super::extent(&shape, first..=first + shape[0] - 1);
    let mut xyz: Vec<&[f64]> = coords.iter().rev().map(|c| c.as_slice()).collect();
    let zero = [0.0];
    while xyz.len() < 3 {
        xyz.push(&zero);
    }
    let t = super::vtk_type(T::PRECISION);
    write_atomic(path, |w| {
        writeln!(w, "<?xml version=\"1.0\"?>")?;
        writeln!(
            w,
            "<VTKFile type=\"RectilinearGrid\" version=\"1.0\" byte_order=\"LittleEndian\" header_type=\"UInt64\">"
        )?;
        writeln!(
            w,
            "<RectilinearGrid WholeExtent=\"{extent}\">\n<Piece Extent=\"{extent}\">"
        )?;
        let mut offset = 0u64;
        writeln!(w, "<PointData>")?;
        for a in arrays {
            writeln!(
                w,
                "<DataArray type=\"{t}\" Name=\"{}\" NumberOfComponents=\"{}\" format=\"appended\" offset=\"{offset}\"/>",
                a.name, a.components
            )?;
            offset += 8 + std::mem::size_of_val(a.data) as u64;
        }
        writeln!(w, "</PointData>\n<Coordinates>")?;
        for (axis, c) in ["x", "y", "z"].iter().zip(&xyz) {
            writeln!(
                w,
                "<DataArray type=\"Float64\" Name=\"{axis}\" format=\"appended\" offset=\"{offset}\"/>"
            )?;
            offset += 8 + 8 * c.len() as u64;
        }
        writeln!(
            w,
            "</Coordinates>\n</Piece>\n</RectilinearGrid>\n<AppendedData encoding=\"raw\">"
        )?;
        write!(w, "_")?;
        let mut bytes = Vec::with_capacity(1 << 20);
        for a in arrays {
            w.write_all(&(std::mem::size_of_val(a.data) as u64).to_le_bytes())?;
            for chunk in a.data.chunks(1 << 16) {
                bytes.clear();
                chunk.iter().for_each(|v| v.push_le_bytes(&mut bytes));
                w.write_all(&bytes)?;
            }
        }
        for c in &xyz {
            w.write_all(&(8 * c.len() as u64).to_le_bytes())?;
            for v in c.iter() {
                w.write_all(&v.to_le_bytes())?;
            }
        }
        write!(w, "\n</AppendedData>\n</VTKFile>\n")
    })
}
