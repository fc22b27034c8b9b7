// A producer's life: what it refuses to create, one producer a channel,
// its end as its consumers see it, the process it recorded (checked where
// /proc can tell), a control block without a name until it is whole.

use std::sync::atomic::AtomicBool;
use std::time::Duration;

use super::{consumer, meta, producer, unique_channel};
use crate::control_block::{control_header, recorded_producer_may_run};
use crate::layout::*;
use crate::*;

#[test]
fn a_mode_beyond_0o777_and_a_ring_beyond_max_slots_are_refused() {
    for permissions in [0o4777, u32::MAX, 777] {
        let channel = unique_channel("mode");
        let err = Producer::create(ProducerConfig {
            channel: channel.clone(),
            permissions,
            ..Default::default()
        })
        .unwrap_err();
        assert!(
            matches!(err, ChannelError::OutOfRange { setting: Setting::Permissions, value }
                if value == u64::from(permissions)),
            "{err}"
        );
        assert!(err.to_string().contains("0 to 0o777"), "{err}");
        assert!(!shm::control_path(&channel).exists());
    }
    let p = producer(&unique_channel("ring"), WhenFull::Block);
    let no = AtomicBool::new(false);
    let deep = vec![[0u8; SLOT_DESCRIPTOR_BYTES]; MAX_SLOTS + 1];
    let err = p.configure_pool(64, &deep, b"pool", &no).unwrap_err();
    assert!(
        matches!(
            err,
            ChannelError::OutOfRange {
                setting: Setting::Slots,
                value: 65
            }
        ),
        "{err}"
    );
    assert_eq!(p.slot_count(), 4, "the ring in place stays");
}

#[test]
fn a_second_producer_is_refused_and_a_closed_channel_is_removed() {
    let channel = unique_channel("dup");
    let p = producer(&channel, WhenFull::Block);
    let err = Producer::create(ProducerConfig {
        channel: channel.clone(),
        ..Default::default()
    })
    .unwrap_err();
    assert!(
        matches!(err, ChannelError::InUse { pid, .. } if pid == std::process::id()),
        "{err}"
    );
    assert!(err.to_string().contains("in use"), "{err}");
    let path = p.path().to_path_buf();
    assert!(path.exists());
    drop(p);
    assert!(!path.exists());
}

/// A consumer that attaches after the end of stream waits for the next
/// stream; when the producer closes instead, its stream ended: the consumer
/// gets that end, in either mode, not "closed without an end of stream".
#[test]
fn a_consumer_attached_after_the_end_of_stream_ends_when_the_producer_closes() {
    for mode in [ConsumerMode::EveryFrame, ConsumerMode::Latest] {
        let channel = unique_channel("ended");
        let no = AtomicBool::new(false);
        let p = producer(&channel, WhenFull::Block);
        for i in 0..3 {
            let slot = p.reserve(&no).unwrap().unwrap();
            p.publish(slot, &meta(1, i)).unwrap();
        }
        p.publish_eos();
        let mut c = consumer(&channel, mode);
        // Still open: the next stream may come.
        assert!(
            matches!(
                c.next(&no, Some(Duration::from_millis(100))),
                Err(ChannelError::Timeout)
            ),
            "{mode:?}"
        );
        drop(p);
        let item = c.next(&no, Some(Duration::from_secs(1))).unwrap();
        assert!(matches!(item, Item::Eos), "{mode:?}");
        assert_eq!(c.frames_missed(), 0, "{mode:?}");
    }
}

#[test]
fn producer_close_is_reported_after_the_last_frame() {
    let channel = unique_channel("close");
    let no = AtomicBool::new(false);
    let p = producer(&channel, WhenFull::Block);
    let mut c = consumer(&channel, ConsumerMode::EveryFrame);
    let slot = p.reserve(&no).unwrap().unwrap();
    p.publish(slot, &meta(1, 0)).unwrap();
    drop(p);
    assert!(matches!(c.next(&no, None).unwrap(), Item::Frame(_)));
    let err = c.next(&no, Some(Duration::from_secs(2))).unwrap_err();
    assert!(
        matches!(err, ChannelError::ProducerGone(ProducerGone::Closed)),
        "{err}"
    );
}

/// The recorded producer process counts only where it can be checked: a
/// dead one of our namespace and user marks the block dead; another user's
/// block keeps to its lock (/proc may hide that user's processes).
#[cfg(unix)]
#[test]
fn a_recorded_producer_is_checked_only_where_proc_can_tell() {
    let channel = unique_channel("recorded");
    let live = producer(&channel, WhenFull::Block);
    let path = shm::control_path(&channel);
    let shared = shm::SharedFile::open(&path).unwrap();
    assert!(recorded_producer_may_run(&shared), "this process runs");
    let mut gone = std::process::Command::new("true").spawn().unwrap();
    let gone_pid = gone.id();
    gone.wait().unwrap();
    let h = control_header(&shared);
    h.producer_pid
        .store(gone_pid, std::sync::atomic::Ordering::SeqCst);
    h.producer_start_time
        .store(0, std::sync::atomic::Ordering::SeqCst);
    assert!(!recorded_producer_may_run(&shared), "a reaped process");
    let namespace = h
        .producer_pid_namespace
        .load(std::sync::atomic::Ordering::SeqCst);
    h.producer_pid_namespace
        .store(namespace ^ 1, std::sync::atomic::Ordering::SeqCst);
    assert!(recorded_producer_may_run(&shared), "another PID namespace");
    h.producer_pid_namespace
        .store(namespace, std::sync::atomic::Ordering::SeqCst);
    // Another user's block: only root can make one here.
    if shm::effective_uid() == 0 {
        std::os::unix::fs::chown(&path, Some(65534), None).unwrap();
        assert!(recorded_producer_may_run(&shared), "another user's block");
        std::os::unix::fs::chown(&path, Some(0), None).unwrap();
    }
    drop(live);
}

/// A producer in another process is taken for the live one it is: the
/// start time it recorded for itself is the one this process reads for its
/// pid, and a consumer attaches. (Under qemu-user the two differed by a
/// tick: consumers took every live producer for a dead one.)
#[test]
fn a_producer_in_another_process_is_recognised_by_its_recorded_start_time() {
    use std::io::BufRead;
    use std::process::{Command, Stdio};
    use std::sync::atomic::Ordering::SeqCst;
    const TEST: &str = "a_producer_in_another_process_is_recognised_by_its_recorded_start_time";
    const CHILD_CHANNEL: &str = "CUDAIPC_TEST_CHILD_PRODUCER";
    if let Ok(channel) = std::env::var(CHILD_CHANNEL) {
        let _live = producer(&channel, WhenFull::Block);
        println!("producer-ready");
        // Live until the parent closes our stdin.
        let _ = std::io::stdin().read_line(&mut String::new());
        return;
    }
    let channel = unique_channel("starttime");
    // This test again, in a child process, by its name in the harness.
    let name = format!("{}::{TEST}", module_path!().split_once("::").unwrap().1);
    let child = Command::new(std::env::current_exe().unwrap())
        .args([&name, "--exact", "--nocapture", "--test-threads=1"])
        .env(CHILD_CHANNEL, &channel)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    /// Ends the child (ours, by its pid) if an assertion fails first.
    struct Reap(std::process::Child);
    impl Drop for Reap {
        fn drop(&mut self) {
            if matches!(self.0.try_wait(), Ok(None)) {
                let _ = self.0.kill();
            }
            let _ = self.0.wait();
        }
    }
    let mut child = Reap(child);
    let stdout = std::io::BufReader::new(child.0.stdout.take().unwrap());
    let (ready, started) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        // The harness writes "test NAME ... " before the test's own output;
        // the rest is read too, so that the child's harness can write it.
        for line in stdout.lines().map_while(Result::ok) {
            if line.ends_with("producer-ready") {
                let _ = ready.send(true);
            }
        }
        let _ = ready.send(false);
    });
    assert_eq!(
        started.recv_timeout(Duration::from_secs(60)),
        Ok(true),
        "the child producer never started"
    );
    let pid = child.0.id();
    let shared = shm::SharedFile::open(&shm::control_path(&channel)).unwrap();
    let h = control_header(&shared);
    assert_eq!(h.producer_pid.load(SeqCst), pid);
    assert_eq!(
        Some(h.producer_start_time.load(SeqCst)),
        shm::process_start_time(pid),
        "the start time the producer recorded for itself is not the one others read"
    );
    assert!(
        recorded_producer_may_run(&shared),
        "a live producer taken for dead"
    );
    let consumer = consumer(&channel, ConsumerMode::EveryFrame);
    assert_eq!(consumer.info().producer_pid, pid);
    assert!(
        consumer.producer_gone().is_none(),
        "a live producer taken for gone"
    );
    drop(child.0.stdin.take());
    assert!(
        child.0.wait().unwrap().success(),
        "the child producer failed"
    );
    assert!(matches!(
        consumer.producer_gone(),
        Some(ProducerGone::Closed)
    ));
}

// O_TMPFILE and /proc: Linux only (Windows falls back to a private name).
#[cfg(unix)]
#[test]
fn a_control_block_has_no_name_until_it_is_linked() {
    use std::os::unix::fs::PermissionsExt;
    let dir = shm::shm_dir().join(unique_channel("unnamed"));
    std::fs::create_dir(&dir).unwrap();
    let name = dir.join("cudaipc-block");
    let block = shm::SharedFile::create_unnamed(&dir, &name, control_size(), 0o640)
        .unwrap()
        .expect("the shm folder's file system (tmpfs) has O_TMPFILE");
    // A producer killed now would leave nothing in the folder.
    let names = || std::fs::read_dir(&dir).unwrap().count();
    assert_eq!(names(), 0, "a block under construction has a name");
    shm::link_unnamed(&block.file, &name).unwrap();
    assert!(block.is_linked_at_path(), "the name is not the block's");
    let mode = std::fs::metadata(&name).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o640);
    let again = shm::link_unnamed(&block.file, &name).unwrap_err();
    assert_eq!(again.kind(), std::io::ErrorKind::AlreadyExists);
    assert_eq!(names(), 1);
    std::fs::remove_dir_all(&dir).unwrap();
}
