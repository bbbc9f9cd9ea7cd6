//! Reading the JSON form of version [`SWGRAPH_VERSION`] (written by `encode.rs`): the header's
//! fields (serde derive), then each row of `nodes`, `writes` and `checks` read straight into
//! the graph's types, the format and table numbers looked up in `formats` and `tables` (in any
//! order of the keys: the lists of rows are kept as text until the header is read). Node types
//! are inferred from the ops, in order. Every error names the list and the row it is in; the
//! graph is validated after (`validate.rs`).

use crate::swgraph::graph::WriteRecord;
use crate::swgraph::graph::{FiniteCheck, GraphError, OutputInfo, SWGRAPH_VERSION, SwGraph};
use crate::swgraph::node::{Node, Op, TileSlice, ValueId};
use crate::swgraph::validate::{header, infer_ty};
use nnp_grammar::{Decl, Span};
use nnp_numerics::{FloatFormat, Format};
use serde::Deserialize;
use serde::de::{self, DeserializeSeed, Deserializer, IgnoredAny, SeqAccess, Visitor};
use serde_json::value::RawValue;
use std::fmt;
use std::marker::PhantomData;

/// The fields of a file; the lists of rows as their text.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct File<'a> {
    version: u32,
    source: String,
    program_hash: String,
    target: String,
    target_hash: String,
    native: usize,
    storage: Float,
    output_storage: Float,
    formats: Vec<Format>,
    #[serde(default)]
    tables: Vec<String>,
    outputs: Vec<OutputInfo>,
    decls: Vec<Decl>,
    #[serde(borrow)]
    nodes: &'a RawValue,
    #[serde(borrow)]
    writes: &'a RawValue,
    #[serde(borrow, default)]
    checks: Option<&'a RawValue>,
}

/// The graph in `text` (of version [`SWGRAPH_VERSION`]), its types inferred, not yet validated.
pub(super) fn graph(text: &str) -> Result<SwGraph, GraphError> {
    let file: File = serde_json::from_str(text).map_err(|e| GraphError::Json(e.to_string()))?;
    if file.version != SWGRAPH_VERSION {
        return Err(GraphError::Version {
            found: file.version,
            expected: SWGRAPH_VERSION,
        });
    }
    let numbers = Numbers {
        formats: file.formats,
        tables: file.tables,
    };
    let ops = rows::<NodeRow>(text, file.nodes, &numbers)?;
    let writes = rows::<WriteRow>(text, file.writes, &numbers)?;
    let checks = match file.checks {
        Some(list) => rows::<CheckRow>(text, list, &numbers)?,
        None => Vec::new(),
    };
    let mut g = SwGraph {
        version: SWGRAPH_VERSION,
        source: file.source,
        program_hash: file.program_hash,
        target: file.target,
        target_hash: file.target_hash,
        native: file.native,
        storage: file.storage.0,
        output_storage: file.output_storage.0,
        nodes: Vec::with_capacity(ops.len()),
        outputs: file.outputs,
        decls: file.decls,
        writes,
        checks,
        planned: Default::default(),
    };
    // What the types are inferred against is checked first, as for a graph of version 2.
    header(&g)?;
    for (i, op) in ops.into_iter().enumerate() {
        let ty = infer_ty(&op, &g.nodes, g.native).map_err(|message| GraphError::Node {
            node: i,
            op: op.name(),
            message,
        })?;
        g.nodes.push(Node { op, ty });
    }
    Ok(g)
}

/// The rows of the list `list`, a part of `text`; an error's line is the file's.
fn rows<R: Row>(text: &str, list: &RawValue, cx: &Numbers) -> Result<Vec<R::Out>, GraphError> {
    let part = list.get();
    let mut de = serde_json::Deserializer::from_str(part);
    let read = List::<R>::new(cx)
        .deserialize(&mut de)
        .and_then(|rows| de.end().map(|()| rows));
    read.map_err(|e| {
        // serde_json counts lines and columns from the start of `part`, inside `text`.
        let offset = (part.as_ptr() as usize).saturating_sub(text.as_ptr() as usize);
        let before = text.get(..offset).unwrap_or("");
        let (line, column) = match e.line() {
            1 => (
                before.matches('\n').count() + 1,
                before.len() - before.rfind('\n').map_or(0, |k| k + 1) + e.column(),
            ),
            l => (before.matches('\n').count() + l, e.column()),
        };
        let message = e.to_string();
        let at = format!(" at line {} column {}", e.line(), e.column());
        let message = message.strip_suffix(&at).unwrap_or(&message);
        GraphError::Json(format!("{message} at line {line} column {column}"))
    })
}

/// A float format, written as its literal (`fp16`, `fp(5, 2, round = zero)`).
struct Float(FloatFormat);

impl<'de> Deserialize<'de> for Float {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        match Format::deserialize(d)? {
            Format::Float(f) => Ok(Float(f)),
            other => Err(de::Error::custom(format!(
                "`{other}` is not a float format"
            ))),
        }
    }
}

/// The formats and table files rows name by number.
struct Numbers {
    formats: Vec<Format>,
    tables: Vec<String>,
}

impl Numbers {
    fn format(&self, id: u32) -> Result<Format, String> {
        self.formats.get(id as usize).copied().ok_or_else(|| {
            format!(
                "format {id} is not in `formats` ({} formats, numbered from 0)",
                self.formats.len()
            )
        })
    }

    fn float(&self, id: u32) -> Result<FloatFormat, String> {
        match self.format(id)? {
            Format::Float(f) => Ok(f),
            other => Err(format!("format {id} (`{other}`) is not a float format")),
        }
    }

    fn table(&self, id: u32) -> Result<String, String> {
        self.tables.get(id as usize).cloned().ok_or_else(|| {
            format!(
                "table {id} is not in `tables` ({} tables, numbered from 0)",
                self.tables.len()
            )
        })
    }
}

/// One kind of row: what it reads into, and how.
trait Row {
    type Out;
    /// The list's name, for errors (`node 5`, `write 7`).
    const WHAT: &'static str;
    fn read<'de, A: SeqAccess<'de>>(
        f: &mut Fields<'_, A>,
        cx: &Numbers,
    ) -> Result<Self::Out, A::Error>;
}

/// A list of rows of kind `R`, read with the numbers `cx`.
struct List<'c, R> {
    cx: &'c Numbers,
    row: PhantomData<R>,
}

impl<'c, R> List<'c, R> {
    fn new(cx: &'c Numbers) -> Self {
        List {
            cx,
            row: PhantomData,
        }
    }
}

impl<'de, R: Row> DeserializeSeed<'de> for List<'_, R> {
    type Value = Vec<R::Out>;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_seq(self)
    }
}

impl<'de, R: Row> Visitor<'de> for List<'_, R> {
    type Value = Vec<R::Out>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        write!(f, "a list of {} rows", R::WHAT)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        let cx = self.cx;
        let mut out = Vec::new();
        while let Some(row) = seq.next_element_seed(RowSeed::<R> {
            cx,
            index: out.len(),
            row: PhantomData,
        })? {
            out.push(row);
        }
        Ok(out)
    }
}

/// Row `index` of a list of rows of kind `R`.
struct RowSeed<'c, R> {
    cx: &'c Numbers,
    index: usize,
    row: PhantomData<R>,
}

impl<'de, R: Row> DeserializeSeed<'de> for RowSeed<'_, R> {
    type Value = R::Out;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<R::Out, D::Error> {
        d.deserialize_seq(self)
    }
}

impl<'de, R: Row> Visitor<'de> for RowSeed<'_, R> {
    type Value = R::Out;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        write!(f, "{} {} as an array", R::WHAT, self.index)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<R::Out, A::Error> {
        let mut f = Fields {
            seq: &mut seq,
            what: R::WHAT,
            index: self.index,
        };
        let out = R::read(&mut f, self.cx)?;
        if f.seq.next_element::<IgnoredAny>()?.is_some() {
            return Err(f.error("has more fields than its kind's"));
        }
        Ok(out)
    }
}

/// The fields of one row, read in order.
struct Fields<'a, A> {
    seq: &'a mut A,
    what: &'static str,
    index: usize,
}

impl<'de, A: SeqAccess<'de>> Fields<'_, A> {
    fn error(&self, message: impl fmt::Display) -> A::Error {
        de::Error::custom(format!("{} {}: {message}", self.what, self.index))
    }

    fn next<T: Deserialize<'de>>(&mut self, field: &str) -> Result<T, A::Error> {
        match self.seq.next_element()? {
            Some(v) => Ok(v),
            None => Err(self.error(format!("has no `{field}`"))),
        }
    }

    /// A field that may be left out at the end of a row.
    fn last<T: Deserialize<'de>>(&mut self) -> Result<Option<T>, A::Error> {
        self.seq.next_element()
    }

    /// A number into a table, looked up.
    fn lookup<T>(
        &mut self,
        field: &str,
        f: impl FnOnce(u32) -> Result<T, String>,
    ) -> Result<T, A::Error> {
        let id: u32 = self.next(field)?;
        f(id).map_err(|e| self.error(format!("`{field}`: {e}")))
    }
}

/// The kinds of node, by their names in the rows (`Op::name`).
#[derive(Deserialize)]
#[serde(rename_all = "snake_case")]
enum Kind {
    Input,
    Weight,
    Zero,
    PadToTiles,
    Unpad,
    Round,
    Quantize,
    Concat,
    TiledMatVec,
    Binary,
    Unary,
    Output,
}

struct NodeRow;

impl Row for NodeRow {
    type Out = Op;
    const WHAT: &'static str = "node";

    fn read<'de, A: SeqAccess<'de>>(f: &mut Fields<'_, A>, cx: &Numbers) -> Result<Op, A::Error> {
        let kind: Kind = f.next("kind")?;
        let op = match kind {
            Kind::Input => Op::Input {
                name: f.next("name")?,
                shape: f.next("shape")?,
            },
            Kind::Weight => Op::Weight {
                name: f.next("name")?,
                shape: f.next("shape")?,
            },
            Kind::Zero => Op::Zero {
                shape: f.next("shape")?,
            },
            Kind::PadToTiles => Op::PadToTiles {
                src: f.next("src")?,
                layout: f.next("layout")?,
                pad: f.next("pad")?,
            },
            Kind::Unpad => Op::Unpad {
                src: f.next("src")?,
                len: f.next("len")?,
            },
            Kind::Round => Op::Round {
                src: f.next("src")?,
                format: f.lookup("format", |id| cx.float(id))?,
            },
            Kind::Quantize => Op::Quantize {
                src: f.next("src")?,
                format: f.lookup("format", |id| cx.format(id))?,
                axis: f.next("axis")?,
            },
            Kind::Concat => {
                let parts: Vec<(ValueId, u32, u32)> = f.next("parts")?;
                Op::Concat {
                    parts: parts
                        .into_iter()
                        .map(|(value, start, count)| TileSlice {
                            value,
                            start,
                            count,
                        })
                        .collect(),
                }
            }
            Kind::TiledMatVec => Op::TiledMatVec {
                x: f.next("x")?,
                w: f.next("w")?,
                rows: f.next("rows")?,
                cols: f.next("cols")?,
                accumulation: f.next("accumulation")?,
                vector_format: f.lookup("vector_format", |id| cx.format(id))?,
                matrix_format: f.lookup("matrix_format", |id| cx.format(id))?,
                output: f.lookup("output", |id| cx.float(id))?,
            },
            Kind::Binary => Op::Binary {
                op: f.next("op")?,
                a: f.next("a")?,
                b: f.next("b")?,
                format: f.lookup("format", |id| cx.float(id))?,
            },
            Kind::Unary => {
                let (op, src) = (f.next("op")?, f.next("src")?);
                let format = f.lookup("format", |id| cx.float(id))?;
                let table = match f.last::<u32>()? {
                    Some(id) => Some(cx.table(id).map_err(|e| f.error(format!("`table`: {e}")))?),
                    None => None,
                };
                Op::Unary {
                    op,
                    src,
                    format,
                    table,
                }
            }
            Kind::Output => Op::Output {
                name: f.next("name")?,
                row: f.next("row")?,
                src: f.next("src")?,
            },
        };
        Ok(op)
    }
}

struct WriteRow;

impl Row for WriteRow {
    type Out = WriteRecord;
    const WHAT: &'static str = "write";

    fn read<'de, A: SeqAccess<'de>>(
        f: &mut Fields<'_, A>,
        cx: &Numbers,
    ) -> Result<WriteRecord, A::Error> {
        Ok(WriteRecord {
            chain: f.next("chain")?,
            iteration: f.next("iteration")?,
            dst: f.next("dst")?,
            addr: f.next("addr")?,
            tiles: f.next("tiles")?,
            value: f.next("value")?,
            storage: f.lookup("storage", |id| cx.float(id))?,
            line: f.next("line")?,
            span: span(f)?,
        })
    }
}

struct CheckRow;

impl Row for CheckRow {
    type Out = FiniteCheck;
    const WHAT: &'static str = "check";

    fn read<'de, A: SeqAccess<'de>>(
        f: &mut Fields<'_, A>,
        _: &Numbers,
    ) -> Result<FiniteCheck, A::Error> {
        Ok(FiniteCheck {
            value: f.next("value")?,
            first_tile: f.next("first_tile")?,
            tiles: f.next("tiles")?,
            weight: f.next("weight")?,
            op: f.next("op")?,
            chain: f.next("chain")?,
            iteration: f.next("iteration")?,
            line: f.next("line")?,
            span: span(f)?,
        })
    }
}

/// A span's two fields, `start` and `end`.
fn span<'de, A: SeqAccess<'de>>(f: &mut Fields<'_, A>) -> Result<Span, A::Error> {
    Ok(Span {
        start: f.next("start")?,
        end: f.next("end")?,
    })
}
