//! NumPy .npy files (numpy.load reads them): npyz's header, then the data's bytes in
//! blocks (element by element through npyz took most of a large run's output time).

use std::path::Path;

use npyz::WriterBuilder;

use super::write_atomic;
use crate::error::Result;
use crate::precision::Real;

pub fn write<T: Real>(path: &Path, shape: &[usize], data: &[T]) -> Result<()> {
    write_blocks(path, shape, data, |block, bytes| {
        block.iter().for_each(|v| v.push_le_bytes(bytes))
    })
}

/// Any other plain element type (u8 id arrays, for instance).
pub fn write_any<T: Element>(path: &Path, shape: &[usize], data: &[T]) -> Result<()> {
    write_blocks(path, shape, data, T::extend_le)
}

/// Element types written as their little-endian bytes.
pub trait Element: npyz::AutoSerialize + Copy {
    fn extend_le(values: &[Self], out: &mut Vec<u8>);
}

impl Element for u8 {
    fn extend_le(values: &[Self], out: &mut Vec<u8>) {
        out.extend_from_slice(values);
    }
}

fn write_blocks<T: npyz::AutoSerialize>(
    path: &Path,
    shape: &[usize],
    data: &[T],
    le: impl Fn(&[T], &mut Vec<u8>),
) -> Result<()> {
    let shape: Vec<u64> = shape.iter().map(|&s| s as u64).collect();
    write_atomic(path, |w| {
        npyz::WriteOptions::<T>::new()
            .default_dtype()
            .shape(&shape)
            .writer(&mut *w)
            .write_header_only()?;
        let mut bytes = Vec::with_capacity(1 << 20);
        for block in data.chunks((1 << 20) / size_of::<T>().max(1)) {
            bytes.clear();
            le(block, &mut bytes);
            w.write_all(&bytes)?;
        }
        Ok(())
    })
}
