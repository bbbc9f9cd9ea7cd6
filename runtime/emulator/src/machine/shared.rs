//! What the chunks of a run share: the program, the host data, the activation tables and the
//! host-loaded weights (matrix tiles and weight vector registers), checked and rounded once.

use super::super::error::{EmuError, Site};
use super::super::mfu::TableFiles;
use super::super::mvm::QRun;
use nnp_grammar::{ChainBody, Decl, DeclKind, Init, Mem, NonFinite, Program, Span};
use nnp_host::HostData;
use nnp_numerics::{FloatFormat, Format};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

/// Everything the chunks share: the program, host data, tables and the host-loaded weights.
pub struct Shared<'a> {
    pub(super) program: &'a Program,
    pub(super) data: &'a HostData,
    /// The native dimension N: the lanes of a vector register, the side of a matrix tile.
    pub(super) native: usize,
    pub(super) files: TableFiles,
    /// Storage format the host rounds loaded values to.
    pub(super) load_fmt: FloatFormat,
    pub(super) nonfinite_error: bool,
    /// Matrix tiles (`mrf`, matrix `dram`), `n * n` values each.
    pub(super) tiles: HashMap<(Mem, u32), Arc<[f32]>>,
    /// Vector registers of weight declarations (one item's `n` lanes).
    pub(super) vregs: HashMap<(Mem, u32), Arc<[f32]>>,
    /// `mvm.matrix` quantizations shared by the chunks, keyed by tile identity (the address of
    /// its data, which lives as long as `tiles`) and format.
    pub(super) qtiles: Mutex<QCache>,
    /// The stop flag ([`crate::EmuOptions::stop`]), looked at before each chain iteration.
    pub stop: Option<&'static std::sync::atomic::AtomicBool>,
}

type QCache = HashMap<(usize, Format), Arc<Vec<QRun>>>;

pub(super) fn lock(m: &Mutex<QCache>) -> MutexGuard<'_, QCache> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

fn float_of(
    f: &Format,
    what: &str,
    program: &Program,
    span: Span,
) -> Result<FloatFormat, EmuError> {
    f.as_float().copied().ok_or_else(|| EmuError::Unsupported {
        message: format!("{what} format `{f}` is not a float format"),
        span,
        line: program.line(span),
    })
}

/// A target's table file, shared by every machine of the run.
fn read_table(path: &std::path::Path) -> Result<Arc<[u16]>, EmuError> {
    nnp_host::io::read_table(path)
        .map(Arc::from)
        .map_err(|message| EmuError::Table {
            path: path.to_path_buf(),
            message,
        })
}

impl<'a> Shared<'a> {
    pub fn new(program: &'a Program, data: &'a HostData) -> Result<Shared<'a>, EmuError> {
        for c in &program.chains {
            if let ChainBody::Vector(vc) = &c.body {
                let st = float_of(&vc.quant.storage, "storage", program, c.span)?;
                // The checker refuses these; a hand-built Program may still hold one.
                if !nnp_grammar::target::storage_fits_f32(&st) {
                    return Err(EmuError::Unsupported {
                        message: format!(
                            "storage format `{}` is wider than fp32",
                            vc.quant.storage
                        ),
                        span: c.span,
                        line: program.line(c.span),
                    });
                }
                float_of(&vc.quant.mvm_output, "mvm.output", program, c.span)?;
                float_of(&vc.quant.mfu_input, "mfu.input", program, c.span)?;
            }
        }
        // The host rounds what it loads to the storage format in force at the first chain.
        let load_fmt = program
            .chains
            .iter()
            .find_map(|c| match &c.body {
                ChainBody::Vector(vc) => vc.quant.storage.as_float().copied(),
                ChainBody::Matrix(_) => None,
            })
            .or_else(|| program.target.numerics.storage.as_float().copied())
            .unwrap_or(FloatFormat::FP16);
        let files = TableFiles(
            (program.target.numerics.tables.iter())
                .map(|(a, path)| Ok((a, read_table(&program.target.table_path(path))?)))
                .collect::<Result<_, EmuError>>()?,
        );
        let mut shared = Shared {
            program,
            data,
            native: program.native().max(1),
            files,
            load_fmt,
            nonfinite_error: program.target.numerics.nonfinite == NonFinite::Error,
            tiles: HashMap::new(),
            vregs: HashMap::new(),
            qtiles: Mutex::new(HashMap::new()),
            stop: None,
        };
        for d in &program.decls {
            let Some(place) = d.place else { continue };
            match d.kind {
                DeclKind::Matrix => shared.load_matrix(d, place.mem, place.addr)?,
                DeclKind::Vector => {
                    let values = shared.weight_values(d)?;
                    let rows = shared.host_rows(d, d.rows(), values.as_deref());
                    shared.check_loaded(d, &rows, 0)?;
                    for (k, reg) in rows.chunks(shared.native).enumerate() {
                        shared
                            .vregs
                            .insert((place.mem, place.addr + k as u32), reg.into());
                    }
                }
                _ => {}
            }
        }
        Ok(shared)
    }

    fn weight_values(&self, d: &Decl) -> Result<Option<Vec<f32>>, EmuError> {
        if d.init == Init::Zero {
            return Ok(None);
        }
        let t = self
            .data
            .weights
            .get(&d.name)
            .ok_or_else(|| EmuError::Data {
                name: d.name.clone(),
                message: "no weights tensor of that name".into(),
            })?;
        if t.len() != d.elements() {
            return Err(EmuError::Data {
                name: d.name.clone(),
                message: format!("{} values, the declaration needs {}", t.len(), d.elements()),
            });
        }
        Ok(Some(t.data.clone()))
    }

    /// A value that became infinite on load (under `nonfinite = "error"`), of batch item
    /// `item` (0 for weights, which every item shares).
    pub(super) fn check_loaded(
        &self,
        d: &Decl,
        values: &[f32],
        item: usize,
    ) -> Result<(), EmuError> {
        if !self.nonfinite_error {
            return Ok(());
        }
        match values.iter().position(|v| !v.is_finite()) {
            Some(lane) => Err(EmuError::NonFinite {
                site: Site {
                    item,
                    chain: 0,
                    iteration: 0,
                    span: d.span,
                    line: self.program.line(d.span),
                },
                op: NonFinite::HOST_LOAD,
                value: f64::from(values[lane]),
                lane,
            }),
            None => Ok(()),
        }
    }

    /// A vector-like declaration's registers: rows padded to whole tiles with `pad`, rounded to
    /// storage, then the declaration's own format (per padded row) and storage again.
    /// `values = None` is `= 0`.
    pub(super) fn host_rows(&self, d: &Decl, rows: usize, values: Option<&[f32]>) -> Vec<f32> {
        let (n, c) = (self.native, d.row_len());
        let width = d.row_tiles(n) * n;
        let pad = self.load_fmt.round(d.pad) as f32;
        let mut out = vec![pad; rows * width];
        let mut scratch = vec![0.0; width];
        let mut q = vec![0.0; width];
        for r in 0..rows {
            let row = &mut out[r * width..(r + 1) * width];
            for (k, lane) in row[..c].iter_mut().enumerate() {
                let v = values.map_or(0.0, |v| v.get(r * c + k).copied().unwrap_or(0.0));
                *lane = self.load_fmt.round(f64::from(v)) as f32;
            }
            if let Some(fmt) = &d.format {
                for (s, v) in scratch.iter_mut().zip(row.iter()) {
                    *s = f64::from(*v);
                }
                fmt.quantize(&scratch, n, &mut q);
                // Registers hold storage values: the quantized value is stored (rounded) again.
                for (lane, v) in row.iter_mut().zip(&q) {
                    *lane = self.load_fmt.round(*v) as f32;
                }
            }
        }
        out
    }

    fn load_matrix(&mut self, d: &Decl, mem: Mem, base: u32) -> Result<(), EmuError> {
        let n = self.native;
        let values = self.weight_values(d)?;
        let (r, c) = (d.shape.first().copied().unwrap_or(0), d.row_len());
        let (tr, tc) = (r.div_ceil(n), c.div_ceil(n));
        for ti in 0..tr {
            for tj in 0..tc {
                let mut tile = vec![0.0f32; n * n];
                if let Some(v) = &values {
                    for i in 0..n.min(r - ti * n) {
                        for j in 0..n.min(c - tj * n) {
                            let x = v[(ti * n + i) * c + tj * n + j];
                            tile[i * n + j] = self.load_fmt.round(f64::from(x)) as f32;
                        }
                    }
                }
                self.check_loaded(d, &tile, 0)?;
                self.tiles
                    .insert((mem, base + (ti * tc + tj) as u32), tile.into());
            }
        }
        Ok(())
    }
}
