//! Host allocations that fail with a message instead of aborting the process.

use crate::error::{Error, Result};

/// A vector of `len` copies of `value`, or an out-of-memory error naming `what`.
pub fn try_filled<T: Clone>(len: usize, value: T, what: &str) -> Result<Vec<T>> {
    let mut v = try_reserved(len, what)?;
    v.resize(len, value);
    Ok(v)
}

/// The vector of `value(n)` for n in 0..len, made by all threads (each page is written
/// once, by the thread that computes it), or an out-of-memory error naming `what`.
pub fn try_from_fn<T: Send>(
    len: usize,
    what: &str,
    value: impl Fn(usize) -> T + Sync + Send,
) -> Result<Vec<T>> {
    use rayon::prelude::*;
    let mut v = try_reserved(len, what)?;
    v.par_extend((0..len).into_par_iter().map(value));
    Ok(v)
}

/// `to` = `from` (of the same length), by all threads: large host copies (a staged
/// transfer's buffers, slabs' pieces of a field) otherwise run at one core's speed.
pub fn par_copy<T: Copy + Send + Sync>(to: &mut [T], from: &[T]) {
    use rayon::prelude::*;
    to.par_chunks_mut(1 << 16)
        .zip(from.par_chunks(1 << 16))
        .for_each(|(o, i)| o.copy_from_slice(i));
}

/// An empty vector with room for `len` values, or an out-of-memory error naming `what`.
fn try_reserved<T>(len: usize, what: &str) -> Result<Vec<T>> {
    let bytes = (len as u128) * std::mem::size_of::<T>() as u128;
    let mut v = Vec::new();
    v.try_reserve_exact(len).map_err(|_| {
        Error::OutOfMemory(format!(
            "{what}: {} of host memory needed, which could not be allocated",
            crate::units::bytes(bytes)
        ))
    })?;
    Ok(v)
}

/// Physical memory of this machine, from /proc/meminfo (None where unreadable).
pub fn host_total_bytes() -> Option<u128> {
    let info = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = info.lines().find(|l| l.starts_with("MemTotal:"))?;
    let kib: u128 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

/// Refuse a request for more host memory than the machine has.
pub fn ensure_host_fits(bytes: u128, what: &str) -> Result<()> {
    ensure_host_fits_or(bytes, what, "use a smaller grid")
}

/// [`ensure_host_fits`] with the advice the refusal ends with.
pub fn ensure_host_fits_or(bytes: u128, what: &str, advice: &str) -> Result<()> {
    if let Some(total) = host_total_bytes()
        && bytes > total
    {
        return Err(Error::TooLarge(format!(
            "{what}: {} of host memory needed, but this machine has {}; {advice}",
            crate::units::bytes(bytes),
            crate::units::bytes(total)
        )));
    }
    Ok(())
}
