//! The layering of `ndarray_ops`, held: every top-level module of `src/` has a place in
//! [`LAYERS`], and a module imports only modules placed before it. A cycle among the modules is
//! then impossible, and a new upward import fails here with the file that makes it.
//!
//! How imports are found: in each source file (test modules and `tests` folders left out, as
//! tests may reach across layers), every path that starts `crate::` names a module, either
//! directly (`crate::ops::lookup`) or through the crate root's re-exports (`crate::NDArray` is
//! `array`'s), and `use crate::{a::x, b}` names each of its members. Comments are skipped, so a
//! doc link to a module above is not an import.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

/// The modules bottom up, by layer. A module may import those listed before it.
const LAYERS: &[(&str, &[&str])] = &[
    (
        "foundations: errors, whole-file writes, switches, the GEMM kernels, element types, kernel resources",
        &["error", "files", "switches", "gemm", "dtype", "resources"],
    ),
    (
        "ops: the graph vocabulary, the registry, each op's inference, kernels and gradient rule",
        &["ops"],
    ),
    (
        "graphs: symbols and their passes, the memory planner",
        &["symbol", "plan"],
    ),
    (
        "arrays: the runtime, NDArray and its tape, imperative invoke, autograd, region writes, files",
        &[
            "runtime",
            "array",
            "imperative",
            "autograd",
            "region",
            "ndfile",
            "operators",
        ],
    ),
    ("execution: bound symbols", &["executor"]),
    (
        "services: the KVStore and its optimizers, data-parallel training, the fuzz harness",
        &["kvstore", "trainer", "fuzz"],
    ),
];

/// Imports that go upward today, each `(from, to)`: the layering's remaining debts. The list only
/// shrinks: an entry that is no longer found fails the test too, so it is removed when paid.
const KNOWN_UPWARD: &[(&str, &str)] = &[];

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

/// Rank of each module in the bottom-up order.
fn ranks() -> BTreeMap<&'static str, usize> {
    LAYERS
        .iter()
        .flat_map(|(_, mods)| mods.iter().copied())
        .enumerate()
        .map(|(i, m)| (m, i))
        .collect()
}

/// The crate root's re-exports (`pub use module::{A, B};`), name to module.
fn reexports(lib: &str) -> BTreeMap<String, String> {
    let mut names = BTreeMap::new();
    for stmt in lib.split(';') {
        let stmt = stmt.trim();
        let Some(rest) = stmt.strip_prefix("pub use ") else {
            continue;
        };
        let Some((module, tail)) = rest.split_once("::") else {
            continue;
        };
        for member in top_level_items(tail) {
            let name = member.rsplit("::").next().unwrap_or("").trim();
            let name = name.split(" as ").last().unwrap_or(name).trim();
            names.insert(name.to_string(), module.trim().to_string());
        }
    }
    names
}

/// The members of `{a, b::{c, d}, e}` (or the single path `a::b`), split at top-level commas.
fn top_level_items(path: &str) -> Vec<String> {
    let path = path.trim();
    let Some(body) = path.strip_prefix('{') else {
        return vec![path.to_string()];
    };
    let mut items = vec![];
    let (mut depth, mut cur) = (0usize, String::new());
    for c in body.chars() {
        match c {
            '{' => depth += 1,
            '}' if depth == 0 => break,
            '}' => depth -= 1,
            ',' if depth == 0 => {
                items.push(std::mem::take(&mut cur));
                continue;
            }
            _ => {}
        }
        cur.push(c);
    }
    items.push(cur);
    items
        .into_iter()
        .map(|s| s.split_whitespace().collect::<String>())
        .filter(|s| !s.is_empty())
        .collect()
}

/// The source without comments and without its test modules.
fn code_of(text: &str) -> String {
    let mut code: String = text
        .lines()
        .map(|l| match l.find("//") {
            Some(i) => &l[..i],
            None => l,
        })
        .collect::<Vec<_>>()
        .join("\n");
    // An inline test module (`mod tests { .. }`) is cut from its attribute to its closing brace;
    // a test module in its own file (`mod reference;`) is left out with that file.
    let marker = "#[cfg(test)]\nmod ";
    let mut from = 0;
    while let Some(i) = code[from..].find(marker).map(|i| i + from) {
        let after = &code[i + marker.len()..];
        let name_end = after
            .find(|c: char| !(c.is_alphanumeric() || c == '_'))
            .unwrap_or(after.len());
        if after[name_end..].trim_start().starts_with('{') {
            let open = i + marker.len() + name_end + after[name_end..].find('{').unwrap();
            let close = open + matching_brace(&code[open..]);
            code.replace_range(i..=close, "");
        } else {
            from = i + marker.len();
        }
    }
    code
}

/// The first identifiers of the paths after each `crate::` in `code`.
fn crate_paths(code: &str) -> Vec<String> {
    let mut heads = vec![];
    let mut rest = code;
    while let Some(i) = rest.find("crate::") {
        rest = &rest[i + "crate::".len()..];
        let items = if rest.starts_with('{') {
            let close = matching_brace(rest);
            top_level_items(&rest[..=close])
        } else {
            let end = rest
                .find(|c: char| !(c.is_alphanumeric() || c == '_'))
                .unwrap_or(rest.len());
            vec![rest[..end].to_string()]
        };
        for item in items {
            let head: String = item
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            heads.push(head);
        }
    }
    heads
}

fn matching_brace(s: &str) -> usize {
    let mut depth = 0;
    for (i, c) in s.char_indices() {
        match c {
            '{' => depth += 1,
            '}' => {
                depth -= 1;
                if depth == 0 {
                    return i;
                }
            }
            _ => {}
        }
    }
    s.len() - 1
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<_> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    entries.sort();
    for path in entries {
        if path.is_dir() {
            if path.file_name().is_some_and(|n| n != "tests") {
                rust_files(&path, out);
            }
        } else if path.extension().is_some_and(|e| e == "rs")
            && path.file_name().is_some_and(|n| n != "tests.rs")
        {
            out.push(path);
        }
    }
}

/// Every import between top-level modules: `(from, to)` to the files that make it.
fn imports() -> BTreeMap<(String, String), BTreeSet<String>> {
    let root = src();
    let lib = fs::read_to_string(root.join("lib.rs")).unwrap();
    let names = reexports(&code_of(&lib));
    let mut files = vec![];
    rust_files(&root, &mut files);
    let mut edges: BTreeMap<(String, String), BTreeSet<String>> = BTreeMap::new();
    for file in files {
        let rel = file.strip_prefix(&root).unwrap();
        let first = rel.components().next().unwrap().as_os_str();
        let from = first.to_string_lossy().trim_end_matches(".rs").to_string();
        if from == "lib" {
            continue;
        }
        let code = code_of(&fs::read_to_string(&file).unwrap());
        for head in crate_paths(&code) {
            let is_module = root.join(&head).is_dir() || root.join(format!("{head}.rs")).is_file();
            let to = if is_module {
                head
            } else if let Some(m) = names.get(&head) {
                m.clone()
            } else {
                continue;
            };
            if to != from {
                edges
                    .entry((from.clone(), to))
                    .or_default()
                    .insert(rel.display().to_string());
            }
        }
    }
    edges
}

#[test]
fn every_module_has_a_place_in_the_layers() {
    let ranks = ranks();
    let mut unplaced = vec![];
    for entry in fs::read_dir(src()).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().to_string();
        let module = name.trim_end_matches(".rs");
        if module != "lib" && !ranks.contains_key(module) {
            unplaced.push(module.to_string());
        }
    }
    assert!(
        unplaced.is_empty(),
        "modules of ndarray_ops/src with no place in tests/layering.rs's LAYERS: {unplaced:?}"
    );
}

#[test]
fn no_module_imports_upward() {
    let ranks = ranks();
    let edges = imports();
    let mut upward = vec![];
    for ((from, to), files) in &edges {
        let (Some(a), Some(b)) = (ranks.get(from.as_str()), ranks.get(to.as_str())) else {
            continue;
        };
        if b > a && !KNOWN_UPWARD.contains(&(from.as_str(), to.as_str())) {
            upward.push(format!("{from} -> {to} (in {files:?})"));
        }
    }
    assert!(
        upward.is_empty(),
        "imports against the layering (a module may use only those before it in LAYERS):\n{}",
        upward.join("\n")
    );
    let paid: Vec<_> = KNOWN_UPWARD
        .iter()
        .filter(|(a, b)| !edges.contains_key(&(a.to_string(), b.to_string())))
        .collect();
    assert!(
        paid.is_empty(),
        "no longer imported, to be removed from KNOWN_UPWARD: {paid:?}"
    );
}

#[test]
fn the_reader_finds_imports_of_every_form() {
    let code = code_of(
        "use crate::ops::{lookup, Attrs};\nuse crate::{array::NDArray, symbol::{Node, Symbol}};\n\
         // crate::executor in a comment\nfn f() { crate::autograd::mode(); }\n\
         #[cfg(test)]\nmod tests { use crate::kvstore::KVStore; }\n\
         #[cfg(test)]\nmod reference;\nuse crate::runtime::Runtime;",
    );
    assert_eq!(
        crate_paths(&code),
        ["ops", "array", "symbol", "autograd", "runtime"]
    );
    let lib = "pub use array::NDArray;\npub use dtype::{DType, Element};";
    let names = reexports(lib);
    assert_eq!(names["NDArray"], "array");
    assert_eq!(names["Element"], "dtype");
}
