// SPDX-License-Identifier: MPL-2.0

// What a user reads and copies agrees with the plugin: the element names in
// docs, scripts and messages are the `rs` ones, `gst-inspect-1.0` reports
// the properties, defaults and stats fields the docs tables give, and the
// debug categories the docs name exist as soon as the plugin loads.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::Command;

use gst::glib;
use gst::prelude::*;

use common::*;

const BARE_NAMES: [&str; 2] = ["cudaipcsink", "cudaipcsrc"];

/// Words that mark text about GStreamer's own (nvcodec's) elements, where
/// the bare names are the right ones.
const ABOUT_UPSTREAM: [&str; 7] = [
    "upstream",
    "nvcodec",
    "GStreamer's own",
    "address=",
    "io-mode=",
    "bare name",
    "registered under two names",
];

fn about_upstream(text: &str) -> bool {
    ABOUT_UPSTREAM.iter().any(|w| text.contains(w))
}

fn is_name_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_' || c == '-'
}

/// The byte offsets of `name` in `text` as a word of its own: not part of a
/// longer name (`rscudaipcsink`, `cudaipcsink-stats`), a path
/// (`src/cudaipcsink/`), a Rust path (`cudaipcsink::`) or a debug
/// category setting (`GST_DEBUG=cudaipcsrc:5`).
fn word_offsets(text: &str, name: &str) -> Vec<usize> {
    text.match_indices(name)
        .map(|(at, _)| at)
        .filter(|&at| {
            let before = text[..at].chars().next_back();
            let after = text[at + name.len()..].chars().next();
            !before.is_some_and(|c| is_name_char(c) || "/.=".contains(c))
                && !after.is_some_and(|c| is_name_char(c) || "/.:".contains(c))
        })
        .collect()
}

/// Whether the bare name at `at` is used as an element in a pipeline: after
/// a link (`! cudaipcsink`) or `gst-launch-1.0 [options]`, or before a link
/// or a property (`cudaipcsrc channel=...`, `cudaipcsrc !`).
fn used_in_a_pipeline(text: &str, at: usize, name: &str) -> bool {
    let before = text[..at].trim_end();
    let mut words = before.rsplit(char::is_whitespace);
    let mut previous = words.next().unwrap_or_default();
    while previous.starts_with('-') && previous.len() <= 3 {
        previous = words.next().unwrap_or_default();
    }
    let previous = previous.trim_start_matches(['`', '"', '\'']);
    if previous.ends_with('!') || previous.ends_with("gst-launch-1.0") {
        return true;
    }
    let after = &text[at + name.len()..];
    let next = after.trim_start();
    if after.len() == next.len() {
        // Not followed by a space: `cudaipcsink`, "cudaipcsink", the end.
        return false;
    }
    let word: String = next.chars().take_while(|&c| c != ' ').collect();
    word == "!"
        || word
            .split_once('=')
            .is_some_and(|(property, _)| !property.is_empty() && property.chars().all(is_name_char))
}

/// Lines of `text` that use a bare name as an element in a pipeline,
/// outside text about GStreamer's own elements.
fn pipeline_uses(text: &str) -> Vec<String> {
    let mut found = Vec::new();
    for (number, line) in text.lines().enumerate() {
        if about_upstream(line) {
            continue;
        }
        for name in BARE_NAMES {
            if word_offsets(line, name)
                .into_iter()
                .any(|at| used_in_a_pipeline(line, at, name))
            {
                found.push(format!("{}: {}", number + 1, line.trim()));
            }
        }
    }
    found
}

/// The string literals of Rust source `text`, with their line numbers.
fn rust_string_literals(text: &str) -> Vec<(usize, String)> {
    let bytes = text.as_bytes();
    let mut literals = Vec::new();
    let mut i = 0;
    let mut line = 1;
    while i < bytes.len() {
        match bytes[i] {
            b'\n' => {
                line += 1;
                i += 1;
            }
            b'/' if bytes.get(i + 1) == Some(&b'/') => {
                while i < bytes.len() && bytes[i] != b'\n' {
                    i += 1;
                }
            }
            b'/' if bytes.get(i + 1) == Some(&b'*') => {
                let end = text[i + 2..]
                    .find("*/")
                    .map_or(bytes.len(), |e| i + 2 + e + 2);
                line += text[i..end].matches('\n').count();
                i = end;
            }
            // A character literal ('"', '\''); a lifetime has no closing quote.
            b'\'' => {
                let close = if bytes.get(i + 1) == Some(&b'\\') {
                    text[i + 2..].find('\'').map(|e| i + 2 + e)
                } else {
                    text[i + 1..]
                        .char_indices()
                        .nth(1)
                        .filter(|&(_, c)| c == '\'')
                        .map(|(e, _)| i + 1 + e)
                };
                i = close.map_or(i + 1, |c| c + 1);
            }
            b'r' if bytes.get(i + 1).is_some_and(|&b| b == b'"' || b == b'#')
                && !bytes[..i]
                    .last()
                    .is_some_and(|&b| b.is_ascii_alphanumeric() || b == b'_') =>
            {
                let hashes = bytes[i + 1..].iter().take_while(|&&b| b == b'#').count();
                let open = i + 1 + hashes;
                if bytes.get(open) != Some(&b'"') {
                    i += 1;
                    continue;
                }
                let closing = format!("\"{}", "#".repeat(hashes));
                let end = text[open + 1..]
                    .find(&closing)
                    .map_or(bytes.len(), |e| open + 1 + e);
                let literal = &text[open + 1..end];
                literals.push((line, literal.to_string()));
                line += literal.matches('\n').count();
                i = end + closing.len();
            }
            b'"' => {
                let mut j = i + 1;
                while j < bytes.len() && bytes[j] != b'"' {
                    j += if bytes[j] == b'\\' { 2 } else { 1 };
                }
                let literal = &text[i + 1..j.min(bytes.len())];
                literals.push((line, literal.to_string()));
                line += literal.matches('\n').count();
                i = j + 1;
            }
            _ => i += 1,
        }
    }
    literals
}

/// Files under `dir` (recursively) whose names end with `suffix`.
fn files(dir: &Path, suffix: &str) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let mut folders = vec![dir.to_path_buf()];
    while let Some(folder) = folders.pop() {
        for entry in std::fs::read_dir(&folder).unwrap().flatten() {
            let path = entry.path();
            if path.is_dir() {
                folders.push(path);
            } else if path.to_string_lossy().ends_with(suffix) {
                found.push(path);
            }
        }
    }
    found.sort();
    found
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

#[test]
fn the_pipeline_finder_tells_bare_names_from_the_rs_ones() {
    // The checks below pass only if this finds what it must.
    for line in [
        "gst-launch-1.0 cudaipcsrc channel=cam0 ! fakesink",
        "gst-launch-1.0 -e videotestsrc ! cudaipcsink",
        "videotestsrc ! cudaipcsink channel=x",
        "`cudaipcsrc ! appsink`",
        "a channel of cudaipcsink transport=host",
    ] {
        assert_eq!(pipeline_uses(line).len(), 1, "{line}");
    }
    for line in [
        "gst-launch-1.0 rscudaipcsrc channel=cam0 ! fakesink",
        "videotestsrc ! rscudaipcsink channel=x",
        "(`cudaipcsink-stats`) every",
        "`GST_DEBUG=cudaipcsrc:5`",
        "src/cudaipcsink/pool.rs",
        "upstream's `cudaipcsink address=/tmp/S`",
        "the bare names `cudaipcsink` / `cudaipcsrc` give",
    ] {
        assert!(pipeline_uses(line).is_empty(), "{line}");
    }
    let literals = rust_string_literals(
        "let c = '\"'; // \"not\"\nf(\"one\", r#\"two \"x\"\"#); /* \"no\" */ g::<'a>(\"three\\\"\")",
    );
    let texts: Vec<&str> = literals.iter().map(|(_, t)| t.as_str()).collect();
    assert_eq!(texts, ["one", "two \"x\"", "three\\\""]);
}

#[test]
fn user_facing_text_writes_the_rs_element_names() {
    let mut found = Vec::new();
    // Docs, scripts and examples: the pipelines a user copies, and the
    // docs' headings.
    let mut texts = vec![repo_file("README.md"), repo_file("scripts/demo.sh")];
    texts.extend(files(&repo_file("docs"), ".md"));
    texts.extend(files(&repo_file("scripts"), ".py"));
    texts.extend(files(&repo_file("examples"), ".rs"));
    texts.extend(files(&repo_file("examples"), ".py"));
    texts.extend(files(&repo_file("crates"), ".py"));
    for path in &texts {
        let text = read(path);
        for line in pipeline_uses(&text) {
            found.push(format!("{}:{line}", path.display()));
        }
        if path.extension().is_some_and(|e| e == "md") {
            for (number, line) in text.lines().enumerate() {
                let bare = BARE_NAMES
                    .iter()
                    .any(|name| !word_offsets(line, name).is_empty());
                if line.starts_with('#') && bare && !about_upstream(line) {
                    found.push(format!("{}:{}: heading {line}", path.display(), number + 1));
                }
            }
        }
    }
    // Messages of the plugin and the crates: any bare name in a string,
    // unless the string is the name itself (a registration, a debug
    // category) or is about GStreamer's own elements.
    let mut sources = files(&repo_file("src"), ".rs");
    sources.extend(files(&repo_file("crates"), ".rs"));
    for path in &sources {
        for (line, literal) in rust_string_literals(&read(path)) {
            if BARE_NAMES.contains(&literal.as_str()) || about_upstream(&literal) {
                continue;
            }
            if BARE_NAMES
                .iter()
                .any(|name| !word_offsets(&literal, name).is_empty())
            {
                found.push(format!("{}:{line}: \"{literal}\"", path.display()));
            }
        }
    }
    assert!(
        found.is_empty(),
        "bare element names where users copy them (write rscudaipcsink/rscudaipcsrc):\n{}",
        found.join("\n")
    );
    // The scan saw the files it is about.
    assert!(
        texts.len() > 10 && sources.len() > 30,
        "{texts:?} {sources:?}"
    );
}

/// One row of a docs table: its cells, without the outer pipes.
fn cells(line: &str) -> Vec<String> {
    line.trim()
        .trim_matches('|')
        .split('|')
        .map(|c| c.trim().to_string())
        .collect()
}

/// The section of a markdown page under the `## ` heading that starts with
/// `` `name` ``, up to the next `## ` heading.
fn section<'a>(page: &'a str, name: &str) -> &'a str {
    let heading = format!("## `{name}`");
    let start = page
        .find(&format!("\n{heading}"))
        .unwrap_or_else(|| panic!("no heading {heading}"));
    let rest = &page[start + 1..];
    let end = rest[3..].find("\n## ").map_or(rest.len(), |e| e + 3);
    &rest[..end]
}

/// The rows of the first table in `text` whose header starts with `header`.
fn table(text: &str, header: &str) -> Vec<Vec<String>> {
    let mut lines = text.lines().skip_while(|l| !l.starts_with(header));
    assert!(lines.next().is_some(), "no table {header:?} in:\n{text}");
    lines
        .skip(1) // |---|
        .take_while(|l| l.starts_with('|'))
        .map(cells)
        .collect()
}

/// The texts in backticks in `cell`.
fn quoted(cell: &str) -> Vec<String> {
    cell.split('`')
        .skip(1)
        .step_by(2)
        .map(str::to_string)
        .collect()
}

/// A number of a docs table: octal with a leading 0 (`0600`), as on a
/// `gst-launch-1.0` line.
fn number(text: &str) -> f64 {
    let text = text.trim();
    if text.len() > 1 && text.starts_with('0') && text.bytes().all(|b| b.is_ascii_digit()) {
        return u64::from_str_radix(text, 8).unwrap() as f64;
    }
    text.parse()
        .unwrap_or_else(|_| panic!("{text:?} is not a number"))
}

/// What the docs call the type of `pspec`, and its range and default as
/// numbers where it has them.
fn describe(pspec: &glib::ParamSpec) -> (&'static str, Option<(f64, f64)>, String) {
    if let Some(p) = pspec.downcast_ref::<glib::ParamSpecString>() {
        let default = p.default_value().unwrap_or_default();
        return (
            "string",
            None,
            format!("`{default}`").replace("``", "`\"\"`"),
        );
    }
    if let Some(p) = pspec.downcast_ref::<glib::ParamSpecUInt>() {
        let range = (p.minimum() as f64, p.maximum() as f64);
        return ("uint", Some(range), p.default_value().to_string());
    }
    if let Some(p) = pspec.downcast_ref::<glib::ParamSpecInt>() {
        let range = (p.minimum() as f64, p.maximum() as f64);
        return ("int", Some(range), p.default_value().to_string());
    }
    if let Some(p) = pspec.downcast_ref::<glib::ParamSpecInt64>() {
        let range = (p.minimum() as f64, p.maximum() as f64);
        return ("int64", Some(range), p.default_value().to_string());
    }
    if let Some(p) = pspec.downcast_ref::<glib::ParamSpecDouble>() {
        return (
            "double",
            Some((p.minimum(), p.maximum())),
            p.default_value().to_string(),
        );
    }
    if let Some(p) = pspec.downcast_ref::<glib::ParamSpecBoolean>() {
        return ("bool", None, p.default_value().to_string());
    }
    if let Some(p) = pspec.downcast_ref::<glib::ParamSpecEnum>() {
        let nick = p
            .enum_class()
            .value(p.default_value_as_i32())
            .unwrap()
            .nick();
        return ("enum", None, format!("`{nick}`"));
    }
    if pspec.value_type() == gst::Structure::static_type() {
        return ("structure", None, "-".to_string());
    }
    panic!("{}: a property type the docs do not name", pspec.name());
}

/// Checks the properties table of `element` in `page` against what the
/// element reports; the problems found.
fn property_problems(element: &gst::Element, name: &str, page: &str) -> Vec<String> {
    let rows = table(section(page, name), "| property | type | default |");
    let mut problems = Vec::new();
    let mut documented = Vec::new();
    for row in &rows {
        let property = quoted(&row[0]).concat();
        documented.push(property.clone());
        let Some(pspec) = element.find_property(&property) else {
            problems.push(format!(
                "{name}: the docs list `{property}`, which it has not"
            ));
            continue;
        };
        let (kind, range, default) = describe(&pspec);
        let (doc_type, doc_default) = (&row[1], &row[2]);
        let doc_kind = doc_type.split([' ', ',']).next().unwrap_or_default();
        if doc_kind != kind {
            problems.push(format!(
                "{name} `{property}`: type {kind}, the docs say {doc_type}"
            ));
        }
        if doc_type.contains("read-only") == pspec.flags().contains(glib::ParamFlags::WRITABLE) {
            problems.push(format!(
                "{name} `{property}`: read-only or not as the docs say ({doc_type})"
            ));
        }
        if let Some(p) = pspec.downcast_ref::<glib::ParamSpecEnum>() {
            let nicks: Vec<String> = p
                .enum_class()
                .values()
                .iter()
                .map(|v| v.nick().to_string())
                .collect();
            if quoted(doc_type) != nicks {
                problems.push(format!(
                    "{name} `{property}`: values {nicks:?}, the docs say {doc_type}"
                ));
            }
        }
        // A narrower range than the type's own is part of the contract.
        let full = match kind {
            "uint" => Some((0.0, u32::MAX as f64)),
            "int" => Some((i32::MIN as f64, i32::MAX as f64)),
            "int64" => Some((i64::MIN as f64, i64::MAX as f64)),
            _ => None,
        };
        if full.is_some() && range != full && !doc_type.contains(" to ") {
            let (min, max) = range.unwrap();
            problems.push(format!(
                "{name} `{property}`: range {min} to {max}, which the docs do not give ({doc_type})"
            ));
        }
        if let (Some((min, max)), Some((_, doc_range))) = (range, doc_type.split_once(", ")) {
            if let Some((low, high)) = doc_range.split_once(" to ") {
                if (number(low), number(high)) != (min, max) {
                    problems.push(format!(
                        "{name} `{property}`: range {min} to {max}, the docs say {doc_range}"
                    ));
                }
            }
        }
        let same_default = match kind {
            "uint" | "int" | "int64" | "double" => number(doc_default) == number(&default),
            _ => *doc_default == default,
        };
        if !same_default {
            problems.push(format!(
                "{name} `{property}`: default {default}, the docs say {doc_default}"
            ));
        }
    }
    for pspec in element.list_properties() {
        if pspec.owner_type() == element.type_() && !documented.iter().any(|d| d == pspec.name()) {
            problems.push(format!(
                "{name}: `{}` is not in the docs' table",
                pspec.name()
            ));
        }
    }
    problems
}

/// The top-level items of a blurb that lists fields ("a, b (why, how), c"),
/// after an optional "structure-name: ".
fn listed_fields(blurb: &str, structure: &str) -> Vec<String> {
    let blurb = blurb
        .strip_prefix(&format!("{structure}: "))
        .unwrap_or(blurb);
    let mut items = vec![String::new()];
    let mut depth = 0;
    for c in blurb.chars() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => items.push(String::new()),
            _ if depth == 0 => items.last_mut().unwrap().push(c),
            _ => {}
        }
    }
    items.iter().map(|i| i.trim().to_string()).collect()
}

fn type_name(value: &glib::SendValue) -> String {
    let t = value.type_();
    let names = [
        (u64::static_type(), "u64"),
        (u32::static_type(), "u32"),
        (i64::static_type(), "i64"),
        (i32::static_type(), "i32"),
        (f64::static_type(), "f64"),
        (bool::static_type(), "bool"),
        (String::static_type(), "string"),
    ];
    names
        .iter()
        .find(|(known, _)| *known == t)
        .map_or_else(|| t.name().to_string(), |(_, n)| n.to_string())
}

/// Checks the `stats` structure of `element` against its docs table and
/// its property's blurb; the problems found.
fn stats_problems(element: &gst::Element, name: &str, page: &str) -> Vec<String> {
    let stats = element.property::<gst::Structure>("stats");
    let text = section(page, name);
    let mut problems = Vec::new();
    let heading = format!("The `stats` structure (`{}`)", stats.name());
    if !text.contains(&heading) {
        problems.push(format!("{name}: no \"{heading}\" in the docs"));
    }
    let fields: Vec<(String, String)> = stats
        .iter()
        .map(|(field, value)| (field.to_string(), type_name(value)))
        .collect();
    let documented: Vec<(String, String)> = table(text, "| field | type |")
        .iter()
        .map(|row| (quoted(&row[0]).concat(), row[1].clone()))
        .collect();
    if documented != fields {
        problems.push(format!(
            "{name} stats: the structure has {fields:?}, the docs list {documented:?}"
        ));
    }
    let blurb = element
        .find_property("stats")
        .unwrap()
        .blurb()
        .unwrap_or_default()
        .to_string();
    let listed = listed_fields(&blurb, stats.name());
    let names: Vec<String> = fields.into_iter().map(|(f, _)| f).collect();
    if listed != names {
        problems.push(format!(
            "{name} stats: the structure has {names:?}, gst-inspect's description lists {listed:?}"
        ));
    }
    problems
}

/// The action signals (those an application emits) of `element`'s own
/// type, as gst-inspect lists them.
fn action_signals(element: &gst::Element) -> Vec<String> {
    use glib::translate::IntoGlib;
    let mut count = 0u32;
    // SAFETY: a registered type; GLib returns an array of `count` signal ids
    // that the caller frees.
    let ids =
        unsafe { glib::gobject_ffi::g_signal_list_ids(element.type_().into_glib(), &mut count) };
    let mut names = Vec::new();
    for i in 0..count as usize {
        // SAFETY: an all-zero GSignalQuery is valid; GLib fills it for an
        // id of the array, whose index is below its length.
        let query = unsafe {
            let mut query: glib::gobject_ffi::GSignalQuery = std::mem::zeroed();
            glib::gobject_ffi::g_signal_query(*ids.add(i), &mut query);
            query
        };
        if query.signal_flags & glib::gobject_ffi::G_SIGNAL_ACTION != 0 {
            // SAFETY: GLib's static, NUL-terminated name of the signal.
            let name = unsafe { std::ffi::CStr::from_ptr(query.signal_name) };
            names.push(name.to_string_lossy().into_owned());
        }
    }
    // SAFETY: the array g_signal_list_ids allocated, freed once.
    unsafe { glib::ffi::g_free(ids.cast()) };
    names
}

#[test]
fn gst_inspect_agrees_with_the_docs_tables() {
    init();
    let elements = read(&repo_file("docs/elements.md"));
    let test_elements = read(&repo_file("docs/test-elements.md"));
    let mut problems = Vec::new();
    for (factory, page) in [
        ("rscudaipcsink", &elements),
        ("rscudaipcsrc", &elements),
        ("cudatestsrc", &test_elements),
        ("cudaprocess", &test_elements),
    ] {
        let element = gst::ElementFactory::make(factory).build().unwrap();
        problems.extend(property_problems(&element, factory, page));
        for signal in action_signals(&element) {
            if !section(page, factory).contains(&format!("`{signal}`")) {
                problems.push(format!(
                    "{factory}: the action signal `{signal}` is not in the docs"
                ));
            }
        }
        if element.find_property("stats").is_some() {
            problems.extend(stats_problems(&element, factory, page));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn descriptions_give_the_channel_rule_and_the_mode_in_octal() {
    init();
    for factory in ["rscudaipcsink", "rscudaipcsrc"] {
        let element = gst::ElementFactory::make(factory).build().unwrap();
        let blurb = element
            .find_property("channel")
            .unwrap()
            .blurb()
            .unwrap()
            .to_string();
        assert!(
            blurb.contains("1-64 characters of A-Z a-z 0-9 _ -"),
            "{factory} channel: {blurb}"
        );
        // The rule it states is the one the channel applies.
        for (name, valid) in [
            ("a_B-9", true),
            (&"x".repeat(64), true),
            (&"x".repeat(65), false),
            ("a.b", false),
            ("", false),
        ] {
            assert_eq!(
                cudaipc_channel::shm::validate_channel_name(name).is_ok(),
                valid,
                "{name:?}"
            );
        }
    }
    let sink = gst::ElementFactory::make("rscudaipcsink").build().unwrap();
    let pspec = sink.find_property("permissions").unwrap();
    let default = pspec
        .downcast_ref::<glib::ParamSpecUInt>()
        .unwrap()
        .default_value();
    let blurb = pspec.blurb().unwrap();
    assert!(
        blurb.contains(&format!("default {default:04o}, octal")),
        "permissions (default {default}): {blurb}"
    );
}

#[test]
fn test_element_instances_are_named_after_their_factory() {
    init();
    for factory in [
        "cudatestsrc",
        "cudaprocess",
        "rscudaipcsink",
        "rscudaipcsrc",
    ] {
        let element = gst::ElementFactory::make(factory).build().unwrap();
        let name = element.name();
        let number = name.strip_prefix(factory);
        assert!(
            number.is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit())),
            "a {factory} is named {name}"
        );
        let named = gst::ElementFactory::make(factory)
            .name("mine")
            .build()
            .unwrap();
        assert_eq!(named.name(), "mine");
    }
    // gst-launch-1.0 names elements the same way.
    let pipeline = gst::parse::launch("cudatestsrc ! cudaprocess ! fakesink")
        .unwrap()
        .downcast::<gst::Bin>()
        .unwrap();
    let names: Vec<String> = pipeline
        .children()
        .iter()
        .map(|e| e.name().to_string())
        .collect();
    assert!(
        names.iter().any(|n| n.starts_with("cudatestsrc"))
            && names.iter().any(|n| n.starts_with("cudaprocess")),
        "{names:?}"
    );
}

/// The debug categories the docs list, from the table under Observability.
fn documented_categories() -> Vec<String> {
    let page = read(&repo_file("docs/elements.md"));
    let start = page
        .find("## Observability")
        .expect("an Observability section");
    table(&page[start..], "| category |")
        .iter()
        .map(|row| quoted(&row[0]).concat())
        .collect()
}

#[test]
fn debug_categories_exist_as_soon_as_the_plugin_loads() {
    // A fresh process that only loads the plugins: nothing of ours ran.
    let out = checked(&mut Command::new("gst-launch-1.0"))
        .arg("--gst-debug-help")
        .env("GST_PLUGIN_PATH", plugin_dir())
        .env("GST_DEBUG_NO_COLOR", "1")
        .output()
        .expect("gst-launch-1.0 must be installed");
    assert_no_glib_complaints(
        "gst-launch-1.0 --gst-debug-help",
        &String::from_utf8_lossy(&out.stderr),
    );
    let listed = String::from_utf8_lossy(&out.stdout);
    let categories: Vec<&str> = listed
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .collect();
    let documented = documented_categories();
    assert!(documented.len() >= 6, "{documented:?}");
    for category in &documented {
        assert!(
            categories.contains(&category.as_str()),
            "`{category}` (docs/elements.md) is not listed by gst-launch-1.0 --gst-debug-help:\n{listed}"
        );
    }
    // And the docs name every category of the plugin.
    init();
    for category in gst::DebugCategory::all_categories() {
        let name = category.name();
        let ours = name.starts_with("cudaipc") || ["cudatestsrc", "cudaprocess"].contains(&name);
        assert!(
            !ours || documented.iter().any(|d| d == name),
            "the debug category {name} is not in docs/elements.md"
        );
    }
}

/// Entry of the child of `a_critical_in_a_child_fails_the_test`: logs a
/// warning, then a critical, as GLib and GStreamer do.
#[test]
#[ignore]
fn child_that_logs_a_critical() {
    if std::env::var_os("CUDAIPC_CRITICAL_CHILD").is_none() {
        return;
    }
    glib::g_warning!("GLib-GObject", "a warning the test provokes");
    glib::g_critical!("GStreamer", "a critical the test provokes");
    println!("survived the critical");
}

#[test]
fn a_critical_in_a_child_fails_the_test() {
    let out = checked(&mut Command::new(std::env::current_exe().unwrap()))
        .args([
            "user_facing::child_that_logs_a_critical",
            "--exact",
            "--ignored",
            "--nocapture",
        ])
        .env("CUDAIPC_CRITICAL_CHILD", "1")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stdout}\n{stderr}");
    assert!(!stdout.contains("survived the critical"), "{stdout}");
    let complaints = glib_complaints(&stderr);
    assert_eq!(complaints.len(), 2, "{stderr}");
    assert!(
        complaints[0].contains("GLib-GObject-WARNING **"),
        "{stderr}"
    );
    assert!(complaints[1].contains("GStreamer-CRITICAL **"), "{stderr}");
    // GStreamer's own debug log and gst-launch-1.0's element warnings are
    // not GLib's complaints.
    assert!(
        glib_complaints(
            "0:00:00.1 123 0x1 WARN GST_PADS gstpad.c:1 x\nWARNING: from element /x: y"
        )
        .is_empty()
    );
}

/// The structs `cudaipc.h` declares (`typedef struct NAME { ... } NAME;`;
/// opaque ones left out), each with its fields in order.
fn c_structs(header: &str) -> Vec<(String, Vec<String>)> {
    let mut structs = Vec::new();
    let mut rest = header;
    while let Some(at) = rest.find("typedef struct ") {
        rest = &rest[at + "typedef struct ".len()..];
        let Some(open) = rest.find(['{', ';']) else {
            break;
        };
        if rest.as_bytes()[open] == b';' {
            continue;
        }
        let name = rest[..open].trim().to_string();
        let close = rest.find('}').expect("a struct's end");
        let fields = rest[open + 1..close]
            .lines()
            .map(str::trim)
            .filter(|l| !l.starts_with("//"))
            .filter_map(|l| l.strip_suffix(';'))
            .map(|declaration| {
                let name = declaration.rsplit([' ', '*']).next().unwrap();
                name.split('[').next().unwrap().to_string()
            })
            .collect();
        structs.push((name, fields));
        rest = &rest[close..];
    }
    structs
}

/// docs/c-api.md names the C structs' fields as cudaipc.h declares them: its
/// table lists every field of every struct, and the C code on the page uses
/// only fields that exist.
#[test]
fn the_c_api_page_names_the_headers_struct_fields() {
    let header = read(&repo_file("crates/cudaipc-c/include/cudaipc.h"));
    let page = read(&repo_file("docs/c-api.md"));
    let structs = c_structs(&header);
    assert!(structs.len() >= 5, "{structs:?}");
    let rows = table(&page, "| struct | fields |");
    let mut problems = Vec::new();
    for (name, fields) in &structs {
        let Some(row) = rows.iter().find(|r| quoted(&r[0]) == [name.clone()]) else {
            problems.push(format!("{name}: not in the table"));
            continue;
        };
        // The fields: the names in backticks outside parentheses (those
        // inside say what a field takes).
        let mut outside = String::new();
        let mut depth = 0;
        for c in row[1].chars() {
            match c {
                '(' => depth += 1,
                ')' => depth -= 1,
                c if depth == 0 => outside.push(c),
                _ => {}
            }
        }
        let listed = quoted(&outside);
        if &listed != fields {
            problems.push(format!(
                "{name}: the page lists {listed:?}, cudaipc.h has {fields:?}"
            ));
        }
    }
    let all: Vec<&String> = structs.iter().flat_map(|(_, f)| f).collect();
    for block in page.split("```c\n").skip(1) {
        let code = block.split("```").next().unwrap();
        for variable in ["info.", "options.", "slot.", "layout."] {
            for (at, _) in code.match_indices(variable) {
                if code[..at].ends_with(|c: char| c.is_alphanumeric() || c == '_') {
                    continue;
                }
                let field: String = code[at + variable.len()..]
                    .chars()
                    .take_while(|c| c.is_alphanumeric() || *c == '_')
                    .collect();
                if !all.contains(&&field) {
                    problems.push(format!(
                        "the C code uses {variable}{field}, a field cudaipc.h lacks"
                    ));
                }
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}
