//! Validation of a software graph read from a file: a compiled graph is untrusted input, so
//! every field is checked (with checked arithmetic, and limits on every size, each error
//! naming the size and the limit) before anything acts on it: [`SwGraph::from_json`]
//! (`file.rs`) validates what it reads with [`SwGraph::validate`].

use super::graph::{GraphError, SwGraph};
use super::node::{BlockAxis, Node, Op, TileLayout, TileSlice, Ty, ValueId};
use nnp_grammar::{Decl, DeclKind};
use nnp_numerics::{FloatFormat, Format};

/// The most elements a value of a graph (a declaration, or a node's value for one batch
/// item) may have: the checker's limit on a declaration (2^36).
pub const MAX_VALUE_ELEMENTS: u64 = 1 << 36;

impl SwGraph {
    /// Check every field before anything acts on it ([`validate`](validate.rs)): every
    /// reference points to an earlier node of the right type, every type follows from its op,
    /// every declaration, value and format is one a run can hold.
    pub fn validate(&self) -> Result<(), GraphError> {
        graph(self)
    }
}

/// Check that every reference points to an earlier node of the right type and that every
/// type follows from its op.
pub(super) fn graph(g: &SwGraph) -> Result<(), GraphError> {
    header(g)?;
    for (i, node) in g.nodes.iter().enumerate() {
        let bad = |message: String| GraphError::Node {
            node: i,
            op: node.op.name(),
            message,
        };
        for v in node.op.inputs() {
            if v.index() >= i {
                return Err(bad(format!("reads {v}, which is not an earlier node")));
            }
        }
        let ty = infer_ty(&node.op, &g.nodes[..i], g.native).map_err(bad)?;
        if ty != node.ty {
            return Err(bad(format!(
                "declared type {:?} but the op gives {:?}",
                node.ty, ty
            )));
        }
        value_size(&ty, g.native).map_err(bad)?;
        formats(&node.op).map_err(bad)?;
    }
    for (i, o) in g.outputs.iter().enumerate() {
        if g.outputs[..i].iter().any(|p| p.name == o.name) {
            return Err(GraphError::Other(format!(
                "output `{}` is listed twice in the graph's outputs",
                o.name
            )));
        }
        let elements = o
            .shape
            .iter()
            .try_fold(1usize, |acc, &d| acc.checked_mul(d));
        if elements.is_none() || elements != o.rows.checked_mul(o.row_len) {
            return Err(GraphError::Other(format!(
                "output `{}` has shape {:?} but {} rows of {} values",
                o.name, o.shape, o.rows, o.row_len
            )));
        }
        self::elements(&o.shape)
            .map_err(|e| GraphError::Other(format!("output `{}`: {e}", o.name)))?;
    }
    let mut rows_made = std::collections::HashMap::new();
    for (id, name, row, src) in g.output_nodes() {
        if let Some(first) = rows_made.insert((name, row), id) {
            return Err(GraphError::Other(format!(
                "{first} and {id} both write row {row} of output `{name}`: a row has one \
                 value"
            )));
        }
        let info = g.outputs.iter().find(|o| o.name == name);
        let fits = info.is_some_and(|o| {
            row < o.rows
                && g.nodes[src.index()].ty
                    == (Ty::Logical {
                        shape: vec![o.row_len],
                    })
        });
        if !fits {
            return Err(GraphError::Other(format!(
                "{id} writes row {row} of output `{name}`, which the graph's outputs list \
                 has no room for (or the row has the wrong length)"
            )));
        }
    }
    for c in &g.checks {
        let tiles = g.nodes.get(c.value.index()).and_then(|n| n.ty.tiles());
        let end = u64::from(c.first_tile) + u64::from(c.tiles);
        if tiles.is_none_or(|t| end > u64::from(t)) {
            return Err(GraphError::Other(format!(
                "the non-finite check of line {} names tiles {}..{end} of {}, which it lacks",
                c.line, c.first_tile, c.value
            )));
        }
    }
    for w in &g.writes {
        float_format(&w.storage).map_err(|e| {
            GraphError::Other(format!(
                "write record of chain {} iteration {}: storage {e}",
                w.chain, w.iteration
            ))
        })?;
        match g.nodes.get(w.value.index()) {
            Some(n) if n.ty == (Ty::Vector { tiles: w.tiles }) => {}
            _ => {
                return Err(GraphError::Other(format!(
                    "write record of chain {} iteration {} names {} which is not a vector \
                     of {} tiles",
                    w.chain, w.iteration, w.value, w.tiles
                )));
            }
        }
    }
    Ok(())
}

/// What a graph's nodes are read against: its native dimension, storage formats (the output
/// storage holding the others) and declarations.
pub(super) fn header(g: &SwGraph) -> Result<(), GraphError> {
    native(g.native)?;
    float_format(&g.storage).map_err(|e| GraphError::Other(format!("storage: {e}")))?;
    float_format(&g.output_storage)
        .map_err(|e| GraphError::Other(format!("output storage: {e}")))?;
    // Every value an output can hold is one of the output storage (what its file type is
    // chosen by): it holds the load storage and every written vector's.
    let holds = |f: &FloatFormat| {
        let o = &g.output_storage;
        o.exp_bits >= f.exp_bits && o.mant_bits >= f.mant_bits && (o.subnormals || !f.subnormals)
    };
    if let Some(f) = std::iter::once(&g.storage)
        .chain(g.writes.iter().map(|w| &w.storage))
        .find(|f| !holds(f))
    {
        return Err(GraphError::OutputStorage {
            output: Format::Float(g.output_storage).to_string(),
            storage: Format::Float(*f).to_string(),
        });
    }
    decls(&g.decls)
}

/// A native dimension a graph may have (1 to 4096).
pub(super) fn native(n: usize) -> Result<(), GraphError> {
    if n == 0 || n > 4096 {
        return Err(GraphError::Other(format!(
            "native dimension {n} is out of range 1..=4096"
        )));
    }
    Ok(())
}

/// The type an op produces given the earlier nodes, or why it is ill-typed.
pub(crate) fn infer_ty(op: &Op, earlier: &[Node], n: usize) -> Result<Ty, String> {
    let ty = |v: ValueId| ty_of(earlier, v);
    let vector = |v: ValueId| -> Result<u32, String> {
        match ty(v)? {
            Ty::Vector { tiles } => Ok(*tiles),
            other => Err(format!("{v} must be a vector value, is {other:?}")),
        }
    };
    match op {
        Op::Input { shape, .. } | Op::Weight { shape, .. } | Op::Zero { shape } => {
            logical_ty(shape)
        }
        Op::PadToTiles { src, layout, .. } => padded_ty(earlier, src, layout, n),
        Op::Unpad { src, len } => {
            let tiles = vector(*src)?;
            if *len == 0 || *len > tiles as usize * n {
                return Err(format!("cannot keep {len} lanes of a {tiles}-tile vector"));
            }
            Ok(Ty::Logical { shape: vec![*len] })
        }
        Op::Round { src, format } => {
            float_format(format)?;
            match ty(*src)? {
                t @ (Ty::Vector { .. } | Ty::TileStack { .. }) => Ok(t.clone()),
                other => Err(format!("cannot round a {other:?} value")),
            }
        }
        Op::Quantize { src, axis, .. } => match (ty(*src)?, axis) {
            (t @ Ty::Vector { .. }, BlockAxis::VectorTile)
            | (t @ Ty::TileStack { .. }, BlockAxis::TileRow) => Ok(t.clone()),
            (t @ Ty::Vector { tiles }, BlockAxis::PaddedRow { tiles: row })
                if *row > 0 && tiles % row == 0 =>
            {
                Ok(t.clone())
            }
            (other, _) => Err(format!("cannot quantize a {other:?} value along {axis:?}")),
        },
        Op::Concat { parts } => concat_ty(earlier, parts),
        Op::TiledMatVec {
            x,
            w,
            rows,
            cols,
            output,
            ..
        } => {
            float_format(output).map_err(|e| format!("output {e}"))?;
            let xt = vector(*x)?;
            let Ty::TileStack { tiles: wt } = ty(*w)? else {
                return Err(format!("{w} must be a tile stack"));
            };
            let need = u64::from(*rows) * u64::from(*cols);
            if xt != *cols || u64::from(*wt) != need || *rows == 0 {
                return Err(format!(
                    "rows = {rows}, cols = {cols} need a {cols}-tile vector and {need} tiles, got \
                     {xt} and {wt}"
                ));
            }
            Ok(Ty::Vector { tiles: *rows })
        }
        Op::Binary { a, b, format, .. } => {
            float_format(format)?;
            let (ta, tb) = (vector(*a)?, vector(*b)?);
            if ta != tb {
                return Err(format!("operands of {ta} and {tb} tiles"));
            }
            Ok(Ty::Vector { tiles: ta })
        }
        Op::Unary { src, format, .. } => {
            float_format(format)?;
            Ok(Ty::Vector {
                tiles: vector(*src)?,
            })
        }
        Op::Output { src, .. } => match ty(*src)? {
            Ty::Logical { shape } if shape.len() == 1 => Ok(Ty::None),
            other => Err(format!(
                "an output row must be an unpadded row, is {other:?}"
            )),
        },
    }
}

/// The type of the earlier node `v`, or why `v` cannot be read.
fn ty_of(earlier: &[Node], v: ValueId) -> Result<&Ty, String> {
    earlier
        .get(v.index())
        .map(|node| &node.ty)
        .ok_or_else(|| format!("reads {v}, which is not an earlier node"))
}

/// A tile count that a value's type can hold (u32), computed without overflow.
fn tile_count(tiles: Option<usize>, what: &dyn Fn() -> String) -> Result<u32, String> {
    tiles
        .and_then(|t| u32::try_from(t).ok())
        .ok_or_else(|| format!("{} is more tiles than a value holds ({})", what(), u32::MAX))
}

/// The type of a logical value of `shape` (an input, weight or zero): non-empty, no zero
/// extent, its elements countable.
fn logical_ty(shape: &[usize]) -> Result<Ty, String> {
    if shape.is_empty() || shape.contains(&0) {
        return Err(format!(
            "shape {shape:?} must be non-empty with no zero extent"
        ));
    }
    if shape
        .iter()
        .try_fold(1usize, |a, &d| a.checked_mul(d))
        .is_none()
    {
        return Err(format!(
            "shape {shape:?} has more elements than memory can hold"
        ));
    }
    Ok(Ty::Logical {
        shape: shape.to_vec(),
    })
}

/// The type of the logical value `src` padded to whole tiles of `layout` at N = `n`.
fn padded_ty(earlier: &[Node], src: &ValueId, layout: &TileLayout, n: usize) -> Result<Ty, String> {
    let ty = |v: ValueId| ty_of(earlier, v);
    let Ty::Logical { shape } = ty(*src)? else {
        return Err(format!("{src} must be a logical value"));
    };
    let c = shape.last().copied().unwrap_or(1);
    let what = || format!("shape {shape:?} at N = {n}");
    match layout {
        TileLayout::Vector => {
            let rows = shape[..shape.len().saturating_sub(1)]
                .iter()
                .try_fold(1usize, |a, &d| a.checked_mul(d));
            let tiles = rows.and_then(|r| r.checked_mul(c.div_ceil(n)));
            Ok(Ty::Vector {
                tiles: tile_count(tiles, &what)?,
            })
        }
        TileLayout::Matrix => {
            if shape.len() != 2 {
                return Err(format!("a matrix must be 2-D, {src} has shape {shape:?}"));
            }
            let tiles = shape[0].div_ceil(n).checked_mul(c.div_ceil(n));
            Ok(Ty::TileStack {
                tiles: tile_count(tiles, &what)?,
            })
        }
    }
}

/// The type of the tiles of `parts` side by side: all vectors or all tile stacks.
fn concat_ty(earlier: &[Node], parts: &[TileSlice]) -> Result<Ty, String> {
    let ty = |v: ValueId| ty_of(earlier, v);
    let first = parts.first().ok_or("concat of nothing")?;
    let kind = ty(first.value)?.clone();
    let mut total = 0u32;
    for p in parts {
        let t = ty(p.value)?;
        let same_kind = matches!(
            (t, &kind),
            (Ty::Vector { .. }, Ty::Vector { .. }) | (Ty::TileStack { .. }, Ty::TileStack { .. })
        );
        let Some(tiles) = t.tiles().filter(|_| same_kind) else {
            return Err(format!("{} is not a value of the same tile kind", p.value));
        };
        if p.count == 0 || p.start as u64 + p.count as u64 > tiles as u64 {
            return Err(format!(
                "tiles {}..{} of {} are out of its {tiles} tiles",
                p.start,
                p.start as u64 + p.count as u64,
                p.value
            ));
        }
        total = total.checked_add(p.count).ok_or_else(|| {
            format!(
                "the parts add up to more tiles than a value holds ({})",
                u32::MAX
            )
        })?;
    }
    Ok(match kind {
        Ty::TileStack { .. } => Ty::TileStack { tiles: total },
        _ => Ty::Vector { tiles: total },
    })
}

/// A float format the numerics support (`FloatFormat`: `2 <= exp_bits <= 11`, `mant_bits <= 52`,
/// every such format embeds in f64), or why not.
fn float_format(f: &FloatFormat) -> Result<(), String> {
    if (2..=11).contains(&f.exp_bits) && f.mant_bits <= 52 {
        Ok(())
    } else {
        Err(format!(
            "format fp({}, {}) is not supported (exponent bits 2 to 11, mantissa bits 0 to 52)",
            f.exp_bits, f.mant_bits
        ))
    }
}

/// The most dimensions a declaration may have, and the largest dimension (the checker's).
const MAX_RANK: usize = 8;
const MAX_DIM: usize = 1 << 32;

/// Every declaration: a unique name, a shape the checker allows (1 to [`MAX_RANK`]
/// dimensions, each from 1 to 2^32, a matrix of 2, at most [`MAX_VALUE_ELEMENTS`] elements,
/// counted without overflow), a finite pad and a format a firmware can name.
fn decls(decls: &[Decl]) -> Result<(), GraphError> {
    for (i, d) in decls.iter().enumerate() {
        let bad =
            |message: String| GraphError::Other(format!("declaration `{}`: {message}", d.name));
        if d.name.is_empty() {
            return Err(GraphError::Other(format!("declaration {i} has no name")));
        }
        if decls[..i].iter().any(|e| e.name == d.name) {
            return Err(bad("declared twice".into()));
        }
        if d.shape.is_empty() || d.shape.len() > MAX_RANK {
            return Err(bad(format!(
                "shape {:?} has {} dimensions; a declaration has 1 to {MAX_RANK}",
                d.shape,
                d.shape.len()
            )));
        }
        if let Some(dim) = d.shape.iter().find(|&&n| n == 0 || n > MAX_DIM) {
            return Err(bad(format!(
                "dimension {dim} of shape {:?} is out of range 1..=2^32",
                d.shape
            )));
        }
        if d.kind == DeclKind::Matrix && d.shape.len() != 2 {
            return Err(bad(format!(
                "a matrix has 2 dimensions, shape {:?}",
                d.shape
            )));
        }
        elements(&d.shape).map_err(bad)?;
        if !d.pad.is_finite() {
            return Err(bad(format!("pad {} is not finite", d.pad)));
        }
        if let Some(f) = &d.format {
            format_literal(f).map_err(bad)?;
        }
    }
    Ok(())
}

/// The elements of `shape`, counted without overflow, at most [`MAX_VALUE_ELEMENTS`].
fn elements(shape: &[usize]) -> Result<u64, String> {
    let n = shape
        .iter()
        .try_fold(1u64, |p, &d| p.checked_mul(u64::try_from(d).ok()?));
    match n {
        Some(n) if n <= MAX_VALUE_ELEMENTS => Ok(n),
        _ => Err(format!(
            "shape {shape:?} has {} elements, more than the limit of {MAX_VALUE_ELEMENTS} (2^36)",
            n.map_or("2^64 or more".to_string(), |n| n.to_string())
        )),
    }
}

/// A value of type `ty` at native dimension `n` holds at most [`MAX_VALUE_ELEMENTS`]
/// elements per batch item.
fn value_size(ty: &Ty, n: usize) -> Result<(), String> {
    let n = n as u64;
    let per_item = match ty {
        Ty::Logical { shape } => return elements(shape).map(|_| ()),
        Ty::Vector { tiles } => u64::from(*tiles).checked_mul(n),
        Ty::TileStack { tiles } => u64::from(*tiles).checked_mul(n * n),
        Ty::None => Some(0),
    };
    match per_item {
        Some(e) if e <= MAX_VALUE_ELEMENTS => Ok(()),
        _ => Err(format!(
            "its value holds {} elements per item, more than the limit of \
             {MAX_VALUE_ELEMENTS} (2^36)",
            per_item.map_or("2^64 or more".to_string(), |e| e.to_string())
        )),
    }
}

/// The graph's host values and outputs agree with its declarations (which host data
/// loading and seeded random data go by): each `Input` and `Weight` node names a declaration
/// of its kind and shape, each output an output declaration of its shape. Checked on a graph
/// read from a file ([`SwGraph::from_json`]); a graph built in memory may carry no
/// declarations.
pub(super) fn declared(g: &SwGraph) -> Result<(), GraphError> {
    for (i, node) in g.nodes.iter().enumerate() {
        host_value(&node.op, &g.decls).map_err(|message| GraphError::Node {
            node: i,
            op: node.op.name(),
            message,
        })?;
    }
    for o in &g.outputs {
        let declared = g.decls.iter().find(|d| d.name == o.name);
        if declared.is_none_or(|d| d.kind != DeclKind::Output || d.shape != o.shape) {
            return Err(GraphError::Other(format!(
                "output `{}` of shape {:?} has no output declaration of that shape",
                o.name, o.shape
            )));
        }
    }
    Ok(())
}

/// An `Input` or `Weight` node names a declaration of its kind and shape.
fn host_value(op: &Op, decls: &[Decl]) -> Result<(), String> {
    match op {
        Op::Input { name, shape } | Op::Weight { name, shape } => {
            let input = matches!(op, Op::Input { .. });
            let fits = decls.iter().find(|d| d.name == *name).is_some_and(|d| {
                let kind = match d.kind {
                    DeclKind::Input => input,
                    DeclKind::Matrix | DeclKind::Vector => !input,
                    DeclKind::Output => false,
                };
                kind && d.shape == *shape
            });
            if !fits {
                let kind = if input {
                    "an input"
                } else {
                    "a matrix or vector"
                };
                return Err(format!(
                    "`{name}` of shape {shape:?} is not {kind} declaration of that shape"
                ));
            }
            Ok(())
        }
        _ => Ok(()),
    }
}

/// Every format of `op` that its type does not check is one a firmware can name.
fn formats(op: &Op) -> Result<(), String> {
    match op {
        Op::Quantize { format, .. } => format_literal(format),
        Op::TiledMatVec {
            vector_format,
            matrix_format,
            ..
        } => {
            format_literal(vector_format)?;
            format_literal(matrix_format)
        }
        _ => Ok(()),
    }
}

/// `f` is a format a firmware can name: its literal reads back to it (so every field is in
/// the range the literal's parser checks).
fn format_literal(f: &Format) -> Result<(), String> {
    let text = f.to_string();
    match text.parse::<Format>() {
        Ok(back) if back == *f => Ok(()),
        _ => Err(format!(
            "format `{text}` is not one a firmware can name (its fields are out of range)"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The limit on a value's elements, by hand: 2^18 x 2^18 = 2^36 is the limit itself;
    /// one more row passes it; 2^32 x 2^32 overflows u64 and is refused, not wrapped.
    #[test]
    fn sizes_are_counted_without_overflow_and_bounded() {
        assert_eq!(elements(&[1 << 18, 1 << 18]), Ok(1 << 36));
        let e = elements(&[(1 << 18) + 1, 1 << 18]).unwrap_err();
        assert!(
            e.contains("68719738880 elements, more than the limit of 68719476736"),
            "{e}"
        );
        let e = elements(&[1 << 32, 1 << 32]).unwrap_err();
        assert!(e.contains("2^64 or more elements"), "{e}");
        // A vector of 2^29 tiles of 128 lanes is 2^36 lanes; of 2^29 + 1 tiles, more.
        assert!(value_size(&Ty::Vector { tiles: 1 << 29 }, 128).is_ok());
        assert!(
            value_size(
                &Ty::Vector {
                    tiles: (1 << 29) + 1
                },
                128
            )
            .is_err()
        );
        assert!(value_size(&Ty::TileStack { tiles: u32::MAX }, 4096).is_err());
    }

    /// A format whose literal reads back to it is accepted; one with a field out of the
    /// parser's range (a 1000-bit mantissa) is refused.
    #[test]
    fn formats_must_be_ones_a_firmware_can_name() {
        for lit in [
            "bfp(mant = 8, exp_bits = 5, round = even)",
            "mx6",
            "fp(5, 2)",
            "bf16",
        ] {
            let f: Format = lit.parse().expect(lit);
            assert_eq!(format_literal(&f), Ok(()), "{lit}");
        }
        let Ok(Format::Bfp(mut b)) = "bfp(mant = 8)".parse::<Format>() else {
            panic!("bfp parses");
        };
        b.mant = 1000;
        let e = format_literal(&Format::Bfp(b)).unwrap_err();
        assert!(e.contains("is not one a firmware can name"), "{e}");
    }
}
