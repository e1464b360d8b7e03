//! Parallel VTK files (.pvti, .pvtr): a field written as pieces, one per process, that
//! ParaView opens as one field. Each piece is a .vti/.vtr of its own whose extent places
//! it in the whole grid; neighbouring pieces share their boundary points.

use std::path::Path;

use super::write_atomic;
use crate::error::Result;
use crate::precision::Real;
use crate::run::{Field, Piece};

/// The name of rank `rank`'s piece of `stem` (no extension).
pub fn piece_stem(stem: &str, rank: usize) -> String {
    format!("{stem}_r{rank:04}")
}

/// The index of `p`'s pieces of field file `stem`, as .pvti (uniform grid) or .pvtr
/// (nonuniform), every piece `<stem>_r<rank>.vti|vtr`.
pub fn write<T: Real>(path: &Path, stem: &str, p: &Piece<T>) -> Result<()> {
    let w = &p.whole;
    let last = p.ranks.len() - 1;
    let whole = super::extent(&w.shape, 0..=w.shape[0] - 1);
    let t = super::vtk_type(T::PRECISION);
    let (kind, ext) = match &w.coords {
        Some(_) => ("PRectilinearGrid", "vtr"),
        None => ("PImageData", "vti"),
    };
    write_atomic(path, |f| {
        writeln!(f, "<?xml version=\"1.0\"?>")?;
        writeln!(
            f,
            "<VTKFile type=\"{kind}\" version=\"1.0\" byte_order=\"LittleEndian\" header_type=\"UInt64\">"
        )?;
        match &w.coords {
            Some(_) => writeln!(f, "<{kind} WholeExtent=\"{whole}\" GhostLevel=\"0\">")?,
            None => {
                let join = |a: [f64; 3]| a.map(|x| x.to_string()).join(" ");
                writeln!(
                    f,
                    "<{kind} WholeExtent=\"{whole}\" GhostLevel=\"0\" Origin=\"{}\" Spacing=\"{}\">",
                    join(super::xyz(&w.origin, 0.0)),
                    join(super::xyz(&w.spacing, 1.0))
                )?
            }
        }
        writeln!(
            f,
            "<PPointData Scalars=\"{0}\">\n<PDataArray type=\"{t}\" Name=\"{0}\"/>\n</PPointData>",
            w.name
        )?;
        if w.coords.is_some() {
            writeln!(f, "<PCoordinates>")?;
            for axis in ["x", "y", "z"] {
                writeln!(f, "<PDataArray type=\"Float64\" Name=\"{axis}\"/>")?;
            }
            writeln!(f, "</PCoordinates>")?;
        }
        for (r, rows) in p.ranks.iter().enumerate() {
            let hi = if r < last { rows.end } else { rows.end - 1 };
            writeln!(
                f,
                "<Piece Extent=\"{}\" Source=\"{}.{ext}\"/>",
                super::extent(&w.shape, rows.start..=hi),
                piece_stem(stem, r)
            )?;
        }
        writeln!(f, "</{kind}>\n</VTKFile>")
    })
}

/// The extension of the index of a field's pieces.
pub fn extension<T>(u: &Field<T>) -> &'static str {
    if u.coords.is_some() { "pvtr" } else { "pvti" }
}
