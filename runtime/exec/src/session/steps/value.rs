//! A node's own op, and what becomes of a value a step made: traced, scanned, kept for warm
//! runs, kept as integers alone, or held until its last reader.

use super::pass_state::Pass;
use crate::state::Failure;
use crate::{WrittenValue, finite};
use candle_core::{Device, Tensor};
use nnp_lowering::swgraph::ValueId;

/// What becomes of a node's value, decided when the session opens.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(in crate::session) struct Keep {
    /// Handed back in the execution's written values (`keep_writes`, `keep_values`).
    pub traced: bool,
    /// Scanned for NaN and infinity (`nonfinite = "error"`).
    pub checked: bool,
    /// The node is constant: a first run's scan of it counts for every later run.
    pub constant: bool,
    /// A constant value warm runs read: the session keeps it.
    pub kept: bool,
    /// A kept constant that only products read, as their matrix `(rows, cols)`: kept as the
    /// kernel's integers alone where it can restore them (`Executor::keep_as_ints`).
    pub as_ints: Option<(usize, usize)>,
}

/// Evaluate node `id`'s op and store its value.
pub(super) fn eval(id: ValueId, keep: &Keep, pass: &mut Pass) -> Result<(), Failure> {
    let t = pass.ex.eval(id.index())?;
    pass.store(id, t, keep)
}

impl Pass<'_> {
    /// Keep the value `t` of `id` for the trace.
    pub(in crate::session) fn trace(&mut self, id: ValueId, t: &Tensor) -> candle_core::Result<()> {
        self.written.insert(id, to_written(t)?);
        Ok(())
    }

    /// Hand back the value of `id`, quantized straight to the kernel's integers: restored
    /// from them, its bits.
    pub(in crate::session) fn trace_ints(&mut self, id: ValueId) -> Result<(), Failure> {
        let Some(Some(xi)) = self.ex.vectors.ints.get(&id) else {
            return Err(crate::internal("a traced vector without its integers").into());
        };
        let (batch, data) = (xi.batch(), xi.restore());
        let lanes = data.len() / batch.max(1);
        self.written.insert(id, WrittenValue { batch, lanes, data });
        Ok(())
    }

    /// Hand back the value `t` of `id` a step made: traced, and scanned by its checks (a
    /// constant's findings count for every later run).
    pub(in crate::session) fn hand(
        &mut self,
        id: ValueId,
        t: &Tensor,
        keep: &Keep,
    ) -> candle_core::Result<()> {
        if keep.traced {
            self.trace(id, t)?;
        }
        if keep.checked {
            let found = match keep.constant {
                true => &mut self.const_found,
                false => &mut self.found,
            };
            let first = self.ex.items.start;
            finite::scan(self.ex.graph, id, &self.plan.checks[id], t, first, found)?;
        }
        Ok(())
    }

    /// Hand back the constant `id` an earlier run kept (its checks ran then): its value, or
    /// a weight stack restored from the form its products read.
    pub(in crate::session) fn hand_kept(
        &mut self,
        id: ValueId,
        keep: &Keep,
    ) -> Result<(), Failure> {
        if !keep.traced {
            return Ok(());
        }
        let t = match &self.kept[id] {
            Some(t) => t.clone(),
            None => self.ex.weights(id)?,
        };
        self.written.insert(id, to_written(&t)?);
        Ok(())
    }

    /// Store the value `t` of `id`: handed back, then kept as integers alone, or held (and
    /// kept for the session where warm runs read it).
    pub(in crate::session) fn store(
        &mut self,
        id: ValueId,
        t: Tensor,
        keep: &Keep,
    ) -> Result<(), Failure> {
        self.hand(id, &t, keep)?;
        if let Some(dims) = keep.as_ints
            && self.ex.keep_as_ints(id, &t, dims)?
        {
            return Ok(());
        }
        if keep.kept {
            self.consts.push((id, t.clone()));
        }
        self.ex.values[id] = Some(t);
        Ok(())
    }
}

fn to_written(t: &Tensor) -> candle_core::Result<WrittenValue> {
    let dims = t.dims().to_vec();
    let batch = dims.first().copied().unwrap_or(1);
    let data: Vec<f64> = t.flatten_all()?.to_device(&Device::Cpu)?.to_vec1()?;
    Ok(WrittenValue {
        batch,
        lanes: data.len() / batch.max(1),
        data,
    })
}
