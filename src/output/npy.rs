//! NumPy .npy files (numpy.load reads them).

use std::path::Path;

use npyz::WriterBuilder;

use super::write_atomic;
use crate::error::Result;
use crate::precision::Real;

pub fn write<T: Real>(path: &Path, shape: &[usize], data: &[T]) -> Result<()> {
    write_any(path, shape, data)
}

/// Any plain element type (u8 id arrays, for instance).
pub fn write_any<T: npyz::AutoSerialize + Copy>(
    path: &Path,
    shape: &[usize],
    data: &[T],
) -> Result<()> {
    let shape: Vec<u64> = shape.iter().map(|&s| s as u64).collect();
    write_atomic(path, |w| {
        let mut npy = npyz::WriteOptions::new()
            .default_dtype()
            .shape(&shape)
            .writer(w)
            .begin_nd()?;
        npy.extend(data.iter().copied())?;
        npy.finish()
    })
}
