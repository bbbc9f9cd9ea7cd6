//! Fine-tuning a firmware program's weights through its concordant graph (docs/training.md).
//!
//! Every training step runs the software graph itself on the batch
//! ([`crate::Session::recording`], handing back the values the reverse pass reads): the forward
//! values are bit-identical to `nnpc run`. The reverse
//! pass (`reverse.rs`) then differentiates the graph's twin at those values, node by node on
//! f64 slices: straight-through quantizers ([`ste`]), float derivatives of products and MFU
//! ops. The loss and its gradient by output are `loss.rs`'s; the weights are f32 in their
//! declared (logical) shapes, and `optim.rs` updates them.
//!
//! [`train`] runs the epochs of a [`schedule::Schedule`] (by default the firmware's own
//! precision throughout) and evaluates the test set three ways: the float model (the twin's
//! own values, `twin.rs`, starting weights), the hardware numerics before training and after.

mod data;
mod error;
pub mod layer;
mod loss;
mod optim;
mod reverse;
pub mod schedule;
pub mod ste;
mod strided;
pub(crate) mod twin;

pub use data::{Dataset, Split};
pub use error::TrainError;
pub use layer::{
    Gradients, Recorded, Recorder, SharedRecorder, backward, float_outputs, gradients, record,
};
pub use loss::LossKind;
pub use optim::OptimizerKind;
pub use schedule::{Phase, Precision, Schedule};
pub use ste::Points;

use crate::{ExecOptions, Session};
use loss::{Scoring, Targets};
use nnp_grammar::Program;
use nnp_host::{HostData, Tensor as HostTensor};
use nnp_lowering::swgraph::{self, Op, Roots, SwGraph, UnOp};
use rand::SeedableRng;
use rand::seq::SliceRandom;
use std::collections::BTreeMap;
use std::time::Instant;

/// How a run trains.
#[derive(Clone, Debug)]
pub struct TrainOptions {
    /// Epochs at the firmware's precision (ignored with a schedule, whose phases say).
    pub epochs: usize,
    /// Items per step.
    pub batch: usize,
    pub lr: f64,
    pub optimizer: OptimizerKind,
    /// `None`: cross-entropy for class targets, else mean squared error.
    pub loss: Option<LossKind>,
    /// The learning rate falls from `lr` to 0 along a half cosine over the run's steps
    /// (else it stays `lr`).
    pub cosine: bool,
    /// Shuffles the training items each epoch.
    pub seed: u64,
    pub schedule: Option<Schedule>,
}

impl Default for TrainOptions {
    fn default() -> Self {
        TrainOptions {
            epochs: 10,
            batch: 32,
            lr: 1e-3,
            optimizer: OptimizerKind::Adam,
            loss: None,
            cosine: true,
            seed: 0,
            schedule: None,
        }
    }
}

/// A model's score on a split.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Score {
    pub loss: f64,
    /// Fraction of positions whose largest output is the target class (cross-entropy only).
    pub accuracy: Option<f64>,
}

/// One epoch's numbers.
#[derive(Clone, Debug)]
pub struct EpochMetrics {
    /// 1-based.
    pub epoch: usize,
    /// The phase's precision ([`Phase::label`]).
    pub precision: String,
    pub steps: usize,
    /// Mean training loss over the epoch's steps (under the phase's numerics).
    pub train_loss: f64,
    /// The test split under the phase's numerics after the epoch.
    pub test: Score,
    /// The `dynfixed` point positions of the epoch's steps, by node.
    pub points: Points,
    pub seconds: f64,
}

/// What [`train`] gives back.
#[derive(Clone, Debug)]
pub struct TrainReport {
    /// The loss each output was trained with.
    pub loss: Vec<(String, LossKind)>,
    /// The float model (the twin's own values) with the starting weights, on the test split.
    pub float: Score,
    /// The hardware numerics (the firmware's precision), starting weights.
    pub before: Score,
    /// The hardware numerics, tuned weights.
    pub after: Score,
    pub epochs: Vec<EpochMetrics>,
    /// The tuned weights, by name, in their declared shapes.
    pub weights: BTreeMap<String, HostTensor>,
}

/// Progress of a run, as it goes.
pub enum Progress<'a> {
    /// The run starts: this many steps in all.
    Start {
        steps: usize,
    },
    /// One more step done.
    Step,
    Epoch(&'a EpochMetrics),
}

/// The starting weights of a run: every matrix and vector `program` loads, checked by name,
/// shape and value as the embedding API checks them ([`crate::module::host_weights`]).
pub fn starting_weights(
    program: &Program,
    weights: crate::module::Weights,
) -> Result<BTreeMap<String, HostTensor>, TrainError> {
    Ok(crate::module::host_weights(program, weights)
        .map_err(Box::new)?
        .weights)
}

/// Train `weights` (every matrix and vector `program` loads, by name, declared shapes) on
/// `data` ([`train`] in the module docs).
pub fn train(
    program: &Program,
    weights: &BTreeMap<String, HostTensor>,
    data: &Dataset,
    opts: &TrainOptions,
    progress: &mut dyn FnMut(Progress),
) -> Result<TrainReport, TrainError> {
    if opts.batch == 0 || !(opts.lr > 0.0 && opts.lr.is_finite()) {
        return Err(TrainError::Options(
            "the batch must be at least 1 and the learning rate a positive number".into(),
        ));
    }
    let schedule = match &opts.schedule {
        Some(s) => s.clone(),
        None if opts.epochs == 0 => Schedule { phases: Vec::new() },
        None => Schedule {
            phases: vec![Phase {
                epochs: opts.epochs,
                precision: Precision::default(),
                layers: Vec::new(),
            }],
        },
    };
    // A dataset built by hand has not been through `Dataset::from_tensors`' checks.
    data.check(program)?;
    let firmware = compile(program)?;
    let scoring = scorings(program, &firmware, &data.train, opts.loss)?;
    let test = data.test.as_ref().unwrap_or(&data.train);
    let test_targets = targets(&scoring, &firmware, test)?;
    let mut vars = weights.clone();
    // The test split's score of `graph` with the current weights.
    let score_test = |graph: &SwGraph, vars: &BTreeMap<String, HostTensor>, engine| {
        score(graph, &scoring, test, &test_targets, vars, engine)
    };
    let float = score_test(&firmware, &vars, Engine::Float)?;
    let before = score_test(&firmware, &vars, Engine::Hardware)?;

    let items = data.train.items();
    let steps_per_epoch = items.div_ceil(opts.batch);
    progress(Progress::Start {
        steps: steps_per_epoch * schedule.epochs(),
    });
    let mut optimizer = optim::Optimizer::new(opts.optimizer, opts.lr, &vars);
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(opts.seed);
    let total_steps = (steps_per_epoch * schedule.epochs()).max(1);
    let mut done = 0usize;
    let mut epochs = Vec::new();
    for phase in &schedule.phases {
        let graph = match phase.precision == Precision::default() && phase.layers.is_empty() {
            true => firmware.clone(),
            false => compile(&schedule::apply(program, phase)?)?,
        };
        // The weights' gradients alone: the inputs' are not needed.
        let mut recorder = layer::Recorder::new(&graph, false)?;
        for _ in 0..phase.epochs {
            let t0 = Instant::now();
            let epoch = epochs.len() + 1;
            let mut order: Vec<usize> = (0..items).collect();
            order.shuffle(&mut rng);
            let (mut total, mut points) = (0.0, Points::default());
            for (step, idx) in order.chunks(opts.batch).enumerate() {
                if opts.cosine {
                    let at = done as f64 / total_steps as f64;
                    optimizer.set_lr(opts.lr * 0.5 * (1.0 + (std::f64::consts::PI * at).cos()));
                }
                done += 1;
                let batch = data.train.gather(idx);
                let batch_targets = targets(&scoring, &graph, &batch)?;
                let (loss, pass_points, _) = step_once(
                    &mut recorder,
                    &scoring,
                    &batch,
                    &batch_targets,
                    &mut vars,
                    &mut optimizer,
                )?;
                if !loss.is_finite() {
                    return Err(TrainError::Diverged {
                        epoch,
                        step: step + 1,
                        loss,
                    });
                }
                total += loss;
                points.merge(&pass_points);
                progress(Progress::Step);
            }
            let test_score = score_test(&graph, &vars, Engine::Hardware)?;
            epochs.push(EpochMetrics {
                epoch,
                precision: phase.label(),
                steps: steps_per_epoch,
                train_loss: total / steps_per_epoch.max(1) as f64,
                test: test_score,
                points,
                seconds: t0.elapsed().as_secs_f64(),
            });
            if let Some(m) = epochs.last() {
                progress(Progress::Epoch(m));
            }
        }
    }
    let after = score_test(&firmware, &vars, Engine::Hardware)?;
    Ok(TrainReport {
        loss: scoring.iter().map(|s| (s.output.clone(), s.loss)).collect(),
        float,
        before,
        after,
        epochs,
        weights: vars,
    })
}

/// Median seconds of a training step and of forward-only runs of the graph on the same batch
/// ([`time_steps`]).
#[derive(Clone, Copy, Debug)]
pub struct StepTimes {
    pub batch: usize,
    /// One step: the graph's run keeping what the reverse pass reads, the reverse pass, the update.
    pub step_s: f64,
    /// A forward run of a fresh session (what a step's forward pass costs alone: the weights
    /// change every step, so each step prepares them again).
    pub forward_s: f64,
    /// A warm forward run (weights prepared by an earlier run), as `nnpc run` repeats it.
    pub forward_warm_s: f64,
    /// The parts of a step (medians of each).
    pub parts: StepParts,
}

/// Seconds of the parts of one training step.
#[derive(Clone, Copy, Debug, Default)]
pub struct StepParts {
    /// The graph's run, keeping what the reverse pass reads (its weights prepared).
    pub record_s: f64,
    /// The outputs, the loss and its gradient by output.
    pub loss_s: f64,
    /// The reverse pass.
    pub reverse_s: f64,
    /// The optimizer's update.
    pub update_s: f64,
}

/// Time `reps` training steps on the first `opts.batch` training items against forward-only
/// runs on the same items, alternating so all see the same machine load.
pub fn time_steps(
    program: &Program,
    weights: &BTreeMap<String, HostTensor>,
    data: &Dataset,
    opts: &TrainOptions,
    reps: usize,
) -> Result<StepTimes, TrainError> {
    data.check(program)?;
    let graph = compile(program)?;
    let scoring = scorings(program, &graph, &data.train, opts.loss)?;
    let items: Vec<usize> = (0..opts.batch.min(data.train.items())).collect();
    let batch = data.train.gather(&items);
    let batch_targets = targets(&scoring, &graph, &batch)?;
    let mut vars = weights.clone();
    let mut optimizer = optim::Optimizer::new(opts.optimizer, opts.lr, &vars);
    let host = HostData {
        batch: items.len(),
        weights: vars.clone(),
        inputs: batch.inputs.clone(),
    };
    let mut warm = Session::new(&graph, &ExecOptions::default())?;
    warm.run(&host)?;
    let mut recorder = layer::Recorder::new(&graph, false)?;
    let (mut step, mut cold, mut hot) = (Vec::new(), Vec::new(), Vec::new());
    let mut parts: [Vec<f64>; 4] = Default::default();
    for _ in 0..reps.max(1) + 1 {
        let t = Instant::now();
        let (_, _, p) = step_once(
            &mut recorder,
            &scoring,
            &batch,
            &batch_targets,
            &mut vars,
            &mut optimizer,
        )?;
        step.push(t.elapsed().as_secs_f64());
        for (all, s) in parts
            .iter_mut()
            .zip([p.record_s, p.loss_s, p.reverse_s, p.update_s])
        {
            all.push(s);
        }
        let t = Instant::now();
        Session::new(&graph, &ExecOptions::default())?.run(&host)?;
        cold.push(t.elapsed().as_secs_f64());
        let t = Instant::now();
        warm.run(&host)?;
        hot.push(t.elapsed().as_secs_f64());
    }
    // The first of each warms caches and the allocator: left out.
    let median = |v: &mut Vec<f64>| crate::baseline::median(&mut v[1..]);
    let [record, loss, reverse, update] = &mut parts;
    Ok(StepTimes {
        batch: items.len(),
        step_s: median(&mut step),
        forward_s: median(&mut cold),
        forward_warm_s: median(&mut hot),
        parts: StepParts {
            record_s: median(record),
            loss_s: median(loss),
            reverse_s: median(reverse),
            update_s: median(update),
        },
    })
}

/// The graph a run executes, optimized for its outputs ([`swgraph::compile`]).
pub fn compile(program: &Program) -> Result<SwGraph, TrainError> {
    Ok(swgraph::compile(program, Roots::Outputs)?)
}

/// The scoring of every output, from the training targets' shapes.
fn scorings(
    program: &Program,
    graph: &SwGraph,
    split: &Split,
    loss: Option<LossKind>,
) -> Result<Vec<Scoring>, TrainError> {
    program
        .outputs()
        .map(|d| {
            let t = split
                .targets
                .get(&d.name)
                .ok_or_else(|| TrainError::Data(format!("no targets for output `{}`", d.name)))?;
            Scoring::new(
                &d.name,
                &d.shape,
                &t.shape[1..],
                loss,
                softmax_output(graph, &d.name),
            )
        })
        .collect()
}

/// Whether every row of output `name` is a `v_softmax` result (through unpadding and
/// storage rounding).
fn softmax_output(graph: &SwGraph, name: &str) -> bool {
    let mut rows = graph
        .output_nodes()
        .filter(|(_, n, _, _)| *n == name)
        .peekable();
    rows.peek().is_some()
        && rows.all(|(_, _, _, mut v)| {
            loop {
                match &graph.node(v).op {
                    Op::Unpad { src, .. } | Op::Round { src, .. } => v = *src,
                    Op::Unary {
                        op: UnOp::Softmax, ..
                    } => return true,
                    _ => return false,
                }
            }
        })
}

/// The loss's targets of every output of `split`.
fn targets(
    scoring: &[Scoring],
    graph: &SwGraph,
    split: &Split,
) -> Result<Vec<Targets>, TrainError> {
    scoring
        .iter()
        .map(|s| {
            let classes = graph
                .outputs
                .iter()
                .find(|o| o.name == s.output)
                .and_then(|o| o.shape.last().copied())
                .unwrap_or(1);
            s.targets(&split.targets[&s.output], classes)
        })
        .collect()
}

/// Which values a scoring pass reads.
#[derive(Clone, Copy, PartialEq)]
enum Engine {
    /// The float model: the twin's own values.
    Float,
    /// The concordant graph (`Session`), as `nnpc run` computes.
    Hardware,
}

/// The loss and accuracy of `graph` with the current weights on `split`.
fn score(
    graph: &SwGraph,
    scoring: &[Scoring],
    split: &Split,
    targets: &[Targets],
    weights: &BTreeMap<String, HostTensor>,
    engine: Engine,
) -> Result<Score, TrainError> {
    let outputs = match engine {
        Engine::Float => {
            let (w, x) = (
                layer::f64_tensors(weights)?,
                layer::f64_tensors(&split.inputs)?,
            );
            let values = twin::forward(graph, &w, &x)?;
            flat_outputs(reverse::outputs(graph, &values)?)
        }
        Engine::Hardware => {
            let data = HostData {
                batch: split.items(),
                weights: weights.clone(),
                inputs: split.inputs.clone(),
            };
            let run = Session::new(graph, &ExecOptions::default())?.run(&data)?;
            host_outputs(&run.outputs)
        }
    };
    Ok(score_of(scoring, &outputs, targets)?.0)
}

/// Outputs by name, flattened, from [`reverse::outputs`].
fn flat_outputs(outputs: BTreeMap<String, (usize, Vec<f64>)>) -> BTreeMap<String, Vec<f64>> {
    outputs.into_iter().map(|(n, (_, v))| (n, v)).collect()
}

/// Host outputs by name, flattened f64.
fn host_outputs(outputs: &BTreeMap<String, HostTensor>) -> BTreeMap<String, Vec<f64>> {
    outputs
        .iter()
        .map(|(n, t)| (n.clone(), t.data.iter().map(|&v| f64::from(v)).collect()))
        .collect()
}

/// The loss and accuracy of `outputs` (flattened f64, by name) against `targets` under
/// `scoring`, with the loss's gradient by output.
fn score_of(
    scoring: &[Scoring],
    outputs: &BTreeMap<String, Vec<f64>>,
    targets: &[Targets],
) -> Result<(Score, BTreeMap<String, Vec<f64>>), TrainError> {
    let (mut loss, mut hits, mut positions) = (0.0, 0u64, 0u64);
    let mut classified = false;
    let mut grads = BTreeMap::new();
    for (s, target) in scoring.iter().zip(targets) {
        let y = outputs
            .get(&s.output)
            .ok_or_else(|| TrainError::Data(format!("no output `{}` to score", s.output)))?;
        let (l, g) = s.loss(y, target)?;
        loss += l;
        grads.insert(s.output.clone(), g);
        if let Some((h, p)) = s.correct(y, target) {
            (hits, positions, classified) = (hits + h, positions + p, true);
        }
    }
    let score = Score {
        loss,
        accuracy: classified.then(|| hits as f64 / positions.max(1) as f64),
    };
    Ok((score, grads))
}

/// The loss and accuracy of a program's `outputs` (`[items, ...]` by name, as a run of the
/// graph or the emulator gives them) against `split`'s targets, as `nnpc train` scores its test
/// split: cross-entropy and accuracy for class targets, else mean squared error (`loss`
/// overrides).
pub fn score_outputs(
    program: &Program,
    split: &Split,
    outputs: &BTreeMap<String, HostTensor>,
    loss: Option<LossKind>,
) -> Result<Score, TrainError> {
    let graph = compile(program)?;
    let scoring = scorings(program, &graph, split, loss)?;
    let targets = targets(&scoring, &graph, split)?;
    Ok(score_of(&scoring, &host_outputs(outputs), &targets)?.0)
}

/// One step on `batch` through `recorder`'s graph: the concordant forward pass, the reverse
/// pass at its values, an update. Returns the batch's loss, the `dynfixed` point positions of the pass and the
/// time of each part.
fn step_once(
    recorder: &mut layer::Recorder,
    scoring: &[Scoring],
    batch: &Split,
    targets: &[Targets],
    weights: &mut BTreeMap<String, HostTensor>,
    optimizer: &mut optim::Optimizer,
) -> Result<(f64, Points, StepParts), TrainError> {
    let mut parts = StepParts::default();
    let mut clock = Instant::now();
    let mut lap = |part: &mut f64| {
        let now = Instant::now();
        *part = (now - clock).as_secs_f64();
        clock = now;
    };
    let data = HostData {
        batch: batch.items(),
        weights: weights.clone(),
        inputs: batch.inputs.clone(),
    };
    let (_, recorded) = recorder.record(data)?;
    lap(&mut parts.record_s);
    let graph = recorder.graph();
    let values = recorded.values(graph)?;
    let outputs = flat_outputs(reverse::outputs(graph, &values)?);
    let (score, output_grads) = score_of(scoring, &outputs, targets)?;
    lap(&mut parts.loss_s);
    if !score.loss.is_finite() {
        // The run stops there (`TrainError::Diverged`).
        return Ok((score.loss, Points::default(), parts));
    }
    // The weights' gradients only: the recorder kept what they read.
    let grads = reverse::backward(graph, &values, &output_grads, false)?;
    lap(&mut parts.reverse_s);
    optimizer.step(weights, &grads.weights);
    lap(&mut parts.update_s);
    Ok((score.loss, grads.points, parts))
}
