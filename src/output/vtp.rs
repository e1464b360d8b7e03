//! VTK XML PolyData (.vtp) for ParaView: a cloud of points (particles) with their
//! per-point arrays, raw appended binary in f64. Open with ParaView's "Point Gaussian"
//! representation, colour by any array.

use std::path::Path;

use super::write_atomic;
use crate::error::Result;

/// One per-point array: a name and `components` values per point.
pub struct PointArray<'a> {
    pub name: &'a str,
    pub components: usize,
    pub values: &'a [f64],
}

/// Write `points` (x, y, z each) with `arrays` (each `components × points.len()` values).
pub fn write(path: &Path, points: &[[f64; 3]], arrays: &[PointArray]) -> Result<()> {
    let n = points.len();
    for a in arrays {
        assert_eq!(
            a.values.len(),
            a.components * n,
            "{}: one value per component per point",
            a.name
        );
    }
    // Appended blocks: each a u64 byte count, then the values.
    let mut offsets = Vec::new();
    let mut at = 0u64;
    for size in std::iter::once(3 * n).chain(arrays.iter().map(|a| a.components * n)) {
        offsets.push(at);
        at += 8 + 8 * size as u64;
    }
    write_atomic(path, |w| {
        write!(
            w,
            "<?xml version=\"1.0\"?>\n\
             <VTKFile type=\"PolyData\" version=\"1.0\" byte_order=\"LittleEndian\" header_type=\"UInt64\">\n\
             <PolyData>\n<Piece NumberOfPoints=\"{n}\" NumberOfVerts=\"0\" NumberOfLines=\"0\" \
             NumberOfStrips=\"0\" NumberOfPolys=\"0\">\n<PointData>\n"
        )?;
        for (a, off) in arrays.iter().zip(&offsets[1..]) {
            writeln!(
                w,
                "<DataArray type=\"Float64\" Name=\"{}\" NumberOfComponents=\"{}\" format=\"appended\" offset=\"{off}\"/>",
                a.name, a.components
            )?;
        }
        write!(
            w,
            "</PointData>\n<Points>\n\
             <DataArray type=\"Float64\" NumberOfComponents=\"3\" format=\"appended\" offset=\"0\"/>\n\
             </Points>\n</Piece>\n</PolyData>\n<AppendedData encoding=\"raw\">\n_"
        )?;
        let mut block =
            |values: &mut dyn Iterator<Item = f64>, count: usize| -> std::io::Result<()> {
                w.write_all(&(8 * count as u64).to_le_bytes())?;
                let bytes: Vec<u8> = values.flat_map(f64::to_le_bytes).collect();
                w.write_all(&bytes)
            };
        block(&mut points.iter().flatten().copied(), 3 * n)?;
        for a in arrays {
            block(&mut a.values.iter().copied(), a.components * n)?;
        }
        write!(w, "\n</AppendedData>\n</VTKFile>\n")
    })
}
