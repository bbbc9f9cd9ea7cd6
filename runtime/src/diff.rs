//! Hardware vs software: compare two sets of outputs bit for bit and say where they differ.
//!
//! Concordance is bit equality of the values (any two NaNs are equal, whatever their payloads),
//! and a hardware value must be a value of the storage format: one that is not (an f32 dump's
//! value between two fp16 values, an fp16 value that bf16 does not hold, an f64 value that f32
//! does not hold) is a mismatch, never rounded into one. For elements that differ the report
//! gives the distance in units in the last place of the storage format, and for the first few
//! the output name, logical index, native tile and lane, and the firmware line of the `v_wr`
//! that produced the element.
//!
//! A whole comparison with a dump ([`Dump`]) is a [`Comparison`]: the software graph run over
//! the batch in chunks, each chunk compared as it is done, and the explain search.

mod builder;
mod compare;
mod dump;
mod heatmap;
pub mod html;
mod map;
pub mod nonfinite;
mod report;

use crate::host::Outputs;
pub use builder::DiffBuilder;
pub use compare::{CompareError, Comparison, ExplainPairs, Measure, Meter};
pub use dump::{Dump, DumpError};
pub use map::{Grid, MAP_BINS, MismatchMap};
use nnp_grammar::Program;
pub use report::{DiffError, DiffReport, Mismatch, OutputDiff, bucket_label, number};

/// Compare `software` against `hardware` for every output of `program`: one piece of a
/// [`DiffBuilder`].
pub fn diff_outputs(
    program: &Program,
    hardware: &Outputs,
    software: &Outputs,
    first: usize,
) -> Result<DiffReport, DiffError> {
    let mut diff = DiffBuilder::new(program, first)?;
    diff.add(0, hardware, software)?;
    Ok(diff.finish())
}

#[cfg(test)]
mod tests;
