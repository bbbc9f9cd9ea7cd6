//! The steps of a pass: what a session does at each place of its evaluation order, decided
//! once when it opens ([`Steps::new`]) from the graph's plan and the run's options, so that a
//! pass ([`super::pass`]) is a loop over them. Each kind of step runs in a module of its own:
//! a fused region (`region`), a weight stack or input prepared in one pass (`prepare`), a
//! node's own op and what becomes of its value (`value`), an output row (`output`); what a
//! pass holds besides its executor is in `pass_state`; a run of products together
//! (`products`: the stacked steps of passes of few items).

mod output;
mod pass_state;
mod prepare;
mod products;
mod region;
mod value;

pub(super) use output::OutputRows;
pub(super) use pass_state::Pass;
pub(super) use prepare::StackForm;
pub(super) use value::Keep;

use super::analysis::{
    concats_to_ints, extend_last_uses, peak_item_bytes, quantized_vectors, reads, written_values,
};
use crate::products::{bounded_stacks, chunked_stacks};
use crate::state::{Failure, Path};
use crate::{ExecOptions, fused, prepare as one_pass, quant};
use candle_core::DType;
use nnp_lowering::swgraph::{NodeMap, Op, Plan, Schedule, SwGraph, ValueId};
use std::collections::HashSet;

/// One step of a pass: the work at one place of the evaluation order, and the values nothing
/// after it reads, freed when it is done.
pub(super) struct Step {
    /// The node (a region's first).
    pub node: ValueId,
    pub work: Work,
    pub frees: Vec<ValueId>,
}

/// The kinds of work a step does.
pub(super) enum Work {
    /// Nothing: a link of a chain prepared with its stack, or a concat its `quantize` nodes
    /// read part by part (made by them if one needs it).
    Skip,
    /// A constant an earlier run computed (warm runs): handed back where it is traced.
    Kept(Keep),
    /// A run of element-wise MFU ops in one pass.
    Region(region::Region),
    /// A `quantize` straight to the integer kernel's integers, or its value where they do not
    /// fit.
    ToInts(quant::BfpInts, Keep),
    /// An input chain's value, in one pass from the host's input.
    Input(one_pass::InputChain, Keep),
    /// A constant weight stack, in one pass from the host's weights, in the form its products
    /// read.
    Stack(one_pass::Stack, StackForm, Keep),
    /// A row of an output.
    Output {
        name: String,
        row: usize,
        src: ValueId,
    },
    /// Consecutive products, none reading another's value, by weight stack and spec: on the
    /// integer kernel in one parallel pass, each group as one product over its vectors' items
    /// stacked (`Executor::products_together`).
    Products(Vec<Vec<(ValueId, Keep)>>),
    /// The node's op on its operands' values.
    Eval(Keep),
}

/// The steps of a cold run (the first, which computes the constants) and of a warm one
/// (which reuses them), with what follows from them.
pub(super) struct Steps {
    pub cold: Vec<Step>,
    pub warm: Vec<Step>,
    /// The warm steps of passes of at most [`STACKED_ITEMS`] items, where the graph has
    /// products of one weight stack that depend on no product (an LSTM's `W x_t`): in the
    /// products-first order, each such stack's products as one ([`Work::Products`]). At batch
    /// 1 a product of one item reads its whole stack for one vector; stacked, the stack is
    /// read once for every step's vector.
    pub stacked: Option<Vec<Step>>,
    /// Bytes per batch item of the values a run holds at once, at most ([`peak_item_bytes`]).
    pub item_bytes: usize,
}

/// Items of a pass, at most, that take the [`Steps::stacked`] steps: on the LSTM 1024 they
/// took 0.81 of the time at batch 1 and the same at 4, 1.07 at 8 (BENCHMARKS.md): with more
/// items each product has work enough for the pool, and the stacked values, held from the
/// start of the pass, crowd the caches.
pub(super) const STACKED_ITEMS: usize = 4;

/// What the steps of a session depend on besides its graph: the run's options, and whether
/// products take the integer kernel or run on a GPU.
pub(super) struct Context<'o> {
    pub opts: &'o ExecOptions,
    /// The values to hand back, where the session was opened for them ([`super::Session::recording`]).
    pub hand_back: Option<&'o [ValueId]>,
    pub int_products: bool,
    pub gpu: bool,
}

impl Steps {
    pub(super) fn new(graph: &SwGraph, plan: &Plan, cx: &Context) -> Steps {
        let constant = &plan.constant;
        // The values a run hands back or scans: every `v_wr`'s for traces, and those the
        // target's `nonfinite = "error"` checks. Each is made whole (never only inside a
        // prepared stack or a skipped concat); only a fused region's checked values stay in
        // its scratch rows, scanned there (`fused::RegionPass::run`). The plan leaves out the
        // checked ones already; the traced ones are left out here.
        let traced: HashSet<ValueId> = written_values(graph, cx.opts, cx.hand_back)
            .into_iter()
            .collect();
        let handed: HashSet<ValueId> = traced
            .iter()
            .copied()
            .chain(graph.checks.iter().map(|c| c.value))
            .collect();
        let mut keep = plan.keep.clone();
        let mut product_only = plan.stacks.clone();
        for &v in &traced {
            keep[v] |= constant[v];
            // On the integer kernel a traced stack is prepared as its products read it and
            // handed back restored from that form (`Executor::weights`); the float path's
            // arranged form gives nothing back.
            if !cx.int_products {
                product_only[v] = None;
            }
        }
        let mut schedule = match cx.opts.products_first {
            true => Schedule::new(graph, constant, true),
            false => plan.schedule.clone(),
        };
        // Every constant stack that only products read, kept or not (a product of constants
        // reads its stack once), is prepared in one pass; the kept ones may be kept as integers.
        let prepared = one_pass::plan(graph, &product_only, &handed);
        // On a GPU the vectors stay values there: none is quantized straight to host integers.
        let to_ints = match cx.gpu {
            true => NodeMap::filled(graph.nodes.len(), None),
            false => quantized_vectors(graph, &plan.vectors),
        };
        let through = concats_to_ints(graph, constant, &to_ints, &handed);
        extend_last_uses(graph, &mut schedule, &through);
        let item_bytes = peak_item_bytes(
            graph,
            &schedule.order,
            constant,
            &schedule.last_use,
            &traced,
        );
        let planner = Planner {
            graph,
            plan,
            ints: cx.int_products,
            traced: &traced,
            keep: &keep,
            as_ints: product_only
                .values()
                .zip(keep.values())
                .map(|(s, &k)| s.filter(|_| k))
                .collect(),
            arranged: chunked_stacks(graph, &prepared),
            bounded: bounded_stacks(graph),
            prepared,
            to_ints,
            through,
            schedule: &schedule,
            together: false,
        };
        // On a GPU every MFU op is a candle op of its own (`fused::MfuOp`'s `cuda_fwd`).
        let regions = match cx.opts.unfused || cx.gpu {
            true => Vec::new(),
            false => fused::regions(&schedule, &traced),
        };
        let cold = planner.steps(&regions, false);
        let warm = planner.steps(&regions, true);
        let stacked =
            (cx.int_products && !cx.gpu && !cx.opts.unstacked && shared_stacks(graph, plan))
                .then(|| {
                    let mut order = Schedule::new(graph, constant, true);
                    extend_last_uses(graph, &mut order, &planner.through);
                    let regions = match cx.opts.unfused {
                        true => Vec::new(),
                        false => fused::regions(&order, &traced),
                    };
                    let planner = Planner {
                        schedule: &order,
                        together: true,
                        ..planner
                    };
                    planner.steps(&regions, true)
                })
                .filter(|steps| {
                    let stacks = |s: &Step| match &s.work {
                        Work::Products(groups) => groups.iter().any(|g| g.len() > 1),
                        _ => false,
                    };
                    steps.iter().any(stacks)
                });
        Steps {
            cold,
            warm,
            stacked,
            item_bytes,
        }
    }
}

/// What the steps are made from: the graph's plan and the session's analyses of it, by node.
struct Planner<'a> {
    graph: &'a SwGraph,
    plan: &'a Plan,
    /// Whether products take the integer kernel (and the graph's native dimension allows it).
    ints: bool,
    traced: &'a HashSet<ValueId>,
    /// Constant values a warm run needs: the plan's and the traced ones.
    keep: &'a NodeMap<bool>,
    /// Kept constant values that only products read, as their matrix: `(rows, cols)` of those
    /// products. Kept as integers alone where the kernel can restore them (a quarter of the
    /// memory; `Executor::keep_as_ints`).
    as_ints: NodeMap<Option<(usize, usize)>>,
    /// The stacks, inputs and skipped links of the one-pass preparation.
    prepared: one_pass::Plan,
    /// For the float path, the stacks whose every product takes the chunked matmul with one
    /// chunk and dtype: that chunk and dtype.
    arranged: NodeMap<Option<(usize, DType)>>,
    /// The stacks whose every product takes the bounded matmul in one layout (per tile
    /// column or not): that layout.
    bounded: NodeMap<Option<bool>>,
    /// `quantize` nodes that only products read, as their vector, in a BFP format the integer
    /// kernel's integers come straight from ([`quant::BfpInts`]).
    to_ints: NodeMap<Option<quant::BfpInts>>,
    /// `concat` nodes that only such `quantize` nodes read: where the kernel runs, those
    /// quantize the concat's parts tile by tile (a convolution's window holds each pixel's
    /// tile several times) and the concat itself is made only if one of them needs its value.
    through: NodeMap<bool>,
    schedule: &'a Schedule,
    /// Whether warm steps run the products that read no other's value together
    /// ([`Work::Products`]).
    together: bool,
}

impl Planner<'_> {
    /// The steps of a pass in evaluation order: a cold one, or a `warm` one, which reuses the
    /// constants.
    fn steps(&self, regions: &[fused::Region], warm: bool) -> Vec<Step> {
        let order = &self.schedule.order;
        let mut regions = regions.iter().peekable();
        let mut steps = Vec::new();
        let mut pos = 0;
        while pos < order.len() {
            if let Some(r) = regions.next_if(|r| r.start == pos) {
                let frees = (r.start..r.end).flat_map(|p| self.frees(p)).collect();
                steps.push(Step {
                    node: order[pos],
                    work: Work::Region(region::Region::new(
                        self.plan,
                        &order[r.start..r.end],
                        r,
                        self.traced,
                    )),
                    frees,
                });
                pos = r.end;
                continue;
            }
            if warm
                && self.together
                && let Some((kept, products, end)) = self.product_run(pos)
            {
                // The run's constants do nothing in a warm pass but hand back their kept
                // values: before the products, which read none of the run's values.
                for (id, keep) in kept {
                    steps.push(Step {
                        node: id,
                        work: Work::Kept(keep),
                        frees: Vec::new(),
                    });
                }
                let frees = (pos..end)
                    .filter(|&p| !self.plan.constant[order[p]])
                    .flat_map(|p| self.frees(p))
                    .collect();
                steps.push(Step {
                    node: order[pos],
                    work: products,
                    frees,
                });
                pos = end;
                continue;
            }
            let id = order[pos];
            let work = self.work(id, warm);
            let frees = match work {
                // Nothing is done, so nothing is freed: the values stay to the pass's end.
                Work::Skip | Work::Kept(_) => Vec::new(),
                _ => self.frees(pos),
            };
            steps.push(Step {
                node: id,
                work,
                frees,
            });
            pos += 1;
        }
        steps
    }

    /// The work of node `id`, outside a region.
    fn work(&self, id: ValueId, warm: bool) -> Work {
        let keep = self.keep(id);
        if warm && self.plan.constant[id] {
            return Work::Kept(keep);
        }
        if self.prepared.skipped[id] || (self.ints && self.through[id]) {
            return Work::Skip;
        }
        // A traced constant is kept whole for the warm runs that hand it back.
        if let (true, Some(f), false) = (self.ints, &self.to_ints[id], keep.traced && keep.kept) {
            return Work::ToInts(*f, keep);
        }
        if let Op::Output { name, row, src } = &self.graph.node(id).op {
            return Work::Output {
                name: name.clone(),
                row: *row,
                src: *src,
            };
        }
        if let Some(chain) = &self.prepared.inputs[id] {
            return Work::Input(chain.clone(), keep);
        }
        let Some(stack) = &self.prepared.stacks[id] else {
            return Work::Eval(keep);
        };
        let bounded = self.bounded[id].filter(|_| self.as_ints[id].is_some());
        let form = match (self.ints, self.arranged[id]) {
            (true, _) => StackForm::Ints { bounded },
            (false, Some(key)) => StackForm::Arranged(key),
            (false, None) => StackForm::Float { bounded },
        };
        Work::Stack(stack.clone(), form, keep)
    }

    /// The run of products from position `pos` of a warm pass (constants between them
    /// included; none reading another's value): its constants, its products grouped by
    /// weight stack and spec ([`Work::Products`]), and the position after it; `None` for a
    /// run of fewer than two.
    #[allow(clippy::type_complexity)]
    fn product_run(&self, pos: usize) -> Option<(Vec<(ValueId, Keep)>, Work, usize)> {
        let order = &self.schedule.order;
        // Each group with its key (`stack_key`), in the order of their first products.
        let mut kept = Vec::new();
        let mut groups = Vec::<(Op, Vec<(ValueId, Keep)>)>::new();
        let mut end = pos;
        while let Some(&id) = order.get(end) {
            if self.plan.constant[id] {
                kept.push((id, self.keep(id)));
            } else if let Some(key) = stack_key(&self.graph.node(id).op)
                && matches!(self.work(id, true), Work::Eval(_))
                && !self
                    .graph
                    .node(id)
                    .op
                    .inputs()
                    .iter()
                    .any(|v| groups.iter().any(|(_, g)| g.iter().any(|(m, _)| m == v)))
            {
                let member = (id, self.keep(id));
                match groups.iter_mut().find(|(k, _)| *k == key) {
                    Some((_, g)) => g.push(member),
                    None => groups.push((key, vec![member])),
                }
            } else {
                break;
            }
            end += 1;
        }
        // Constants after the last product are left to the steps after the run.
        while end > pos && self.plan.constant[order[end - 1]] {
            end -= 1;
            kept.pop();
        }
        let groups: Vec<_> = groups.into_iter().map(|(_, g)| g).collect();
        let products: usize = groups.iter().map(Vec::len).sum();
        (products > 1).then_some((kept, Work::Products(groups), end))
    }

    /// What becomes of node `id`'s value.
    fn keep(&self, id: ValueId) -> Keep {
        let constant = self.plan.constant[id];
        Keep {
            traced: self.traced.contains(&id),
            checked: !self.plan.checks[id].is_empty(),
            constant,
            kept: self.keep[id] && constant,
            as_ints: self.as_ints[id],
        }
    }

    /// The values the node at position `pos` reads that nothing later reads.
    fn frees(&self, pos: usize) -> Vec<ValueId> {
        let id = self.schedule.order[pos];
        let mut vs: Vec<ValueId> = reads(self.graph, &self.through, id)
            .into_iter()
            .filter(|&v| self.schedule.last_use[v] == pos)
            .collect();
        vs.sort_unstable();
        vs.dedup();
        vs
    }
}

/// Whether two products that depend on the inputs read one weight stack (what the stacked
/// steps stack; without, they are not made).
fn shared_stacks(graph: &SwGraph, plan: &Plan) -> bool {
    let mut seen = HashSet::new();
    graph
        .nodes
        .iter()
        .enumerate()
        .any(|(i, node)| match &node.op {
            Op::TiledMatVec { w, .. } => !plan.constant[ValueId(i as u32)] && !seen.insert(*w),
            _ => false,
        })
}

/// A product's op with its vector left out: equal for the products of one weight stack and
/// spec; `None` for any other op.
fn stack_key(op: &Op) -> Option<Op> {
    let mut op = op.clone();
    match &mut op {
        Op::TiledMatVec { x, .. } => *x = ValueId(0),
        _ => return None,
    }
    Some(op)
}

/// What a step did: the profile's line for it and the nodes it counts; `None` for a step
/// that did nothing (it frees nothing either).
pub(super) type Done = Option<(&'static str, usize)>;

impl Work {
    /// Do the work of node `id` in `pass`.
    pub(super) fn run(&self, id: ValueId, pass: &mut Pass) -> Result<Done, Failure> {
        let i = id.index();
        let op_name = pass.ex.graph.nodes[i].op.name();
        Ok(match self {
            Work::Skip => None,
            Work::Kept(keep) => {
                pass.hand_kept(id, keep)?;
                None
            }
            Work::Region(region) => Some(region.run(pass)?),
            Work::ToInts(format, keep) => match pass.ex.quantize_to_ints(i, format)? {
                true => {
                    if keep.traced {
                        pass.trace_ints(id)?;
                    }
                    pass.ex.paths.insert((Path::QuantizedToInts, i));
                    Some(("quantize to ints", 1))
                }
                false => {
                    value::eval(id, keep, pass)?;
                    Some((op_name, 1))
                }
            },
            Work::Input(chain, keep) => {
                let t = pass.ex.rounded_input(chain)?;
                pass.store(id, t, keep)?;
                Some(("input", 1))
            }
            Work::Stack(stack, form, keep) => Some(prepare::stack(id, stack, *form, keep, pass)?),
            Work::Output { name, row, src } => {
                let t = pass.ex.value(*src)?;
                pass.outputs.put(name, *row, t)?;
                Some((op_name, 1))
            }
            Work::Products(groups) => Some(products::run(groups, pass)?),
            Work::Eval(keep) => {
                value::eval(id, keep, pass)?;
                Some((op_name, 1))
            }
        })
    }
}

#[cfg(test)]
impl Steps {
    /// The keeps of a first run's steps, by node.
    pub(super) fn keeps(&self) -> impl Iterator<Item = (ValueId, &Keep)> {
        self.cold.iter().filter_map(|s| match &s.work {
            Work::Kept(k) | Work::ToInts(_, k) | Work::Input(_, k) | Work::Eval(k) => {
                Some((s.node, k))
            }
            Work::Stack(_, _, k) => Some((s.node, k)),
            Work::Skip | Work::Region(_) | Work::Output { .. } | Work::Products(_) => None,
        })
    }

    /// The weight stacks a first run prepares in one pass.
    pub(super) fn stacks(&self) -> impl Iterator<Item = (ValueId, &one_pass::Stack)> {
        self.cold.iter().filter_map(|s| match &s.work {
            Work::Stack(stack, _, _) => Some((s.node, stack)),
            _ => None,
        })
    }

    /// How many input chains a first run computes in one pass.
    pub(super) fn inputs(&self) -> usize {
        let input = |s: &&Step| matches!(s.work, Work::Input(..));
        self.cold.iter().filter(input).count()
    }

    /// How many `quantize` nodes a first run quantizes straight to integers.
    pub(super) fn to_ints(&self) -> usize {
        let to_ints = |s: &&Step| matches!(s.work, Work::ToInts(..));
        self.cold.iter().filter(to_ints).count()
    }
}
