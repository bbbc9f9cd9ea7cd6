//! The files a command reads and writes: no output may land on a file the command reads
//! ([`Reads::check`], one rule for every command), and what every tensor file nnpc writes
//! records about how it was made ([`provenance`]), which `nnpc diff` holds against its own
//! flags ([`provenance_warnings`]).

use super::data::DataArgs;
use super::failure::fail;
use nnp_grammar::ast::Item;
use nnp_grammar::target::BUILTIN_TARGETS;
use nnp_grammar::{Interface, Program, Target, fnv1a64, target_hash};
use nnp_lowering::swgraph::{Op, SwGraph};
use nnp_runtime::io::{Metadata, OutputKind, output_kind, sidecar_path};
use std::path::{Path, PathBuf};

/// The files a command reads, each with the words that say where it came from ("the
/// firmware file", "the file --weights gives").
#[derive(Default)]
pub struct Reads(Vec<(String, PathBuf)>);

impl Reads {
    /// Add `path`, read as `what`; a directory adds the files in it too (a tensor directory
    /// is read file by file).
    pub fn add(&mut self, what: impl Into<String>, path: &Path) {
        let what = what.into();
        if path.is_dir()
            && let Ok(entries) = std::fs::read_dir(path)
        {
            for entry in entries.flatten() {
                self.0
                    .push((format!("a file in the directory {what}"), entry.path()));
            }
        }
        self.0.push((what, path.to_path_buf()));
    }

    /// The files a command on the firmware `file` reads: the firmware, the target file that
    /// `--target` (`target_flag`) or the firmware's `target` statement names, and the target's
    /// activation table files.
    pub fn firmware(file: &Path, target_flag: Option<&str>, program: &Program) -> Reads {
        let mut reads = Reads::default();
        reads.add("the firmware file", file);
        match target_flag {
            Some(t) if !BUILTIN_TARGETS.contains(&t) => {
                reads.add("the target file --target gives", Path::new(t));
            }
            Some(_) => {}
            None => {
                if let Some(path) = statement_target(file, program) {
                    reads.add("the target file of the firmware's `target` line", &path);
                }
            }
        }
        reads.tables(&program.target);
        reads
    }

    /// The files a run of the compiled graph `file` reads: the graph and the activation table
    /// files its ops name.
    pub fn graph(file: &Path, graph: &SwGraph) -> Reads {
        let mut reads = Reads::default();
        reads.add("the compiled graph", file);
        for node in &graph.nodes {
            if let Op::Unary {
                table: Some(path), ..
            } = &node.op
            {
                reads.add("an activation table file of the graph", Path::new(path));
            }
        }
        reads
    }

    /// The host data files of `data`.
    pub fn data(&mut self, data: &DataArgs) {
        for (flag, source) in [("--weights", &data.weights), ("--inputs", &data.inputs)] {
            if let Some(source) = source {
                self.add(format!("the file {flag} gives"), &source.path);
            }
        }
    }

    fn tables(&mut self, target: &Target) {
        let t = &target.numerics.tables;
        for (_, path) in t.iter() {
            self.add(
                "an activation table file of the target",
                &target.table_path(path),
            );
        }
    }

    /// An error where `written` (given by `flag`) is, or will replace, a file this command
    /// reads: the same file by any name (a link, a hard link, `./x`), compared by device and
    /// inode where it exists. A path that does not exist yet is no file read.
    pub fn check(&self, flag: &str, written: &Path) -> miette::Result<()> {
        use std::os::unix::fs::MetadataExt;
        let Ok(out) = std::fs::metadata(written) else {
            return Ok(());
        };
        for (what, path) in &self.0 {
            let same =
                std::fs::metadata(path).is_ok_and(|m| (m.dev(), m.ino()) == (out.dev(), out.ino()));
            if same {
                let reads = format!(
                    "{flag} {} names {what}, which this command reads: writing there would \
                     lose it",
                    written.display()
                );
                return Err(super::fail(
                    super::Failure::new(reads).help("write to another path"),
                ));
            }
        }
        Ok(())
    }

    /// [`check`](Self::check) every file that tensors named `names` written to `path` go to
    /// ([`written_files`]).
    pub fn check_tensors<'a>(
        &self,
        flag: &str,
        path: &Path,
        names: impl IntoIterator<Item = &'a String>,
    ) -> miette::Result<()> {
        for file in written_files(path, names) {
            self.check(flag, &file)?;
        }
        Ok(())
    }
}

/// The target file the firmware's `target` line names, resolved against the firmware's
/// directory; `None` for a built-in target or none.
fn statement_target(file: &Path, program: &Program) -> Option<PathBuf> {
    let ast = nnp_grammar::parse(&program.source).ok()?;
    let value = ast.items.iter().find_map(|item| match item {
        Item::Target(t) => Some(t.value.clone()),
        _ => None,
    })?;
    if BUILTIN_TARGETS.contains(&value.as_str()) {
        return None;
    }
    let path = Path::new(&value);
    Some(match file.parent() {
        Some(dir) if path.is_relative() => dir.join(path),
        _ => path.to_path_buf(),
    })
}

/// Whether `a` and `b` name one file (or directory): one that exists, by any of its names
/// (links, hard links, `./x`), or one yet to be made, by the same place (its nearest existing
/// directory resolved, the rest of the path taken as written).
pub fn same_file(a: &Path, b: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    match (std::fs::metadata(a), std::fs::metadata(b)) {
        (Ok(a), Ok(b)) => (a.dev(), a.ino()) == (b.dev(), b.ino()),
        (Err(_), Err(_)) => place(a).is_some_and(|p| place(b) == Some(p)),
        _ => false,
    }
}

/// Where a path that does not exist yet will be: its nearest existing ancestor, resolved,
/// with the rest of its names. `None` where a missing directory is followed by `..` (the
/// system cannot resolve such a path either).
fn place(path: &Path) -> Option<PathBuf> {
    let absolute = std::path::absolute(path).ok()?;
    let mut rest = Vec::new();
    let mut base = absolute.as_path();
    let mut out = loop {
        if let Ok(dir) = base.canonicalize() {
            break dir;
        }
        rest.push(base.file_name()?);
        base = base.parent()?;
    };
    out.extend(rest.iter().rev());
    Some(out)
}

/// An error where two outputs of one command (each a flag and the files it writes,
/// [`written_files`]) would write one file: the second would lose the first.
pub fn refuse_shared(
    (flag, files): (&str, &[PathBuf]),
    (other, others): (&str, &[PathBuf]),
) -> miette::Result<()> {
    for file in files {
        if let Some(shared) = others.iter().find(|o| same_file(o, file)) {
            let what = format!(
                "{flag} writes {}, which {other} writes too: one would lose the other",
                shared.display()
            );
            return Err(fail(
                super::Failure::new(what).help(format!("give {flag} another path")),
            ));
        }
    }
    Ok(())
}

/// Every file that tensors named `names` written to `path` go to: the file itself, or each
/// `NAME.npy` of a directory (and the directory), and the sidecar file.
pub fn written_files<'a>(path: &Path, names: impl IntoIterator<Item = &'a String>) -> Vec<PathBuf> {
    let mut files = vec![path.to_path_buf()];
    if matches!(output_kind(path), Ok(OutputKind::Dir)) {
        files.extend(names.into_iter().map(|n| path.join(format!("{n}.npy"))));
    }
    files.extend(sidecar_path(path));
    files
}

/// Metadata keys of the tensor files that `run` and `emulate` write.
pub mod key {
    pub const VERSION: &str = "nnpc.version";
    /// The firmware file as given on the command line (a compiled graph: the firmware it was
    /// compiled from).
    pub const PROGRAM: &str = "nnpc.program";
    /// [`nnp_grammar::fnv1a64`] of the firmware's text.
    pub const PROGRAM_HASH: &str = "nnpc.program_fnv1a64";
    pub const TARGET: &str = "nnpc.target";
    /// [`nnp_grammar::target_hash`]: FNV-1a of the target's settings as JSON.
    pub const TARGET_HASH: &str = "nnpc.target_fnv1a64";
    pub const SEED: &str = "nnpc.seed";
    pub const BATCH: &str = "nnpc.batch";
    /// Where the host data came from: `random` (seeded), `files`, or `files+random`
    /// (`--random-missing`, or `--weights` with no `--inputs`).
    pub const DATA: &str = "nnpc.data";
}

/// Where `data` takes the host data from ([`key::DATA`]): a weights file with no inputs file
/// seeds the inputs (`HostData::open`), so it is `files+random`.
fn data_source(data: &DataArgs) -> &'static str {
    match (
        data.weights.is_some() || data.inputs.is_some(),
        data.random_missing || data.inputs.is_none(),
    ) {
        (false, _) => "random",
        (true, false) => "files",
        (true, true) => "files+random",
    }
}

/// What the outputs of `program` (from `file`, or the firmware a compiled graph names when
/// `graph` is true) run on `data` with `batch` items record ([`key`]): enough for `nnpc
/// diff` to say when its own flags would give other data or another program.
pub fn provenance(
    file: &Path,
    program: &dyn Interface,
    graph: bool,
    data: &DataArgs,
    batch: usize,
) -> Metadata {
    let made = program.provenance();
    let mut m = Metadata::new();
    let mut set = |k: &str, v: String| {
        m.insert(k.to_string(), v);
    };
    set(key::VERSION, env!("CARGO_PKG_VERSION").to_string());
    set(
        key::PROGRAM,
        match graph {
            true => made.program,
            false => file.display().to_string(),
        },
    );
    set(key::PROGRAM_HASH, made.program_hash);
    set(key::TARGET, made.target);
    set(key::TARGET_HASH, made.target_hash);
    set(key::SEED, data.seed.to_string());
    set(key::BATCH, batch.to_string());
    set(key::DATA, data_source(data).to_string());
    m
}

/// How the dump `dump`, whose metadata is `made` ([`provenance`]), was made otherwise than
/// `nnpc diff` on `file` with `program` and `data` runs the software graph: each a warning
/// naming what differs and the flag that makes it the same.
pub fn provenance_warnings(
    dump: &Path,
    made: &Metadata,
    file: &Path,
    program: &Program,
    data: &DataArgs,
) -> Vec<String> {
    let mut out = Vec::new();
    let dump = dump.display();
    let get = |k: &str| made.get(k).map(String::as_str);
    if let Some(name) = get(key::PROGRAM) {
        let differs = match get(key::PROGRAM_HASH) {
            Some(hash) => hash != fnv1a64(program.source.text.as_bytes()),
            None => Path::new(name).file_name() != file.file_name(),
        };
        if differs {
            out.push(format!(
                "`{dump}` was made from `{name}`, whose text differs from `{}`'s: its outputs \
                 may differ for that reason alone (diff the firmware it was made from)",
                file.display()
            ));
        }
    }
    if let Some(target) = get(key::TARGET) {
        let same_name = target == program.target.name;
        let differs =
            !same_name || get(key::TARGET_HASH).is_some_and(|h| h != target_hash(&program.target));
        if differs {
            let which = if same_name {
                format!("a target `{target}` whose settings differ from this one's")
            } else {
                format!("the target `{target}`, not `{}`", program.target.name)
            };
            out.push(format!(
                "`{dump}` was made for {which}: pass `--target` with the target it was made \
                 for"
            ));
        }
    }
    let ours = data_source(data);
    let random = |source: &str| source != "files";
    if let Some(theirs) = get(key::DATA) {
        let seed = get(key::SEED).unwrap_or("0");
        if theirs == "random" && ours != "random" {
            out.push(format!(
                "`{dump}` was made with seeded random data (--seed {seed}), and this diff reads \
                 --weights/--inputs files: leave them out and pass --seed {seed}"
            ));
        } else if theirs != "random" && ours == "random" {
            out.push(format!(
                "`{dump}` was made from --weights/--inputs files, and this diff uses seeded \
                 random data: pass the same files"
            ));
        } else if random(theirs) && random(ours) && seed != data.seed.to_string() {
            out.push(format!(
                "the dump `{dump}` was made with --seed {seed}, and this diff uses --seed {}: \
                 pass --seed {seed}",
                data.seed
            ));
        }
    }
    out
}

/// Write `bytes` to `path` (given by `flag`) in one piece: through a temporary file beside it
/// and an atomic rename ([`nnp_runtime::io::write_file_atomic`]), so that a full disk or a
/// crash leaves the old file whole and two writers never interleave; refused where `path`
/// is a file the command reads (`reads`).
pub fn write_output(flag: &str, path: &Path, bytes: &[u8], reads: &Reads) -> miette::Result<()> {
    reads.check(flag, path)?;
    nnp_runtime::io::write_file_atomic(path, bytes)
        .map_err(|e| fail(format!("cannot write `{}`: {e}", path.display())))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Tensors written to a directory go to `NAME.npy` in it and `nnpc.json`; to a file, to
    /// it and (for `.npy`) its sidecar.
    #[test]
    fn written_files_by_hand() {
        let names = ["y".to_string(), "z".to_string()];
        let got = written_files(Path::new("/nonexistent/out"), &names);
        let want: Vec<PathBuf> = ["out", "out/y.npy", "out/z.npy", "out/nnpc.json"]
            .iter()
            .map(|p| Path::new("/nonexistent").join(p))
            .collect();
        assert_eq!(got, want);
        let got = written_files(Path::new("a/hw.npy"), &names);
        assert_eq!(
            got,
            vec![
                PathBuf::from("a/hw.npy"),
                PathBuf::from("a/hw.npy.nnpc.json")
            ]
        );
        let got = written_files(Path::new("a/hw.safetensors"), &names);
        assert_eq!(got, vec![PathBuf::from("a/hw.safetensors")]);
    }
}
