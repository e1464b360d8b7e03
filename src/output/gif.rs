//! Animated GIFs of a series of 2D fields (frames of a run), coloured with viridis on one
//! scale for all frames so they compare.

use std::borrow::Cow;
use std::fs::File;
use std::io::BufWriter;
use std::path::Path;

use crate::error::{Error, Result};
use crate::precision::Real;

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

/// The frames of a run's 2D field for an animated GIF. Each frame is block-averaged to at
/// most `side` pixels on its long side; past `cap` frames every other one is dropped and
/// only every other later frame kept, so a long run's animation stays bounded in memory
/// (`cap` frames of at most `side`² values) and still spans the whole run.
pub struct Animation {
    side: usize,
    cap: usize,
    every: usize,
    offered: usize,
    shape: [usize; 2],
    frames: Vec<Vec<f64>>,
}

impl Animation {
    pub fn new(side: usize, cap: usize) -> Self {
        Self {
            side: side.max(1),
            cap: cap.max(2),
            every: 1,
            offered: 0,
            shape: [0, 0],
            frames: Vec::new(),
        }
    }

    /// Offer the field `data` (`ny` rows of `nx`, row 0 at the bottom) as the next frame.
    pub fn push<T: Real>(&mut self, ny: usize, nx: usize, data: &[T]) {
        let k = self.offered;
        self.offered += 1;
        if self.frames.len() == self.cap && k.is_multiple_of(self.every) {
            self.halve();
        }
        if k.is_multiple_of(self.every) {
            self.add(block_average(ny, nx, data, self.side));
        }
    }

    /// Add the last field unless it is the frame already last (the final step on the
    /// output schedule).
    pub fn push_last<T: Real>(&mut self, ny: usize, nx: usize, data: &[T]) {
        let frame = block_average(ny, nx, data, self.side);
        if self.frames.last() != Some(&frame.0) {
            if self.frames.len() == self.cap {
                self.halve();
            }
            self.add(frame);
        }
    }

    /// Keep every other frame, and from now on every other one offered.
    fn halve(&mut self) {
        self.frames = std::mem::take(&mut self.frames)
            .into_iter()
            .step_by(2)
            .collect();
        self.every *= 2;
    }

    fn add(&mut self, (frame, shape): (Vec<f64>, [usize; 2])) {
        self.shape = shape;
        self.frames.push(frame);
    }

    /// Write the GIF as `name` of `set` when there are two frames or more (one frame is
    /// the PNG's picture, and a set lists only files it holds).
    pub fn write(&self, set: &mut super::OutputSet, name: &str, delay_cs: u16) -> Result<()> {
        if self.frames.len() < 2 {
            return Ok(());
        }
        write(
            &set.file(name),
            self.shape[0],
            self.shape[1],
            &self.frames,
            delay_cs,
        )
    }
}

/// `data` (`ny` × `nx`, in either precision: no f64 copy of a whole field) averaged over
/// square blocks so that its long side is at most `side`; non-finite values are left out
/// of their block's mean.
fn block_average<T: Real>(ny: usize, nx: usize, data: &[T], side: usize) -> (Vec<f64>, [usize; 2]) {
    let b = ny.max(nx).div_ceil(side).max(1);
    let (h, w) = (ny.div_ceil(b), nx.div_ceil(b));
    let mut out = vec![0.0; h * w];
    for (r, line) in out.chunks_mut(w).enumerate() {
        for (c, v) in line.iter_mut().enumerate() {
            let (mut s, mut n) = (0.0, 0usize);
            for j in r * b..((r + 1) * b).min(ny) {
                for x in &data[j * nx + c * b..(j * nx + ((c + 1) * b).min(nx))] {
                    let x = x.as_f64();
                    if x.is_finite() {
                        s += x;
                        n += 1;
                    }
                }
            }
            *v = if n > 0 { s / n as f64 } else { f64::NAN };
        }
    }
    (out, [h, w])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_are_averaged_down_to_the_side() {
        let (ny, nx) = (5, 9);
        let data: Vec<f64> = (0..ny * nx).map(|k| k as f64).collect();
        let (f, [h, w]) = block_average(ny, nx, &data, 4);
        // Blocks of 3: 2 rows by 3 columns, the last ones partial.
        assert_eq!([h, w], [2, 3]);
        assert_eq!(
            f[0],
            (0.0 + 1.0 + 2.0 + 9.0 + 10.0 + 11.0 + 18.0 + 19.0 + 20.0) / 9.0
        );
        assert_eq!(f[5], (33.0 + 34.0 + 35.0 + 42.0 + 43.0 + 44.0) / 6.0);
        let (same, shape) = block_average(ny, nx, &data, 100);
        assert_eq!((same, shape), (data, [ny, nx]));
    }

    #[test]
    fn a_long_run_keeps_at_most_cap_frames_spread_over_it() {
        let mut a = Animation::new(8, 4);
        for k in 0..20 {
            a.push(1, 1, &[k as f64]);
        }
        assert!(a.frames.len() <= 4, "{}", a.frames.len());
        // The first frame and frames from the whole run, in order.
        let firsts: Vec<f64> = a.frames.iter().map(|f| f[0]).collect();
        assert_eq!(firsts[0], 0.0);
        assert!(firsts.windows(2).all(|w| w[0] < w[1]));
        assert!(*firsts.last().unwrap() >= 8.0, "{firsts:?}");
        a.push_last(1, 1, &[19.0]);
        assert_eq!(a.frames.last().unwrap()[0], 19.0);
        let before = a.frames.len();
        a.push_last(1, 1, &[19.0]);
        assert_eq!(
            a.frames.len(),
            before,
            "the same last frame is not added twice"
        );
    }
}
