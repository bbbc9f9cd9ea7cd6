//! Machine state the checker simulates: the scalar registers in force, who last wrote each
//! register (for uninitialised reads, dead writes and unread declarations), the pad lanes each
//! register holds (followed in `pads.rs`) and the netq queues.

use crate::program::{Mem, OpKind, Span};
use std::collections::HashMap;

/// Scalar control registers in force.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Scalars {
    pub rows: u32,
    pub cols: u32,
    pub win_w: u32,
    pub win_h: u32,
    pub pitch: u32,
    /// `s_wr iterations, K` waiting for the next chain.
    pub iterations: Option<(u32, Span)>,
}

/// A register address space. `dram` has two: vector registers and matrix tiles.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Space(pub usize);

impl Space {
    /// The space of a memory (`tiles` selects dram's matrix-tile space). None for netq.
    pub fn of(mem: Mem, tiles: bool) -> Option<Space> {
        Some(Space(match mem {
            Mem::Netq => return None,
            Mem::Dram if tiles => 1,
            Mem::Dram => 0,
            Mem::Ivrf => 2,
            Mem::Mrf => 3,
            Mem::AsVrf(k) => 4 + 2 * k as usize,
            Mem::MulVrf(k) => 5 + 2 * k as usize,
        }))
    }
}

/// Something that puts values in registers: a declaration the host loads, or a write
/// instruction (one per source line, shared by all unrolled copies and iterations).
#[derive(Clone, Debug)]
pub struct Writer {
    pub span: Span,
    /// The declaration whose data this writer holds (a declaration itself, or an `m_wr` copying
    /// a declared matrix).
    pub decl: Option<usize>,
    pub is_decl: bool,
    /// Some register holding this writer's value was read.
    pub used: bool,
    /// The first write that replaced one of its values (for the dead-write message).
    pub overwritten_by: Option<Span>,
}

/// Writer of each register, per space (0 = nothing yet).
#[derive(Default)]
pub struct Regs {
    spaces: Vec<Vec<u32>>,
    pub writers: Vec<Writer>,
    by_span: HashMap<Span, u32>,
}

impl Regs {
    pub fn new() -> Self {
        Regs {
            spaces: Vec::new(),
            // Index 0 is "uninitialised".
            writers: vec![Writer {
                span: Span::default(),
                decl: None,
                is_decl: false,
                used: true,
                overwritten_by: None,
            }],
            by_span: HashMap::new(),
        }
    }

    pub fn decl_writer(&mut self, decl: usize, span: Span) -> u32 {
        self.writers.push(Writer {
            span,
            decl: Some(decl),
            is_decl: true,
            used: false,
            overwritten_by: None,
        });
        (self.writers.len() - 1) as u32
    }

    /// The writer of a write instruction (same id for every unrolled copy of the line).
    pub fn instr_writer(&mut self, span: Span) -> u32 {
        if let Some(&w) = self.by_span.get(&span) {
            return w;
        }
        self.writers.push(Writer {
            span,
            decl: None,
            is_decl: false,
            used: false,
            overwritten_by: None,
        });
        let w = (self.writers.len() - 1) as u32;
        self.by_span.insert(span, w);
        w
    }

    fn slot(&mut self, space: Space, reg: u32) -> &mut u32 {
        if self.spaces.len() <= space.0 {
            self.spaces.resize_with(space.0 + 1, Vec::new);
        }
        let regs = &mut self.spaces[space.0];
        let i = reg as usize;
        if regs.len() <= i {
            regs.resize(i + 1, 0);
        }
        &mut regs[i]
    }

    /// Current writer of a register (0 when uninitialised), without marking it read.
    pub fn writer_at(&self, space: Space, reg: u32) -> u32 {
        self.spaces
            .get(space.0)
            .and_then(|r| r.get(reg as usize))
            .copied()
            .unwrap_or(0)
    }

    /// Read a register: None when nothing initialised it.
    pub fn read(&mut self, space: Space, reg: u32) -> Option<u32> {
        let w = self.writer_at(space, reg);
        if w == 0 {
            return None;
        }
        if let Some(wr) = self.writers.get_mut(w as usize) {
            wr.used = true;
        }
        Some(w)
    }

    pub fn write(&mut self, space: Space, reg: u32, writer: u32) {
        let slot = self.slot(space, reg);
        let prev = std::mem::replace(slot, writer);
        if prev != 0 && prev != writer {
            let span = self.writers.get(writer as usize).map(|w| w.span);
            if let Some(p) = self.writers.get_mut(prev as usize)
                && p.overwritten_by.is_none()
            {
                p.overwritten_by = span;
            }
        }
    }

    /// Mark the value in a register as used (declared outputs read back after the run).
    pub fn keep(&mut self, space: Space, reg: u32) {
        let w = self.writer_at(space, reg);
        if let Some(wr) = self.writers.get_mut(w as usize) {
            wr.used = true;
        }
    }
}

/// One netq direction: the rows the host pushes (inputs) or collects (outputs), in order.
#[derive(Default)]
pub struct Queue {
    /// (declaration index, row, tiles per row)
    pub rows: Vec<(usize, usize, u32)>,
    pub next: usize,
}

impl Queue {
    /// The next row, advancing the queue.
    pub fn take(&mut self) -> Option<(usize, usize, u32)> {
        let r = self.rows.get(self.next).copied();
        if r.is_some() {
            self.next += 1;
        }
        r
    }
}

/// The pad lanes of one register: lanes `data..N` all hold `value`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Pad {
    pub data: u32,
    pub value: f64,
    /// Where the lanes got this value: an op, or (`None`) the declaration's `pad` or a product.
    pub op: Option<(OpKind, Span)>,
    pub origin: Span,
}

/// Pad lanes per register, per space (`None`: a full register, or a value not followed).
#[derive(Default)]
pub(crate) struct PadLanes {
    /// Some declaration has a partial register (otherwise nothing is followed).
    pub active: bool,
    spaces: Vec<Vec<Option<Pad>>>,
}

impl PadLanes {
    pub fn get(&self, space: Space, reg: u32) -> Option<Pad> {
        *self.spaces.get(space.0)?.get(reg as usize)?
    }

    pub fn set(&mut self, space: Space, reg: u32, pad: Option<Pad>) {
        if self.spaces.len() <= space.0 {
            self.spaces.resize_with(space.0 + 1, Vec::new);
        }
        let regs = &mut self.spaces[space.0];
        let i = reg as usize;
        if regs.len() <= i {
            if pad.is_none() {
                return;
            }
            regs.resize(i + 1, None);
        }
        regs[i] = pad;
    }
}
