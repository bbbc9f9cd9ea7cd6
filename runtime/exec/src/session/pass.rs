//! One pass of a session's graph over some items of a batch: its steps in order
//! ([`super::steps`]), each freeing what nothing later reads.

use super::steps::{OutputRows, Pass, STACKED_ITEMS, Step};
use super::{Part, Session};
use crate::state::{Caches, Executor, Failure, Paths, VectorCaches, counts, tally};
use crate::{ExecError, short};
use nnp_host::HostData;
use nnp_lowering::swgraph::SwGraph;
use std::collections::HashMap;
use std::ops::Range;

impl Session<'_> {
    /// One pass of the graph over the items `items` of `data`, with the session's `caches`.
    pub(super) fn run_items(
        &self,
        data: &HostData,
        items: Range<usize>,
        caches: &mut Caches,
    ) -> Result<Part, ExecError> {
        let graph: &SwGraph = &self.graph;
        if let Some(gpu) = &self.gpu {
            gpu.bind_to_thread()?;
        }
        let batch = items.len();
        let mut pass = Pass {
            ex: Executor {
                graph,
                data,
                items,
                dev: self.dev.clone(),
                native: graph.native,
                values: self.consts.clone(),
                constant: &self.plan.constant,
                rounded: &self.rounded,
                caches,
                vectors: VectorCaches::default(),
                int_products: self.int_products,
                paths: Paths::new(),
                gpu: self.gpu.as_deref(),
                prof: std::env::var_os("NNPC_EXEC_PROFILE").map(|_| Vec::new()),
            },
            plan: &self.plan,
            kept: &self.consts,
            outputs: OutputRows::new(graph, batch),
            written: HashMap::new(),
            found: Default::default(),
            const_found: Default::default(),
            fused_found: Default::default(),
            consts: Vec::new(),
        };
        let steps = match (self.warm, &self.steps.stacked) {
            (true, Some(stacked)) if batch <= STACKED_ITEMS => stacked,
            (true, _) => &self.steps.warm,
            (false, _) => &self.steps.cold,
        };
        for step in steps {
            run_step(step, &mut pass)?;
        }
        let Pass {
            ex,
            outputs,
            written,
            mut found,
            const_found,
            fused_found,
            consts,
            ..
        } = pass;
        if let Some(prof) = &ex.prof {
            for (name, secs, count) in prof {
                eprintln!(
                    "profile: {name:>14} {count:>6} nodes {:>10.3} ms",
                    secs * 1e3
                );
            }
            eprintln!("profile: items {:?}: {}", ex.items, counts(&ex.paths));
        }
        found.merge(fused_found);
        Ok(Part {
            outputs: outputs.finish()?,
            written,
            found,
            const_found,
            paths: ex.paths,
            consts,
        })
    }
}

/// Do `step`, then free what nothing later reads and count its time.
fn run_step(step: &Step, pass: &mut Pass) -> Result<(), ExecError> {
    let t0 = std::time::Instant::now();
    let done = step.work.run(step.node, pass).map_err(|e| match e {
        Failure::Candle(c) => ExecError::Tensor {
            node: step.node.index(),
            op: pass.ex.graph.nodes[step.node.index()].op.name(),
            message: short(&c),
        },
        Failure::Exec(x) => x,
    })?;
    if let Some((line, count)) = done {
        for &v in &step.frees {
            pass.ex.values[v] = None;
        }
        tally(&mut pass.ex.prof, line, t0, count);
    }
    Ok(())
}
