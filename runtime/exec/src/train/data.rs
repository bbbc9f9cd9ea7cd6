//! Training data: the items of every input and the targets of every output, in a training and
//! a test split, read from a tensor file's `NAME_train` / `NAME_test` (or `NAME`) tensors.

use super::TrainError;
use nnp_grammar::Program;
use nnp_host::Tensor as HostTensor;
use std::collections::BTreeMap;

/// Items for every input (`[items, ...declared shape]`) and the targets of every output.
#[derive(Clone, Debug, Default)]
pub struct Split {
    pub inputs: BTreeMap<String, HostTensor>,
    pub targets: BTreeMap<String, HostTensor>,
}

impl Split {
    /// Items of the split (the inputs' first dimension).
    pub fn items(&self) -> usize {
        self.inputs
            .values()
            .chain(self.targets.values())
            .next()
            .and_then(|t| t.shape.first().copied())
            .unwrap_or(0)
    }

    /// The items `idx`, in that order.
    pub(super) fn gather(&self, idx: &[usize]) -> Split {
        let take = |ts: &BTreeMap<String, HostTensor>| {
            ts.iter()
                .map(|(name, t)| {
                    let per = t.data.len() / t.shape.first().copied().unwrap_or(1).max(1);
                    let mut data = Vec::with_capacity(idx.len() * per);
                    for &i in idx {
                        data.extend_from_slice(&t.data[i * per..(i + 1) * per]);
                    }
                    let mut shape = t.shape.clone();
                    shape[0] = idx.len();
                    (name.clone(), HostTensor { shape, data })
                })
                .collect()
        };
        Split {
            inputs: take(&self.inputs),
            targets: take(&self.targets),
        }
    }
}

/// The training and test items.
#[derive(Clone, Debug, Default)]
pub struct Dataset {
    pub train: Split,
    /// `None`: the model is evaluated on the training items.
    pub test: Option<Split>,
}

impl Dataset {
    /// The tensors of a data file for `program`: for each input and output `NAME`,
    /// `NAME_train` and `NAME_test`, or `NAME` alone (then the test set is the training set).
    pub fn from_tensors(
        program: &Program,
        mut tensors: BTreeMap<String, HostTensor>,
    ) -> Result<Dataset, TrainError> {
        let names: Vec<(String, bool)> = program
            .inputs()
            .map(|d| (d.name.clone(), true))
            .chain(program.outputs().map(|d| (d.name.clone(), false)))
            .collect();
        let split = |tensors: &mut BTreeMap<String, HostTensor>, suffix: &str| {
            let mut s = Split::default();
            for (name, input) in &names {
                let key = format!("{name}{suffix}");
                if let Some(t) = tensors.remove(&key) {
                    match input {
                        true => s.inputs.insert(name.clone(), t),
                        false => s.targets.insert(name.clone(), t),
                    };
                }
            }
            s
        };
        let mut train = split(&mut tensors, "_train");
        let test = split(&mut tensors, "_test");
        if train.inputs.is_empty() && train.targets.is_empty() {
            train = split(&mut tensors, "");
        }
        for (name, input) in &names {
            let held = if *input {
                &train.inputs
            } else {
                &train.targets
            };
            if !held.contains_key(name) {
                let what = if *input {
                    "input"
                } else {
                    "the targets of output"
                };
                return Err(TrainError::NoData {
                    name: name.to_string(),
                    what,
                });
            }
        }
        let test = (!test.inputs.is_empty() || !test.targets.is_empty()).then_some(test);
        let data = Dataset { train, test };
        data.check(program)?;
        Ok(data)
    }

    /// Every split has every input and target, with one item count and the declared shapes.
    pub(super) fn check(&self, program: &Program) -> Result<(), TrainError> {
        for (which, s) in
            std::iter::once(("train", &self.train)).chain(self.test.iter().map(|t| ("test", t)))
        {
            let items = s.items();
            if items == 0 {
                return Err(TrainError::Data(format!("the {which} split has no items")));
            }
            for d in program.inputs() {
                let t = s.inputs.get(&d.name).ok_or_else(|| {
                    TrainError::Data(format!("the {which} split has no input `{}`", d.name))
                })?;
                let mut want = vec![items];
                want.extend(&d.shape);
                if t.shape != want {
                    return Err(TrainError::Data(format!(
                        "input `{}` of the {which} split has shape {:?}; the program takes \
                         {want:?} ([items, ...declared shape])",
                        d.name, t.shape
                    )));
                }
                if let Some(k) = t.data.iter().position(|v| !v.is_finite()) {
                    return Err(TrainError::Data(format!(
                        "input `{}` of the {which} split holds {} at element {k}",
                        d.name, t.data[k]
                    )));
                }
            }
            for d in program.outputs() {
                let t = s.targets.get(&d.name).ok_or_else(|| {
                    TrainError::Data(format!("the {which} split has no targets for `{}`", d.name))
                })?;
                if t.shape.first() != Some(&items) {
                    return Err(TrainError::Data(format!(
                        "the targets of `{}` in the {which} split have {} items; its inputs \
                         {items}",
                        d.name,
                        t.shape.first().copied().unwrap_or(0)
                    )));
                }
            }
        }
        Ok(())
    }
}
