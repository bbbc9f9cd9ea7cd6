//! Firmware files with the targets their headers name (`// nnpc: targets = a, b`): the samples,
//! and the fuzz corpus's firmware.

use std::path::{Path, PathBuf};

/// One firmware file: its name, text, and the TOML of each target its header names.
pub struct Firmware {
    pub name: String,
    pub text: String,
    pub targets: Vec<String>,
}

/// Every shipped sample (`samples/*.nnp`), each naming at least one target.
pub fn samples() -> Vec<Firmware> {
    firmware_in(&super::root().join("samples"))
}

/// Every `*.nnp` in `dir`, in name order, with the targets its header names (a file that names
/// none is refused).
pub fn firmware_in(dir: &Path) -> Vec<Firmware> {
    let mut paths: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "nnp"))
        .collect();
    paths.sort();
    paths
        .iter()
        .map(|p| {
            let text = std::fs::read_to_string(p).expect("firmware reads");
            let targets: Vec<String> = text
                .lines()
                .find_map(|l| l.trim().strip_prefix("// nnpc: targets ="))
                .map(|rest| rest.split(',').map(|s| target_toml(s.trim())).collect())
                .unwrap_or_default();
            let name = p
                .file_name()
                .map_or(String::new(), |n| n.to_string_lossy().into_owned());
            assert!(!targets.is_empty(), "{name} names no target");
            Firmware {
                name,
                text,
                targets,
            }
        })
        .collect()
}

/// The TOML of a target named in a header: `bw-default`, or `samples/targets/NAME.toml`.
pub fn target_toml(name: &str) -> String {
    if name == "bw-default" {
        return "name = \"bw-default\"\n".into();
    }
    let path = super::root()
        .join("samples/targets")
        .join(format!("{name}.toml"));
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}
