//! Precision schedules (seed 003): training phases, each a number of epochs at its own
//! `mvm.vector` / `mvm.matrix` formats, per layer if wanted (docs/training.md).
//!
//! A layer is a chain with an `mv_mul`, counted from 0 in program order. A phase's precision
//! is `firmware` (the program's own formats), `aNwM` (the program's BFP formats with `N`-bit
//! vector and `M`-bit matrix mantissas, sign included; `aN` or `wM` alone change one side), or
//! any catalogue formats given in full.

use super::TrainError;
use nnp_grammar::{ChainBody, Program};
use nnp_numerics::Format;
use serde::Deserialize;
use std::fmt;

/// How one side of the product changes in a phase.
#[derive(Clone, Debug, PartialEq)]
pub enum FormatChange {
    /// The program's BFP format with this mantissa width (sign included).
    Mantissa(u32),
    /// This format.
    Format(Format),
}

/// The formats of one phase (for all layers, or one).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Precision {
    pub vector: Option<FormatChange>,
    pub matrix: Option<FormatChange>,
}

impl Precision {
    /// `firmware`, `aNwM`, `aN` or `wM`.
    pub fn parse(text: &str) -> Result<Precision, TrainError> {
        let t = text.trim();
        if t == "firmware" || t == "fw" {
            return Ok(Precision::default());
        }
        let bad = || TrainError::NotAPrecision(t.to_string());
        let mut p = Precision::default();
        let mut rest = t;
        while let Some(side) = rest.chars().next() {
            let digits: String = rest[1..].chars().take_while(char::is_ascii_digit).collect();
            let width: u32 = digits.parse().map_err(|_| bad())?;
            if !(2..=32).contains(&width) {
                return Err(TrainError::Schedule(format!(
                    "mantissa width {width} in `{t}`: BFP mantissas take 2 to 32 bits"
                )));
            }
            let slot = match side {
                'a' if p.vector.is_none() => &mut p.vector,
                'w' if p.matrix.is_none() => &mut p.matrix,
                _ => return Err(bad()),
            };
            *slot = Some(FormatChange::Mantissa(width));
            rest = &rest[1 + digits.len()..];
        }
        if p == Precision::default() {
            return Err(bad());
        }
        Ok(p)
    }
}

impl fmt::Display for Precision {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let side = |c: &Option<FormatChange>, tag: &str| match c {
            None => String::new(),
            Some(FormatChange::Mantissa(m)) => format!("{tag}{m}"),
            Some(FormatChange::Format(fmt)) => format!("{tag}={fmt}"),
        };
        match (&self.vector, &self.matrix) {
            (None, None) => write!(f, "firmware"),
            (Some(FormatChange::Format(_)), _) | (_, Some(FormatChange::Format(_))) => {
                let (v, m) = (side(&self.vector, "vector"), side(&self.matrix, "matrix"));
                write!(
                    f,
                    "{}",
                    [v, m]
                        .into_iter()
                        .filter(|s| !s.is_empty())
                        .collect::<Vec<_>>()
                        .join(" ")
                )
            }
            _ => write!(f, "{}{}", side(&self.vector, "a"), side(&self.matrix, "w")),
        }
    }
}

/// One phase: `epochs` epochs at `precision`, with per-layer exceptions.
#[derive(Clone, Debug, PartialEq)]
pub struct Phase {
    pub epochs: usize,
    pub precision: Precision,
    /// Layer `k`'s precision where it differs from `precision` (`None`: `precision`).
    pub layers: Vec<Option<Precision>>,
}

impl Phase {
    /// A label for reports: the phase's precision, and the layers that differ.
    pub fn label(&self) -> String {
        let mut s = self.precision.to_string();
        for (k, p) in self.layers.iter().enumerate() {
            if let Some(p) = p {
                s.push_str(&format!(", layer {k}: {p}"));
            }
        }
        s
    }
}

/// The phases of a run, in order.
#[derive(Clone, Debug, PartialEq)]
pub struct Schedule {
    pub phases: Vec<Phase>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FileSchedule {
    phase: Vec<FilePhase>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FilePhase {
    epochs: usize,
    precision: Option<String>,
    vector: Option<String>,
    matrix: Option<String>,
    #[serde(default)]
    layers: Vec<String>,
}

impl Schedule {
    /// The flag form: `PRECISION:EPOCHS` phases separated by commas
    /// (`a4w4:2,a6w6:2,firmware:1`).
    pub fn parse_spec(spec: &str) -> Result<Schedule, TrainError> {
        let mut phases = Vec::new();
        for part in spec.split(',') {
            let (p, e) = part
                .trim()
                .rsplit_once(':')
                .ok_or_else(|| TrainError::NoEpochs(part.to_string()))?;
            phases.push(Phase {
                epochs: epochs(e.trim(), part)?,
                precision: Precision::parse(p)?,
                layers: Vec::new(),
            });
        }
        Schedule::checked(phases)
    }

    /// A schedule file (TOML): `[[phase]]` tables with `epochs`, and `precision`
    /// (`aNwM`), or `vector` and `matrix` formats, and `layers` (one precision per layer).
    pub fn parse_toml(text: &str) -> Result<Schedule, TrainError> {
        let file: FileSchedule = toml::from_str(text)
            .map_err(|e| TrainError::Schedule(format!("schedule file: {}", e.message())))?;
        let format = |s: &Option<String>| -> Result<Option<FormatChange>, TrainError> {
            s.as_deref()
                .map(|f| {
                    f.parse::<Format>()
                        .map(FormatChange::Format)
                        .map_err(|e| TrainError::Schedule(format!("format `{f}`: {e}")))
                })
                .transpose()
        };
        let mut phases = Vec::new();
        for p in &file.phase {
            let mut precision = match &p.precision {
                Some(s) => Precision::parse(s)?,
                None => Precision::default(),
            };
            if let Some(v) = format(&p.vector)? {
                precision.vector = Some(v);
            }
            if let Some(m) = format(&p.matrix)? {
                precision.matrix = Some(m);
            }
            let layers = p
                .layers
                .iter()
                .map(|s| Precision::parse(s).map(Some))
                .collect::<Result<_, _>>()?;
            phases.push(Phase {
                epochs: p.epochs,
                precision,
                layers,
            });
        }
        Schedule::checked(phases)
    }

    fn checked(phases: Vec<Phase>) -> Result<Schedule, TrainError> {
        if phases.is_empty() || phases.iter().any(|p| p.epochs == 0) {
            return Err(TrainError::Schedule(
                "a schedule needs at least one phase, each of at least one epoch".into(),
            ));
        }
        Ok(Schedule { phases })
    }

    /// Epochs of all phases.
    pub fn epochs(&self) -> usize {
        self.phases.iter().map(|p| p.epochs).sum()
    }
}

fn epochs(text: &str, part: &str) -> Result<usize, TrainError> {
    match text.parse::<usize>() {
        Ok(e) if e > 0 => Ok(e),
        _ => Err(TrainError::Schedule(format!(
            "`{text}` in phase `{part}` is not a number of epochs (1 or more)"
        ))),
    }
}

/// `program` with the formats of `phase` in its layers.
pub fn apply(program: &Program, phase: &Phase) -> Result<Program, TrainError> {
    let mut p = program.clone();
    let layers = p
        .chains
        .iter()
        .filter(|c| matches!(&c.body, ChainBody::Vector(v) if v.mv_mul.is_some()))
        .count();
    if phase.layers.len() > layers {
        return Err(TrainError::Schedule(format!(
            "the schedule names {} layers; the program has {layers} (chains with `mv_mul`)",
            phase.layers.len()
        )));
    }
    let mut k = 0;
    for chain in &mut p.chains {
        let ChainBody::Vector(v) = &mut chain.body else {
            continue;
        };
        let Some(mv) = &mut v.mv_mul else { continue };
        let precision = phase
            .layers
            .get(k)
            .and_then(Option::as_ref)
            .unwrap_or(&phase.precision);
        let line = program.line(mv.span);
        if let Some(c) = &precision.vector {
            v.quant.mvm_vector = changed(&v.quant.mvm_vector, c, "mvm.vector", line)?;
        }
        if let Some(c) = &precision.matrix {
            let f = changed(&mv.matrix_format, c, "mvm.matrix", line)?;
            mv.matrix_format = f;
            mv.iteration_formats.clear();
            v.quant.mvm_matrix = f;
        }
        k += 1;
    }
    Ok(p)
}

fn changed(
    from: &Format,
    change: &FormatChange,
    what: &str,
    line: usize,
) -> Result<Format, TrainError> {
    match (change, from) {
        (FormatChange::Format(f), _) => Ok(*f),
        (FormatChange::Mantissa(m), Format::Bfp(b)) => {
            Ok(Format::Bfp(nnp_numerics::BfpFormat { mant: *m, ..*b }))
        }
        (FormatChange::Mantissa(m), other) => Err(TrainError::NotBfp {
            mant: *m,
            what: what.to_string(),
            line,
            format: other.to_string(),
        }),
    }
}
