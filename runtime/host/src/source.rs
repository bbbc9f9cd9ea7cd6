//! Where host tensors come from: a tensor file (or directory), whole or a selection of its
//! tensors under the names the program declares (`FILE:NAME=STORED[,NAME=STORED...]`, as
//! `--weights` and `--inputs` take it): `digits.safetensors:x=x_test` is the file's `x_test`
//! as the input `x`.

use crate::io::{self, IoError, StoredTensor};
use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};

/// A tensor file or directory, and which of its tensors are used under which names.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TensorSource {
    pub path: PathBuf,
    /// `(name, stored)` pairs: the tensor the file stores as `stored` is the declaration
    /// `name`'s. Empty: every tensor of the file, under its own name.
    pub select: Vec<(String, String)>,
}

/// A tensor source that cannot be parsed, or whose selection the file or program does not
/// match.
#[derive(Debug, thiserror::Error, miette::Diagnostic)]
pub enum SourceError {
    #[error(transparent)]
    #[diagnostic(transparent)]
    Io(#[from] IoError),
    #[error("`{spec}`: `{piece}` is not a selection NAME=STORED")]
    #[diagnostic(help(
        "select tensors as FILE:NAME=STORED[,NAME=STORED...], e.g. \
         `data.safetensors:x=x_test` (the file's `x_test` as the declaration `x`)"
    ))]
    Syntax { spec: String, piece: String },
    #[error("`{spec}` selects `{name}` twice")]
    #[diagnostic(help("select each declaration once"))]
    Twice { spec: String, name: String },
    #[error("`{path}` holds no tensor named `{stored}` (selected for `{name}`); it holds {held}")]
    #[diagnostic(help("select one of the tensors it holds: `{path}:{name}=STORED`"))]
    Unknown {
        /// The file, as it is written (`Path::display`).
        path: String,
        name: String,
        stored: String,
        held: String,
    },
    #[error(
        "`{path}:{name}={stored}` selects `{stored}` for `{name}`, which the program does not \
         declare; it takes {declared}"
    )]
    #[diagnostic(help(
        "select it under the name of one of the program's inputs or loaded weights, e.g. \
         `{path}:{first}={stored}`"
    ))]
    Undeclared {
        path: String,
        name: String,
        stored: String,
        declared: String,
        /// The first input or weight the program takes (for the help).
        first: String,
    },
}

impl TensorSource {
    /// Every tensor of the file or directory `path`, under its own name.
    pub fn file(path: impl Into<PathBuf>) -> TensorSource {
        TensorSource {
            path: path.into(),
            select: Vec::new(),
        }
    }

    /// `FILE` or `FILE:NAME=STORED[,NAME=STORED...]`. A `spec` that names an existing file
    /// or directory is that path whole, whatever it holds (a file name may contain `:`);
    /// otherwise the text after the last `:` is the selection when it holds a `=` or the
    /// text before it names an existing path (`data.safetensors:x` is then an error, not a
    /// file that does not exist).
    pub fn parse(spec: &str) -> Result<TensorSource, SourceError> {
        if Path::new(spec).exists() {
            return Ok(TensorSource::file(spec));
        }
        let Some((path, list)) = spec.rsplit_once(':') else {
            return Ok(TensorSource::file(spec));
        };
        if path.is_empty() || !(list.contains('=') || Path::new(path).exists()) {
            return Ok(TensorSource::file(spec));
        }
        let mut select: Vec<(String, String)> = Vec::new();
        for piece in list.split(',') {
            let syntax = || SourceError::Syntax {
                spec: spec.to_string(),
                piece: piece.to_string(),
            };
            let (name, stored) = piece.split_once('=').ok_or_else(syntax)?;
            if name.is_empty() || stored.is_empty() || stored.contains('=') {
                return Err(syntax());
            }
            if select.iter().any(|(n, _)| n == name) {
                return Err(SourceError::Twice {
                    spec: spec.to_string(),
                    name: name.to_string(),
                });
            }
            select.push((name.to_string(), stored.to_string()));
        }
        Ok(TensorSource {
            path: PathBuf::from(path),
            select,
        })
    }

    /// The tensors this source gives, by name, as their files' headers describe them (no
    /// values read, [`io::index_tensors`]): every tensor of the file, or the selected ones
    /// under their new names. A selected name the file does not hold is an error naming the
    /// ones it does.
    pub fn index(&self) -> Result<BTreeMap<String, StoredTensor>, SourceError> {
        let stored = io::index_tensors(&self.path)?;
        if self.select.is_empty() {
            return Ok(stored);
        }
        let mut out = BTreeMap::new();
        for (name, from) in &self.select {
            let Some(t) = stored.get(from) else {
                return Err(SourceError::Unknown {
                    path: self.path.display().to_string(),
                    name: name.clone(),
                    stored: from.clone(),
                    held: held(stored.keys()),
                });
            };
            out.insert(name.clone(), t.clone());
        }
        Ok(out)
    }
}

impl std::str::FromStr for TensorSource {
    type Err = SourceError;

    fn from_str(spec: &str) -> Result<TensorSource, SourceError> {
        TensorSource::parse(spec)
    }
}

impl From<PathBuf> for TensorSource {
    fn from(path: PathBuf) -> TensorSource {
        TensorSource::file(path)
    }
}

impl From<&Path> for TensorSource {
    fn from(path: &Path) -> TensorSource {
        TensorSource::file(path)
    }
}

/// `FILE` or `FILE:NAME=STORED,...`, as [`TensorSource::parse`] reads it.
impl fmt::Display for TensorSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.path.display())?;
        for (i, (name, stored)) in self.select.iter().enumerate() {
            let sep = if i == 0 { ':' } else { ',' };
            write!(f, "{sep}{name}={stored}")?;
        }
        Ok(())
    }
}

/// The names a file holds, for an error: `` `a`, `b` `` (the first 16), or "no tensors".
pub(crate) fn held<'a>(names: impl ExactSizeIterator<Item = &'a String>) -> String {
    const SHOWN: usize = 16;
    let count = names.len();
    if count == 0 {
        return "no tensors".to_string();
    }
    let mut list: Vec<String> = names.take(SHOWN).map(|n| format!("`{n}`")).collect();
    if count > SHOWN {
        list.push(format!("and {} more", count - SHOWN));
    }
    list.join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn specs_by_hand() {
        let s = TensorSource::parse("no/such/d.safetensors:x=x_test,W1=fc1.weight").unwrap();
        assert_eq!(s.path, Path::new("no/such/d.safetensors"));
        let pairs = [("x", "x_test"), ("W1", "fc1.weight")];
        let want: Vec<(String, String)> = pairs
            .iter()
            .map(|(a, b)| (a.to_string(), b.to_string()))
            .collect();
        assert_eq!(s.select, want);
        assert_eq!(
            s.to_string(),
            "no/such/d.safetensors:x=x_test,W1=fc1.weight"
        );
        // No `=` after the last `:` and no file before it: a path (that does not exist).
        let plain = TensorSource::parse("no/such:file.npy").unwrap();
        assert_eq!(plain, TensorSource::file("no/such:file.npy"));
        assert_eq!(
            TensorSource::parse(":x=y").unwrap(),
            TensorSource::file(":x=y")
        );
        for bad in ["d.npy:x=", "d.npy:x=a=b", "d.npy:x=a,,y=b"] {
            assert!(
                matches!(TensorSource::parse(bad), Err(SourceError::Syntax { .. })),
                "{bad}"
            );
        }
        assert!(matches!(
            TensorSource::parse("d.npy:x=a,x=b"),
            Err(SourceError::Twice { .. })
        ));
    }

    /// An existing file is read whole whatever its name holds; after an existing path, the
    /// rest must be a selection.
    #[test]
    fn an_existing_path_wins() {
        let dir = std::env::temp_dir().join(format!("nnp-host-source-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let odd = dir.join("a:x=y.npy");
        std::fs::write(&odd, b"").unwrap();
        let spec = odd.to_str().unwrap();
        assert_eq!(TensorSource::parse(spec).unwrap(), TensorSource::file(&odd));
        let e = TensorSource::parse(&format!("{}:x", dir.display())).unwrap_err();
        assert!(matches!(e, SourceError::Syntax { .. }), "{e}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
