//! The dependency graph as a self-contained web page (`nnpc graph --format html`) and as an
//! SVG drawing of some of its nodes (the neighbourhood of a divergent `v_wr` in `nnpc diff
//! --report`). The layout is computed here ([`super::layout`]); the page's script
//! (`graph.js`, hand-written, no library) only pans, zooms, searches and shows a clicked
//! node's instruction, source line, registers, producers and consumers.

use super::layout::layered;
use super::{DepGraph, DepKind, ExportError, Instr, Node, NodeId};
use crate::html::{escape, page, script_json};
use nnp_grammar::Program;
use petgraph::Direction;
use petgraph::visit::EdgeRef;
use std::collections::{BTreeSet, HashMap};
use std::fmt::Write as _;

/// A node's box and the gaps between boxes, in SVG units.
const BOX_W: usize = 190;
const BOX_H: usize = 34;
const GAP_X: usize = 16;
const GAP_Y: usize = 44;
/// Characters of a node's label before it is cut (the whole text is in its tooltip).
const LABEL_CHARS: usize = 30;

/// The page's script and style.
const SCRIPT: &str = include_str!("graph.js");
const CSS: &str = include_str!("graph.css");

/// The class of a node's box: what kind of instruction it is.
fn node_class(n: &Node) -> &'static str {
    match n.instr {
        Instr::Read | Instr::Read2d => "rd",
        Instr::MvMul => "mv",
        Instr::Op(_) => "op",
        Instr::Write => "wr",
        Instr::MatRead | Instr::MatWrite => "mat",
    }
}

fn cut(s: &str, chars: usize) -> String {
    match s.char_indices().nth(chars) {
        Some((i, _)) => format!("{}…", &s[..i]),
        None => s.to_string(),
    }
}

/// An SVG drawing and its size.
pub struct Drawing {
    pub svg: String,
    pub width: usize,
    pub height: usize,
}

impl DepGraph {
    /// The nodes that feed `node` through its incoming edges (pipeline, raw and fifo: the data
    /// it depends on), back `levels` levels, at most `max` of them; with `node`, sorted.
    pub fn feeders(&self, node: NodeId, levels: usize, max: usize) -> Vec<NodeId> {
        let mut seen = BTreeSet::from([node]);
        let mut frontier = vec![node];
        for _ in 0..levels {
            let mut next = Vec::new();
            for &v in &frontier {
                for e in self.graph.edges_directed(v, Direction::Incoming) {
                    let data = matches!(
                        e.weight().kind,
                        DepKind::Pipeline | DepKind::Raw | DepKind::Fifo
                    );
                    if data && seen.len() < max && seen.insert(e.source()) {
                        next.push(e.source());
                    }
                }
            }
            frontier = next;
        }
        seen.into_iter().collect()
    }

    /// The `v_wr` node of chain `chain`'s iteration `iteration` at source line `line` (a
    /// trace record's instruction).
    pub fn write_node(
        &self,
        program: &Program,
        chain: usize,
        iteration: u32,
        line: usize,
    ) -> Option<NodeId> {
        let c = self.chains.get(chain)?;
        let iteration = (iteration < c.iterations).then_some(iteration)?;
        c.iteration(iteration).find(|&id| {
            let n = &self.graph[id];
            n.instr == Instr::Write && program.line(n.span) == line
        })
    }

    /// The SVG drawing of `nodes` (node ids) and the edges between them, laid out in layers;
    /// `focus` drawn highlighted. Each node is a `<g class="node" id="nI">`.
    pub fn svg(&self, program: &Program, nodes: &[NodeId], focus: Option<NodeId>) -> Drawing {
        let mut ids: Vec<NodeId> = nodes.to_vec();
        ids.sort();
        ids.dedup();
        let index: HashMap<NodeId, usize> = ids.iter().enumerate().map(|(i, &v)| (v, i)).collect();
        let mut edges = Vec::new();
        for &v in &ids {
            for e in self.graph.edges_directed(v, Direction::Outgoing) {
                if let Some(&j) = index.get(&e.target()) {
                    edges.push((index[&v], j, e.weight()));
                }
            }
        }
        let pairs: Vec<(usize, usize)> = edges.iter().map(|&(a, b, _)| (a, b)).collect();
        let layout = layered(ids.len(), &pairs);
        let mut per_layer = vec![0usize; layout.layers];
        for &l in &layout.layer {
            per_layer[l] += 1;
        }
        let step_x = BOX_W + GAP_X;
        let width = (layout.width * step_x).max(step_x) + GAP_X;
        let height = layout.layers * (BOX_H + GAP_Y) + GAP_Y;
        // Each layer centred.
        let at = |i: usize| {
            let l = layout.layer[i];
            let x = GAP_X + (layout.width - per_layer[l]) * step_x / 2 + layout.column[i] * step_x;
            (x, GAP_Y / 2 + l * (BOX_H + GAP_Y))
        };
        let mut svg = String::with_capacity(ids.len() * 400 + edges.len() * 120);
        let _ = write!(
            svg,
            "<svg xmlns=\"http://www.w3.org/2000/svg\" class=\"depgraph\" width=\"{width}\" \
             height=\"{height}\" viewBox=\"0 0 {width} {height}\"><g class=\"vp\">"
        );
        svg.push_str("<g class=\"edges\">");
        for &(a, b, dep) in &edges {
            let ((xa, ya), (xb, yb)) = (at(a), at(b));
            let (x1, y1, x2, y2) = (xa + BOX_W / 2, ya + BOX_H, xb + BOX_W / 2, yb);
            let bend = (y2.saturating_sub(y1) / 2).max(GAP_Y / 2);
            let title = match dep.at {
                Some(acc) => format!("{} {acc}", dep.kind.name()),
                None => dep.kind.name().to_string(),
            };
            let _ = write!(
                svg,
                "<path class=\"e {}\" data-f=\"{}\" data-t=\"{}\" d=\"M{x1} {y1}C{x1} {} {x2} {} {x2} {y2}\"><title>{}</title></path>",
                dep.kind.name(),
                ids[a].index(),
                ids[b].index(),
                y1 + bend,
                y2.saturating_sub(bend),
                escape(&title)
            );
        }
        svg.push_str("</g><g class=\"nodes\">");
        for (i, &id) in ids.iter().enumerate() {
            let n = &self.graph[id];
            let (x, y) = at(i);
            let resolved = n.resolved();
            let line = program.line(n.span);
            let mfu = n.mfu.map(|k| format!(" MFU{k}")).unwrap_or_default();
            let focused = if Some(id) == focus { " focus" } else { "" };
            let _ = write!(
                svg,
                "<g class=\"node {}{focused}\" id=\"n{}\" data-line=\"{line}\" transform=\"translate({x},{y})\">\
                 <title>{}&#10;line {line}: {}</title><rect width=\"{BOX_W}\" height=\"{BOX_H}\" rx=\"4\"/>\
                 <text x=\"6\" y=\"14\">{}</text><text class=\"sub\" x=\"6\" y=\"28\">line {line} · chain {}.{}{mfu}</text></g>",
                node_class(n),
                id.index(),
                escape(&resolved),
                escape(program.source.line_text(n.span.start)),
                escape(&cut(&resolved, LABEL_CHARS)),
                n.chain,
                n.iteration,
            );
        }
        svg.push_str("</g></g></svg>");
        Drawing { svg, width, height }
    }

    /// The whole graph as a self-contained interactive page: the drawing, a search box (a
    /// name, an instruction or a line number), and a panel with the clicked node's
    /// instruction, source line, registers, producers and consumers. The page's URL may say
    /// `#node=I` (select node I) or `#search=TEXT`.
    pub fn to_html(&self, program: &Program) -> String {
        let all: Vec<NodeId> = self.graph.node_indices().collect();
        let drawing = self.svg(program, &all, None);
        let nodes: Vec<serde_json::Value> = all
            .iter()
            .map(|&id| {
                let n = &self.graph[id];
                let regs = |a: &[super::Access]| {
                    a.iter()
                        .map(ToString::to_string)
                        .collect::<Vec<_>>()
                        .join(", ")
                };
                serde_json::json!([
                    n.chain,
                    n.iteration,
                    program.line(n.span),
                    n.resolved(),
                    program.source.line_text(n.span.start),
                    regs(&n.reads),
                    regs(&n.writes),
                ])
            })
            .collect();
        let edges: Vec<serde_json::Value> = self
            .graph
            .edge_references()
            .map(|e| {
                let d = e.weight();
                let at = d.at.map(|a| a.to_string()).unwrap_or_default();
                serde_json::json!([e.source().index(), e.target().index(), d.kind.name(), at])
            })
            .collect();
        let data = serde_json::json!({ "nodes": nodes, "edges": edges }).to_string();
        let title = format!(
            "{}: dependency graph on {}",
            program.source.name, program.target.name
        );
        let mut body = String::with_capacity(drawing.svg.len() + data.len() + 2048);
        let _ = writeln!(
            body,
            "<header><b>{}</b> <span class=\"mono\">target {} (N = {})</span> · {} nodes, {} edges, \
             {} chains <input id=\"search\" type=\"search\" placeholder=\"search: instruction, register or line\" \
             autocomplete=\"off\"> <span id=\"hits\"></span> <span class=\"keys\">drag to pan, wheel to zoom, \
             click a node; edges: <i class=\"k pipeline\">pipeline</i> <i class=\"k raw\">raw</i> \
             <i class=\"k war\">war</i> <i class=\"k waw\">waw</i> <i class=\"k fifo\">fifo</i></span></header>",
            escape(&program.source.name),
            escape(&program.target.name),
            program.target.native,
            self.node_count(),
            self.edge_count(),
            self.chains.len()
        );
        body.push_str("<main><div id=\"view\">");
        body.push_str(&drawing.svg);
        body.push_str("</div><aside id=\"panel\"><p>Click a node to see its instruction, source line, registers, producers and consumers.</p></aside></main>\n");
        body.push_str("<script type=\"application/json\" id=\"graph-data\">");
        body.push_str(&script_json(&data));
        body.push_str("</script>");
        page(&title, &format!("{DRAWING_CSS}{CSS}"), &body, SCRIPT)
    }

    /// [`to_html`](Self::to_html) written to `out`.
    pub fn write_html(
        &self,
        program: &Program,
        out: &mut dyn std::io::Write,
    ) -> Result<(), ExportError> {
        out.write_all(self.to_html(program).as_bytes())?;
        Ok(())
    }
}

/// The style of a drawing on any page (the diff report draws a neighbourhood with it).
pub const DRAWING_CSS: &str = include_str!("drawing.css");
