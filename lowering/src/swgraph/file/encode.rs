//! Writing the JSON form: the header's fields one per line, then each node, write record and
//! check as one array on a line of its own (docs/files.md, "Compiled graphs"). Formats and table
//! files are numbered by first use and written once, in `formats` and `tables`, before the
//! rows that name them by number.

use crate::swgraph::graph::{FiniteCheck, SWGRAPH_VERSION, SwGraph, WriteRecord};
use crate::swgraph::node::Op;
use nnp_numerics::{FloatFormat, Format};
use serde::Serialize;
use std::collections::HashMap;

/// The JSON form of `g`.
pub(super) fn graph(g: &SwGraph) -> String {
    // Serialising plain data with string keys into memory cannot fail.
    write(g).unwrap_or_default()
}

fn write(g: &SwGraph) -> Result<String, serde_json::Error> {
    let mut numbers = Numbers::default();
    let mut nodes = Lines::with_capacity(g.nodes.len() * 32);
    for node in &g.nodes {
        op(nodes.row(), &node.op, &mut numbers)?;
    }
    let mut writes = Lines::with_capacity(g.writes.len() * 48);
    for w in &g.writes {
        write_record(writes.row(), w, &mut numbers)?;
    }
    let mut checks = Lines::with_capacity(g.checks.len() * 56);
    for c in &g.checks {
        check(checks.row(), c)?;
    }
    let mut out = Vec::with_capacity(nodes.0.len() + writes.0.len() + checks.0.len() + 4096);
    out.extend_from_slice(format!("{{\n  \"version\": {SWGRAPH_VERSION}").as_bytes());
    let text = |key: &str, value: &str| -> Result<Vec<u8>, serde_json::Error> {
        Ok(format!(",\n  \"{key}\": {}", serde_json::to_string(value)?).into_bytes())
    };
    out.extend(text("source", &g.source)?);
    out.extend(text("program_hash", &g.program_hash)?);
    out.extend(text("target", &g.target)?);
    out.extend(text("target_hash", &g.target_hash)?);
    out.extend_from_slice(format!(",\n  \"native\": {}", g.native).as_bytes());
    out.extend(text("storage", &Format::Float(g.storage).to_string())?);
    out.extend(text(
        "output_storage",
        &Format::Float(g.output_storage).to_string(),
    )?);
    list(&mut out, "formats", &Lines::of(&numbers.formats)?);
    if !numbers.tables.is_empty() {
        list(&mut out, "tables", &Lines::of(&numbers.tables)?);
    }
    list(&mut out, "outputs", &Lines::of(&g.outputs)?);
    list(&mut out, "decls", &Lines::of(&g.decls)?);
    list(&mut out, "nodes", &nodes);
    list(&mut out, "writes", &writes);
    if !g.checks.is_empty() {
        list(&mut out, "checks", &checks);
    }
    out.extend_from_slice(b"\n}");
    // Every piece is serde_json's output or ASCII: UTF-8.
    Ok(String::from_utf8(out).unwrap_or_default())
}

/// `,\n  "key": [` then the lines, then `]`.
fn list(out: &mut Vec<u8>, key: &str, lines: &Lines) {
    out.extend_from_slice(format!(",\n  \"{key}\": [").as_bytes());
    if !lines.0.is_empty() {
        out.extend_from_slice(&lines.0);
        out.extend_from_slice(b"\n  ");
    }
    out.push(b']');
}

/// The row of `op` alone, its formats and table files numbered by `numbers`.
pub(super) fn row(op: &Op, numbers: &mut Numbers) -> Vec<u8> {
    let mut out = Vec::with_capacity(32);
    // Into memory, with string keys: cannot fail.
    let _ = self::op(
        Row {
            out: &mut out,
            empty: true,
        },
        op,
        numbers,
    );
    out
}

/// The numbers of the formats and table files rows name, in order of first use.
#[derive(Default)]
pub(super) struct Numbers {
    formats: Vec<Format>,
    format_ids: HashMap<Format, u32>,
    tables: Vec<String>,
    table_ids: HashMap<String, u32>,
}

impl Numbers {
    fn format(&mut self, f: Format) -> u32 {
        *self.format_ids.entry(f).or_insert_with(|| {
            self.formats.push(f);
            self.formats.len() as u32 - 1
        })
    }

    fn float(&mut self, f: FloatFormat) -> u32 {
        self.format(Format::Float(f))
    }

    fn table(&mut self, path: &str) -> u32 {
        if let Some(&id) = self.table_ids.get(path) {
            return id;
        }
        self.tables.push(path.to_string());
        let id = self.tables.len() as u32 - 1;
        self.table_ids.insert(path.to_string(), id);
        id
    }
}

/// Lines of a list: each `\n    ` then one compact JSON value, separated by commas.
struct Lines(Vec<u8>);

impl Lines {
    fn with_capacity(bytes: usize) -> Lines {
        Lines(Vec::with_capacity(bytes))
    }

    /// One line per item.
    fn of<T: Serialize>(items: &[T]) -> Result<Lines, serde_json::Error> {
        let mut lines = Lines::with_capacity(items.len() * 64);
        for item in items {
            lines.start();
            serde_json::to_writer(&mut lines.0, item)?;
        }
        Ok(lines)
    }

    fn start(&mut self) {
        if !self.0.is_empty() {
            self.0.push(b',');
        }
        self.0.extend_from_slice(b"\n    ");
    }

    /// A new line holding an array, filled by the returned [`Row`].
    fn row(&mut self) -> Row<'_> {
        self.start();
        Row {
            out: &mut self.0,
            empty: true,
        }
    }
}

/// One array being written; `]` is written when it is dropped.
struct Row<'a> {
    out: &'a mut Vec<u8>,
    empty: bool,
}

impl Row<'_> {
    fn item<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<&mut Self, serde_json::Error> {
        self.out.push(if self.empty { b'[' } else { b',' });
        self.empty = false;
        serde_json::to_writer(&mut *self.out, value)?;
        Ok(self)
    }
}

impl Drop for Row<'_> {
    fn drop(&mut self) {
        if self.empty {
            self.out.push(b'[');
        }
        self.out.push(b']');
    }
}

/// A node's row: `[kind, fields...]` (docs/swgraph.md's table of rows).
fn op(mut r: Row, op: &Op, n: &mut Numbers) -> Result<(), serde_json::Error> {
    r.item(op.name())?;
    match op {
        Op::Input { name, shape } | Op::Weight { name, shape } => {
            r.item(name)?.item(shape)?;
        }
        Op::Zero { shape } => {
            r.item(shape)?;
        }
        Op::PadToTiles { src, layout, pad } => {
            r.item(src)?.item(layout)?.item(pad)?;
        }
        Op::Unpad { src, len } => {
            r.item(src)?.item(len)?;
        }
        Op::Round { src, format } => {
            r.item(src)?.item(&n.float(*format))?;
        }
        Op::Quantize { src, format, axis } => {
            r.item(src)?.item(&n.format(*format))?.item(axis)?;
        }
        Op::Concat { parts } => {
            let parts: Vec<_> = parts.iter().map(|p| (p.value, p.start, p.count)).collect();
            r.item(&parts)?;
        }
        Op::TiledMatVec {
            x,
            w,
            rows,
            cols,
            accumulation,
            vector_format,
            matrix_format,
            output,
        } => {
            r.item(x)?
                .item(w)?
                .item(rows)?
                .item(cols)?
                .item(accumulation)?;
            r.item(&n.format(*vector_format))?
                .item(&n.format(*matrix_format))?
                .item(&n.float(*output))?;
        }
        Op::Binary { op, a, b, format } => {
            r.item(op)?.item(a)?.item(b)?.item(&n.float(*format))?;
        }
        Op::Unary {
            op,
            src,
            format,
            table,
        } => {
            r.item(op)?.item(src)?.item(&n.float(*format))?;
            if let Some(path) = table {
                r.item(&n.table(path))?;
            }
        }
        Op::Output { name, row, src } => {
            r.item(name)?.item(row)?.item(src)?;
        }
    }
    Ok(())
}

/// `[chain, iteration, dst, addr, tiles, value, storage, line, start, end]`.
fn write_record(mut r: Row, w: &WriteRecord, n: &mut Numbers) -> Result<(), serde_json::Error> {
    r.item(&w.chain)?.item(&w.iteration)?.item(&w.dst)?;
    r.item(&w.addr)?.item(&w.tiles)?.item(&w.value)?;
    r.item(&n.float(w.storage))?;
    r.item(&w.line)?.item(&w.span.start)?.item(&w.span.end)?;
    Ok(())
}

/// `[value, first_tile, tiles, weight, op, chain, iteration, line, start, end]`.
fn check(mut r: Row, c: &FiniteCheck) -> Result<(), serde_json::Error> {
    r.item(&c.value)?.item(&c.first_tile)?.item(&c.tiles)?;
    r.item(&c.weight)?
        .item(&c.op)?
        .item(&c.chain)?
        .item(&c.iteration)?;
    r.item(&c.line)?.item(&c.span.start)?.item(&c.span.end)?;
    Ok(())
}
