// SPDX-License-Identifier: MPL-2.0
#![cfg(unix)]

//! What a user who types the command wrong, or picks a taken port, reads:
//! a clear line and an exit code, never a panic. The bridge between hosts
//! is tested with real namespaces in the plugin's processes_and_channels.

#[path = "../../../tests/common/workspace_binaries.rs"]
mod workspace_binaries;
use workspace_binaries::workspace_binary;

use std::process::{Command, Output};
use std::time::{Duration, Instant};

fn bridge(args: &[&str]) -> Output {
    Command::new(workspace_binary("cudaipc-bridge"))
        .args(args)
        .env("UCX_TLS", "tcp")
        .output()
        .unwrap()
}

fn ucx_or_skip() -> bool {
    let out = bridge(&["version"]);
    if !out.status.success() {
        eprintln!("SKIPPED: {}", String::from_utf8_lossy(&out.stderr));
    }
    out.status.success()
}

#[test]
fn wrong_commands_say_what_is_wrong_with_code_2() {
    for (args, says) in [
        (
            vec!["receive", "--listen", "127.0.0.1:0", "--channel", "c"],
            "say which senders to accept",
        ),
        (
            vec![
                "receive",
                "--listen",
                "nowhere",
                "--channel",
                "c",
                "--allow",
                "10.0.0.1",
            ],
            "is not ADDRESS:PORT",
        ),
        (
            vec![
                "receive",
                "--listen",
                "127.0.0.1:0",
                "--channel",
                "c",
                "--allow",
                "ten",
            ],
            "is not an IP address",
        ),
        (
            vec![
                "receive",
                "--listen",
                "127.0.0.1:0",
                "--channel",
                "a/b",
                "--allow",
                "10.0.0.1",
            ],
            "a/b",
        ),
        (
            vec![
                "send",
                "--to",
                "127.0.0.1:1",
                "--channel",
                "c",
                "--frames",
                "most",
            ],
            "auto, every or latest",
        ),
        (vec!["send", "--to", "127.0.0.1:1"], "--channel is needed"),
        (
            vec![
                "send",
                "--to",
                "127.0.0.1:1",
                "--channel",
                "c",
                "--channel",
                "d",
            ],
            "given twice",
        ),
        (
            vec![
                "send",
                "--to",
                "127.0.0.1:1",
                "--channel",
                "c",
                "--patience",
                "0",
            ],
            "seconds from 0.5",
        ),
        (vec!["bridge"], "unknown command"),
    ] {
        let out = bridge(&args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains(says), "{args:?}: {says:?} not in {stderr}");
        assert!(!stderr.contains("panicked"), "{stderr}");
    }
}

#[test]
fn a_secret_file_others_may_read_is_refused() {
    let path = std::env::temp_dir().join(format!("cudaipc-bridge-secret-{}", std::process::id()));
    std::fs::write(&path, "0123456789abcdef0123456789abcdef").unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
    let p = path.to_str().unwrap();
    let out = bridge(&[
        "send",
        "--to",
        "127.0.0.1:1",
        "--channel",
        "c",
        "--secret-file",
        p,
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("chmod 600"), "{stderr}");
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
    std::fs::write(&path, "short").unwrap();
    let out = bridge(&[
        "send",
        "--to",
        "127.0.0.1:1",
        "--channel",
        "c",
        "--secret-file",
        p,
    ]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("shorter than 16 bytes"));
    std::fs::remove_file(&path).ok();
}

#[test]
fn a_taken_port_is_an_error_naming_it() {
    if !ucx_or_skip() {
        return;
    }
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let address = taken.local_addr().unwrap().to_string();
    let started = Instant::now();
    let out = bridge(&[
        "receive",
        "--listen",
        &address,
        "--channel",
        "c",
        "--allow",
        "127.0.0.1",
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains(&format!("cannot listen on {address}")),
        "{stderr}"
    );
    assert!(started.elapsed() < Duration::from_secs(20));
}
