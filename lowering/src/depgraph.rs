//! The dependency graph of a checked program (docs/language.md).
//!
//! One node per instruction per iteration (`v_rd`, `mv_mul`, each MFU op, each `v_wr`, `m_rd`,
//! `m_wr`; `s_wr` and `end_chain` move no data and get no node), in execution order, grouped by
//! chain and iteration. Edges:
//!
//! - **pipeline**: the data path inside one chain iteration (`v_rd -> mv_mul -> ops -> v_wr`,
//!   `m_rd -> m_wr`);
//! - **raw** / **war** / **waw**: ordering through registers, per tile address, each labelled with
//!   the memory and the address run it concerns. A WAW edge is only added when no read came
//!   between the two writes (otherwise RAW + WAR already order them). Edges between nodes of the
//!   same chain iteration are left out: the pipeline already orders them, except two `v_wr`s of
//!   one iteration that overlap, which a WAW edge orders (the later one is what stays);
//! - **fifo**: `netq` is a queue, not addressed memory: consecutive pops and consecutive pushes
//!   are ordered by fifo edges, and nothing flows from a push to a pop.
//!
//! Edges are built in one pass with a per-(memory, address) last-writer / readers-since-last-write
//! table, so building is linear in the number of accesses. Dependence edges that share source,
//! kind and memory and cover consecutive addresses are merged into one edge with a tile count.

use nnp_grammar::{ChainBody, Mem, OpKind, Program, Span};
use petgraph::Direction;
use petgraph::graph::{DiGraph, NodeIndex};
use petgraph::visit::EdgeRef;
use serde::{Serialize, Serializer};
use std::collections::HashMap;
use std::fmt;
use std::hash::{BuildHasherDefault, Hasher};

mod export;
mod html;
pub mod layout;

pub use export::{ExportError, JSON_SCHEMA_VERSION};
pub use html::{DRAWING_CSS, Drawing};
pub use nnp_grammar::LineIndex;

/// A node of the graph (petgraph index; equals the node's position in execution order).
pub type NodeId = NodeIndex<u32>;

/// What an instruction node does.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Instr {
    /// `v_rd`
    Read,
    /// `v_rd_2d`
    Read2d,
    /// `mv_mul`
    MvMul,
    /// An MFU op.
    Op(OpKind),
    /// `v_wr`
    Write,
    /// `m_rd`
    MatRead,
    /// `m_wr`
    MatWrite,
}

impl Instr {
    /// Base mnemonic (the `_inc` spelling is in the source text).
    pub fn mnemonic(self) -> &'static str {
        match self {
            Instr::Read => "v_rd",
            Instr::Read2d => "v_rd_2d",
            Instr::MvMul => "mv_mul",
            Instr::Op(k) => k.mnemonic(),
            Instr::Write => "v_wr",
            Instr::MatRead => "m_rd",
            Instr::MatWrite => "m_wr",
        }
    }
}

/// An address space. `dram` has two (semantics.md): vector registers (`v_rd`/`v_wr`) and
/// matrix tiles (`m_rd`), so matrix DRAM is its own space here.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Space {
    /// A memory of docs/language.md, addressed as the memory is (`mrf` in tiles, the rest in
    /// vector registers).
    Reg(Mem),
    /// DRAM addressed in N x N tiles by `m_rd`.
    DramTiles,
}

impl Space {
    /// Dense index for the slot table.
    fn key(self) -> u64 {
        match self {
            Space::DramTiles => 0,
            Space::Reg(Mem::Netq) => 1,
            Space::Reg(Mem::Dram) => 2,
            Space::Reg(Mem::Ivrf) => 3,
            Space::Reg(Mem::Mrf) => 4,
            Space::Reg(Mem::AsVrf(k)) => 8 + 2 * u64::from(k),
            Space::Reg(Mem::MulVrf(k)) => 9 + 2 * u64::from(k),
        }
    }
}

impl fmt::Display for Space {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Space::Reg(m) => m.fmt(f),
            Space::DramTiles => f.write_str("dram.tiles"),
        }
    }
}

impl Serialize for Space {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

/// A run of consecutive registers (or tiles): `addr .. addr + tiles`. For `netq`, `addr` and
/// `tiles` are 0.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
pub struct Access {
    #[serde(rename = "mem")]
    pub space: Space,
    pub addr: u32,
    pub tiles: u32,
}

impl Access {
    pub fn end(&self) -> u32 {
        self.addr.saturating_add(self.tiles)
    }
}

impl fmt::Display for Access {
    /// `ivrf[3]`, `ivrf[3..5]` (end exclusive), `netq`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self.space, self.tiles) {
            (Space::Reg(Mem::Netq), _) => f.write_str("netq"),
            (s, 1) => write!(f, "{s}[{}]", self.addr),
            (s, n) => write!(f, "{s}[{}..{}]", self.addr, self.addr + n),
        }
    }
}

/// The input or output row a netq pop or push moves.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct NetqRow {
    /// Index into `Program::decls`.
    pub decl: usize,
    pub row: usize,
}

/// An instruction executed in one iteration of a chain.
#[derive(Clone, Debug, PartialEq)]
pub struct Node {
    pub chain: usize,
    pub iteration: u32,
    pub instr: Instr,
    /// MFU the op was placed on (MFU ops only).
    pub mfu: Option<u8>,
    pub span: Span,
    /// Registers read, as runs of consecutive addresses (a 2-D window gives one run per row).
    pub reads: Vec<Access>,
    /// Registers written.
    pub writes: Vec<Access>,
    /// For a netq pop or push: the declaration row it moves.
    pub netq: Option<NetqRow>,
}

impl Node {
    /// Resolved text: mnemonic and the registers it touches, e.g. `vv_add asvrf0[8..10]`.
    pub fn resolved(&self) -> String {
        let mut s = self.instr.mnemonic().to_string();
        let accesses = if self.writes.is_empty() {
            &self.reads
        } else {
            &self.writes
        };
        for (i, a) in accesses.iter().enumerate() {
            s.push_str(if i == 0 { " " } else { ", " });
            s.push_str(&a.to_string());
        }
        s
    }
}

/// Kinds of edges.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum DepKind {
    /// Data path inside one chain iteration.
    Pipeline,
    /// Read after write: the source wrote what the target reads.
    Raw,
    /// Write after read: the target overwrites what the source read.
    War,
    /// Write after write with no read in between.
    Waw,
    /// netq order: consecutive pops, or consecutive pushes.
    Fifo,
}

impl DepKind {
    pub fn name(self) -> &'static str {
        match self {
            DepKind::Pipeline => "pipeline",
            DepKind::Raw => "raw",
            DepKind::War => "war",
            DepKind::Waw => "waw",
            DepKind::Fifo => "fifo",
        }
    }
}

/// An edge: its kind and, for raw/war/waw, the registers it concerns (for fifo, `netq`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Dep {
    pub kind: DepKind,
    pub at: Option<Access>,
}

/// Where a chain's nodes are.
#[derive(Clone, Debug, PartialEq)]
pub struct ChainNodes {
    pub iterations: u32,
    /// First node of iteration 0.
    pub first: usize,
    /// Nodes per iteration (iteration `t` starts at `first + t * per_iteration`).
    pub per_iteration: usize,
    pub span: Span,
}

impl ChainNodes {
    /// Node ids of iteration `t`.
    pub fn iteration(&self, t: u32) -> impl Iterator<Item = NodeId> + use<> {
        let start = self.first + t as usize * self.per_iteration;
        (start..start + self.per_iteration).map(NodeIndex::new)
    }
    /// All node ids of the chain.
    pub fn nodes(&self) -> impl Iterator<Item = NodeId> + use<> {
        let n = self.iterations as usize * self.per_iteration;
        (self.first..self.first + n).map(NodeIndex::new)
    }
}

/// The dependency graph of a program.
#[derive(Clone, Debug)]
pub struct DepGraph {
    pub graph: DiGraph<Node, Dep, u32>,
    /// Indexed by chain index.
    pub chains: Vec<ChainNodes>,
}

impl DepGraph {
    /// Build the graph of a checked program.
    pub fn build(program: &Program) -> DepGraph {
        Builder::new(program).run()
    }

    pub fn node(&self, id: NodeId) -> &Node {
        &self.graph[id]
    }

    pub fn node_count(&self) -> usize {
        self.graph.node_count()
    }

    pub fn edge_count(&self) -> usize {
        self.graph.edge_count()
    }

    /// Edges of one kind entering `id`, with their source nodes.
    fn edges_in(&self, id: NodeId, kind: DepKind) -> Vec<(NodeId, Dep)> {
        let mut v: Vec<_> = self
            .graph
            .edges_directed(id, Direction::Incoming)
            .filter(|e| e.weight().kind == kind)
            .map(|e| (e.source(), *e.weight()))
            .collect();
        v.sort_by_key(|(n, d)| (*n, d.at.map(|a| a.addr)));
        v
    }

    /// Edges of one kind leaving `id`, with their target nodes.
    fn edges_out(&self, id: NodeId, kind: DepKind) -> Vec<(NodeId, Dep)> {
        let mut v: Vec<_> = self
            .graph
            .edges_directed(id, Direction::Outgoing)
            .filter(|e| e.weight().kind == kind)
            .map(|e| (e.target(), *e.weight()))
            .collect();
        v.sort_by_key(|(n, d)| (*n, d.at.map(|a| a.addr)));
        v
    }

    /// What a read depends on: the writes that produced the registers node `id` reads, with the
    /// registers each one supplies. Registers not listed hold what the host loaded.
    pub fn producers(&self, id: NodeId) -> Vec<(NodeId, Dep)> {
        self.edges_in(id, DepKind::Raw)
    }

    /// What a write feeds: the reads of the registers node `id` wrote, before they are
    /// overwritten.
    pub fn consumers(&self, id: NodeId) -> Vec<(NodeId, Dep)> {
        self.edges_out(id, DepKind::Raw)
    }

    /// Nodes whose instruction starts at the given 1-based source line.
    pub fn nodes_at_line(&self, lines: &LineIndex, line: usize) -> Vec<NodeId> {
        self.graph
            .node_indices()
            .filter(|&n| lines.line(self.graph[n].span.start) == line)
            .collect()
    }

    /// For each chain, the earlier chains it depends on directly (any edge other than pipeline
    /// from one of their nodes to one of its nodes), sorted.
    pub fn chain_deps(&self) -> Vec<Vec<usize>> {
        let mut deps = vec![Vec::new(); self.chains.len()];
        for e in self.graph.edge_references() {
            let (a, b) = (self.graph[e.source()].chain, self.graph[e.target()].chain);
            if a != b {
                deps[b].push(a);
            }
        }
        for d in &mut deps {
            d.sort_unstable();
            d.dedup();
        }
        deps
    }

    /// Chains with no path to or from chain `c` (in either direction), sorted.
    pub fn independent_of(&self, c: usize) -> Vec<usize> {
        let deps = self.chain_deps();
        let n = deps.len();
        if c >= n {
            return Vec::new();
        }
        // Edges go from earlier to later chains, so one backward sweep finds the ancestors and
        // one forward sweep the descendants.
        let mut related = vec![false; n];
        related[c] = true;
        let mut ancestor = vec![false; n];
        ancestor[c] = true;
        for b in (0..=c).rev() {
            if ancestor[b] {
                for &a in &deps[b] {
                    ancestor[a] = true;
                }
            }
        }
        let mut descendant = vec![false; n];
        descendant[c] = true;
        for b in c + 1..n {
            descendant[b] = deps[b].iter().any(|&a| descendant[a]);
        }
        for i in 0..n {
            related[i] = ancestor[i] || descendant[i];
        }
        (0..n).filter(|&i| !related[i]).collect()
    }

    /// Every pair `(a, b)`, `a < b`, of chains with no path between them. Quadratic in the number
    /// of chains (bit sets): meant for programs of up to a few thousand chains.
    pub fn independent_pairs(&self) -> Vec<(usize, usize)> {
        let deps = self.chain_deps();
        let n = deps.len();
        let words = n.div_ceil(64);
        // reach[b]: bit a set when chain a reaches chain b (a <= b).
        let mut reach = vec![0u64; n * words];
        for b in 0..n {
            let (done, rest) = reach.split_at_mut(b * words);
            let row = &mut rest[..words];
            row[b / 64] |= 1 << (b % 64);
            for &a in &deps[b] {
                let src = &done[a * words..(a + 1) * words];
                for (r, s) in row.iter_mut().zip(src) {
                    *r |= s;
                }
            }
        }
        let mut pairs = Vec::new();
        for b in 0..n {
            let row = &reach[b * words..(b + 1) * words];
            for a in 0..b {
                if row[a / 64] & (1 << (a % 64)) == 0 {
                    pairs.push((a, b));
                }
            }
        }
        pairs.sort_unstable();
        pairs
    }

    /// True when there is a path from chain `a` to chain `b` or back.
    pub fn chains_dependent(&self, a: usize, b: usize) -> bool {
        a != b && !self.independent_of(a).contains(&b)
    }
}

/// Fast hasher for the (space, address) keys of the slot table.
#[derive(Default)]
struct KeyHasher(u64);

impl Hasher for KeyHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.write_u64(u64::from(b));
        }
    }
    fn write_u64(&mut self, n: u64) {
        self.0 = (self.0.rotate_left(5) ^ n).wrapping_mul(0x517c_c1b7_2722_0a95);
    }
}

/// What the builder knows about one register.
#[derive(Default)]
struct Slot {
    writer: Option<NodeId>,
    readers: Vec<NodeId>,
}

struct Builder<'p> {
    program: &'p Program,
    graph: DiGraph<Node, Dep, u32>,
    chains: Vec<ChainNodes>,
    slots: HashMap<u64, Slot, BuildHasherDefault<KeyHasher>>,
    /// Dependence edges of the current node before merging: (source, kind, space, address).
    pending: Vec<(NodeId, DepKind, Space, u32)>,
    /// First node of the current chain iteration: edges from nodes at or after it are skipped.
    iteration_start: NodeId,
    last_pop: Option<NodeId>,
    last_push: Option<NodeId>,
    pops: std::slice::Iter<'p, nnp_grammar::NetqSlot>,
    pushes: std::slice::Iter<'p, nnp_grammar::NetqSlot>,
}

impl<'p> Builder<'p> {
    fn new(program: &'p Program) -> Self {
        Builder {
            program,
            graph: DiGraph::default(),
            chains: Vec::with_capacity(program.chains.len()),
            slots: HashMap::default(),
            pending: Vec::new(),
            iteration_start: NodeIndex::new(0),
            last_pop: None,
            last_push: None,
            pops: program.pops.iter(),
            pushes: program.pushes.iter(),
        }
    }

    fn run(mut self) -> DepGraph {
        let program = self.program;
        for chain in &program.chains {
            let first = self.graph.node_count();
            for t in 0..chain.iterations {
                self.iteration_start = NodeIndex::new(self.graph.node_count());
                let node = |instr, mfu, span| Node {
                    chain: chain.index,
                    iteration: t,
                    instr,
                    mfu,
                    span,
                    reads: Vec::new(),
                    writes: Vec::new(),
                    netq: None,
                };
                match &chain.body {
                    ChainBody::Vector(v) => {
                        let width = v.width;
                        let instr = if v.read.window.is_some() {
                            Instr::Read2d
                        } else {
                            Instr::Read
                        };
                        let mut n = node(instr, None, v.read.span);
                        n.reads = runs(Space::Reg(v.read.src), &v.read.registers(t));
                        if v.read.src == Mem::Netq {
                            n.reads = vec![netq_access()];
                        }
                        let mut prev = self.add(n);
                        if let Some(m) = &v.mv_mul {
                            let mut n = node(Instr::MvMul, None, m.span);
                            let tiles = chain.rows * chain.cols;
                            n.reads = vec![range(Space::Reg(Mem::Mrf), m.addr.at(t), tiles)];
                            prev = self.add_after(prev, n);
                        }
                        for op in &v.ops {
                            let mut n = node(Instr::Op(op.kind), Some(op.mfu), op.span);
                            if let Some((mem, addr)) = op.operand {
                                n.reads = vec![range(Space::Reg(mem), addr.at(t), width)];
                            }
                            prev = self.add_after(prev, n);
                        }
                        for w in &v.writes {
                            let mut n = node(Instr::Write, None, w.span);
                            n.writes = if w.dst == Mem::Netq {
                                vec![netq_access()]
                            } else {
                                vec![range(Space::Reg(w.dst), w.addr.at(t), width)]
                            };
                            self.add_after(prev, n);
                        }
                    }
                    ChainBody::Matrix(m) => {
                        let mut n = node(Instr::MatRead, None, m.src_span);
                        n.reads = vec![range(tile_space(m.src), m.src_addr.at(t), m.tiles)];
                        let rd = self.add(n);
                        let mut n = node(Instr::MatWrite, None, m.dst_span);
                        n.writes = vec![range(tile_space(m.dst), m.dst_addr.at(t), m.tiles)];
                        self.add_after(rd, n);
                    }
                }
            }
            let count = self.graph.node_count() - first;
            self.chains.push(ChainNodes {
                iterations: chain.iterations,
                first,
                per_iteration: count.checked_div(chain.iterations as usize).unwrap_or(0),
                span: chain.span,
            });
        }
        DepGraph {
            graph: self.graph,
            chains: self.chains,
        }
    }

    /// Add `node` with a pipeline edge from `prev`.
    fn add_after(&mut self, prev: NodeId, node: Node) -> NodeId {
        let id = self.add(node);
        self.graph.add_edge(
            prev,
            id,
            Dep {
                kind: DepKind::Pipeline,
                at: None,
            },
        );
        id
    }

    /// Add a node and its dependence edges. Reads are processed before writes.
    fn add(&mut self, mut node: Node) -> NodeId {
        let id = NodeIndex::new(self.graph.node_count());
        let netq = Space::Reg(Mem::Netq);
        // Previous pop or push, for the fifo edge (added once the node exists).
        let mut fifo = None;
        if node.reads.first().is_some_and(|a| a.space == netq) {
            node.netq = self.pops.next().map(|s| NetqRow {
                decl: s.decl,
                row: s.row,
            });
            fifo = self.last_pop.replace(id);
        }
        if node.writes.first().is_some_and(|a| a.space == netq) {
            node.netq = self.pushes.next().map(|s| NetqRow {
                decl: s.decl,
                row: s.row,
            });
            fifo = self.last_push.replace(id);
        }
        for a in node.reads.iter().filter(|a| a.space != netq) {
            for addr in a.addr..a.end() {
                let slot = self.slots.entry(key(a.space, addr)).or_default();
                if let Some(w) = slot.writer
                    && w < self.iteration_start
                {
                    self.pending.push((w, DepKind::Raw, a.space, addr));
                }
                if slot.readers.last() != Some(&id) {
                    slot.readers.push(id);
                }
            }
        }
        for a in node.writes.iter().filter(|a| a.space != netq) {
            for addr in a.addr..a.end() {
                let slot = self.slots.entry(key(a.space, addr)).or_default();
                let start = self.iteration_start;
                if slot.readers.is_empty() {
                    // An earlier write of the register, also one of the same chain iteration:
                    // the pipeline does not order two `v_wr`s of one chain, and the later one
                    // is what the register holds.
                    if let Some(w) = slot.writer {
                        self.pending.push((w, DepKind::Waw, a.space, addr));
                    }
                } else {
                    let readers = slot.readers.iter().filter(|&&r| r < start);
                    self.pending
                        .extend(readers.map(|&r| (r, DepKind::War, a.space, addr)));
                    slot.readers.clear();
                }
                slot.writer = Some(id);
            }
        }
        let added = self.graph.add_node(node);
        debug_assert_eq!(added, id);
        if let Some(prev) = fifo {
            let at = Some(netq_access());
            self.graph.add_edge(
                prev,
                id,
                Dep {
                    kind: DepKind::Fifo,
                    at,
                },
            );
        }
        self.flush(id);
        id
    }

    /// Merge the pending edges of node `id` into address runs and add them.
    fn flush(&mut self, id: NodeId) {
        self.pending.sort_unstable();
        let mut i = 0;
        while i < self.pending.len() {
            let (src, kind, space, addr) = self.pending[i];
            let mut end = addr + 1;
            let mut j = i + 1;
            while let Some(&(s, k, sp, a)) = self.pending.get(j) {
                if (s, k, sp) != (src, kind, space) || a != end {
                    break;
                }
                end += 1;
                j += 1;
            }
            let at = Access {
                space,
                addr,
                tiles: end - addr,
            };
            self.graph.add_edge(src, id, Dep { kind, at: Some(at) });
            i = j;
        }
        self.pending.clear();
    }
}

fn key(space: Space, addr: u32) -> u64 {
    (space.key() << 32) | u64::from(addr)
}

fn netq_access() -> Access {
    Access {
        space: Space::Reg(Mem::Netq),
        addr: 0,
        tiles: 0,
    }
}

fn range(space: Space, addr: u32, tiles: u32) -> Access {
    Access { space, addr, tiles }
}

/// Matrix chains address `dram` in tiles.
fn tile_space(mem: Mem) -> Space {
    match mem {
        Mem::Dram => Space::DramTiles,
        m => Space::Reg(m),
    }
}

/// Registers (in read order) as runs of consecutive addresses.
fn runs(space: Space, regs: &[u32]) -> Vec<Access> {
    let mut out: Vec<Access> = Vec::new();
    for &r in regs {
        match out.last_mut() {
            Some(a) if a.end() == r => a.tiles += 1,
            _ => out.push(range(space, r, 1)),
        }
    }
    out
}

#[cfg(test)]
mod tests;
