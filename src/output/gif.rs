//! Animated GIFs of a series of 2D fields (frames of a run), coloured with viridis on one
//! scale for all frames so they compare.

use std::borrow::Cow;
use std::fs::File;
use std::io::BufWriter;
use std::path::Path;

use crate::error::{Error, Result};

/// Write `frames` (each `ny` rows of `nx` values, row 0 at the bottom) as a looping GIF,
/// `delay_cs` hundredths of a second per frame; values map linearly from the smallest
/// to the largest finite value over all frames.
pub fn write(path: &Path, ny: usize, nx: usize, frames: &[Vec<f64>], delay_cs: u16) -> Result<()> {
    let io = |e: std::io::Error| Error::io(path, e);
    let enc = |e: ::gif::EncodingError| Error::io(path, std::io::Error::other(e.to_string()));
    let (w, h) = (
        u16::try_from(nx).map_err(|_| Error::Parse(format!("a GIF frame of {nx} columns")))?,
        u16::try_from(ny).map_err(|_| Error::Parse(format!("a GIF frame of {ny} rows")))?,
    );
    let finite = frames.iter().flatten().copied().filter(|v| v.is_finite());
    let (lo, hi) = finite.fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), v| {
        (a.min(v), b.max(v))
    });
    let span = if hi > lo { hi - lo } else { 1.0 };
    let palette: Vec<u8> = (0..256)
        .flat_map(|k| super::png::viridis(k as f64 / 255.0))
        .collect();
    let file = BufWriter::new(File::create(path).map_err(io)?);
    let mut e = ::gif::Encoder::new(file, w, h, &palette).map_err(enc)?;
    e.set_repeat(::gif::Repeat::Infinite).map_err(enc)?;
    for f in frames {
        let mut pixels = vec![0u8; nx * ny];
        for (row, line) in pixels.chunks_mut(nx).enumerate() {
            let src = &f[(ny - 1 - row) * nx..(ny - row) * nx];
            for (p, v) in line.iter_mut().zip(src) {
                let t = if v.is_finite() { (v - lo) / span } else { 0.0 };
                *p = (t * 255.0).round().clamp(0.0, 255.0) as u8;
            }
        }
        let frame = ::gif::Frame {
            width: w,
            height: h,
            delay: delay_cs,
            buffer: Cow::Owned(pixels),
            ..Default::default()
        };
        e.write_frame(&frame).map_err(enc)?;
    }
    Ok(())
}
