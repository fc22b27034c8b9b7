// SPDX-License-Identifier: MPL-2.0

//! The tool as a user types it, without any channel: an empty folder is
//! said to be empty, a wrong command is named with the usage and code 2.
//! Against real producers and consumers it is tested in the plugin's
//! processes_and_channels (watch, serve-metrics, remove-stale).

#[path = "../../../tests/common/workspace_binaries.rs"]
mod workspace_binaries;
use workspace_binaries::workspace_binary;

use std::path::Path;
use std::process::{Command, Output};

fn channels(args: &[&str], shm_dir: &Path) -> Output {
    Command::new(workspace_binary("cudaipc-channels"))
        .args(args)
        .env("CUDAIPC_SHM_DIR", shm_dir)
        .output()
        .unwrap()
}

#[test]
fn an_empty_folder_lists_no_channels_and_a_wrong_command_says_how_to_call_it() {
    let dir = std::env::temp_dir().join(format!("cudaipc-channels-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let listed = channels(&[], &dir);
    assert!(listed.status.success(), "{listed:?}");
    let stdout = String::from_utf8_lossy(&listed.stdout);
    assert!(
        stdout.contains(&format!("no channels in {}", dir.display())),
        "{stdout}"
    );

    let wrong = channels(&["lsit"], &dir);
    let stderr = String::from_utf8_lossy(&wrong.stderr);
    assert_eq!(wrong.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("unknown command \"lsit\""), "{stderr}");
    assert!(stderr.contains("usage: cudaipc-channels"), "{stderr}");

    let once = channels(&["watch", "--once", "--json"], &dir);
    assert!(once.status.success(), "{once:?}");
    let json = String::from_utf8_lossy(&once.stdout);
    assert!(json.contains("\"channels\":[]"), "{json}");
    std::fs::remove_dir_all(&dir).ok();
}
