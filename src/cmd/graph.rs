//! `nnpc graph`: the dependency graph of a firmware file, as DOT, JSON or a web page, and queries
//! on it.

use super::output;
use nnp_lowering::depgraph::{Dep, DepGraph, LineIndex, NodeId};
use nnpc::{LoadError, Program};
use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;

/// Output format of the graph.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum GraphFormat {
    /// Graphviz DOT: one cluster per chain, edges coloured by kind.
    Dot,
    /// JSON, schema `nnpc-depgraph` version 1 (docs/depgraph.md).
    Json,
    /// A self-contained web page: the graph laid out, with pan, zoom, search and a clicked
    /// node's instruction, registers, producers and consumers (no Graphviz, no network).
    Html,
}

/// Build the dependency graph of a firmware file (docs/language.md) and write it as DOT, JSON or
/// a self-contained web page, or answer a query on it.
///
/// Nodes are instructions, one per iteration; edges are the pipeline inside a chain and
/// read-after-write (blue), write-after-read (orange) and write-after-write (red) ordering through
/// registers, each labelled with memory and address, plus netq order (green, dashed).
/// Exit status: 0 on success, 1 when the firmware has errors, 2 on unreadable input.
#[derive(clap::Args)]
#[command(after_help = "Examples:
  nnpc graph samples/lstm.nnp --format dot -o lstm.dot && dot -Tsvg lstm.dot -o lstm.svg
  nnpc graph samples/lstm.nnp --format html -o lstm.html     open it in a browser
  nnpc graph samples/lstm.nnp --format json | jq '.edges[] | select(.kind == \"raw\")'
  nnpc graph samples/conv3x3.nnp --target samples/targets/fp32.toml --format json -o g.json
  nnpc graph samples/lstm.nnp --producers 106     what feeds the reads on line 106
  nnpc graph samples/lstm.nnp --consumers 120     what reads the writes on line 120
  nnpc graph samples/gru.nnp --independent        pairs of chains with no path between them")]
pub struct Args {
    /// Output format of the graph (the queries answer in text).
    #[arg(
        long,
        value_enum,
        default_value_t = GraphFormat::Dot,
        conflicts_with_all = ["producers", "consumers", "independent"]
    )]
    pub format: GraphFormat,
    /// Write to this file instead of stdout.
    #[arg(short, long, value_name = "FILE")]
    pub output: Option<PathBuf>,
    #[command(flatten)]
    pub firmware: super::Firmware,
    /// Instead of the graph, list the writes that feed each instruction on this source line
    /// (a line where an instruction of a chain starts).
    #[arg(long, value_name = "LINE", conflicts_with_all = ["consumers", "independent"])]
    pub producers: Option<usize>,
    /// Instead of the graph, list the reads of what each instruction on this line writes.
    #[arg(long, value_name = "LINE", conflicts_with = "independent")]
    pub consumers: Option<usize>,
    /// Instead of the graph, list the pairs of chains with no path between them.
    #[arg(long)]
    pub independent: bool,
}

pub fn run(args: Args) -> miette::Result<ExitCode> {
    let out = match nnpc::load_program_with_warnings(&args.firmware.file, args.firmware.target()) {
        Ok(out) => out,
        Err(e @ LoadError::Firmware(_)) => {
            let code = e.exit_code();
            return Ok(output::report(&miette::Report::new(e), code));
        }
        Err(e) => return Err(e.into()),
    };
    let program = &out.program;
    let graph = DepGraph::build(program);
    let mut buf = Vec::new();
    if let Some(line) = args.producers {
        buf = query(program, &graph, line, true)?.into_bytes();
    } else if let Some(line) = args.consumers {
        buf = query(program, &graph, line, false)?.into_bytes();
    } else if args.independent {
        buf = independent(program, &graph).into_bytes();
    } else {
        let written = match args.format {
            GraphFormat::Dot => graph.write_dot(program, &mut buf),
            GraphFormat::Json => graph.write_json(program, &mut buf),
            GraphFormat::Html => graph.write_html(program, &mut buf),
        };
        written.map_err(super::fail)?;
    }
    match &args.output {
        Some(path) => {
            let reads = args.firmware.reads(program);
            super::write_output("-o", path, &buf, &reads)?;
            output::note(format!(
                "{}: written to {}\n",
                args.firmware.file.display(),
                path.display()
            ))?;
        }
        None => output::stdout(&buf)?,
    }
    Ok(ExitCode::SUCCESS)
}

/// `line N (chain C, iteration I) resolved-text`
fn describe(program: &Program, lines: &LineIndex, graph: &DepGraph, id: NodeId) -> String {
    let n = graph.node(id);
    let line = lines.line(n.span.start);
    let text = program
        .source
        .text
        .lines()
        .nth(line.saturating_sub(1))
        .unwrap_or("")
        .trim();
    let it = if graph.chains.get(n.chain).is_some_and(|c| c.iterations > 1) {
        format!(", iteration {}", n.iteration)
    } else {
        String::new()
    };
    format!(
        "line {line} (chain {}{it}): {}   [{text}]",
        n.chain,
        n.resolved()
    )
}

/// Producers (or consumers) of every node at `line`; an error naming the lines nearby that
/// hold instructions where none starts on `line`.
fn query(
    program: &Program,
    graph: &DepGraph,
    line: usize,
    producers: bool,
) -> miette::Result<String> {
    let lines = program.source.lines();
    let nodes = graph.nodes_at_line(lines, line);
    let mut s = String::new();
    if nodes.is_empty() {
        let flag = if producers { "producers" } else { "consumers" };
        return Err(miette::miette!(
            help = nearby_instructions(graph, lines, line),
            "--{flag} {line}: no instruction of a chain starts on line {line} of `{}`",
            program.source.name
        ));
    }
    for id in nodes {
        let _ = writeln!(s, "{}", describe(program, lines, graph, id));
        let edges: Vec<(NodeId, Dep)> = if producers {
            graph.producers(id)
        } else {
            graph.consumers(id)
        };
        let node = graph.node(id);
        if edges.is_empty() {
            let none = match (producers, node.reads.is_empty(), node.writes.is_empty()) {
                (true, true, _) => "reads no register",
                (true, false, _) => "reads only data the host loaded",
                (false, _, true) => "writes no register",
                (false, _, false) => "nothing reads what it writes",
            };
            let _ = writeln!(s, "    {none}");
        }
        for (other, dep) in edges {
            let at = dep.at.map(|a| a.to_string()).unwrap_or_default();
            let arrow = if producers { "<-" } else { "->" };
            let _ = writeln!(
                s,
                "    {arrow} {at:<16} {}",
                describe(program, lines, graph, other)
            );
        }
    }
    Ok(s)
}

/// The help of a query on `line`, where no instruction starts: the lines nearest to it,
/// before and after, where instructions do (two on each side at most).
fn nearby_instructions(graph: &DepGraph, lines: &LineIndex, line: usize) -> String {
    let starts: BTreeSet<usize> = graph
        .graph
        .node_weights()
        .map(|n| lines.line(n.span.start))
        .collect();
    let mut before: Vec<usize> = starts.range(..line).rev().take(2).copied().collect();
    before.reverse();
    let after: Vec<usize> = starts.range(line..).take(2).copied().collect();
    let list = |l: &[usize]| {
        l.iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join(" and ")
    };
    let lines_word = |l: &[usize]| if l.len() == 1 { "line" } else { "lines" };
    match (before.is_empty(), after.is_empty()) {
        (true, true) => "the program has no instruction in a chain".to_string(),
        (false, true) => format!(
            "the last instructions are on {} {}",
            lines_word(&before),
            list(&before)
        ),
        (true, false) => format!(
            "the first instructions are on {} {}",
            lines_word(&after),
            list(&after)
        ),
        (false, false) => format!(
            "instructions nearby are on {} {} before it and {} {} after it",
            lines_word(&before),
            list(&before),
            lines_word(&after),
            list(&after)
        ),
    }
}

/// Pairs of independent chains, with their first lines.
fn independent(program: &Program, graph: &DepGraph) -> String {
    let lines = program.source.lines();
    let line = |c: usize| graph.chains.get(c).map_or(0, |c| lines.line(c.span.start));
    let pairs = graph.independent_pairs();
    let mut s = String::new();
    let _ = writeln!(
        s,
        "{} of chains (no path between them):",
        output::count(pairs.len(), "independent pair")
    );
    for (a, b) in pairs {
        let _ = writeln!(
            s,
            "  chain {a} (line {}) || chain {b} (line {})",
            line(a),
            line(b)
        );
    }
    s
}
