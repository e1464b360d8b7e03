//! Arrays users hand in as .npy files (initial fields, charge densities, id arrays):
//! the header is checked against the grid before any work — shape, dtype, C order, and
//! a file length that matches, so a truncated or appended file fails with its field named.

use std::fs::File;
use std::io::BufReader;
use std::path::Path;

use npyz::{DType, NpyFile, Order, TypeChar};

use crate::error::{Error, Result};

/// What a file must hold.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Kind {
    /// float32 or float64.
    Float,
    /// uint8 (ids).
    Byte,
}

/// An opened array file whose header matched, and the bytes per value.
pub struct Opened {
    pub npy: NpyFile<BufReader<File>>,
    pub value_bytes: usize,
}

/// Open `path` (given as `field`) and check it holds a C-order array of `shape` (named
/// `grid` in messages, e.g. "the mesh's nodes (z, y, x)") of `kind`.
pub fn open(field: &str, path: &Path, shape: &[usize], grid: &str, kind: Kind) -> Result<Opened> {
    let shown = path.display();
    let bad = |why: String| Error::invalid(field, &shown, why);
    let file = File::open(path).map_err(|e| bad(e.to_string()))?;
    let npy = NpyFile::new(BufReader::new(file))
        .map_err(|e| bad(format!("not a readable .npy file: {e}")))?;
    let got: Vec<usize> = npy.shape().iter().map(|&v| v as usize).collect();
    if got != shape {
        return Err(bad(format!(
            "holds an array of shape {got:?}; {grid} is {shape:?}"
        )));
    }
    let value_bytes = match (npy.dtype(), kind) {
        (DType::Plain(t), Kind::Float) if t.type_char() == TypeChar::Float => {
            match t.size_field() {
                4 | 8 => t.size_field() as usize,
                _ => return Err(bad(format!("has dtype {t}; save it as float64 or float32"))),
            }
        }
        (DType::Plain(t), Kind::Byte) if t.type_char() == TypeChar::Uint && t.size_field() == 1 => {
            1
        }
        (DType::Plain(t), Kind::Float) => {
            return Err(bad(format!(
                "has dtype {t}; save it as float64 or float32 (arr.astype(np.float64))"
            )));
        }
        (DType::Plain(t), Kind::Byte) => {
            return Err(bad(format!(
                "has dtype {t}; save the ids as uint8 (arr.astype(np.uint8))"
            )));
        }
        _ => return Err(bad("holds a structured array; save a plain array".into())),
    };
    if npy.order() == Order::Fortran && shape.iter().filter(|&&n| n > 1).count() > 1 {
        return Err(bad(
            "is in Fortran order; save np.ascontiguousarray(arr)".into()
        ));
    }
    let values: u64 = shape.iter().map(|&n| n as u64).product();
    check_length(field, path, values * value_bytes as u64)?;
    Ok(Opened { npy, value_bytes })
}

/// The shape an .npy file's header declares (to pick the shape `open` then checks).
pub fn shape_of(field: &str, path: &Path) -> Result<Vec<usize>> {
    let bad = |why: String| Error::invalid(field, path.display(), why);
    let file = File::open(path).map_err(|e| bad(e.to_string()))?;
    let npy = NpyFile::new(BufReader::new(file))
        .map_err(|e| bad(format!("not a readable .npy file: {e}")))?;
    Ok(npy.shape().iter().map(|&v| v as usize).collect())
}

/// The file holds exactly the header and `data` bytes: no fewer (truncated), no more
/// (a different array, or bytes appended).
fn check_length(field: &str, path: &Path, data: u64) -> Result<()> {
    use std::io::Read;
    let shown = path.display();
    let why = |e: &dyn std::fmt::Display| Error::invalid(field, &shown, e.to_string());
    let mut f = File::open(path).map_err(|e| why(&e))?;
    let len = f.metadata().map_err(|e| why(&e))?.len();
    let mut head = [0u8; 12];
    f.read_exact(&mut head).map_err(|e| why(&e))?;
    // Format 1.0 stores the header length in 2 bytes, 2.0 and 3.0 in 4.
    let offset = match head[6] {
        1 => 10 + u16::from_le_bytes([head[8], head[9]]) as u64,
        _ => 12 + u32::from_le_bytes([head[8], head[9], head[10], head[11]]) as u64,
    };
    let expected = offset + data;
    match len.cmp(&expected) {
        std::cmp::Ordering::Less => Err(Error::invalid(
            field,
            &shown,
            format!(
                "is truncated: its array needs {data} bytes of data, the file holds {}",
                len.saturating_sub(offset)
            ),
        )),
        std::cmp::Ordering::Greater => Err(Error::invalid(
            field,
            &shown,
            format!(
                "has {} bytes after its array's data; save one array per file with np.save",
                len - expected
            ),
        )),
        std::cmp::Ordering::Equal => Ok(()),
    }
}

/// Read an opened float array into `out` (converted to `T`).
pub fn fill_floats<T: crate::precision::Real>(
    field: &str,
    path: &Path,
    f: Opened,
    out: &mut [T],
) -> Result<()> {
    let why = |e: &dyn std::fmt::Display| Error::invalid(field, path.display(), e.to_string());
    if f.value_bytes == 4 {
        for (v, x) in out
            .iter_mut()
            .zip(f.npy.data::<f32>().map_err(|e| why(&e))?)
        {
            *v = T::lit(x.map_err(|e| why(&e))? as f64);
        }
    } else {
        for (v, x) in out
            .iter_mut()
            .zip(f.npy.data::<f64>().map_err(|e| why(&e))?)
        {
            *v = T::lit(x.map_err(|e| why(&e))?);
        }
    }
    Ok(())
}

/// The rows `rows` (ascending, `row_len` values each) of an opened array, one after
/// another, as `f64` (float files) or as stored (`u8`): what a rank under mpirun reads
/// of a file, seeking past the other ranks' rows.
pub fn read_rows<S: npyz::Deserialize + Copy>(
    field: &str,
    path: &Path,
    f: Opened,
    row_len: usize,
    rows: &[usize],
) -> Result<Vec<S>> {
    let why = |e: &dyn std::fmt::Display| Error::invalid(field, path.display(), e.to_string());
    let mut r = f.npy.data::<S>().map_err(|e| why(&e))?;
    let mut out = Vec::with_capacity(rows.len() * row_len);
    for &j in rows {
        r.seek_to((j * row_len) as u64).map_err(|e| why(&e))?;
        for x in r.by_ref().take(row_len) {
            out.push(x.map_err(|e| why(&e))?);
        }
    }
    Ok(out)
}

/// [`read_rows`] of a float array (float32 or float64) as `f64`.
pub fn read_float_rows(
    field: &str,
    path: &Path,
    f: Opened,
    row_len: usize,
    rows: &[usize],
) -> Result<Vec<f64>> {
    Ok(match f.value_bytes {
        4 => read_rows::<f32>(field, path, f, row_len, rows)?
            .into_iter()
            .map(f64::from)
            .collect(),
        _ => read_rows::<f64>(field, path, f, row_len, rows)?,
    })
}

/// Read a whole uint8 array.
pub fn read_bytes(field: &str, path: &Path, shape: &[usize], grid: &str) -> Result<Vec<u8>> {
    let f = open(field, path, shape, grid, Kind::Byte)?;
    let why = |e: &dyn std::fmt::Display| Error::invalid(field, path.display(), e.to_string());
    f.npy
        .data::<u8>()
        .map_err(|e| why(&e))?
        .map(|x| x.map_err(|e| why(&e)))
        .collect()
}
