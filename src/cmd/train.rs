//! `nnpc train`: fine-tune a program's weights through its concordant graph (docs/training.md).

use super::files::{Reads, key};
use super::{at_least_one, bar, fail, output};
use nnp_grammar::{Program, fnv1a64};
use nnp_runtime::host::{Tensor, TensorSource};
use nnp_runtime::io::{self, Dtype, Metadata};
use nnp_runtime::module::Weights;
use nnp_runtime::train::{
    self, Dataset, EpochMetrics, LossKind, OptimizerKind, Progress, Schedule, Score, TrainOptions,
    TrainReport,
};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// Fine-tune the weights of a firmware program against the hardware's exact numerics.
///
/// Each step runs the software graph (bit-identical to `nnpc run`) on a batch and takes the
/// gradient through it: quantizers straight through (zero where they saturate), products and
/// MFU ops by their float derivatives. The test split is scored three ways: the float model
/// with the starting weights, the hardware numerics before and after training.
///
/// Data: a safetensors file with `NAME_train` and `NAME_test` (or `NAME`) for every input and
/// output of the program; an output's targets are class indices (the output's shape without
/// its last axis: softmax cross-entropy, accuracy) or values of its shape (mean squared error).
/// Without `--data` / `--weights`, the files beside the firmware, `STEM.data.safetensors` and
/// `STEM.weights.safetensors`, are used (without the weights file: seeded random weights).
///
/// Exit status: 0 on success, 1 for errors in the firmware or a failed run, 2 for bad input.
#[derive(clap::Args)]
#[command(after_help = "Examples:
  nnpc train samples/train/digits_mlp.nnp -o tuned.safetensors
  nnpc train samples/train/digits_mlp.nnp --schedule a4w4:2,a6w6:2,firmware:2 --json
  nnpc train samples/train/digits_mlp.nnp --bench 20 --batch 256
  nnpc train samples/train/digits_mlp.nnp --data samples/train/digits_mlp.data.safetensors --weights samples/train/digits_mlp.weights.safetensors --optimizer sgd --lr 0.01 --epochs 2

Schedules (--schedule): PRECISION:EPOCHS phases separated by commas, PRECISION being
`firmware`, `aNwM` (BFP mantissa widths of mvm.vector and mvm.matrix, sign included), `aN` or
`wM`; or a TOML file of [[phase]] tables (docs/training.md).")]
pub struct Args {
    #[command(flatten)]
    pub files: Files,
    /// Where the tuned weights go (safetensors, `.npy` directory): the names and shapes of the
    /// starting weights.
    #[arg(short = 'o', long, value_name = "OUT")]
    pub output: Option<PathBuf>,
    /// Epochs at the firmware's precision (a schedule sets its own).
    #[arg(long, default_value_t = 10)]
    pub epochs: usize,
    /// Items per step.
    #[arg(long, default_value_t = 32, value_parser = at_least_one)]
    pub batch: usize,
    /// Learning rate (at the start: it falls to 0 along a half cosine unless `--constant-lr`).
    #[arg(long, default_value_t = 1e-3)]
    pub lr: f64,
    /// Keep the learning rate at `--lr` throughout.
    #[arg(long)]
    pub constant_lr: bool,
    #[arg(long, value_enum, default_value_t = Optimizer::Adam)]
    pub optimizer: Optimizer,
    /// Momentum of `--optimizer sgd`.
    #[arg(long, default_value_t = 0.9)]
    pub momentum: f64,
    /// Loss (default: cross-entropy for class targets, else mean squared error).
    #[arg(long, value_enum)]
    pub loss: Option<Loss>,
    /// Seed of the item order (and of the random weights without a weights file).
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Precision schedule: `a4w4:2,a6w6:2,firmware:1`, or a TOML file.
    #[arg(long, value_name = "SPEC|FILE")]
    pub schedule: Option<String>,
    /// One JSON line per epoch, then the summary as one JSON object on the last line.
    #[arg(long)]
    pub json: bool,
    /// Measure instead of training: this many training steps on the first `--batch` items,
    /// each against forward-only runs of the graph on the same items (medians).
    #[arg(long, value_name = "STEPS", value_parser = at_least_one)]
    pub bench: Option<usize>,
}

#[derive(Clone, Copy, Debug, clap::ValueEnum)]
pub enum Optimizer {
    Adam,
    Sgd,
}

#[derive(Clone, Copy, Debug, clap::ValueEnum)]
pub enum Loss {
    Mse,
    Xent,
}

impl Loss {
    pub(super) fn kind(self) -> LossKind {
        match self {
            Loss::Mse => LossKind::Mse,
            Loss::Xent => LossKind::CrossEntropy,
        }
    }
}

/// The firmware and the files of `nnpc train` and `nnpc score`, with their defaults beside
/// the firmware.
#[derive(clap::Args)]
#[command(mut_arg("file", |a| a.help("Firmware file")))]
#[command(mut_arg("target", |a| a.value_name("TARGET").help(
    "Target: a built-in name or a TOML file (default: the firmware's `target` line, else \
     bw-default)"
)))]
pub struct Files {
    #[command(flatten)]
    pub firmware: super::Firmware,
    /// The data (safetensors: `NAME_train` / `NAME_test`, or `NAME`, for every input and
    /// output); default `STEM.data.safetensors` beside the firmware.
    #[arg(long, value_name = "FILE")]
    pub data: Option<PathBuf>,
    /// Weights (the starting weights of `train`); default `STEM.weights.safetensors` beside the
    /// firmware, else seeded random weights. `FILE:NAME=STORED,...` takes only the tensors
    /// stored as STORED, used as NAME (as `run --weights` does).
    #[arg(long, value_name = "FILE[:NAME=STORED,...]", value_parser = super::data::parse_source)]
    pub weights: Option<TensorSource>,
}

impl Files {
    /// `--data`, else `STEM.data.safetensors` beside the firmware, which must exist.
    pub(super) fn data_path(&self) -> miette::Result<PathBuf> {
        let path = self
            .data
            .clone()
            .unwrap_or_else(|| self.beside("data.safetensors"));
        if self.data.is_none() && !path.exists() {
            let none = format!("no data: `{}` does not exist", path.display());
            return Err(fail(super::Failure::new(none).help(
                "pass `--data FILE` (safetensors with `NAME_train` / `NAME_test` for every input \
                 and output)",
            )));
        }
        Ok(path)
    }

    /// `--weights`, else `STEM.weights.safetensors` beside the firmware where it exists.
    pub(super) fn weights_source(&self) -> Option<TensorSource> {
        self.weights.clone().or_else(|| {
            let beside = self.beside("weights.safetensors");
            beside.exists().then(|| TensorSource::file(beside))
        })
    }

    /// The starting weights ([`Files::weights_source`], added to `reads`), else the seeded
    /// random weights of `seed`, read and checked as the candle module's are
    /// ([`train::starting_weights`]).
    pub(super) fn starting_weights(
        &self,
        program: &Program,
        seed: u64,
        reads: &mut Reads,
    ) -> miette::Result<BTreeMap<String, Tensor>> {
        let weights = match self.weights_source() {
            None => Weights::Random { seed },
            Some(source) => {
                reads.add("the starting weights", &source.path);
                Weights::Source(source)
            }
        };
        train::starting_weights(program, weights).map_err(fail)
    }

    /// `STEM.SUFFIX` beside the firmware.
    fn beside(&self, suffix: &str) -> PathBuf {
        let stem = self
            .firmware
            .file
            .file_stem()
            .unwrap_or_default()
            .to_string_lossy();
        self.firmware
            .file
            .with_file_name(format!("{stem}.{suffix}"))
    }
}

pub fn run(args: Args) -> miette::Result<ExitCode> {
    let program = match args.files.firmware.load() {
        Ok(p) => p,
        Err(code) => return Ok(code),
    };
    let mut reads = args.files.firmware.reads(&program);
    let data_path = args.files.data_path()?;
    reads.add("the training data", &data_path);
    let start = args
        .files
        .starting_weights(&program, args.seed, &mut reads)?;
    if let Some(s) = args.schedule.as_deref().filter(|s| Path::new(s).is_file()) {
        reads.add("the schedule file", Path::new(s));
    }
    if let Some(out) = &args.output {
        reads.check("-o", out)?;
    }
    let schedule = args.schedule.as_deref().map(read_schedule).transpose()?;
    let tensors = io::read_tensors(&data_path).map_err(fail)?;
    let data = Dataset::from_tensors(&program, tensors).map_err(fail)?;
    let opts = TrainOptions {
        epochs: args.epochs,
        batch: args.batch,
        lr: args.lr,
        optimizer: match args.optimizer {
            Optimizer::Adam => OptimizerKind::Adam,
            Optimizer::Sgd => OptimizerKind::Sgd {
                momentum: args.momentum,
            },
        },
        loss: args.loss.map(Loss::kind),
        cosine: !args.constant_lr,
        seed: args.seed,
        schedule,
    };
    if let Some(reps) = args.bench {
        let t = train::time_steps(&program, &start, &data, &opts, reps).map_err(fail)?;
        let text = if args.json {
            json!({
                "file": args.files.firmware.file.display().to_string(),
                "batch": t.batch,
                "steps": reps,
                "step_seconds": t.step_s,
                "forward_seconds": t.forward_s,
                "forward_warm_seconds": t.forward_warm_s,
                "step_over_forward": t.step_s / t.forward_s,
                "step_over_forward_warm": t.step_s / t.forward_warm_s,
                "step_parts_seconds": {
                    "record": t.parts.record_s,
                    "loss": t.parts.loss_s,
                    "reverse": t.parts.reverse_s,
                    "update": t.parts.update_s,
                },
            })
            .to_string()
        } else {
            format!(
                "{}: batch {}, medians of {reps} steps\n  training step        {:>9.3} ms\n  \
                 forward, fresh session {:>7.3} ms  (step / forward = {:.2})\n  \
                 forward, warm session  {:>7.3} ms  (step / forward = {:.2})\n  \
                 a step's parts: record {:.3} ms, loss {:.3}, reverse pass {:.3}, update {:.3}",
                args.files.firmware.file.display(),
                t.batch,
                t.step_s * 1e3,
                t.forward_s * 1e3,
                t.step_s / t.forward_s,
                t.forward_warm_s * 1e3,
                t.step_s / t.forward_warm_s,
                t.parts.record_s * 1e3,
                t.parts.loss_s * 1e3,
                t.parts.reverse_s * 1e3,
                t.parts.update_s * 1e3,
            )
        };
        output::stdout(format!("{text}\n"))?;
        return Ok(ExitCode::SUCCESS);
    }
    let mut steps = None;
    let json = args.json;
    let mut epoch_lines = Vec::new();
    let mut on_progress = |p: Progress| match p {
        Progress::Start { steps: s } => steps = Some(bar("training", s, "steps")),
        Progress::Step => {
            if let Some(b) = &steps {
                b.inc(1);
            }
        }
        Progress::Epoch(m) => {
            let line = if json {
                epoch_json(m).to_string()
            } else {
                epoch_text(m)
            };
            match &steps {
                // Above the bar, as each epoch ends; JSON lines go to stdout with the summary.
                // (Progress, as the bar is: not with --quiet.)
                Some(b) if !json => {
                    let _ = b.suspend(|| output::note(format!("{line}\n")));
                }
                _ => epoch_lines.push(line),
            }
        }
    };
    let report = train::train(&program, &start, &data, &opts, &mut on_progress);
    if let Some(b) = &steps {
        b.finish_and_clear();
    }
    let report = match report {
        Ok(r) => r,
        // Unusable data or options are bad input (2); a run that fails is 1.
        Err(e) => {
            let code = if e.is_input_error() { 2 } else { 1 };
            return Ok(output::report(&fail(e), ExitCode::from(code)));
        }
    };
    if let Some(out) = &args.output {
        let mut meta = Metadata::new();
        meta.insert(key::VERSION.into(), env!("CARGO_PKG_VERSION").into());
        meta.insert(
            key::PROGRAM.into(),
            args.files.firmware.file.display().to_string(),
        );
        meta.insert(
            key::PROGRAM_HASH.into(),
            fnv1a64(program.source.text.as_bytes()),
        );
        meta.insert(key::TARGET.into(), program.target.name.clone());
        meta.insert("nnpc.trained_on".into(), data_path.display().to_string());
        reads.check_tensors("-o", out, report.weights.keys())?;
        io::write_tensors_with(out, &report.weights, Dtype::F32, &meta).map_err(fail)?;
    }
    let mut text = String::new();
    for line in &epoch_lines {
        text.push_str(line);
        text.push('\n');
    }
    if json {
        text.push_str(&summary_json(&args, &report, &data_path).to_string());
    } else {
        text.push_str(&summary_text(&report));
    }
    text.push('\n');
    output::stdout(text)?;
    output::note(match &args.output {
        Some(p) => format!("tuned weights written to {}\n", p.display()),
        None => "tuned weights not written (pass -o FILE to keep them)\n".to_string(),
    })?;
    Ok(ExitCode::SUCCESS)
}

fn read_schedule(spec: &str) -> miette::Result<Schedule> {
    let path = Path::new(spec);
    if path.extension().is_some_and(|e| e == "toml") || path.is_file() {
        let text = std::fs::read_to_string(path)
            .map_err(|e| fail(format!("cannot read schedule file `{spec}`: {e}")))?;
        return Schedule::parse_toml(&text).map_err(fail);
    }
    Schedule::parse_spec(spec).map_err(fail)
}

fn score_json(s: &Score) -> Value {
    json!({ "loss": s.loss, "accuracy": s.accuracy })
}

fn points_json(m: &EpochMetrics) -> Value {
    let nodes: serde_json::Map<String, Value> = m
        .points
        .by_node
        .iter()
        .map(|(node, hist)| {
            let h: serde_json::Map<String, Value> = hist
                .iter()
                .map(|(f, c)| (f.to_string(), json!(c)))
                .collect();
            (format!("%{node}"), Value::Object(h))
        })
        .collect();
    Value::Object(nodes)
}

fn epoch_json(m: &EpochMetrics) -> Value {
    let mut v = json!({
        "epoch": m.epoch,
        "precision": m.precision,
        "steps": m.steps,
        "train_loss": m.train_loss,
        "test": score_json(&m.test),
        "seconds": m.seconds,
    });
    if !m.points.by_node.is_empty() {
        v["dynfixed_frac_bits"] = points_json(m);
    }
    v
}

fn epoch_text(m: &EpochMetrics) -> String {
    let acc = m
        .test
        .accuracy
        .map(|a| format!(", test accuracy {:.2}%", a * 100.0))
        .unwrap_or_default();
    format!(
        "epoch {:>3} [{}]: train loss {:.4}, test loss {:.4}{acc} ({:.2} s)",
        m.epoch, m.precision, m.train_loss, m.test.loss, m.seconds
    )
}

fn summary_json(args: &Args, r: &TrainReport, data: &Path) -> Value {
    json!({
        "file": args.files.firmware.file.display().to_string(),
        "data": data.display().to_string(),
        "output_file": args.output.as_ref().map(|p| p.display().to_string()),
        "loss": r.loss.iter().map(|(o, l)| json!({"output": o, "loss": l.name()})).collect::<Vec<_>>(),
        "epochs": r.epochs.len(),
        "accuracy_float": r.float.accuracy,
        "accuracy_before": r.before.accuracy,
        "accuracy_after": r.after.accuracy,
        "loss_float": r.float.loss,
        "loss_before": r.before.loss,
        "loss_after": r.after.loss,
        "seconds": r.epochs.iter().map(|m| m.seconds).sum::<f64>(),
    })
}

fn summary_text(r: &TrainReport) -> String {
    let line = |what: &str, s: &Score| match s.accuracy {
        Some(a) => format!(
            "{what:<32} loss {:.4}, accuracy {:.2}%\n",
            s.loss,
            a * 100.0
        ),
        None => format!("{what:<32} loss {:.4}\n", s.loss),
    };
    let mut t = String::new();
    t.push_str(&line("float model, starting weights", &r.float));
    t.push_str(&line("hardware numerics, before", &r.before));
    t.push_str(&line("hardware numerics, after", &r.after));
    t.pop();
    t
}
