//! Where an output's mismatches are ([`MismatchMap`]): two grids of at most [`MAP_BINS`] x
//! [`MAP_BINS`] cells, each cell the count of its mismatches and the ULP bucket of its worst,
//! so that what a report draws is bounded whatever the batch (`nnpc diff --report`).

use serde::{Deserialize, Serialize};
use std::ops::Range;

/// The most bins along either axis of a grid.
pub const MAP_BINS: usize = 200;

/// A grid of cells over two axes of units (items and elements, or rows and columns), each
/// axis cut into at most [`MAP_BINS`] bins of consecutive units.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Grid {
    /// Units along the rows and the columns of the grid.
    pub units: [usize; 2],
    /// Bins along each: `min(units, MAP_BINS)`; unit `u` of an axis is in bin
    /// `u * bins / units`.
    pub bins: [usize; 2],
    /// Per cell, row-major: how many mismatches it holds.
    pub count: Vec<u64>,
    /// Per cell: the ULP-histogram bucket of its worst mismatch (`DiffReport::ulp_histogram`'s
    /// index: 1 for 1 ULP, ..., 17 for more than 2^15, 18 for a NaN against a number), 0 where
    /// it holds none.
    pub worst: Vec<u8>,
}

impl Grid {
    pub fn new(units: [usize; 2]) -> Grid {
        let bins = units.map(|u| u.clamp(1, MAP_BINS));
        let cells = bins[0] * bins[1];
        Grid {
            units: units.map(|u| u.max(1)),
            bins,
            count: vec![0; cells],
            worst: vec![0; cells],
        }
    }

    /// The bin of unit `u` along `axis` (0 rows, 1 columns).
    pub fn bin(&self, axis: usize, u: usize) -> usize {
        let (units, bins) = (self.units[axis], self.bins[axis]);
        ((u as u128 * bins as u128 / units as u128) as usize).min(bins - 1)
    }

    /// The units of bin `b` along `axis`: those `u` with `u * bins / units == b`.
    pub fn range(&self, axis: usize, b: usize) -> Range<usize> {
        let (units, bins) = (self.units[axis] as u128, self.bins[axis] as u128);
        let start = |b: u128| (b * units).div_ceil(bins) as usize;
        start(b as u128)..start(b as u128 + 1)
    }

    /// Count a mismatch of ULP bucket `bucket` at units `(row, col)`.
    pub fn add(&mut self, row: usize, col: usize, bucket: u8) {
        let cell = self.bin(0, row) * self.bins[1] + self.bin(1, col);
        if let (Some(c), Some(w)) = (self.count.get_mut(cell), self.worst.get_mut(cell)) {
            *c += 1;
            *w = (*w).max(bucket);
        }
    }
}

/// Where one output's mismatches are.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct MismatchMap {
    pub output: String,
    /// Batch items (rows) by elements of an item in logical order (columns).
    pub items: Grid,
    /// The output's rows (a netq output's time steps) by the elements of a row (columns),
    /// over every item: the columns are the row's native tiles side by side, `native` lanes
    /// each, so tile `t` is columns `t * native ..`.
    pub rows: Grid,
    pub native: usize,
}

impl MismatchMap {
    /// The map of an output of `batch` items whose item has `rows` rows of `row_len` elements.
    pub fn new(output: &str, batch: usize, rows: usize, row_len: usize, native: usize) -> Self {
        MismatchMap {
            output: output.to_string(),
            items: Grid::new([batch, rows * row_len]),
            rows: Grid::new([rows, row_len]),
            native,
        }
    }

    /// Count a mismatch of bucket `bucket` at element `within` (flat, of a row of `row_len`)
    /// of item `item`.
    pub fn add(&mut self, item: usize, within: usize, row_len: usize, bucket: u8) {
        self.items.add(item, within, bucket);
        let row_len = row_len.max(1);
        self.rows.add(within / row_len, within % row_len, bucket);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 1000 units in 200 bins: 5 each; 7 units in 7 bins: 1 each; 201 units in 200 bins: one
    /// bin holds two (bin 0: units 0 and 1, as 1 * 200 / 201 < 1), every other one.
    #[test]
    fn bins_by_hand() {
        let g = Grid::new([1000, 7]);
        assert_eq!(g.bins, [200, 7]);
        assert_eq!((g.bin(0, 4), g.bin(0, 5), g.bin(0, 999)), (0, 1, 199));
        assert_eq!(g.range(0, 1), 5..10);
        assert_eq!(g.range(1, 6), 6..7);
        let g = Grid::new([201, 1]);
        assert_eq!((g.bin(0, 199), g.bin(0, 200)), (198, 199));
        assert_eq!(g.range(0, 199), 200..201);
        assert_eq!(g.range(0, 198), 199..200);
        assert_eq!(g.range(0, 0), 0..2);
        // Every unit lies in the range of its bin.
        for u in 0..201 {
            assert!(g.range(0, g.bin(0, u)).contains(&u), "{u}");
        }
    }

    #[test]
    fn cells_keep_count_and_worst() {
        let mut m = MismatchMap::new("y", 10, 4, 256, 128);
        m.add(3, 256 + 130, 256, 2);
        m.add(3, 256 + 130, 256, 18);
        m.add(3, 256 + 130, 256, 5);
        let cell = m.items.bin(0, 3) * m.items.bins[1] + m.items.bin(1, 386);
        assert_eq!((m.items.count[cell], m.items.worst[cell]), (3, 18));
        // Row 1, column 130: tile 1, lane 2.
        let cell = m.rows.bin(0, 1) * m.rows.bins[1] + m.rows.bin(1, 130);
        assert_eq!((m.rows.count[cell], m.rows.worst[cell]), (3, 18));
        assert_eq!(m.rows.count.iter().sum::<u64>(), 3);
    }
}
