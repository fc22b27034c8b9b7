// Linux-only checks of the platform layer: /proc, zombies and unix modes.

use std::os::unix::fs::MetadataExt;

use super::*;
use crate::platform::random_u64;
use crate::shm::SharedFile;

#[test]
fn a_process_runs_until_it_is_a_zombie_and_its_pid_names_only_it() {
    let me = std::process::id();
    let started = process_start_time(me).unwrap();
    assert!(process_runs(me, started));
    assert!(process_runs(me, 0), "start time not known");
    assert!(
        !process_runs(me, started + 1),
        "another process under a reused pid"
    );
    let mut child = std::process::Command::new("true").spawn().unwrap();
    let pid = child.id();
    let child_started = process_start_time(pid).unwrap_or(0);
    // Exited but not reaped: a zombie, which holds nothing any more.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while process_stat(pid).is_some_and(|(state, _)| state != 'Z') {
        assert!(
            std::time::Instant::now() < deadline,
            "the child never exited"
        );
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    assert!(!process_runs(pid, child_started), "a zombie");
    child.wait().unwrap();
    assert!(!process_runs(pid, child_started), "gone");
}

/// The start time this process reads for itself is the one another
/// process (a `cat`, reading the kernel's) reads for its pid: else
/// consumers take a live producer for a dead one whose pid was reused.
/// Natively /proc/self/stat agrees too; under qemu-user it is qemu's
/// own answer, which is why the task entry is read.
#[test]
fn own_start_time_is_what_another_process_reads() {
    let me = std::process::id();
    let read_by_another = |path: String| {
        let out = std::process::Command::new("cat").arg(&path).output();
        let out = out.expect("cat runs");
        assert!(out.status.success(), "cat {path}");
        parse_stat(&String::from_utf8_lossy(&out.stdout))
            .unwrap_or_else(|| panic!("{path} parses"))
            .1
    };
    let outside = read_by_another(format!("/proc/{me}/stat"));
    assert_eq!(own_start_time(), Some(outside));
    assert_eq!(
        read_by_another(format!("/proc/{me}/task/{me}/stat")),
        outside
    );
    // `uname` is a binary of the host: under qemu-user it runs natively
    // and names another architecture than this test's.
    let uname = std::process::Command::new("uname").arg("-m").output();
    let host_arch = String::from_utf8_lossy(&uname.expect("uname runs").stdout)
        .trim()
        .to_owned();
    if host_arch == std::env::consts::ARCH {
        let own = std::fs::read_to_string("/proc/self/stat").unwrap();
        assert_eq!(parse_stat(&own).map(|(_, t)| t), Some(outside));
    } else {
        eprintln!(
            "emulated ({} on {host_arch}): /proc/self/stat is the emulator's, not compared",
            std::env::consts::ARCH
        );
    }
}

#[test]
fn exclusive_creation_sets_the_exact_mode() {
    let path = std::env::temp_dir().join(format!("cudaipc-mode-{}", random_u64()));
    let f = SharedFile::create_exclusive(&path, 64, 0o640).unwrap();
    assert_eq!(f.file.metadata().unwrap().mode() & 0o777, 0o640);
    assert!(SharedFile::create_exclusive(&path, 64, 0o600).is_err());
    assert!(f.is_linked_at_path());
    std::fs::remove_file(&path).unwrap();
    assert!(!f.is_linked_at_path());
}
