//! VTK XML RectilinearGrid (.vtr) for ParaView: a grid with its node coordinates per
//! axis (nonuniform meshes), point-data arrays of 1 or 3 components, raw appended binary.

use std::io::Write;
use std::path::Path;

use super::write_atomic;
use crate::error::Result;
use crate::precision::Real;

/// A point-data array's values as VTK stores them: a field's reals, or ids as bytes
/// (UInt8: a quarter of the same ids as Float32).
trait Values: Sync {
    fn vtk_type(&self) -> &'static str;
    fn byte_len(&self) -> usize;
    fn write_le(&self, w: &mut dyn Write) -> std::io::Result<()>;
}

struct Reals<'a, T>(&'a [T]);
struct Bytes<'a>(&'a [u8]);

impl<T: Real> Values for Reals<'_, T> {
    fn vtk_type(&self) -> &'static str {
        super::vtk_type(T::PRECISION)
    }
    fn byte_len(&self) -> usize {
        std::mem::size_of_val(self.0)
    }
    fn write_le(&self, w: &mut dyn Write) -> std::io::Result<()> {
        let mut bytes = Vec::with_capacity(1 << 20);
        for chunk in self.0.chunks(1 << 16) {
            bytes.clear();
            chunk.iter().for_each(|v| v.push_le_bytes(&mut bytes));
            w.write_all(&bytes)?;
        }
        Ok(())
    }
}

impl Values for Bytes<'_> {
    fn vtk_type(&self) -> &'static str {
        "UInt8"
    }
    fn byte_len(&self) -> usize {
        self.0.len()
    }
    fn write_le(&self, w: &mut dyn Write) -> std::io::Result<()> {
        w.write_all(self.0)
    }
}

/// One point-data array: `components` values per point, points in memory order.
pub struct Array<'a> {
    name: &'a str,
    components: usize,
    data: Box<dyn Values + 'a>,
}

impl<'a> Array<'a> {
    /// `components` reals per point.
    pub fn reals<T: Real>(name: &'a str, components: usize, data: &'a [T]) -> Self {
        Self {
            name,
            components,
            data: Box::new(Reals(data)),
        }
    }

    pub fn scalar<T: Real>(name: &'a str, data: &'a [T]) -> Self {
        Self::reals(name, 1, data)
    }

    /// Ids, a byte per point.
    pub fn bytes(name: &'a str, data: &'a [u8]) -> Self {
        Self {
            name,
            components: 1,
            data: Box::new(Bytes(data)),
        }
    }
}

/// `coords`: node coordinates per axis, slowest axis first (z, y, x or y, x); x fastest
/// in memory, as keisan stores fields.
pub fn write(path: &Path, coords: &[Vec<f64>], arrays: &[Array]) -> Result<()> {
    write_at(path, coords, 0, arrays)
}

/// Rows of a larger grid whose first row is row `first` of the slowest axis (`coords`
/// are the rows' own): the extent starts at `first` (a piece of a .pvtr).
pub fn write_at(path: &Path, coords: &[Vec<f64>], first: usize, arrays: &[Array]) -> Result<()> {
    let shape: Vec<usize> = coords.iter().map(|c| c.len()).collect();
    let extent = super::extent(&shape, first..=first + shape[0] - 1);
    let mut xyz: Vec<&[f64]> = coords.iter().rev().map(|c| c.as_slice()).collect();
    let zero = [0.0];
    while xyz.len() < 3 {
        xyz.push(&zero);
    }
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
                "<DataArray type=\"{}\" Name=\"{}\" NumberOfComponents=\"{}\" format=\"appended\" offset=\"{offset}\"/>",
                a.data.vtk_type(),
                a.name,
                a.components
            )?;
            offset += 8 + a.data.byte_len() as u64;
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
        for a in arrays {
            w.write_all(&(a.data.byte_len() as u64).to_le_bytes())?;
            a.data.write_le(w)?;
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
