// One suite over the platform implementation that is built: what the
// channel relies on from every operating system.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use super::*;
use crate::shm::SharedFile;

fn temp_path(tag: &str) -> std::path::PathBuf {
    std::env::temp_dir().join(format!("cudaipc-{tag}-{:x}", random_u64()))
}

#[test]
fn byte_locks_conflict_between_handles_and_go_with_the_handle() {
    let path = temp_path("lock");
    let a = SharedFile::create_exclusive(&path, 4096, 0o600).unwrap();
    let b = SharedFile::open(&path).unwrap();
    assert!(!byte_is_locked(&b.file, 3).unwrap());
    assert!(try_lock_byte(&a.file, 3).unwrap());
    assert!(byte_is_locked(&b.file, 3).unwrap());
    assert!(!try_lock_byte(&b.file, 3).unwrap());
    // Other bytes are independent.
    assert!(try_lock_byte(&b.file, 4).unwrap());
    assert!(byte_is_locked(&a.file, 4).unwrap());
    unlock_byte(&b.file, 4);
    assert!(!byte_is_locked(&a.file, 4).unwrap());
    drop(a);
    // Closing the handle drops its locks, as death does.
    assert!(try_lock_byte(&b.file, 3).unwrap());
    drop(b);
    std::fs::remove_file(&path).unwrap();
}

#[test]
fn exclusive_creation_refuses_a_taken_name_and_links_atomically() {
    let path = temp_path("excl");
    let f = SharedFile::create_exclusive(&path, 64, 0o600).unwrap();
    assert_eq!(f.len(), 64);
    let again = SharedFile::create_exclusive(&path, 64, 0o600)
        .err()
        .unwrap();
    assert_eq!(again.kind(), std::io::ErrorKind::AlreadyExists);
    assert!(f.is_linked_at_path());
    assert_eq!(owner_uid(&f.file).unwrap(), effective_uid());
    assert_eq!(path_owner_uid(&path).unwrap(), effective_uid());

    let public = temp_path("public");
    link_exclusive(&path, &public).unwrap();
    let taken = link_exclusive(&path, &public).unwrap_err();
    assert_eq!(taken.kind(), std::io::ErrorKind::AlreadyExists);
    assert_eq!(path_identity(&public).unwrap(), f.inode().unwrap());
    std::fs::remove_file(&public).unwrap();
    assert!(f.is_linked_at_path());
    // The name goes at once, though the file is open and mapped, and a new
    // file can take it.
    crate::shm::remove_name(&path).unwrap();
    assert!(!f.is_linked_at_path());
    let successor = SharedFile::create_exclusive(&path, 64, 0o600).unwrap();
    assert!(!f.is_linked_at_path());
    assert!(successor.is_linked_at_path());
    drop(successor);
    crate::shm::remove_name(&path).unwrap();
}

#[test]
fn a_mapping_is_shared_between_handles() {
    let path = temp_path("map");
    let a = SharedFile::create_exclusive(&path, 4096, 0o600).unwrap();
    let b = SharedFile::open(&path).unwrap();
    let read_only = SharedFile::open_read_only(&path).unwrap();
    assert!(read_only.map.as_mut_ptr().is_none());
    // SAFETY: both mappings cover 4096 bytes of one file; offset 100 is in range.
    unsafe { a.map.as_mut_ptr().unwrap().add(100).write_volatile(0x5a) };
    // SAFETY: as above, read through the other handles' mappings.
    assert_eq!(unsafe { b.map.as_ptr().add(100).read_volatile() }, 0x5a);
    // SAFETY: the read-only mapping covers the same 4096 bytes; offset 100
    // is in range.
    let through_read_only = unsafe { read_only.map.as_ptr().add(100).read_volatile() };
    assert_eq!(through_read_only, 0x5a);
    drop((a, b, read_only));
    std::fs::remove_file(&path).unwrap();
}

#[test]
fn a_process_is_named_by_its_pid_and_start_time() {
    let me = std::process::id();
    let started = own_start_time().expect("own start time");
    assert_eq!(process_start_time(me), Some(started));
    assert!(process_runs(me, started));
    assert!(process_runs(me, 0), "start time not known");
    assert!(
        !process_runs(me, started + 1),
        "another process under a reused pid"
    );
    assert!(pid_namespace() != 0);
    // A child that exits at once (the test binary listing no tests).
    let mut child = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--list", "--exact", "no-such-test"])
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let pid = child.id();
    let child_started = process_start_time(pid).unwrap_or(0);
    child.wait().unwrap();
    assert!(!process_runs(pid, child_started), "gone");
}

#[test]
fn random_values_differ_and_the_clock_runs_forward() {
    let (a, b) = (random_u64(), random_u64());
    assert_ne!(a, b);
    assert_ne!(a, 0);
    let t0 = monotonic_ns();
    std::thread::sleep(Duration::from_millis(2));
    let t1 = monotonic_ns();
    assert!(t1 >= t0 + 1_000_000, "{t0} then {t1}");
}

/// A sleeper on a word of a shared mapping wakes when another handle's
/// mapping of the same word is bumped and woken, long before its timeout.
#[test]
fn a_wake_reaches_a_sleeper_through_another_mapping() {
    let path = temp_path("wake");
    let a = SharedFile::create_exclusive(&path, 4096, 0o600).unwrap();
    let b = Arc::new(SharedFile::open(&path).unwrap());
    let word_of = |f: &SharedFile| {
        // SAFETY: offset 64 of a 4096-byte shared mapping, 4-byte aligned,
        // accessed only atomically; the mapping outlives the reference here.
        unsafe { &*(f.map.as_ptr().add(64) as *const AtomicU32) }
    };
    let sleepers = Arc::new(AtomicU32::new(0));
    let sleeper = {
        let (b, sleepers) = (b.clone(), sleepers.clone());
        std::thread::spawn(move || {
            let word = word_of(&b);
            let started = Instant::now();
            sleepers.fetch_add(1, Ordering::SeqCst);
            while word.load(Ordering::SeqCst) == 0 {
                futex_wait(word, 0, Duration::from_secs(10));
            }
            started.elapsed()
        })
    };
    while sleepers.load(Ordering::SeqCst) == 0 {
        std::thread::yield_now();
    }
    std::thread::sleep(Duration::from_millis(50));
    let word = word_of(&a);
    word.fetch_add(1, Ordering::SeqCst);
    futex_wake(word, 1);
    let slept = sleeper.join().unwrap();
    assert!(slept < Duration::from_secs(5), "woken after {slept:?}");
    drop(a);
    drop(b);
    std::fs::remove_file(&path).unwrap();
}

#[test]
fn the_own_user_is_named_as_users_write_it() {
    #[cfg(unix)]
    assert_eq!(
        parse_user_id(&effective_uid().to_string()),
        Some(effective_uid())
    );
    #[cfg(windows)]
    assert_eq!(parse_user_id(user_sid()), Some(effective_uid()));
    assert_eq!(parse_user_id("not-a-user"), None);
}
