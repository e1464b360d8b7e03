//! A PNG picture of a 2D field, or of a 3D field's middle z-plane: viridis colours, y
//! upwards (row 0 of the array at the bottom, as in a plot), and a colour bar labelled
//! with the minimum, middle and maximum value. Large planes are averaged down to at most
//! 1024 pixels a side, small ones enlarged to at least 256; non-finite points are grey.

use std::path::Path;

use rayon::prelude::*;

use super::write_atomic;
use crate::error::Result;
use crate::precision::Real;
use crate::run::Field;

const LONG_SIDE_MAX: usize = 1024;
const LONG_SIDE_MIN: usize = 256;
const MARGIN: usize = 12;
const BAR_GAP: usize = 16;
const BAR_WIDTH: usize = 24;
/// Glyphs are 5×7 pixels drawn at this scale.
const FONT_SCALE: usize = 2;
const BACKGROUND: [u8; 3] = [255, 255, 255];
const INK: [u8; 3] = [0, 0, 0];
const NOT_FINITE: [u8; 3] = [128, 128, 128];

/// The plane a picture shows: the field itself in 2D, its middle z-plane in 3D.
fn plane<T: Real>(u: &Field<T>) -> Option<(usize, usize, &[T])> {
    if !u.is_grid() {
        return None;
    }
    match u.shape[..] {
        [ny, nx] => Some((ny, nx, &u.data[..])),
        [nz, ny, nx] => {
            let k = nz / 2;
            Some((ny, nx, &u.data[k * ny * nx..(k + 1) * ny * nx]))
        }
        _ => None,
    }
}

/// Whether `u` gets a picture (2D and 3D fields).
pub fn applies<T: Real>(u: &Field<T>) -> bool {
    plane(u).is_some()
}

/// Viridis, by Matt Zucker's polynomial fit (max error under 1/255 per channel).
pub fn viridis(t: f64) -> [u8; 3] {
    const C: [[f64; 3]; 7] = [
        [
            0.277_727_327_223_417_7,
            0.005_407_344_544_966_578,
            0.334_099_805_335_306_1,
        ],
        [
            0.105_093_043_108_577_4,
            1.404_613_529_898_575,
            1.384_590_162_594_685,
        ],
        [
            -0.330_861_828_725_556_3,
            0.214_847_559_468_213,
            0.095_095_163_028_236_59,
        ],
        [
            -4.634_230_498_983_486,
            -5.799_100_973_351_585,
            -19.332_440_956_279_87,
        ],
        [
            6.228_269_936_347_081,
            14.179_933_366_805_09,
            56.690_552_600_681_05,
        ],
        [
            4.776_384_997_670_288,
            -13.745_145_377_746_01,
            -65.353_032_633_372_34,
        ],
        [
            -5.435_455_855_934_631,
            4.645_852_612_178_535,
            26.312_435_249_583_2,
        ],
    ];
    let t = t.clamp(0.0, 1.0);
    let mut rgb = [0u8; 3];
    for (c, out) in rgb.iter_mut().enumerate() {
        let v = C.iter().rev().fold(0.0, |acc, k| acc * t + k[c]);
        *out = (v.clamp(0.0, 1.0) * 255.0).round() as u8;
    }
    rgb
}

/// 5×7 glyphs (bit 4 is the leftmost column) for the characters of a number.
fn glyph(c: char) -> [u8; 7] {
    match c {
        '0' => [0x0E, 0x11, 0x13, 0x15, 0x19, 0x11, 0x0E],
        '1' => [0x04, 0x0C, 0x04, 0x04, 0x04, 0x04, 0x0E],
        '2' => [0x0E, 0x11, 0x01, 0x02, 0x04, 0x08, 0x1F],
        '3' => [0x1F, 0x02, 0x04, 0x02, 0x01, 0x11, 0x0E],
        '4' => [0x02, 0x06, 0x0A, 0x12, 0x1F, 0x02, 0x02],
        '5' => [0x1F, 0x10, 0x1E, 0x01, 0x01, 0x11, 0x0E],
        '6' => [0x06, 0x08, 0x10, 0x1E, 0x11, 0x11, 0x0E],
        '7' => [0x1F, 0x01, 0x02, 0x04, 0x08, 0x08, 0x08],
        '8' => [0x0E, 0x11, 0x11, 0x0E, 0x11, 0x11, 0x0E],
        '9' => [0x0E, 0x11, 0x11, 0x0F, 0x01, 0x02, 0x0C],
        '.' => [0, 0, 0, 0, 0, 0x0C, 0x0C],
        '-' => [0, 0, 0, 0x1F, 0, 0, 0],
        '+' => [0, 0x04, 0x04, 0x1F, 0x04, 0x04, 0],
        'e' => [0, 0, 0x0E, 0x11, 0x1F, 0x10, 0x0E],
        _ => [0x1F; 7],
    }
}

/// A colour-bar label: four significant digits, in exponent form outside [1e-3, 1e4).
pub fn label(v: f64) -> String {
    let a = v.abs();
    if v == 0.0 {
        "0".to_string()
    } else if (1e-3..1e4).contains(&a) {
        let decimals = (3 - a.log10().floor() as i32).clamp(0, 6) as usize;
        format!("{v:.decimals$}")
    } else {
        format!("{v:.3e}")
    }
}

struct Canvas {
    width: usize,
    height: usize,
    rgb: Vec<u8>,
}

impl Canvas {
    fn new(width: usize, height: usize) -> Self {
        Self {
            width,
            height,
            rgb: BACKGROUND.repeat(width * height),
        }
    }

    fn set(&mut self, x: usize, y: usize, c: [u8; 3]) {
        if x < self.width && y < self.height {
            let i = 3 * (y * self.width + x);
            self.rgb[i..i + 3].copy_from_slice(&c);
        }
    }

    /// Text with its top-left corner at (x, y).
    fn text(&mut self, x: usize, y: usize, s: &str) {
        for (k, c) in s.chars().enumerate() {
            let g = glyph(c);
            for (row, bits) in g.iter().enumerate() {
                for col in 0..5 {
                    if bits & (0x10 >> col) != 0 {
                        for dy in 0..FONT_SCALE {
                            for dx in 0..FONT_SCALE {
                                let px = x + (6 * k + col) * FONT_SCALE + dx;
                                self.set(px, y + row * FONT_SCALE + dy, INK);
                            }
                        }
                    }
                }
            }
        }
    }
}

/// Pixels per grid point: averaging down planes longer than the maximum, whole-number
/// enlargement of planes shorter than the minimum.
fn scale(ny: usize, nx: usize) -> f64 {
    let long = ny.max(nx);
    if long > LONG_SIDE_MAX {
        LONG_SIDE_MAX as f64 / long as f64
    } else if long < LONG_SIDE_MIN {
        LONG_SIDE_MIN.div_ceil(long) as f64
    } else {
        1.0
    }
}

/// The picture of a plane: mean of the finite points under each pixel, coloured.
fn render(ny: usize, nx: usize, data: &[impl Real], s: f64, lo: f64, hi: f64) -> Canvas {
    let (w, h) = (
        ((nx as f64 * s).round() as usize).max(1),
        ((ny as f64 * s).round() as usize).max(1),
    );
    let span = |p: usize, n: usize| {
        let a = ((p as f64 / s) as usize).min(n - 1);
        let b = (((p + 1) as f64 / s) as usize).clamp(a + 1, n);
        a..b
    };
    let mut c = Canvas::new(w, h);
    c.rgb
        .par_chunks_mut(3 * w)
        .enumerate()
        .for_each(|(row, line)| {
            let ys = span(h - 1 - row, ny);
            for px in 0..w {
                let xs = span(px, nx);
                let (mut sum, mut count) = (0.0, 0usize);
                for y in ys.clone() {
                    for v in &data[y * nx + xs.start..y * nx + xs.end] {
                        let v = v.as_f64();
                        if v.is_finite() {
                            sum += v;
                            count += 1;
                        }
                    }
                }
                let colour = if count == 0 {
                    NOT_FINITE
                } else if hi > lo {
                    viridis((sum / count as f64 - lo) / (hi - lo))
                } else {
                    viridis(0.5)
                };
                line[3 * px..3 * px + 3].copy_from_slice(&colour);
            }
        });
    c
}

/// Write the picture of `u` (2D, or the middle z-plane of 3D) to `path`.
pub fn write<T: Real>(path: &Path, u: &Field<T>) -> Result<()> {
    let Some((ny, nx, data)) = plane(u) else {
        return Ok(());
    };
    let (lo, hi) = data
        .par_iter()
        .map(|v| v.as_f64())
        .filter(|v| v.is_finite())
        .fold(
            || (f64::INFINITY, f64::NEG_INFINITY),
            |(a, b), v| (a.min(v), b.max(v)),
        )
        .reduce(
            || (f64::INFINITY, f64::NEG_INFINITY),
            |(a, b), (c, d)| (a.min(c), b.max(d)),
        );
    let (lo, hi) = if lo <= hi { (lo, hi) } else { (0.0, 0.0) };
    let image = render(ny, nx, data, scale(ny, nx), lo, hi);
    let labels = [label(hi), label(0.5 * (lo + hi)), label(lo)];
    let text_w = labels.iter().map(|l| l.len()).max().unwrap_or(0) * 6 * FONT_SCALE;
    let text_h = 7 * FONT_SCALE;
    let bar_h = image.height.max(4 * text_h);
    let width = MARGIN + image.width + BAR_GAP + BAR_WIDTH + 6 + text_w + MARGIN;
    let height = MARGIN + bar_h + MARGIN;
    let mut c = Canvas::new(width, height);
    let top = MARGIN + (bar_h - image.height) / 2;
    for y in 0..image.height {
        let src = &image.rgb[3 * y * image.width..3 * (y + 1) * image.width];
        let i = 3 * ((top + y) * width + MARGIN);
        c.rgb[i..i + src.len()].copy_from_slice(src);
    }
    let bar_x = MARGIN + image.width + BAR_GAP;
    for y in 0..bar_h {
        let colour = viridis(1.0 - y as f64 / (bar_h - 1) as f64);
        for x in bar_x..bar_x + BAR_WIDTH {
            c.set(x, MARGIN + y, colour);
        }
    }
    let text_x = bar_x + BAR_WIDTH + 6;
    let ys = [
        MARGIN,
        MARGIN + (bar_h - text_h) / 2,
        MARGIN + bar_h - text_h,
    ];
    for (l, y) in labels.iter().zip(ys) {
        c.text(text_x, y, l);
    }
    write_atomic(path, |w| {
        let mut e = png::Encoder::new(w, width as u32, height as u32);
        e.set_color(png::ColorType::Rgb);
        e.set_depth(png::BitDepth::Eight);
        let mut writer = e.write_header().map_err(std::io::Error::other)?;
        writer
            .write_image_data(&c.rgb)
            .map_err(std::io::Error::other)?;
        writer.finish().map_err(std::io::Error::other)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn viridis_ends_and_labels() {
        // The published map runs from (68, 1, 84) to (253, 231, 37).
        let (a, b) = (viridis(0.0), viridis(1.0));
        assert!(
            a.iter()
                .zip([68, 1, 84])
                .all(|(x, y)| (*x as i32 - y).abs() <= 4),
            "{a:?}"
        );
        assert!(
            b.iter()
                .zip([253, 231, 37])
                .all(|(x, y)| (*x as i32 - y).abs() <= 4),
            "{b:?}"
        );
        assert_eq!(label(0.5), "0.5000");
        assert_eq!(label(123.456), "123.5");
        assert_eq!(label(-2.5e-7), "-2.500e-7");
        assert_eq!(label(0.0), "0");
    }

    #[test]
    fn scale_keeps_pictures_between_256_and_1024_pixels() {
        assert_eq!(scale(16384, 16384), 1024.0 / 16384.0);
        assert_eq!(scale(64, 40), 4.0);
        assert_eq!(scale(300, 500), 1.0);
    }
}
