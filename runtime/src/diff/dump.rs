//! The hardware's dump: its headers read and checked against the program, each output's
//! values read a range of items at a time, in logical layout whatever the dump's.

use super::DiffError;
use crate::host::{Outputs, ShapeDisplay};
use crate::io::{self, Inexact, IoError, Layout, StoredTensor};
use nnp_grammar::Program;
use std::collections::BTreeMap;
use std::ops::Range;
use std::path::{Path, PathBuf};

/// The hardware's dump, its headers read: each output's values are read a range of items at
/// a time ([`Dump::items`]).
pub struct Dump {
    path: PathBuf,
    tensors: BTreeMap<String, StoredTensor>,
    layout: Layout,
    /// Whether each output's tensor has the batch dimension (a dump of one input set may
    /// leave it out).
    batched: BTreeMap<String, bool>,
}

/// Why a dump cannot be opened: unreadable, or a single .npy file for several outputs.
#[derive(Debug, thiserror::Error, miette::Diagnostic)]
pub enum DumpError {
    #[error(transparent)]
    #[diagnostic(transparent)]
    Io(#[from] IoError),
    #[error(transparent)]
    #[diagnostic(transparent)]
    Diff(#[from] DiffError),
}

impl Dump {
    /// The dump at `path` (`*.safetensors`, a directory of .npy files, or one .npy file for a
    /// program with one output) in `layout`, its headers read.
    pub fn open(program: &Program, path: &Path, layout: Layout) -> Result<Dump, DumpError> {
        let mut tensors = io::index_tensors(path)?;
        // A single .npy file holds one tensor, whatever its name: the program's output, where
        // it has one (the file is named by the board, not after the output).
        let npy = path
            .extension()
            .and_then(|e| e.to_str())
            .is_some_and(|e| e.eq_ignore_ascii_case("npy"));
        if npy && !path.is_dir() {
            let outputs: Vec<&str> = program.outputs().map(|d| d.name.as_str()).collect();
            match outputs[..] {
                [] => {}
                [name] => {
                    tensors = tensors
                        .into_values()
                        .map(|t| (name.to_string(), t))
                        .collect();
                }
                _ => {
                    let outputs = outputs.iter().map(|o| format!("`{o}`")).collect::<Vec<_>>();
                    return Err(DiffError::OneNpyForOutputs {
                        path: path.to_path_buf(),
                        count: outputs.len(),
                        outputs: outputs.join(", "),
                    }
                    .into());
                }
            }
        }
        let batched = program
            .outputs()
            .filter_map(|d| {
                let t = tensors.get(&d.name)?;
                let rank = match layout {
                    Layout::Logical => d.shape.len(),
                    Layout::Tiles => d.shape.len() + 1,
                };
                Some((d.name.clone(), t.shape.len() > rank))
            })
            .collect();
        Ok(Dump {
            path: path.to_path_buf(),
            tensors,
            layout,
            batched,
        })
    }

    /// Where the dump is.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The batch of the dump: the leading dimension of the first output (in declaration
    /// order) that has one.
    pub fn batch(&self, program: &Program) -> Option<usize> {
        program.outputs().find_map(|d| {
            let batched = self.batched.get(&d.name).copied().unwrap_or(false);
            batched.then(|| self.tensors.get(&d.name)?.shape.first().copied())?
        })
    }

    /// Every output is in the dump with the shape of `batch` items (in the dump's layout), so
    /// that every range of items can be read: checked before the run.
    pub fn check(&self, program: &Program, batch: usize) -> Result<(), DiffError> {
        for d in program.outputs() {
            let t = self
                .tensors
                .get(&d.name)
                .ok_or_else(|| DiffError::MissingOutput(d.name.clone()))?;
            let logical: Vec<usize> = std::iter::once(batch).chain(d.shape.clone()).collect();
            let (whole, one, layout) = match self.layout {
                Layout::Logical => (logical, d.shape.clone(), ""),
                Layout::Tiles => {
                    let tiles = |s: &[usize]| io::tiles_shape(s, program.native(), false);
                    (tiles(&logical), tiles(&d.shape), " in native tiles")
                }
            };
            if t.shape != whole && !(batch == 1 && t.shape == one) {
                return Err(DiffError::Shape {
                    name: d.name.clone(),
                    expected: format!("{}{layout}", ShapeDisplay(&whole)),
                    found: ShapeDisplay(&t.shape).to_string(),
                    batch,
                });
            }
        }
        Ok(())
    }

    /// Items `items` of every output, in logical layout (a tensor without the batch
    /// dimension whole, in its declared shape), and each output's values that the dump holds
    /// but f32 does not ([`Inexact`], indexed in that logical piece).
    pub fn items(
        &self,
        program: &Program,
        items: Range<usize>,
    ) -> Result<(Outputs, BTreeMap<String, Inexact>), IoError> {
        let mut out = Outputs::new();
        let mut inexact = BTreeMap::new();
        for d in program.outputs() {
            let Some(t) = self.tensors.get(&d.name) else {
                continue; // reported as missing by the comparison
            };
            let batched = self.batched.get(&d.name).copied().unwrap_or(false);
            let ((piece, wide), mut logical) = match batched {
                true => (t.read_items_checked(items.clone())?, vec![items.len()]),
                false => (t.read_checked()?, Vec::new()),
            };
            logical.extend(&d.shape);
            let (piece, wide) = match self.layout {
                Layout::Logical => (piece, wide),
                Layout::Tiles => {
                    let n = program.native();
                    let piece = io::from_tiles(&d.name, &piece, &logical, n, false)?;
                    (piece, logical_of_tiles(wide, &logical, n))
                }
            };
            if !wide.is_empty() {
                inexact.insert(d.name.clone(), wide);
            }
            out.insert(d.name.clone(), piece);
        }
        Ok((out, inexact))
    }
}

/// Values indexed in the native-tile layout of a vector-like tensor of shape `logical`
/// (`[..., C]` as `[..., ceil(C/N), N]`), indexed in the logical layout instead: those in pad
/// lanes left out, as [`io::from_tiles`] leaves them.
fn logical_of_tiles(values: Inexact, logical: &[usize], native: usize) -> Inexact {
    let c = logical.last().copied().unwrap_or(1);
    let padded = c.div_ceil(native.max(1)) * native.max(1);
    values
        .into_iter()
        .filter_map(|(i, v)| {
            let (row, lane) = (i.checked_div(padded)?, i.checked_rem(padded)?);
            (lane < c).then_some((row * c + lane, v))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::logical_of_tiles;

    /// Indices in a native-tile layout, by hand: logical `[2, 3]` with N = 4 is tiles
    /// `[2, 1, 4]`, row r's lanes at 4r..4r + 3, lane 3 a pad lane: 0 -> 0, 2 -> 2, 5 -> 4,
    /// 6 -> 5; 3 and 7 (pad lanes) are left out.
    #[test]
    fn tile_indices_become_logical_indices() {
        let tiles = [0, 2, 3, 5, 6, 7].map(|i| (i, i as f64)).to_vec();
        let want = vec![(0, 0.0), (2, 2.0), (4, 5.0), (5, 6.0)];
        assert_eq!(logical_of_tiles(tiles, &[2, 3], 4), want);
        // Nothing to index: no panic.
        assert_eq!(logical_of_tiles(vec![(0, 1.0)], &[2, 0], 4), vec![]);
    }
}
