//! Tests of `swgraph::plan`.
use super::*;
use crate::swgraph::{BinOp, BlockAxis, FiniteCheck, Node, SWGRAPH_VERSION};
use nnp_grammar::{Accumulation, Span};
use nnp_numerics::{FloatFormat, Format};

/// A side table's entries in node order.
fn entries<T: Clone>(m: &NodeMap<T>) -> Vec<T> {
    m.values().cloned().collect()
}

/// An order's node indices.
fn indices(order: &[ValueId]) -> Vec<usize> {
    order.iter().map(|v| v.index()).collect()
}

fn hand_graph(nodes: Vec<Node>) -> SwGraph {
    SwGraph {
        version: SWGRAPH_VERSION,
        source: "hand".into(),
        program_hash: String::new(),
        target: "hand".into(),
        target_hash: String::new(),
        native: 2,
        storage: FloatFormat::FP16,
        output_storage: FloatFormat::FP16,
        nodes,
        outputs: vec![],
        decls: vec![],
        writes: vec![],
        checks: vec![],
        planned: PlanCell::default(),
    }
}

fn node(op: Op) -> Node {
    Node {
        op,
        ty: Ty::Vector { tiles: 2 },
    }
}

fn input() -> Op {
    Op::Input {
        name: "x".into(),
        shape: vec![4],
    }
}

fn add(a: u32, b: u32) -> Op {
    Op::Binary {
        op: BinOp::Add,
        a: ValueId(a),
        b: ValueId(b),
        format: FloatFormat::FP16,
    }
}

fn quantize(src: u32) -> Op {
    Op::Quantize {
        src: ValueId(src),
        format: Format::FP16,
        axis: BlockAxis::VectorTile,
    }
}

fn product(x: u32, w: u32) -> Op {
    Op::TiledMatVec {
        x: ValueId(x),
        w: ValueId(w),
        rows: 1,
        cols: 1,
        accumulation: Accumulation::Exact,
        vector_format: Format::FP16,
        matrix_format: Format::FP16,
        output: FloatFormat::FP16,
    }
}

/// An element-wise op waits for the node that needs it, so the adds around a product come
/// together: 2 and 5 form one region at positions 4..6 after the product (4).
#[test]
fn schedule_gathers_element_wise_ops() {
    let graph = hand_graph(vec![
        node(input()),
        node(Op::Zero { shape: vec![4] }),
        node(add(0, 1)),
        node(quantize(0)),
        node(product(3, 1)),
        node(add(2, 4)),
        node(quantize(5)),
    ]);
    let plan = Plan::new(&graph);
    assert_eq!(
        entries(&plan.constant),
        [false, true, false, false, false, false, false]
    );
    // The constant is read by the add and by the product.
    assert_eq!(
        entries(&plan.keep),
        [false, true, false, false, false, false, false]
    );
    let s = &plan.schedule;
    assert_eq!(indices(&s.order), vec![0, 3, 1, 4, 2, 5, 6]);
    assert_eq!(s.regions, vec![4..6]);
    // The input's last reader is the add (position 4), the add's the add at 5.
    assert_eq!(s.last_use[ValueId(0)], 4);
    assert_eq!(s.last_use[ValueId(2)], 5);
    // The constant is read by the add too: no stack; the quantize only by the product.
    assert_eq!(entries(&plan.stacks), vec![None; 7]);
    assert_eq!(
        entries(&plan.vectors),
        [false, false, false, true, false, false, false]
    );
    assert_eq!(plan.weight_elements, 4);
}

/// Weight stacks only products read are planned, unless a check reads them; a checked
/// quantize is no candidate either.
#[test]
fn stacks_and_vectors() {
    let mut graph = hand_graph(vec![
        node(input()),
        node(Op::Zero { shape: vec![4] }),
        node(quantize(0)),
        node(product(2, 1)),
    ]);
    let plan = Plan::new(&graph);
    assert_eq!(entries(&plan.stacks), vec![None, Some((1, 1)), None, None]);
    assert_eq!(entries(&plan.vectors), [false, false, true, false]);
    for v in [1, 2] {
        graph.checks.push(FiniteCheck {
            value: ValueId(v),
            first_tile: 0,
            tiles: 2,
            weight: v == 1,
            op: "hand".into(),
            chain: 0,
            iteration: 0,
            line: 1,
            span: Span::new(0, 0),
        });
    }
    // The graph's own plan is the one of its first use; a clone plans anew.
    let planned = graph.plan().clone();
    assert_eq!(entries(&graph.clone().plan().stacks), vec![None; 4]);
    assert_eq!(*planned, Plan::new(&graph));
    assert!(planned.keep[ValueId(1)]);
    assert_eq!(entries(&planned.vectors), [false; 4]);
}

/// With products first, the products whose operands depend on no product (3 and 8, like an
/// LSTM's `W x_t`) come right after the operands of both; the product that reads another's
/// value (6, like `U h_t`) keeps its place.
#[test]
fn products_first_hoists_the_independent_products() {
    let graph = hand_graph(vec![
        node(input()),
        node(Op::Zero { shape: vec![4] }),
        node(quantize(0)),
        node(product(2, 1)),
        node(add(3, 0)),
        node(quantize(4)),
        node(product(5, 1)),
        node(quantize(0)),
        node(product(7, 1)),
    ]);
    let constant = NodeMap::from(vec![
        false, true, false, false, false, false, false, false, false,
    ]);
    assert_eq!(
        indices(&Schedule::new(&graph, &constant, true).order),
        vec![0, 2, 1, 7, 3, 8, 4, 5, 6]
    );
    // Without: graph order, the add waiting for the quantize that reads it and the constant
    // weights (1) for the first product.
    assert_eq!(
        indices(&Schedule::new(&graph, &constant, false).order),
        vec![0, 2, 1, 3, 4, 5, 6, 7, 8]
    );
}
