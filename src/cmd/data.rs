//! The host-data flags shared by the commands that execute firmware (`run`, `emulate`,
//! `diff`): where the weights and inputs come from. One definition, so the emulator and the
//! software graph always see the same data for the same flags.

use nnp_grammar::Interface;
use nnp_runtime::host::{HostData, HostError, InputFeed, LoadOptions, Tensor, TensorSource};
use std::collections::BTreeMap;

/// Host data: weight and input files, or seeded random data of the declared shapes.
#[derive(clap::Args, Clone, Debug)]
pub struct DataArgs {
    /// Weights: a .safetensors file, a .npy file, or a directory of .npy files; with
    /// `:NAME=STORED[,NAME=STORED...]`, only the tensors stored as STORED, used as NAME.
    #[arg(long, value_name = "FILE[:NAME=STORED,...]", value_parser = parse_source)]
    pub weights: Option<TensorSource>,
    /// Inputs, same kinds of file and selection (`data.safetensors:x=x_test`); each input is
    /// its declared shape or [batch, ...shape].
    #[arg(long, value_name = "FILE[:NAME=STORED,...]", value_parser = parse_source)]
    pub inputs: Option<TensorSource>,
    /// Batch size: independent input sets run in one pass (default: from batched inputs, else
    /// 1).
    #[arg(long, value_name = "B", value_parser = super::at_least_one)]
    pub batch: Option<usize>,
    /// Seed of the random data used when no files are given (or with --random-missing).
    #[arg(long, value_name = "S", default_value_t = 0)]
    pub seed: u64,
    /// Fill tensors missing from --weights/--inputs with seeded random data.
    #[arg(long)]
    pub random_missing: bool,
}

impl DataArgs {
    /// The batch of seeded random data when no files are given (`None` with files);
    /// `fallback_batch` as in [`DataArgs::feed`].
    pub fn random_batch(&self, fallback_batch: Option<usize>) -> Option<usize> {
        let random = self.weights.is_none() && self.inputs.is_none();
        random.then(|| self.batch.or(fallback_batch).unwrap_or(1).max(1))
    }

    /// The host data these flags describe, the inputs made or read a range of items at a
    /// time: the weights, and the inputs' feed. `fallback_batch` is used when neither
    /// `--batch` nor batched input files say how many input sets there are.
    pub fn feed(
        &self,
        program: &dyn Interface,
        fallback_batch: Option<usize>,
    ) -> Result<(BTreeMap<String, Tensor>, InputFeed), HostError> {
        // Refused before any is made (a compiled graph's declarations may be any size).
        nnp_runtime::host::weights_fit(program)?;
        if let Some(batch) = self.random_batch(fallback_batch) {
            let weights = HostData::random_weights(program, self.seed);
            return Ok((weights, InputFeed::random(program, batch, self.seed)));
        }
        let opts = LoadOptions {
            batch: self.batch.or(fallback_batch),
            random_missing: self.random_missing,
            seed: self.seed,
        };
        let data =
            HostData::open_sources(program, self.weights.as_ref(), self.inputs.as_ref(), &opts)?;
        for note in self.unused_tensors(program) {
            // A warning that cannot be shown does not stop the run.
            let _ = super::output::stderr(format!("warning: {note}\n"));
        }
        Ok(data)
    }

    /// What the files hold that the run does not use: tensors that no declaration names (a
    /// misspelt name, whose declaration `--random-missing` then fills), and names in both
    /// files (the weights file's tensor is the one used).
    fn unused_tensors(&self, program: &dyn Interface) -> Vec<String> {
        // Named as the run looks them up.
        let names = |source: Option<&TensorSource>, input: bool| {
            let index = source.and_then(|s| HostData::index_file(program, s, input).ok());
            index
                .map(|t| t.into_keys().collect::<Vec<_>>())
                .unwrap_or_default()
        };
        let declared = |n: &String| program.decl(n).is_some();
        let weights = names(self.weights.as_ref(), false);
        let inputs = names(self.inputs.as_ref(), true);
        let mut notes = Vec::new();
        for (source, held) in [(&self.weights, &weights), (&self.inputs, &inputs)] {
            let Some(source) = source else { continue };
            for name in held.iter().filter(|n| !declared(n)) {
                notes.push(format!(
                    "{}: `{name}` is not a declaration of the program; it is not used",
                    source.path.display()
                ));
            }
        }
        for name in weights.iter().filter(|n| declared(n) && inputs.contains(n)) {
            notes.push(format!(
                "`{name}` is in both files; the one in the weights file is used"
            ));
        }
        notes
    }
}

/// `FILE` or `FILE:NAME=STORED[,NAME=STORED...]` ([`TensorSource::parse`]), for clap: a
/// selection that cannot be parsed is a usage error, with its help.
pub(super) fn parse_source(spec: &str) -> Result<TensorSource, String> {
    TensorSource::parse(spec).map_err(|e| {
        use miette::Diagnostic as _;
        match e.help() {
            Some(help) => format!("{e}\n  help: {help}"),
            None => e.to_string(),
        }
    })
}
