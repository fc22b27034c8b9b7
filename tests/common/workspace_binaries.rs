// SPDX-License-Identifier: MPL-2.0

// Where a test finds one of the workspace's commands (cudaipc-channels,
// cudaipc-bridge): where the test binary runs, never cargo's build-time
// path, which a staged copy on the GPU host does not have. Included by path
// from the crates' own tests too.

use std::path::PathBuf;

/// The command `name` (also its package's name) beside this test binary,
/// where the GPU host's staging puts both, else in the cargo target folder
/// above it (`cargo test --workspace` builds it there); that it is there is
/// the caller's to check.
pub fn workspace_binary_path(name: &str) -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let here = exe.parent().unwrap();
    let staged = here.join(name);
    if staged.is_file() {
        return staged;
    }
    here.parent().unwrap().join(name)
}

/// [`workspace_binary_path`], which must be there.
pub fn workspace_binary(name: &str) -> PathBuf {
    let built = workspace_binary_path(name);
    assert!(
        built.is_file(),
        "{} is missing: cargo build -p {name}",
        built.display()
    );
    built
}
