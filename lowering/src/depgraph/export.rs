//! DOT and JSON export of the dependency graph (schema: `docs/depgraph.md`).

use super::{Access, DepGraph, DepKind, Node, NodeId};
use nnp_grammar::{Program, Span};
use petgraph::visit::EdgeRef;
use serde::Serialize;
use std::io::Write;

/// Version of the JSON schema written by [`DepGraph::write_json`].
pub const JSON_SCHEMA_VERSION: u32 = 1;

/// The graph could not be written.
#[derive(Debug, thiserror::Error, miette::Diagnostic)]
pub enum ExportError {
    #[error("cannot write the graph: {0}")]
    Io(#[from] std::io::Error),
    #[error("cannot encode the graph as JSON: {0}")]
    Json(#[from] serde_json::Error),
}

/// The trimmed first line of the text a span covers ("" when the span is outside the text).
fn span_text(text: &str, span: Span) -> &str {
    let s = text
        .get(span.start as usize..span.end as usize)
        .unwrap_or("");
    s.lines().next().unwrap_or("").trim()
}

/// DOT string literal contents.
fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            c if c.is_control() => {}
            c => out.push(c),
        }
    }
    out
}

fn edge_style(kind: DepKind) -> &'static str {
    match kind {
        DepKind::Pipeline => "color=black",
        DepKind::Raw => "color=blue, fontcolor=blue",
        DepKind::War => "color=orange, fontcolor=orange",
        DepKind::Waw => "color=red, fontcolor=red",
        DepKind::Fifo => "color=darkgreen, fontcolor=darkgreen, style=dashed",
    }
}

#[derive(Serialize)]
struct JsonDoc<'a> {
    schema: &'static str,
    version: u32,
    file: &'a str,
    target: &'a str,
    native: usize,
    chains: Vec<JsonChain>,
    nodes: Vec<JsonNode<'a>>,
    edges: Vec<JsonEdge<'a>>,
}

#[derive(Serialize)]
struct JsonChain {
    index: usize,
    iterations: u32,
    line: usize,
    first_node: usize,
    nodes_per_iteration: usize,
    depends_on: Vec<usize>,
}

#[derive(Serialize)]
struct JsonNetq<'a> {
    decl: &'a str,
    row: usize,
}

#[derive(Serialize)]
struct JsonNode<'a> {
    id: usize,
    chain: usize,
    iteration: u32,
    mnemonic: &'static str,
    mfu: Option<u8>,
    line: usize,
    text: &'a str,
    resolved: String,
    reads: &'a [Access],
    writes: &'a [Access],
    netq: Option<JsonNetq<'a>>,
}

#[derive(Serialize)]
struct JsonEdge<'a> {
    from: usize,
    to: usize,
    kind: DepKind,
    #[serde(flatten)]
    at: Option<Access>,
    #[serde(skip_serializing_if = "Option::is_none")]
    from_line: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    to_line: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    from_text: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    to_text: Option<&'a str>,
}

impl DepGraph {
    /// Graphviz DOT: one `cluster_` subgraph per chain (nested clusters per iteration when the
    /// chain is iterated), edges coloured by kind, dependence edges labelled `mem[addr]`.
    pub fn write_dot(&self, program: &Program, out: &mut dyn Write) -> Result<(), ExportError> {
        let lines = program.source.lines();
        let node_label = |n: &Node| {
            let mfu = n.mfu.map(|k| format!(", MFU{k}")).unwrap_or_default();
            let line = lines.line(n.span.start);
            format!("{}\\nline {line}{mfu}", escape(&n.resolved()))
        };
        writeln!(out, "digraph depgraph {{")?;
        writeln!(
            out,
            "  label=\"{}\"; labelloc=t; rankdir=TB; compound=true;",
            escape(&format!(
                "{} (target {})",
                program.source.name, program.target.name
            ))
        )?;
        writeln!(
            out,
            "  node [shape=box, fontname=\"monospace\", fontsize=10];"
        )?;
        writeln!(out, "  edge [fontname=\"monospace\", fontsize=9];")?;
        for (c, chain) in self.chains.iter().enumerate() {
            let line = lines.line(chain.span.start);
            let times = if chain.iterations > 1 {
                format!(" x{}", chain.iterations)
            } else {
                String::new()
            };
            writeln!(out, "  subgraph cluster_c{c} {{")?;
            writeln!(
                out,
                "    label=\"chain {c} (line {line}){times}\"; style=rounded;"
            )?;
            for t in 0..chain.iterations {
                let nested = chain.iterations > 1;
                if nested {
                    writeln!(out, "    subgraph cluster_c{c}_i{t} {{")?;
                    writeln!(out, "      label=\"iteration {t}\"; style=dashed;")?;
                }
                for id in chain.iteration(t) {
                    let n = &self.graph[id];
                    writeln!(out, "      n{} [label=\"{}\"];", id.index(), node_label(n))?;
                }
                if nested {
                    writeln!(out, "    }}")?;
                }
            }
            writeln!(out, "  }}")?;
        }
        for e in self.graph.edge_references() {
            let d = e.weight();
            let label = match (d.kind, d.at) {
                (DepKind::Pipeline | DepKind::Fifo, _) | (_, None) => String::new(),
                (_, Some(a)) => format!(", label=\"{}\"", escape(&a.to_string())),
            };
            writeln!(
                out,
                "  n{} -> n{} [{}{label}];",
                e.source().index(),
                e.target().index(),
                edge_style(d.kind)
            )?;
        }
        writeln!(out, "}}")?;
        Ok(())
    }

    /// The DOT text as a string.
    pub fn to_dot(&self, program: &Program) -> String {
        let mut buf = Vec::new();
        // Writing to a Vec cannot fail.
        let _ = self.write_dot(program, &mut buf);
        String::from_utf8_lossy(&buf).into_owned()
    }

    /// JSON (schema `nnpc-depgraph`, version [`JSON_SCHEMA_VERSION`], `docs/depgraph.md`).
    pub fn write_json(&self, program: &Program, out: &mut dyn Write) -> Result<(), ExportError> {
        let (text, lines) = (program.source.text.as_str(), program.source.lines());
        let line_of = |id: NodeId| lines.line(self.graph[id].span.start);
        let text_of = |id: NodeId| span_text(text, self.graph[id].span);
        let deps = self.chain_deps();
        let chains = self
            .chains
            .iter()
            .zip(deps)
            .enumerate()
            .map(|(index, (c, depends_on))| JsonChain {
                index,
                iterations: c.iterations,
                line: lines.line(c.span.start),
                first_node: c.first,
                nodes_per_iteration: c.per_iteration,
                depends_on,
            })
            .collect();
        let nodes = self
            .graph
            .node_indices()
            .map(|id| {
                let n = &self.graph[id];
                JsonNode {
                    id: id.index(),
                    chain: n.chain,
                    iteration: n.iteration,
                    mnemonic: n.instr.mnemonic(),
                    mfu: n.mfu,
                    line: line_of(id),
                    text: text_of(id),
                    resolved: n.resolved(),
                    reads: &n.reads,
                    writes: &n.writes,
                    netq: n.netq.map(|q| JsonNetq {
                        decl: program.decls.get(q.decl).map_or("", |d| d.name.as_str()),
                        row: q.row,
                    }),
                }
            })
            .collect();
        let edges = self
            .graph
            .edge_references()
            .map(|e| {
                let d = e.weight();
                let (a, b) = (e.source(), e.target());
                let dep = d.kind != DepKind::Pipeline;
                let raw = d.kind == DepKind::Raw;
                JsonEdge {
                    from: a.index(),
                    to: b.index(),
                    kind: d.kind,
                    at: d.at,
                    from_line: dep.then(|| line_of(a)),
                    to_line: dep.then(|| line_of(b)),
                    from_text: raw.then(|| text_of(a)),
                    to_text: raw.then(|| text_of(b)),
                }
            })
            .collect();
        let doc = JsonDoc {
            schema: "nnpc-depgraph",
            version: JSON_SCHEMA_VERSION,
            file: &program.source.name,
            target: &program.target.name,
            native: program.target.native,
            chains,
            nodes,
            edges,
        };
        serde_json::to_writer_pretty(&mut *out, &doc)?;
        writeln!(out)?;
        Ok(())
    }

    /// The JSON text as a string.
    pub fn to_json(&self, program: &Program) -> String {
        let mut buf = Vec::new();
        let _ = self.write_json(program, &mut buf);
        String::from_utf8_lossy(&buf).into_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dot_escaping() {
        assert_eq!(escape(r#"a"b\c"#), r#"a\"b\\c"#);
    }
}
