// SPDX-License-Identifier: MPL-2.0

//! docs/architecture.md as the code is: every source file has its row in
//! the file table of its room, and the page names no source file or folder
//! that is gone. Lists of paths are compared, not prose: the files on disk
//! in the folders the page's "Every file, room by room" covers, against the
//! first cells of its `| file | what it holds |` tables and every path the
//! page names in backticks.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use crate::common::repo_file;

const PAGE: &str = "docs/architecture.md";

/// The folders whose files the page lists, each with the endings of the
/// files listed (the page's "Every file, room by room" says the same in
/// words); `*` is any one folder (every crate).
const SCOPE: [(&str, &[&str]); 6] = [
    ("src", &[".rs"]),
    ("crates/*/src", &[".rs"]),
    ("bench/src", &[".rs"]),
    ("kernels", &[".cu"]),
    ("crates/cudaipc-python/python/cudaipc", &[".py"]),
    ("crates/cudaipc-c/include", &[".h", ".hpp"]),
];

/// The header of the page's file tables.
const FILE_TABLE: &str = "| file | what it holds |";

/// The endings of the files listed under `path` (a file or a folder, from
/// the repository's root), or `None` where the page lists nothing there.
fn scope_of(path: &str) -> Option<&'static [&'static str]> {
    let parts: Vec<&str> = path.trim_end_matches('/').split('/').collect();
    SCOPE.iter().find_map(|(folder, endings)| {
        let pattern: Vec<&str> = folder.split('/').collect();
        let inside = parts.len() >= pattern.len()
            && pattern
                .iter()
                .zip(&parts)
                .all(|(p, part)| *p == "*" || p == part);
        inside.then_some(*endings)
    })
}

/// The folders `pattern` stands for under `root` (`*`: every folder there).
fn expand(root: &Path, pattern: &str) -> Vec<PathBuf> {
    let mut found = vec![root.to_path_buf()];
    for part in pattern.split('/') {
        found = found
            .iter()
            .flat_map(|folder| match part {
                "*" => std::fs::read_dir(folder)
                    .unwrap_or_else(|e| panic!("{}: {e}", folder.display()))
                    .flatten()
                    .map(|entry| entry.path())
                    .filter(|path| path.is_dir())
                    .collect(),
                name => vec![folder.join(name)],
            })
            .filter(|path| path.is_dir())
            .collect();
    }
    found
}

/// The files on disk that the page must list, by their paths from `root`.
fn source_files(root: &Path) -> BTreeSet<String> {
    let mut files = BTreeSet::new();
    for (pattern, endings) in SCOPE {
        let mut folders = expand(root, pattern);
        while let Some(folder) = folders.pop() {
            for entry in std::fs::read_dir(&folder).unwrap().flatten() {
                let path = entry.path();
                let name = path.to_string_lossy();
                if path.is_dir() {
                    folders.push(path);
                } else if endings.iter().any(|ending| name.ends_with(ending)) {
                    let relative = path.strip_prefix(root).unwrap();
                    let parts: Vec<_> = relative.iter().map(|p| p.to_string_lossy()).collect();
                    files.insert(parts.join("/"));
                }
            }
        }
    }
    files
}

/// The rows of the page's file tables: each file's path and what the row
/// says it holds; a row whose first cell is not one path in backticks is a
/// problem.
fn file_rows(page: &str, found: &mut Vec<String>) -> Vec<(String, String)> {
    let mut rows = Vec::new();
    let mut in_table = false;
    for line in page.lines().map(str::trim) {
        if line == FILE_TABLE {
            in_table = true;
            continue;
        }
        if !in_table || line.starts_with("|---") {
            continue;
        }
        if !line.starts_with('|') {
            in_table = false;
            continue;
        }
        let cells: Vec<&str> = line.trim_matches('|').split(" | ").map(str::trim).collect();
        let file = cells[0].strip_prefix('`').and_then(|c| c.strip_suffix('`'));
        match file {
            Some(file) if !file.contains('`') => {
                let holds = cells.get(1).copied().unwrap_or_default();
                rows.push((file.to_owned(), holds.to_owned()));
            }
            _ => found.push(format!("a file table's row names no one file: {line}")),
        }
    }
    rows
}

/// The paths the page names that lie in [`SCOPE`]: files (by their
/// endings) and folders (ending in `/`), in backticks or in a fenced block
/// (the layer diagram). Patterns (`src/<element>/imp.rs`, `src/**/tests.rs`,
/// `{a,b}.rs`) are no paths.
fn named_paths(page: &str) -> BTreeSet<String> {
    let (mut prose, mut blocks) = (String::new(), String::new());
    let mut in_block = false;
    for line in page.lines() {
        if line.trim_start().starts_with("```") {
            in_block = !in_block;
        } else if in_block {
            blocks.extend([line, "\n"]);
        } else {
            prose.extend([line, "\n"]);
        }
    }
    let quoted = prose.split('`').skip(1).step_by(2);
    let in_blocks = blocks
        .split_whitespace()
        .map(|word| word.trim_matches(|c: char| ",:;()".contains(c)));
    quoted
        .chain(in_blocks)
        .filter(|path| !path.contains([' ', '\n', '*', '<', '>', '{', '}']))
        .filter(|path| match scope_of(path) {
            Some(endings) => path.ends_with('/') || endings.iter().any(|e| path.ends_with(e)),
            None => false,
        })
        .map(str::to_owned)
        .collect()
}

/// What the page gets wrong about `on_disk` (the files in [`SCOPE`]);
/// `exists` says whether a path the page names is there.
fn problems(page: &str, on_disk: &BTreeSet<String>, exists: impl Fn(&str) -> bool) -> Vec<String> {
    let mut found = Vec::new();
    let mut rows: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for (file, holds) in file_rows(page, &mut found) {
        rows.entry(file).or_default().push(holds);
    }
    let unlisted: Vec<&String> = on_disk.iter().filter(|f| !rows.contains_key(*f)).collect();
    if !unlisted.is_empty() {
        found.push(format!(
            "source files with no row in a file table of {PAGE} (add `| `PATH` | what it holds |` to its room's table):\n  {}",
            unlisted.iter().map(|f| f.as_str()).collect::<Vec<_>>().join("\n  ")
        ));
    }
    for (file, says) in &rows {
        if says.len() > 1 {
            found.push(format!("{file}: {} rows, one is enough", says.len()));
        }
        if says.iter().any(|holds| holds.is_empty() || holds == "-") {
            found.push(format!("{file}: its row does not say what it holds"));
        }
        if scope_of(file).is_none() {
            found.push(format!(
                "{file}: in a file table, but outside the folders the page lists"
            ));
        }
    }
    let gone: Vec<String> = named_paths(page)
        .into_iter()
        .chain(rows.into_keys())
        .collect::<BTreeSet<_>>()
        .into_iter()
        .filter(|path| !exists(path))
        .collect();
    if !gone.is_empty() {
        found.push(format!(
            "{PAGE} names paths that are not in the repository:\n  {}",
            gone.join("\n  ")
        ));
    }
    found
}

/// The page lists every source file in the table of its room, each once,
/// and names no source file or folder that is gone.
#[test]
fn architecture_md_names_every_source_file_and_no_file_that_is_gone() {
    let page_path = repo_file(PAGE);
    let root = page_path.parent().unwrap().parent().unwrap().to_path_buf();
    let page = std::fs::read_to_string(&page_path).unwrap();
    let on_disk = source_files(&root);
    // A walk from the wrong folder would find nothing and pass.
    for known in [
        "src/lib.rs",
        "crates/cudaipc-channel/src/lib.rs",
        "bench/src/main.rs",
    ] {
        assert!(
            on_disk.contains(known),
            "{known} not found under {}",
            root.display()
        );
    }
    let found = problems(&page, &on_disk, |path| {
        let path = root.join(path);
        path.is_file() || path.is_dir()
    });
    assert!(found.is_empty(), "{}", found.join("\n"));
}

/// The comparison above finds what it must: a file without a row, a row or
/// a mention of a file that is gone, a file with two rows or an empty one.
#[test]
fn the_file_list_check_finds_missing_gone_and_doubled_files() {
    let page = "\
## Rooms

| file | what it holds |
|---|---|
| `src/lib.rs` | the front |
| `src/gone.rs` | a file removed since |
| `src/twice.rs` | one |
| `src/twice.rs` | two |
| `src/empty.rs` |  |

Prose names `crates/cudaipc-channel/src/old.rs`, the folder `src/old/`,
`attach.rs` (no path), `src/<element>/imp.rs` (a pattern) and
`tests/common/mod.rs` (outside the scope).

```text
 memory   src/lib.rs: the front
          src/diagram_gone.rs: a file the diagram still names
```
";
    let on_disk: BTreeSet<String> = ["src/lib.rs", "src/new.rs", "src/twice.rs", "src/empty.rs"]
        .map(str::to_owned)
        .into();
    let found = problems(page, &on_disk, |path| on_disk.contains(path)).join("\n");
    for expected in [
        "no row in a file table of docs/architecture.md",
        "\n  src/new.rs",
        "src/twice.rs: 2 rows",
        "src/empty.rs: its row does not say what it holds",
        "names paths that are not in the repository:",
        "\n  src/gone.rs",
        "\n  crates/cudaipc-channel/src/old.rs",
        "\n  src/old/",
        "\n  src/diagram_gone.rs",
    ] {
        assert!(found.contains(expected), "{expected:?} not in:\n{found}");
    }
    for not_expected in ["attach.rs", "<element>", "tests/common", "src/lib.rs"] {
        assert!(
            !found.contains(not_expected),
            "{not_expected:?} in:\n{found}"
        );
    }
}
