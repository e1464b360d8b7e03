//! Parallel VTK files (.pvti, .pvtr): a field written as pieces, one per process, that
//! ParaView opens as one field. Each piece is a .vti/.vtr of its own whose extent places
//! it in the whole grid; neighbouring pieces share their boundary points.

use std::path::Path;

use super::write_atomic;
use crate::error::Result;
use crate::precision::{Precision, Real};
use crate::run::{Field, Piece};

/// The name of rank `rank`'s piece of `stem` (no extension).
pub fn piece_stem(stem: &str, rank: usize) -> String {
    format!("{stem}_r{rank:04}")
}

/// The index of `p`'s pieces of field file `stem`, as .pvti (uniform grid) or .pvtr
/// (nonuniform), every piece `<stem>_r<rank>.vti|vtr`.
pub fn write<T: Real>(path: &Path, stem: &str, p: &Piece<T>) -> Result<()> {
    let w = &p.whole;
    let rank = w.shape.len();
    let last = p.ranks.len() - 1;
    // VTK's axes are x, y, z; ours run slowest first.
    let extent = |lo: usize, hi: usize| -> String {
        let mut e = [(0usize, 0usize); 3];
        for (k, n) in w.shape.iter().rev().enumerate() {
            e[k] = (0, n - 1);
        }
        e[rank - 1] = (lo, hi);
        e.iter()
            .map(|(a, b)| format!("{a} {b}"))
            .collect::<Vec<_>>()
            .join(" ")
    };
    let whole = extent(0, w.shape[0] - 1);
    let t = match T::PRECISION {
        Precision::F32 => "Float32",
        Precision::F64 => "Float64",
    };
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
                let rev = |v: &[f64], fill: f64| -> Vec<String> {
                    let mut a = [fill; 3];
                    for (k, x) in v.iter().rev().enumerate() {
                        a[k] = *x;
                    }
                    a.iter().map(|x| x.to_string()).collect()
                };
                writeln!(
                    f,
                    "<{kind} WholeExtent=\"{whole}\" GhostLevel=\"0\" Origin=\"{}\" Spacing=\"{}\">",
                    rev(&w.origin, 0.0).join(" "),
                    rev(&w.spacing, 1.0).join(" ")
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
                extent(rows.start, hi),
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
