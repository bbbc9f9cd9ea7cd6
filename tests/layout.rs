//! The layout rules of docs/testing.md ("Layout"), enforced on the sources: no source file of
//! a crate over 800 lines and no function over 150 (tests excepted), no import cycle between
//! the files of a crate, and docs/architecture.md's MFU-op recipe naming exactly the files a
//! new binary op touches.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The source folders: crate name, folder under the workspace root.
const CRATES: [(&str, &str); 10] = [
    ("numerics", "numerics/src"),
    ("grammar", "grammar/src"),
    ("lowering", "lowering/src"),
    ("host", "runtime/host/src"),
    ("emulator", "runtime/emulator/src"),
    ("exec", "runtime/exec/src"),
    ("runtime", "runtime/src"),
    ("nnpc", "src"),
    ("progen", "progen/src"),
    ("python", "python/src"),
];

/// Most lines a source file may have (tests excepted).
const MAX_LINES: usize = 800;

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// Every `.rs` file under `dir`, sorted.
fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let entries = std::fs::read_dir(&d).unwrap_or_else(|e| panic!("{}: {e}", d.display()));
        for entry in entries {
            let path = entry.expect("a directory entry").path();
            if path.is_dir() {
                stack.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                out.push(path);
            }
        }
    }
    out.sort();
    out
}

/// A test file: one named `tests.rs`, or one under a `tests` folder.
fn is_test(src: &Path, file: &Path) -> bool {
    let rel = file.strip_prefix(src).unwrap_or(file);
    rel.file_name().is_some_and(|n| n == "tests.rs")
        || rel
            .parent()
            .is_some_and(|p| p.components().any(|c| c.as_os_str() == "tests"))
}

#[test]
fn no_source_file_is_over_800_lines() {
    let mut long = Vec::new();
    for (_, dir) in CRATES {
        let src = root().join(dir);
        for file in rust_files(&src).into_iter().filter(|f| !is_test(&src, f)) {
            let text = std::fs::read_to_string(&file).expect("a readable source file");
            let lines = text.lines().count();
            if lines > MAX_LINES {
                long.push(format!("{} ({lines} lines)", file.display()));
            }
        }
    }
    assert!(
        long.is_empty(),
        "source files over {MAX_LINES} lines (split them by concern): {long:#?}"
    );
}

type ModPath = Vec<String>;

/// The module path of `file` in the crate whose root folder is `src`.
fn module_path(src: &Path, file: &Path) -> ModPath {
    let rel = file.strip_prefix(src).unwrap_or(file).with_extension("");
    let mut path: ModPath = rel
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    if matches!(
        path.last().map(String::as_str),
        Some("mod" | "lib" | "main")
    ) {
        path.pop();
    }
    path
}

/// `text` without `//` comments (doc comments included), without an inline
/// `#[cfg(test)] mod tests { ... }` (or `pub(crate) mod tests`) at its end, and with `pub(in path)` written `pub`.
fn code(text: &str) -> String {
    let stripped: String = text
        .lines()
        .map(|l| l.find("//").map_or(l, |i| &l[..i]))
        .collect::<Vec<_>>()
        .join("\n");
    let tests = [
        "#[cfg(test)]\nmod tests {",
        "#[cfg(test)]\npub(crate) mod tests {",
    ];
    let mut code = match tests.iter().filter_map(|t| stripped.find(t)).min() {
        Some(i) => stripped[..i].to_string(),
        None => stripped,
    };
    // A `pub(in path)` visibility names a module without importing it.
    while let Some(i) = code.find("pub(in ") {
        let end = code[i..].find(')').map_or(code.len(), |e| i + e + 1);
        code.replace_range(i..end, "pub");
    }
    code
}

fn is_ident(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// `code` (its literals blanked, [`blank_literals`], so that braces in them are not counted)
/// with the `super::` paths inside its inline modules (`mod kernels { ... }`) written as the
/// file sees them: `super::` there names the file itself, not its parent.
fn rebase_inline_supers(code: &str) -> String {
    let text = code;
    let mut modules = Vec::new();
    let mut from = 0;
    while let Some(k) = text[from..].find("mod ") {
        let i = from + k;
        from = i + 4;
        if i > 0 && text[..i].ends_with(is_ident) {
            continue;
        }
        let rest = &text[i + 4..];
        let name = rest.find(|c: char| !is_ident(c)).unwrap_or(rest.len());
        let after = rest[name..].trim_start();
        if name > 0 && after.starts_with('{') {
            let open = i + 4 + name + (rest.len() - name - after.len());
            modules.push((open, closing_brace(text.as_bytes(), open)));
        }
    }
    let depth = |i: usize| modules.iter().filter(|(o, c)| *o < i && i < *c).count();
    let mut out = String::with_capacity(code.len());
    let mut at = 0;
    while let Some(k) = code[at..].find("super::") {
        let i = at + k;
        let word = i == 0 || !code[..i].ends_with(is_ident);
        let supers = (0..)
            .take_while(|n| code[i + 7 * n..].starts_with("super::"))
            .count();
        out.push_str(&code[at..i]);
        at = i + 7 * supers;
        let d = if word { depth(i) } else { 0 };
        match (d, supers >= d) {
            (0, _) => out.push_str(&"super::".repeat(supers)),
            (_, true) if supers > d => out.push_str(&"super::".repeat(supers - d)),
            _ => out.push_str("self::"),
        }
    }
    out.push_str(&code[at..]);
    out
}

/// The items a `use` tree names, `{}` groups expanded, each as `path` or `path as name`
/// (`crate::a::{b, c::{d, e as f}}` names `crate::a::b`, `crate::a::c::d`,
/// `crate::a::c::e as f`).
fn expand(tree: &str) -> Vec<String> {
    let tree = tree.trim();
    let Some(open) = tree.find('{') else {
        let item = tree.split_whitespace().collect::<Vec<_>>().join(" ");
        return vec![item];
    };
    let close = tree.rfind('}').filter(|&c| c > open).unwrap_or(tree.len());
    let (prefix, body) = (&tree[..open], &tree[open + 1..close]);
    let mut parts = Vec::new();
    let (mut depth, mut start) = (0, 0);
    for (i, c) in body.char_indices() {
        match c {
            '{' => depth += 1,
            '}' => depth -= 1,
            ',' if depth == 0 => {
                parts.push(&body[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&body[start..]);
    parts
        .into_iter()
        .filter(|p| !p.trim().is_empty())
        .flat_map(expand)
        .map(|p| format!("{}{p}", prefix.trim()))
        .collect()
}

/// An item of [`expand`] without its rename, and the name it is known by.
fn renamed(item: &str) -> (&str, &str) {
    match item.split_once(" as ") {
        Some((path, name)) => (path.trim(), name.trim()),
        None => (item, item.rsplit("::").next().unwrap_or(item)),
    }
}

/// The `use` trees of `code` (`use` at a word start), whitespace collapsed.
fn use_trees(code: &str) -> Vec<String> {
    let at_word = |i: usize| i == 0 || !code[..i].ends_with(is_ident);
    let mut out = Vec::new();
    let mut from = 0;
    while let Some(k) = code[from..].find("use") {
        let i = from + k;
        from = i + 3;
        let after = &code[i + 3..];
        if at_word(i) && after.starts_with(char::is_whitespace) {
            let end = after.find(';').unwrap_or(after.len());
            let tree: String = after[..end]
                .split_whitespace()
                .collect::<Vec<_>>()
                .join(" ");
            out.push(tree.replace(":: ", "::").replace(" ::", "::"));
        }
    }
    out
}

/// The paths of `code` that start with `head` (`crate::`, or a child module's `name::`) at a
/// path's start (not after `::`), as far as their segments go.
fn inline_paths(code: &str, head: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut from = 0;
    while let Some(k) = code[from..].find(head) {
        let i = from + k;
        from = i + head.len();
        if code[..i].ends_with(is_ident) || code[..i].ends_with("::") {
            continue;
        }
        let mut end = i + head.len();
        loop {
            let rest = &code[end..];
            let len = rest.find(|c: char| !is_ident(c)).unwrap_or(rest.len());
            if len == 0 || rest.starts_with(|c: char| c.is_ascii_digit()) {
                break;
            }
            end += len;
            if code[end..].starts_with("::") {
                end += 2;
            } else {
                break;
            }
        }
        let path = code[i..end].trim_end_matches("::");
        // A `use` group's prefix (`crate::a::{b, c}`) names no item: its expansion does.
        let group = code[i + path.len()..].starts_with("::{");
        if path.contains("::") && !group {
            out.push(path.to_string());
        }
    }
    out
}

/// Every `crate::`, `super::` or `self::` path of `code`, and every path into one of
/// `children` (bare `steps::Step` in `session.rs`, written `self::steps::Step`): the `use`
/// trees and the paths written inline.
fn paths(code: &str, children: &[&str]) -> Vec<String> {
    let own = |p: &str| {
        ["crate::", "super::", "self::"]
            .iter()
            .any(|h| p.starts_with(h))
    };
    let child = |p: &str| children.iter().any(|c| p.starts_with(&format!("{c}::")));
    let mut out = Vec::new();
    for tree in use_trees(code) {
        for item in expand(&tree) {
            let (path, _) = renamed(&item);
            match () {
                _ if own(path) => out.push(path.to_string()),
                _ if child(path) => out.push(format!("self::{path}")),
                _ => {}
            }
        }
    }
    for head in ["crate::", "super::", "self::"] {
        out.extend(inline_paths(code, head));
    }
    for c in children {
        let found = inline_paths(code, &format!("{c}::"));
        out.extend(found.into_iter().map(|p| format!("self::{p}")));
    }
    out
}

/// The file a path in module `from` refers to (the longest prefix of its module path that is
/// a file of the crate), and the segments after it.
fn locate(
    from: &ModPath,
    path: &str,
    files: &BTreeMap<ModPath, PathBuf>,
) -> Option<(ModPath, Vec<String>)> {
    let mut segs = path.split("::").filter(|s| !s.is_empty()).peekable();
    let mut full: ModPath = match segs.peek().copied() {
        Some("crate") => {
            segs.next();
            Vec::new()
        }
        Some("super" | "self") => {
            let mut base = from.clone();
            while let Some(&s) = segs.peek() {
                match s {
                    "super" => {
                        base.pop();
                    }
                    "self" => {}
                    _ => break,
                }
                segs.next();
            }
            base
        }
        _ => return None,
    };
    full.extend(segs.filter(|s| *s != "*").map(str::to_string));
    (0..=full.len())
        .rev()
        .find(|&k| files.contains_key(&full[..k]))
        .map(|k| (full[..k].to_vec(), full[k..].to_vec()))
}

/// What each file re-exports (`pub use`, `pub(crate) use`, `pub(super) use`): the name it
/// gives, and the path it names (a child's bare path written `self::`).
type Reexports = BTreeMap<ModPath, BTreeMap<String, String>>;

/// `code` split into its re-exports' trees and the rest.
fn split_reexports(code: &str) -> (Vec<String>, String) {
    let (mut trees, mut rest, mut out) = (Vec::new(), code, String::new());
    while let Some((i, head)) = ["pub use ", "pub(crate) use ", "pub(super) use "]
        .iter()
        .filter_map(|h| rest.find(h).map(|i| (i, *h)))
        .min()
    {
        out.push_str(&rest[..i]);
        let body = &rest[i + head.len()..];
        let end = body.find(';').unwrap_or(body.len());
        trees.extend(use_trees(&format!("use {};", &body[..end])));
        rest = &body[(end + 1).min(body.len())..];
    }
    out.push_str(rest);
    (trees, out)
}

/// The file a path in module `from` refers to, followed through re-exports to the file that
/// defines the name (`super::Checker`, re-exported from `checker`, is `checker`'s).
fn target(
    from: &ModPath,
    path: &str,
    files: &BTreeMap<ModPath, PathBuf>,
    reexports: &Reexports,
) -> Option<ModPath> {
    let (mut file, mut rest) = locate(from, path, files)?;
    for _ in 0..16 {
        let Some(named) = rest.first().and_then(|n| reexports.get(&file)?.get(n)) else {
            break;
        };
        let mut next = named.clone();
        for s in &rest[1..] {
            next = format!("{next}::{s}");
        }
        // A re-export of a local item (a macro) or of another crate's stays this file's.
        match locate(&file, &next, files) {
            Some(found) => (file, rest) = found,
            None => break,
        }
    }
    Some(file)
}

/// The import graph of a crate's non-test files: module path to the files it refers to,
/// through re-exports to the defining file, its references to itself left out. A parent's
/// use of its child counts, so a child that reaches back into its parent (`super::Thing`)
/// closes a circle.
fn imports(src: &Path) -> BTreeMap<ModPath, BTreeSet<ModPath>> {
    let files: BTreeMap<ModPath, PathBuf> = rust_files(src)
        .into_iter()
        .map(|f| (module_path(src, &f), f))
        .collect();
    let children = |m: &ModPath| -> Vec<String> {
        files
            .keys()
            .filter(|k| k.len() == m.len() + 1 && k.starts_with(m))
            .filter_map(|k| k.last().cloned())
            .collect()
    };
    let mut reexports = Reexports::new();
    let mut bodies = BTreeMap::new();
    for (m, file) in files.iter().filter(|(m, _)| !is_tests(m)) {
        let text = std::fs::read_to_string(file).expect("a readable source file");
        let (trees, body) = split_reexports(&rebase_inline_supers(&code(&blank_literals(&text))));
        let kids = children(m);
        let named = reexports.entry(m.clone()).or_default();
        for item in trees.iter().flat_map(|t| expand(t)) {
            let (path, name) = renamed(&item);
            let bare = kids.iter().any(|c| path.starts_with(&format!("{c}::")));
            let path = if bare {
                format!("self::{path}")
            } else {
                path.to_string()
            };
            named.insert(name.to_string(), path);
        }
        bodies.insert(m.clone(), body);
    }
    let mut edges = BTreeMap::new();
    for (m, body) in &bodies {
        let kids = children(m);
        let kids: Vec<&str> = kids.iter().map(String::as_str).collect();
        // A name the file re-exports and also uses itself is an import of where it is from.
        let own_uses = reexports[m]
            .iter()
            .filter(|(name, _)| mentions(body, name))
            .map(|(_, path)| path.clone());
        let targets = paths(body, &kids)
            .into_iter()
            .chain(own_uses)
            .filter_map(|p| target(m, &p, &files, &reexports))
            .filter(|t| t != m)
            .collect();
        edges.insert(m.clone(), targets);
    }
    edges
}

/// Whether `code` names `name` as a whole word, not after `::` (another module's item).
fn mentions(code: &str, name: &str) -> bool {
    code.match_indices(name).any(|(i, _)| {
        let before = &code[..i];
        let after = &code[i + name.len()..];
        !before.ends_with(is_ident) && !before.ends_with("::") && !after.starts_with(is_ident)
    })
}

/// A `tests` module: test code, outside the rules.
fn is_tests(m: &ModPath) -> bool {
    m.last().is_some_and(|s| s == "tests")
}

/// The strongly connected components of more than one node (Tarjan, iterative).
fn cycles(edges: &BTreeMap<ModPath, BTreeSet<ModPath>>) -> Vec<Vec<ModPath>> {
    let nodes: Vec<&ModPath> = edges.keys().collect();
    let index_of: BTreeMap<&ModPath, usize> =
        nodes.iter().enumerate().map(|(i, m)| (*m, i)).collect();
    let succ: Vec<Vec<usize>> = nodes
        .iter()
        .map(|m| {
            edges[*m]
                .iter()
                .filter_map(|t| index_of.get(t).copied())
                .collect()
        })
        .collect();
    let n = nodes.len();
    let (mut index, mut low, mut on) = (vec![usize::MAX; n], vec![0; n], vec![false; n]);
    let (mut stack, mut next, mut out) = (Vec::new(), 0, Vec::new());
    for root in 0..n {
        if index[root] != usize::MAX {
            continue;
        }
        let mut work = vec![(root, 0usize)];
        while let Some(top) = work.last_mut() {
            let (v, child) = *top;
            if index[v] == usize::MAX {
                index[v] = next;
                low[v] = next;
                next += 1;
                stack.push(v);
                on[v] = true;
            }
            if let Some(&w) = succ[v].get(child) {
                top.1 += 1;
                if index[w] == usize::MAX {
                    work.push((w, 0));
                } else if on[w] {
                    low[v] = low[v].min(index[w]);
                }
                continue;
            }
            work.pop();
            if let Some(&(parent, _)) = work.last() {
                low[parent] = low[parent].min(low[v]);
            }
            if low[v] == index[v] {
                let mut comp = Vec::new();
                while let Some(w) = stack.pop() {
                    on[w] = false;
                    comp.push(nodes[w].clone());
                    if w == v {
                        break;
                    }
                }
                if comp.len() > 1 {
                    comp.sort();
                    out.push(comp);
                }
            }
        }
    }
    out
}

#[test]
fn no_import_cycles_between_files() {
    let mut found = Vec::new();
    for (name, dir) in CRATES {
        let src = root().join(dir);
        let edges = imports(&src);
        let show = |m: &ModPath| match m.is_empty() {
            true => "<root>".to_string(),
            false => m.join("::"),
        };
        for comp in cycles(&edges) {
            // The arrows inside the circle, so the reader sees which import to move.
            let arrows: Vec<String> = comp
                .iter()
                .flat_map(|a| {
                    edges[a]
                        .iter()
                        .filter(|b| comp.contains(b))
                        .map(move |b| format!("{} -> {}", show(a), show(b)))
                })
                .collect();
            found.push(format!("{name}: {}", arrows.join(", ")));
        }
    }
    assert!(
        found.is_empty(),
        "files that import each other (move what they share into a module both import): \
         {found:#?}"
    );
}

/// The rules cover every crate: each workspace member's `src` (and the Python crate's) is in
/// `CRATES`, so a new crate cannot slip past them.
#[test]
fn the_rules_cover_every_crate() {
    let manifest = std::fs::read_to_string(root().join("Cargo.toml")).expect("Cargo.toml");
    let members = manifest
        .lines()
        .find_map(|l| l.trim().strip_prefix("members = ["))
        .expect("a one-line `members = [...]` in Cargo.toml");
    let mut want: BTreeSet<String> = members
        .trim_end_matches(']')
        .split(',')
        .map(|m| format!("{}/src", m.trim().trim_matches('"')))
        .collect();
    want.insert("src".into());
    want.insert("python/src".into());
    let have: BTreeSet<String> = CRATES.iter().map(|(_, d)| d.to_string()).collect();
    assert_eq!(have, want);
}

/// The names in a manifest's `[dependencies]` table.
fn dependencies(manifest: &str) -> BTreeSet<String> {
    let text = std::fs::read_to_string(root().join(manifest)).expect("a readable manifest");
    text.lines()
        .skip_while(|l| l.trim() != "[dependencies]")
        .skip(1)
        .take_while(|l| !l.trim_start().starts_with('['))
        .filter_map(|l| l.split(['=', '.']).next())
        .map(|name| name.trim().to_string())
        .filter(|name| !name.is_empty() && !name.starts_with('#'))
        .collect()
}

/// The two engines are independent oracles (docs/testing.md): the emulator's crate cannot
/// reach the software graph or candle, and the executor's reaches the emulator only in its
/// tests (a dev-dependency).
#[test]
fn the_engines_do_not_depend_on_each_other() {
    let emulator = dependencies("runtime/emulator/Cargo.toml");
    assert!(emulator.contains("nnp-host"), "{emulator:?}");
    for other in ["nnp-exec", "nnp-lowering", "candle-core"] {
        assert!(!emulator.contains(other), "the emulator depends on {other}");
    }
    let exec = dependencies("runtime/exec/Cargo.toml");
    assert!(exec.contains("candle-core"), "{exec:?}");
    assert!(
        !exec.contains("nnp-emulator"),
        "the executor depends on the emulator"
    );
}

/// The rules' own parts, on hand-written sources.
#[test]
fn the_cycle_finder_by_hand() {
    assert_eq!(
        expand("crate::a::{b, c::{d, e as f}, self}"),
        [
            "crate::a::b",
            "crate::a::c::d",
            "crate::a::c::e as f",
            "crate::a::self"
        ]
    );
    assert_eq!(renamed("crate::a::c::e as f"), ("crate::a::c::e", "f"));
    assert_eq!(renamed("crate::a::b"), ("crate::a::b", "b"));
    let code = code(
        "use super::x;\n// crate::nothing\nfn f() { crate::y::z(); self::w::v; b::g(); o::b::h() }",
    );
    // The `use` trees, then the inline paths (the `use` tree's among them), then the bare
    // paths into the child `b` (not `o::b`, another module's).
    assert_eq!(
        paths(&code, &["b"]),
        [
            "super::x",
            "crate::y::z",
            "super::x",
            "self::w::v",
            "self::b::g"
        ]
    );
    // Inside an inline module, `super::` is the file; below the file's own items, the parent.
    let nested = "use super::a::B;\nmod k {\n    use super::C;\n    use super::super::d::E;\n    const S: &str = \"}\";\n    fn f() { super::g() }\n}\nfn h() { super::i() }";
    assert_eq!(
        rebase_inline_supers(&blank_literals(nested)),
        "use super::a::B;\nmod k {\n    use self::C;\n    use super::d::E;\n    const S: &str =    ;\n    fn f() { self::g() }\n}\nfn h() { super::i() }"
    );
    assert!(mentions("let c = Checker::new();", "Checker"));
    assert!(!mentions(
        "let c = other::Checker::new(); Checkers",
        "Checker"
    ));
    let (trees, rest) = split_reexports("pub use b::{X, Y as Z};\nmod b;\nfn f() {}");
    assert_eq!(
        (trees, rest.as_str()),
        (vec!["b::{X, Y as Z}".to_string()], "\nmod b;\nfn f() {}")
    );
    let m = |s: &str| -> ModPath {
        s.split("::")
            .filter(|s| !s.is_empty())
            .map(String::from)
            .collect()
    };
    let files: BTreeMap<ModPath, PathBuf> = ["", "a", "a::b", "c"]
        .into_iter()
        .map(|s| (m(s), PathBuf::new()))
        .collect();
    // `a` re-exports `b`'s `Thing` as `Alias`: a path to `a::Alias` is `b`'s.
    let reexports: Reexports = [(
        m("a"),
        [("Alias".to_string(), "self::b::Thing".to_string())].into(),
    )]
    .into();
    let to = |from: &str, path: &str| target(&m(from), path, &files, &reexports);
    assert_eq!(to("a::b", "super::super::c::f"), Some(m("c")));
    assert_eq!(to("a", "crate::a::b::g"), Some(m("a::b")));
    assert_eq!(to("c", "crate::Thing"), Some(m("")));
    assert_eq!(to("c", "crate::a::Alias::new"), Some(m("a::b")));
    assert_eq!(to("c", "crate::a::Other"), Some(m("a")));
    let edges: BTreeMap<ModPath, BTreeSet<ModPath>> = [
        (m("a"), [m("c")].into()),
        (m("a::b"), [m("a")].into()),
        (m("c"), [m("a::b")].into()),
        (m(""), BTreeSet::new()),
    ]
    .into();
    assert_eq!(cycles(&edges), [vec![m("a"), m("a::b"), m("c")]]);
}

/// Most lines a function may have, from its `fn` line to its closing brace (tests excepted).
const MAX_FN_LINES: usize = 150;

/// `text` with its comments, string literals and character literals blanked out (their
/// characters but newlines become spaces), so that braces in them are not counted.
fn blank_literals(text: &str) -> String {
    let chars: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(text.len());
    let blank = |out: &mut String, run: &[char]| {
        out.extend(run.iter().map(|&c| if c == '\n' { '\n' } else { ' ' }));
    };
    let mut i = 0;
    while i < chars.len() {
        let rest = &chars[i..];
        let starts = |s: &str| rest.iter().take(s.len()).copied().eq(s.chars());
        let after_ident = i > 0 && is_ident(chars[i - 1]);
        let end = if starts("//") {
            rest.iter().position(|&c| c == '\n').unwrap_or(rest.len())
        } else if starts("/*") {
            (2..rest.len())
                .find(|&k| rest[k - 1] == '*' && rest[k] == '/')
                .map_or(rest.len(), |k| k + 1)
        } else if !after_ident && (starts("r\"") || starts("r#") || starts("br\"") || starts("br#"))
        {
            // A raw string: r##"..."## closes on a quote and as many hashes.
            let open = rest.iter().position(|&c| c == '"').unwrap_or(0);
            let hashes = rest[..open].iter().filter(|&&c| c == '#').count();
            let close = |k: usize| {
                rest[k] == '"' && rest[k + 1..].iter().take_while(|&&c| c == '#').count() >= hashes
            };
            (open + 1..rest.len())
                .find(|&k| close(k))
                .map_or(rest.len(), |k| k + 1 + hashes)
        } else if rest[0] == '"' {
            let mut k = 1;
            while k < rest.len() && rest[k] != '"' {
                k += if rest[k] == '\\' { 2 } else { 1 };
            }
            (k + 1).min(rest.len())
        } else if rest[0] == '\'' {
            // A character literal ('x', '\n', '\u{..}'), not a lifetime ('a).
            let len = match rest.get(1) {
                Some('\\') => rest.iter().skip(2).position(|&c| c == '\'').map(|k| k + 3),
                Some(_) if rest.get(2) == Some(&'\'') => Some(3),
                _ => None,
            };
            len.unwrap_or(1)
        } else {
            out.push(rest[0]);
            i += 1;
            continue;
        };
        if rest[0] == '\'' && end == 1 {
            out.push('\'');
        } else {
            blank(&mut out, &rest[..end]);
        }
        i += end;
    }
    out
}

/// The index of the brace that closes the one at `open` in `code`.
fn closing_brace(code: &[u8], open: usize) -> usize {
    let mut depth = 0usize;
    for (k, &c) in code.iter().enumerate().skip(open) {
        match c {
            b'{' => depth += 1,
            b'}' => {
                depth -= 1;
                if depth == 0 {
                    return k;
                }
            }
            _ => {}
        }
    }
    code.len()
}

/// The functions of `text` over `max` lines, as `name (N lines, line L)`: a scan of each
/// `fn NAME ... {` to its matching brace, leaving out `#[cfg(test)]` modules.
fn long_functions(text: &str, max: usize) -> Vec<String> {
    let mut code = blank_literals(text).into_bytes();
    // Blank the test modules out.
    let mut from = 0;
    while let Some(k) = std::str::from_utf8(&code[from..])
        .expect("ASCII blanks keep UTF-8")
        .find("#[cfg(test)]")
    {
        let at = from + k;
        let rest = std::str::from_utf8(&code[at..]).expect("UTF-8");
        let item = rest["#[cfg(test)]".len()..].trim_start();
        let open = rest.find('{').map(|o| at + o);
        match open {
            Some(open) if item.starts_with("mod ") && !rest[..open - at].contains(';') => {
                let close = closing_brace(&code, open);
                let end = (close + 1).min(code.len());
                for c in &mut code[at..end] {
                    if *c != b'\n' {
                        *c = b' ';
                    }
                }
                from = close.min(code.len());
            }
            _ => from = at + 1,
        }
    }
    let code = String::from_utf8(code).expect("UTF-8");
    let line_of = |i: usize| code[..i].matches('\n').count() + 1;
    let mut long = Vec::new();
    let mut from = 0;
    while let Some(k) = code[from..].find("fn ") {
        let at = from + k;
        from = at + 3;
        if at > 0 && code[..at].ends_with(is_ident) {
            continue;
        }
        let name: String = code[at + 3..]
            .trim_start()
            .chars()
            .take_while(|&c| is_ident(c))
            .collect();
        // The body opens at the first `{` before any `;` (a declaration without a body).
        let Some(open) = code[at..].find(['{', ';']).map(|o| at + o) else {
            break;
        };
        if name.is_empty() || code.as_bytes()[open] == b';' {
            continue;
        }
        let close = closing_brace(code.as_bytes(), open);
        let lines = line_of(close.min(code.len())) - line_of(at) + 1;
        if lines > max {
            long.push(format!("{name} ({lines} lines, line {})", line_of(at)));
        }
    }
    long
}

#[test]
fn no_function_is_over_150_lines() {
    let mut long = Vec::new();
    for (_, dir) in CRATES {
        let src = root().join(dir);
        for file in rust_files(&src).into_iter().filter(|f| !is_test(&src, f)) {
            let text = std::fs::read_to_string(&file).expect("a readable source file");
            for f in long_functions(&text, MAX_FN_LINES) {
                let rel = file.strip_prefix(root()).unwrap_or(&file);
                long.push(format!("{}: {f}", rel.display()));
            }
        }
    }
    assert!(
        long.is_empty(),
        "functions over {MAX_FN_LINES} lines (split them into well-named pieces): {long:#?}"
    );
}

/// The function scan's own parts, on hand-written sources.
#[test]
fn the_function_scan_by_hand() {
    let body = "    let x = 1;\n".repeat(3);
    let text = format!(
        "fn short() {{}}\nfn long(a: u8) -> u8 {{\n{body}    let s = \"}}\";\n    let c = '}}';\n    \
         // }}\n    a\n}}\ntrait T {{ fn decl(&self); }}\n#[cfg(test)]\nmod tests {{\n    fn \
         in_test() {{\n{body}{body}    }}\n}}\n"
    );
    assert_eq!(long_functions(&text, 5), ["long (9 lines, line 2)"]);
    assert!(long_functions(&text, 9).is_empty());
    let literals = "a /* b { */ r#\"}\"# 'x' '\\n' '{' &'a str \"\\\"{\" // }";
    let blanked = blank_literals(literals);
    assert_eq!(blanked.len(), literals.len());
    assert!(blanked.starts_with("a ") && blanked.contains(" &'a str "));
    assert!(!blanked.contains(['{', '}', '"', 'x']), "{blanked}");
}

/// Whether `code` names `path` as a whole path (not the start of a longer name).
fn names(code: &str, path: &str) -> bool {
    code.match_indices(path).any(|(i, _)| {
        !code[i + path.len()..].starts_with(|c: char| c.is_ascii_alphanumeric() || c == '_')
    })
}

/// The files that name `vv_max`'s variants (`OpKind::Max`, `BinOp::Max`), relative to the
/// workspace root: every match over the ops is exhaustive, so each is a place that does not
/// compile without a new binary op. docs/architecture.md's recipe must name exactly these.
fn files_naming_max() -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for (_, dir) in CRATES {
        let src = root().join(dir);
        for file in rust_files(&src).into_iter().filter(|f| !is_test(&src, f)) {
            let text = std::fs::read_to_string(&file).expect("a readable source file");
            let code = code(&text);
            if names(&code, "OpKind::Max") || names(&code, "BinOp::Max") {
                let rel = file.strip_prefix(root()).expect("under the root");
                out.insert(rel.to_string_lossy().replace('\\', "/"));
            }
        }
    }
    out
}

/// The source files the doc's "Another MFU op" paragraph names before its tests: every
/// backticked path under a crate's `src/`, except the optional shared definition
/// (`numerics/src/elementwise.rs`).
fn recipe() -> BTreeSet<String> {
    let doc = std::fs::read_to_string(root().join("docs/architecture.md")).expect("the doc");
    let start = doc
        .find("**Another MFU op**")
        .expect("the MFU op recipe in docs/architecture.md");
    let para = &doc[start..];
    let para = &para[..para.find("\n\n").unwrap_or(para.len())];
    let para = &para[..para.find("Then tests").expect("the recipe's tests")];
    para.split('`')
        .skip(1)
        .step_by(2)
        .filter(|s| s.ends_with(".rs") && s.contains("src/"))
        .filter(|s| *s != "numerics/src/elementwise.rs")
        .map(str::to_string)
        .collect()
}

#[test]
fn the_mfu_op_recipe_names_every_file_a_binary_op_touches() {
    let have = files_naming_max();
    assert!(have.contains("runtime/exec/src/device.rs"), "{have:#?}");
    assert_eq!(
        recipe(),
        have,
        "docs/architecture.md's \"Another MFU op\" lists other files than the sources that \
         name `OpKind::Max` / `BinOp::Max`"
    );
}

#[test]
fn names_is_whole_paths() {
    assert!(names("x = BinOp::Max;", "BinOp::Max"));
    assert!(!names("x = BinOp::MaxAbs;", "BinOp::Max"));
}
