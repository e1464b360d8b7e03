//! Arrays users hand in as .npy files (initial fields, charge densities, id arrays):
//! the header is checked against the grid before any work — shape, dtype, C order, and
//! a file length that matches, so a truncated or appended file fails with its field named.

use std::fs::File;
use std::io::{BufReader, Read, Seek, SeekFrom};
use std::path::Path;

use npyz::{DType, Endianness, NpyFile, Order, TypeChar};

use crate::error::{Error, Result};

/// What a file must hold.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Kind {
    /// float32 or float64.
    Float,
    /// uint8 (ids).
    Byte,
}

/// An opened array file whose header matched: the bytes per value, where its data start
/// and their byte order. Its values are read in blocks of bytes (npyz's value-by-value
/// reader took about 50 ns a value: seconds for a large velocity or charge array).
pub struct Opened {
    pub value_bytes: usize,
    data_offset: u64,
    big_endian: bool,
}

/// Open `path` for reading only if it is a regular file (after links): opening a FIFO
/// waits for a writer forever, and /dev/zero or a folder is no input. `why` turns the
/// reason into the caller's error.
pub fn open_regular(path: &Path, why: impl Fn(String) -> Error) -> Result<File> {
    let m = std::fs::metadata(path).map_err(|e| why(e.to_string()))?;
    if !m.is_file() {
        let what = if m.is_dir() {
            "a folder"
        } else {
            "not a regular file (a FIFO, socket or device)"
        };
        return Err(why(format!("is {what}; give a file")));
    }
    File::open(path).map_err(|e| why(e.to_string()))
}

/// Open `path` (given as `field`) and check it holds a C-order array of `shape` (named
/// `grid` in messages, e.g. "the mesh's nodes (z, y, x)") of `kind`.
pub fn open(field: &str, path: &Path, shape: &[usize], grid: &str, kind: Kind) -> Result<Opened> {
    let shown = path.display();
    let bad = |why: String| Error::invalid(field, &shown, why);
    let file = open_regular(path, bad)?;
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
    let big_endian = match npy.dtype() {
        DType::Plain(t) => t.endianness() == Endianness::Big,
        _ => false,
    };
    let values: u64 = shape.iter().map(|&n| n as u64).product();
    let data_offset = check_length(field, path, values * value_bytes as u64)?;
    Ok(Opened {
        value_bytes,
        data_offset,
        big_endian,
    })
}

/// The shape an .npy file's header declares (to pick the shape `open` then checks).
pub fn shape_of(field: &str, path: &Path) -> Result<Vec<usize>> {
    let bad = |why: String| Error::invalid(field, path.display(), why);
    let file = open_regular(path, bad)?;
    let npy = NpyFile::new(BufReader::new(file))
        .map_err(|e| bad(format!("not a readable .npy file: {e}")))?;
    Ok(npy.shape().iter().map(|&v| v as usize).collect())
}

/// The file holds exactly the header and `data` bytes: no fewer (truncated), no more
/// (a different array, or bytes appended). Where the data start.
fn check_length(field: &str, path: &Path, data: u64) -> Result<u64> {
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
        std::cmp::Ordering::Equal => Ok(offset),
    }
}

/// A value type an array file may hold, decoded from its bytes.
pub trait Stored: Copy {
    const BYTES: usize;
    fn decode(bytes: &[u8], big_endian: bool) -> Self;
}

macro_rules! stored {
    ($($t:ty),*) => {$(
        impl Stored for $t {
            const BYTES: usize = size_of::<$t>();
            fn decode(bytes: &[u8], big_endian: bool) -> Self {
                let b = bytes.try_into().expect("one value's bytes");
                match big_endian {
                    true => <$t>::from_be_bytes(b),
                    false => <$t>::from_le_bytes(b),
                }
            }
        }
    )*};
}
stored!(u8, f32, f64);

impl Opened {
    /// The values of each run `(first, count)` of the file as `S` (its stored type), runs
    /// in order and each in blocks, handed to `put` in order: one open file and one
    /// buffer for all the runs (a rank's rows may be thousands).
    fn read<S: Stored>(
        &self,
        path: &Path,
        runs: impl IntoIterator<Item = (usize, usize)>,
        mut put: impl FnMut(S),
    ) -> std::io::Result<()> {
        debug_assert_eq!(S::BYTES, self.value_bytes);
        let mut file = File::open(path)?;
        let per_block = ((1 << 20) / S::BYTES).max(1);
        let mut bytes = vec![0u8; per_block * S::BYTES];
        for (first, count) in runs {
            file.seek(SeekFrom::Start(
                self.data_offset + (first * S::BYTES) as u64,
            ))?;
            let mut left = count;
            while left > 0 {
                let n = left.min(per_block);
                let block = &mut bytes[..n * S::BYTES];
                file.read_exact(block)?;
                block
                    .chunks_exact(S::BYTES)
                    .for_each(|b| put(S::decode(b, self.big_endian)));
                left -= n;
            }
        }
        Ok(())
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
    let n = out.len();
    let mut at = out.iter_mut();
    let mut put = |x: f64| {
        if let Some(v) = at.next() {
            *v = T::lit(x);
        }
    };
    match f.value_bytes {
        4 => f.read::<f32>(path, [(0, n)], |x| put(x as f64)),
        _ => f.read::<f64>(path, [(0, n)], put),
    }
    .map_err(|e| why(&e))
}

/// The rows `rows` (ascending, `row_len` values each) of an opened array, one after
/// another, as `f64` (float files) or as stored (`u8`): what a rank under mpirun reads
/// of a file, seeking past the other ranks' rows.
pub fn read_rows<S: Stored>(
    field: &str,
    path: &Path,
    f: Opened,
    row_len: usize,
    rows: &[usize],
) -> Result<Vec<S>> {
    let why = |e: &dyn std::fmt::Display| Error::invalid(field, path.display(), e.to_string());
    let mut out = Vec::with_capacity(rows.len() * row_len);
    let runs = rows.iter().map(|&j| (j * row_len, row_len));
    f.read::<S>(path, runs, |x| out.push(x))
        .map_err(|e| why(&e))?;
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
    let n = shape.iter().product();
    let mut out = Vec::with_capacity(n);
    f.read::<u8>(path, [(0, n)], |x| out.push(x))
        .map_err(|e| Error::invalid(field, path.display(), e.to_string()))?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An .npy file (format 1.0) of `descr` and `shape` holding `data` as given.
    fn npy_file(
        dir: &Path,
        name: &str,
        descr: &str,
        shape: &str,
        data: &[u8],
    ) -> std::path::PathBuf {
        let mut dict =
            format!("{{'descr': '{descr}', 'fortran_order': False, 'shape': {shape}, }}");
        while (10 + dict.len() + 1) % 64 != 0 {
            dict.push(' ');
        }
        dict.push('\n');
        let mut bytes = b"\x93NUMPY\x01\x00".to_vec();
        bytes.extend_from_slice(&(dict.len() as u16).to_le_bytes());
        bytes.extend_from_slice(dict.as_bytes());
        bytes.extend_from_slice(data);
        let path = dir.join(name);
        std::fs::write(&path, bytes).unwrap();
        path
    }

    /// Floats of either width and byte order, whole and by rows past a block's length,
    /// and bytes, read as numpy wrote them.
    #[test]
    fn values_are_read_in_either_byte_order_and_width() {
        let dir = tempfile::tempdir().unwrap();
        let (rows, len) = (3, 100_000);
        let values: Vec<f64> = (0..rows * len).map(|n| n as f64 * 0.25 - 7.0).collect();
        let shape = format!("({rows}, {len})");
        let files = [
            (
                "<f8",
                values
                    .iter()
                    .flat_map(|v| v.to_le_bytes())
                    .collect::<Vec<_>>(),
            ),
            (">f8", values.iter().flat_map(|v| v.to_be_bytes()).collect()),
            (
                "<f4",
                values
                    .iter()
                    .flat_map(|&v| (v as f32).to_le_bytes())
                    .collect(),
            ),
            (
                ">f4",
                values
                    .iter()
                    .flat_map(|&v| (v as f32).to_be_bytes())
                    .collect(),
            ),
        ];
        for (k, (descr, data)) in files.iter().enumerate() {
            let path = npy_file(dir.path(), &format!("{k}.npy"), descr, &shape, data);
            let open = || open("f", &path, &[rows, len], "the grid", Kind::Float).unwrap();
            let mut whole = vec![0.0f64; rows * len];
            fill_floats("f", &path, open(), &mut whole).unwrap();
            assert_eq!(whole, values, "{descr}");
            let two = read_float_rows("f", &path, open(), len, &[0, 2]).unwrap();
            assert_eq!(two[..len], values[..len], "{descr}");
            assert_eq!(two[len..], values[2 * len..], "{descr}");
        }
        let ids: Vec<u8> = (0..rows * len).map(|n| (n % 251) as u8).collect();
        let path = npy_file(dir.path(), "ids.npy", "|u1", &shape, &ids);
        assert_eq!(
            read_bytes("ids", &path, &[rows, len], "the grid").unwrap(),
            ids
        );
        let open = open("ids", &path, &[rows, len], "the grid", Kind::Byte).unwrap();
        let row = read_rows::<u8>("ids", &path, open, len, &[1]).unwrap();
        assert_eq!(row, ids[len..2 * len]);
    }
}
