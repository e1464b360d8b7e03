//! Slabs of rows: who owns which rows, which halo rows each reads, and the buffer row
//! that holds a given grid row.

use std::ops::Range;

use crate::error::{Error, Result};

/// One slab as its engine sees it. "Rows" are the units of the slowest axis (rows of a
/// 2D grid, planes of a 3D one). The engine's buffer holds `rows` of them, buffer row 0
/// being grid row `base`; a periodic slab's halo rows keep their unwrapped numbers
/// (row −1 is grid row n−1), so `base` may be negative.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Window {
    /// Rows of the whole grid.
    pub n: usize,
    /// Grid row of buffer row 0.
    pub base: isize,
    /// Rows in the buffer.
    pub rows: usize,
    /// The rows this slab computes and reports.
    pub own: Range<usize>,
    /// Halo rows on each side (fewer where a non-periodic grid ends).
    pub halo: usize,
    pub periodic: bool,
}

impl Window {
    /// The whole grid in one buffer: no halo (a periodic engine wraps by itself).
    pub fn whole(n: usize, periodic: bool) -> Self {
        Self {
            n,
            base: 0,
            rows: n,
            own: 0..n,
            halo: 0,
            periodic,
        }
    }

    /// The buffer row that holds grid row `r`: `r` itself where the buffer has it (halo
    /// rows included), else wrapped (periodic, the whole grid in the buffer) or clamped
    /// to the grid's edge (rows a held boundary never reads for a result).
    pub fn buffer_row(&self, r: isize) -> usize {
        let l = r - self.base;
        if (0..self.rows as isize).contains(&l) {
            return l as usize;
        }
        let g = if self.periodic {
            r.rem_euclid(self.n as isize)
        } else {
            r.clamp(0, self.n as isize - 1)
        };
        (g - self.base) as usize
    }

    /// The grid row (0..n) that buffer row `l` stands for.
    pub fn grid_row(&self, l: usize) -> usize {
        (self.base + l as isize).rem_euclid(self.n as isize) as usize
    }

    /// Buffer rows of the owned rows.
    pub fn own_in_buffer(&self) -> Range<usize> {
        let s = (self.own.start as isize - self.base) as usize;
        s..s + self.own.len()
    }

    /// Halo blocks this slab receives: (first buffer row, the grid rows it takes), below
    /// then above.
    pub fn halos(&self) -> Vec<(usize, Range<usize>)> {
        let own = self.own_in_buffer();
        let mut v = Vec::new();
        if own.start > 0 {
            let first = self.own.start as isize - own.start as isize;
            let g = first.rem_euclid(self.n as isize) as usize;
            v.push((0, g..g + own.start));
        }
        if own.end < self.rows {
            let g = self.own.end % self.n;
            v.push((own.end, g..g + (self.rows - own.end)));
        }
        v
    }
}

/// Cut `n` rows into `parts` slabs, as even as can be (the first `n % parts` get one row
/// more), each reading `halo` rows beyond its own on each side (`periodic`: around the
/// ends too). Every slab must own at least `halo` rows, so a halo comes from one
/// neighbour; `what` names the option that asked for the parts.
pub fn windows(
    n: usize,
    parts: usize,
    halo: usize,
    periodic: bool,
    what: &str,
) -> Result<Vec<Window>> {
    if parts == 0 {
        return Err(Error::invalid(what, parts, "at least one subdomain"));
    }
    if parts == 1 {
        return Ok(vec![Window::whole(n, periodic)]);
    }
    let least = halo.max(1);
    if n / parts < least {
        return Err(Error::invalid(
            what,
            parts,
            format!(
                "{n} rows in {parts} slabs leave fewer than the {least} rows each slab \
                 needs (its halo is {halo} rows); use at most {} subdomains",
                (n / least).max(1)
            ),
        ));
    }
    let mut start = 0;
    Ok((0..parts)
        .map(|p| {
            let len = n / parts + usize::from(p < n % parts);
            let own = start..start + len;
            start += len;
            let below = if periodic { halo } else { halo.min(own.start) };
            let above = if periodic {
                halo
            } else {
                halo.min(n - own.end)
            };
            Window {
                n,
                base: own.start as isize - below as isize,
                rows: below + len + above,
                own,
                halo,
                periodic,
            }
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slabs_cover_the_rows_once_and_take_their_halos_from_neighbours() {
        for periodic in [false, true] {
            for parts in 1..=5 {
                let w = windows(23, parts, 2, periodic, "--subdomains").unwrap();
                let mut next = 0;
                for s in &w {
                    assert_eq!(s.own.start, next);
                    next = s.own.end;
                    for (at, rows) in s.halos() {
                        // The halo block's grid rows sit at the block's buffer rows.
                        for (o, g) in rows.clone().enumerate() {
                            let r = s.base + (at + o) as isize;
                            assert_eq!(r.rem_euclid(23) as usize, g);
                            assert_eq!(s.buffer_row(r), at + o);
                        }
                        // ... and lie inside one other slab.
                        let owner = w.iter().position(|t| t.own.contains(&rows.start));
                        let owner = &w[owner.unwrap()];
                        assert!(owner.own.contains(&(rows.end - 1)));
                        assert_ne!(owner, s);
                    }
                }
                assert_eq!(next, 23);
            }
        }
    }

    #[test]
    fn rows_outside_a_buffer_wrap_or_clamp_like_the_whole_grid() {
        let whole = Window::whole(10, true);
        assert_eq!(whole.buffer_row(-2), 8);
        assert_eq!(whole.buffer_row(11), 1);
        let held = windows(10, 2, 2, false, "x").unwrap();
        assert_eq!(held[0].buffer_row(-2), 0);
        assert_eq!(held[1].base, 3);
        assert_eq!(held[1].buffer_row(11), held[1].rows - 1);
    }

    #[test]
    fn too_many_slabs_for_the_halo_are_refused() {
        let e = windows(7, 4, 2, false, "--subdomains").unwrap_err();
        assert!(e.to_string().contains("at most 3 subdomains"), "{e}");
    }
}
