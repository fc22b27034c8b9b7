// SPDX-License-Identifier: MPL-2.0

//! include/cudaipc.h is what cbindgen makes of this crate now.

use std::path::Path;

/// The header cbindgen generates from the crate with cbindgen.toml. Tests
/// run in the crate's folder (cargo's working directory for them).
pub(super) fn generated() -> String {
    let config = cbindgen::Config::from_file("cbindgen.toml").expect("cbindgen.toml parses");
    let bindings = cbindgen::Builder::new()
        .with_crate(".")
        .with_config(config)
        .generate()
        .expect("cbindgen generates the header");
    let mut out = Vec::new();
    bindings.write(&mut out);
    String::from_utf8(out).expect("the header is UTF-8")
}

#[test]
fn checked_in_header_is_the_generated_one() {
    let path = Path::new("include/cudaipc.h");
    let generated = generated();
    if std::env::var_os("CUDAIPC_BLESS").is_some() {
        std::fs::write(path, &generated).expect("include/cudaipc.h is writable");
    }
    let checked_in = std::fs::read_to_string(path).unwrap_or_default();
    assert!(
        checked_in == generated,
        "crates/cudaipc-c/include/cudaipc.h is not what cbindgen makes of the crate: \
         regenerate it with `CUDAIPC_BLESS=1 cargo test -p cudaipc-c header` and commit it"
    );
}

/// The functions the header declares.
pub(super) fn functions() -> Vec<String> {
    let header = std::fs::read_to_string("include/cudaipc.h").expect("the header");
    let mut names: Vec<String> = header
        .lines()
        .filter(|line| !line.starts_with(' ') && !line.starts_with("//") && line.contains('('))
        .filter_map(|line| {
            let before = &line[..line.find('(')?];
            let name = before.rsplit([' ', '*']).next()?;
            name.starts_with("cudaipc_").then(|| name.to_owned())
        })
        .collect();
    names.sort();
    names.dedup();
    names
}

#[test]
fn header_declares_the_api() {
    let names = functions();
    for expected in [
        "cudaipc_publisher_create",
        "cudaipc_subscriber_next_frame",
        "cudaipc_frame_release_after_stream",
        "cudaipc_last_error_message",
    ] {
        assert!(
            names.iter().any(|n| n == expected),
            "{expected} missing from {names:?}"
        );
    }
}
