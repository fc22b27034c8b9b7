// Faults with real processes: peers killed with SIGKILL, stopped with
// SIGSTOP, restarted; stale channels; permissions; liveness that does not
// trust pids; PID namespaces. Each scenario runs on the host transport (CI)
// and on the cuda transport where a GPU exists (SKIPPED elsewhere, failing
// with CUDAIPC_REQUIRE_GPU=1). Time limits are generous bounds, except the
// one-second bounds that the protocol promises.

use crate::common;

use std::time::{Duration, Instant};

use common::*;
use cudaipc_channel::ControlBlock;

const LIMIT: Duration = HOST.limit;
/// What the protocol promises for noticing a dead peer.
const NOTICE: Duration = Duration::from_secs(1);

/// The control block of the live producer of `channel` (not the remains of
/// a dead one).
fn block(channel: &str) -> ControlBlock {
    let mut block = None;
    wait_until(
        LIMIT,
        &format!("a producer opens channel '{channel}'"),
        || {
            block = ControlBlock::open(channel).filter(|b| b.producer_alive());
            block.is_some()
        },
    );
    block.unwrap()
}

/// A live producer that streams until it is killed.
fn live_producer(t: Transport, channel: &str) -> Launch {
    launch(&format!(
        "videotestsrc is-live=true pattern=ball ! {} ! rscudaipcsink channel={channel} {}",
        t.caps, t.sink
    ))
}

/// Once a consumer waits on `channel`, runs a producer of `frames` frames
/// to its end; returns the checksums the consumer should print.
fn produce_for_waiting_consumer(
    t: Transport,
    channel: &str,
    frames: u32,
    what: &str,
) -> Vec<String> {
    wait_for_waiting_consumers(channel, 1, LIMIT);
    let src = source(t, frames);
    let expected = reference_checksums(&src);
    launch(&format!(
        "{src} ! rscudaipcsink channel={channel} {} sync=false",
        t.sink
    ))
    .finish(LIMIT)
    .assert_success(what);
    expected
}

fn source(t: Transport, frames: u32) -> String {
    format!(
        "videotestsrc num-buffers={frames} pattern=ball ! {}",
        t.caps
    )
}

// ---------------------------------------------------------------------------
// Producer killed mid-stream

/// Three consumers, one per `on-producer-lost` policy, see the producer die:
/// all notice within a second; `error` fails with a clear message, `eos`
/// ends cleanly, `wait` picks up a restarted producer and gets every frame
/// of it intact.
fn producer_killed(t: Transport) {
    let channel = unique_channel("pkill");
    let consumers: Vec<(&str, Launch)> = ["error", "eos", "wait"]
        .into_iter()
        .map(|mode| {
            (
                mode,
                launch(&format!(
                    "rscudaipcsrc channel={channel} on-producer-lost={mode} connect-timeout=120000 ! checksumsink"
                )),
            )
        })
        .collect();
    wait_for_waiting_consumers(&channel, 3, LIMIT);
    let producer = live_producer(t, &channel);
    let cb = block(&channel);
    // A consumer takes its second frame once it delivered the first (with
    // the cuda transport, after opening the slots).
    wait_until(LIMIT, "three consumers get frames", || {
        cb.active_consumers() == 3 && cb.published() >= 5 && cb.min_frames_received() >= 2
    });
    producer.signal(libc::SIGKILL);
    let killed = Instant::now();
    drop(producer);
    // Each consumer gives up its record once it noticed.
    wait_until(LIMIT, "consumers notice the death", || {
        cb.active_consumers() == 0
    });
    let noticed = killed.elapsed();
    assert!(
        noticed < NOTICE,
        "consumers noticed the death after {noticed:?}"
    );

    let mut consumers = consumers.into_iter();
    let (_, error) = consumers.next().unwrap();
    let done = error.finish(LIMIT);
    assert!(!done.success, "on-producer-lost=error must fail");
    assert!(
        done.stderr
            .contains(&format!("the producer of channel '{channel}' died"))
            || done
                .stdout
                .contains(&format!("the producer of channel '{channel}' died")),
        "{}\n{}",
        done.stdout,
        done.stderr
    );
    assert!(!done.stderr.contains("panicked"), "{}", done.stderr);
    let (_, eos) = consumers.next().unwrap();
    let done = eos.finish(LIMIT);
    done.assert_success("on-producer-lost=eos");
    let before = done.checksums().len();
    assert!(
        before >= 1,
        "the eos consumer got no frame before the death"
    );

    // `wait`: a new producer on the same channel is picked up.
    let (_, wait) = consumers.next().unwrap();
    let expected = produce_for_waiting_consumer(t, &channel, 30, "restarted producer");
    let done = wait.finish(LIMIT);
    done.assert_success("on-producer-lost=wait");
    let got = done.checksums();
    assert!(got.len() > expected.len(), "no frame of the first producer");
    assert_eq!(got[got.len() - expected.len()..], expected[..]);
}

#[test]
fn host_producer_killed_consumers_follow_their_policy() {
    producer_killed(HOST);
}

#[test]
fn cuda_producer_killed_consumers_follow_their_policy() {
    if gpu("cuda_producer_killed_consumers_follow_their_policy") {
        producer_killed(CUDA);
    }
}

/// One `on-producer-lost=wait` consumer outlives three killed producers: it
/// reattaches each time, frames flow again, and it keeps no mapping, file
/// or handle of the dead ones.
fn restarted_producers(t: Transport, host: bool) {
    let channel = unique_channel("restart");
    let consumer = launch(&format!(
        "rscudaipcsrc channel={channel} on-producer-lost=wait connect-timeout=120000 ! checksumsink"
    ));
    let pid = consumer.pid();
    let mut fds = Vec::new();
    for run in 0..3 {
        wait_for_waiting_consumers(&channel, 1, LIMIT);
        let producer = live_producer(t, &channel);
        let cb = block(&channel);
        let start = std::time::Instant::now();
        while cb.consumer_of(pid).is_none_or(|i| cb.cursor(i) < 5) {
            // Failed once on a GPU host in ~10 runs: say where things stood.
            assert!(
                start.elapsed() < LIMIT,
                "frames do not flow in run {run} after {LIMIT:?}: consumer record {:?} (cursor {:?}), {} published, producer alive {}; consumer threads: {}",
                cb.consumer_of(pid),
                cb.consumer_of(pid).map(|i| cb.cursor(i)),
                cb.published(),
                cb.producer_alive(),
                proc_threads(pid)
            );
            std::thread::sleep(Duration::from_millis(5));
        }
        if host {
            // Every mapping of a dead producer's files is gone: the files
            // were unlinked by the new producer, so a leak shows as
            // "(deleted)".
            let maps = proc_maps(pid);
            let stale: Vec<&str> = maps
                .lines()
                .filter(|l| l.contains(&format!("cudaipc-{channel}")) && l.contains("(deleted)"))
                .collect();
            assert!(stale.is_empty(), "run {run}: stale mappings {stale:#?}");
        }
        fds.push(proc_fds(pid));
        producer.signal(libc::SIGKILL);
        drop(producer);
    }
    assert!(
        fds[2] <= fds[0],
        "the consumer's descriptors grew with reconnections: {fds:?}"
    );
    let expected = produce_for_waiting_consumer(t, &channel, 30, "last producer");
    let done = consumer.finish(LIMIT);
    done.assert_success("consumer");
    let got = done.checksums();
    assert_eq!(got[got.len() - expected.len()..], expected[..]);
}

#[test]
fn host_wait_consumer_survives_restarts_without_leaks() {
    restarted_producers(HOST, true);
}

#[test]
fn cuda_wait_consumer_survives_restarts_without_leaks() {
    if gpu("cuda_wait_consumer_survives_restarts_without_leaks") {
        restarted_producers(CUDA, false);
    }
}

// ---------------------------------------------------------------------------
// Consumer killed while holding slots

/// A slow consumer holds slots and holds the producer back (when-full=block);
/// it is killed: the producer reclaims its slots within a second and
/// finishes, and the other consumer gets every frame intact.
fn consumer_killed(t: Transport) {
    let channel = unique_channel("ckill");
    let frames = 200;
    let src = source(t, frames);
    let expected = reference_checksums(&src);
    let slow = launch(&format!(
        "rscudaipcsrc channel={channel} connect-timeout=120000 ! identity sleep-time=100000 ! fakesink"
    ));
    let fast = launch(&format!(
        "rscudaipcsrc channel={channel} connect-timeout=120000 ! checksumsink"
    ));
    wait_for_waiting_consumers(&channel, 2, LIMIT);
    let producer = PipelineChild::spawn(
        &format!(
            "{src} ! rscudaipcsink name=sink channel={channel} slots=3 sync=false {}",
            t.sink
        ),
        &["sink"],
    );
    let cb = block(&channel);
    let slow_pid = slow.pid();
    wait_until(LIMIT, "the slow consumer holds a slot", || {
        cb.consumer_of(slow_pid)
            .is_some_and(|i| cb.holds_slots(i) && cb.published() >= 3)
    });
    let index = cb.consumer_of(slow_pid).unwrap();
    let stalled = cb.published();
    assert!(
        stalled < frames as u64,
        "the slow consumer did not hold the producer back"
    );
    slow.signal(libc::SIGKILL);
    let killed = Instant::now();
    drop(slow);
    wait_until(LIMIT, "the dead consumer's slots are reclaimed", || {
        !cb.holds_slots(index) && cb.consumer_of(slow_pid).is_none()
    });
    wait_until(LIMIT, "the producer carries on", || {
        cb.published() > stalled + 3 || cb.published() > frames as u64
    });
    let resumed = killed.elapsed();
    assert!(
        resumed < NOTICE,
        "the producer carried on only {resumed:?} after the kill"
    );
    let end = producer.finish(LIMIT);
    end.assert_success("producer");
    let report = end.report.expect("final report");
    assert_eq!(report.num("sink.frames"), frames as u64);
    assert_eq!(report.num("sink.dropped"), 0);
    assert_eq!(report.num("sink.reclaimed-consumers"), 1);
    let done = fast.finish(LIMIT);
    done.assert_success("the other consumer");
    assert_eq!(done.checksums(), expected);
}

#[test]
fn host_killed_consumer_slots_are_reclaimed() {
    consumer_killed(HOST);
}

#[test]
fn cuda_killed_consumer_slots_are_reclaimed() {
    if gpu("cuda_killed_consumer_slots_are_reclaimed") {
        consumer_killed(CUDA);
    }
}

// ---------------------------------------------------------------------------
// Consumer stopped (SIGSTOP)

/// when-full=block: a stopped consumer holds the producer; after SIGCONT
/// every frame arrives intact.
fn stopped_consumer_block(t: Transport) {
    let channel = unique_channel("stop-block");
    let frames = 150;
    let src = source(t, frames);
    let expected = reference_checksums(&src);
    let consumer = launch(&format!(
        "rscudaipcsrc channel={channel} connect-timeout=120000 ! checksumsink"
    ));
    wait_for_waiting_consumers(&channel, 1, LIMIT);
    // A ring well short of the stream (the default may hold 64 frames), so
    // that the stopped consumer holds the producer before the stream ends.
    let mut producer = PipelineChild::spawn(
        &format!(
            "{src} ! rscudaipcsink name=sink channel={channel} when-full=block sync=false slots=32 {}",
            t.sink
        ),
        &["sink"],
    );
    let cb = block(&channel);
    wait_until(LIMIT, "frames flow", || cb.published() >= 20);
    consumer.signal(libc::SIGSTOP);
    std::thread::sleep(Duration::from_millis(300));
    let held = cb.published();
    std::thread::sleep(Duration::from_millis(700));
    assert_eq!(
        cb.published(),
        held,
        "the producer went on past a stopped consumer"
    );
    assert!(held < frames as u64);
    // Reports come periodically: the first one may predate the stop (on the
    // GPU host one came after 8 frames, before any wait).
    let report = producer.wait_report(
        LIMIT,
        "the sink counts its wait for the stopped consumer",
        |r| r.num("sink.waits") >= 1,
    );
    assert_eq!(report.num("sink.dropped"), 0);
    consumer.signal(libc::SIGCONT);
    let end = producer.finish(LIMIT);
    end.assert_success("producer");
    let report = end.report.expect("final report");
    assert_eq!(report.num("sink.frames"), frames as u64);
    assert_eq!(report.num("sink.dropped"), 0);
    let done = consumer.finish(LIMIT);
    done.assert_success("consumer");
    assert_eq!(done.checksums(), expected);
}

#[test]
fn host_stopped_consumer_holds_a_blocking_producer_without_loss() {
    stopped_consumer_block(HOST);
}

#[test]
fn cuda_stopped_consumer_holds_a_blocking_producer_without_loss() {
    if gpu("cuda_stopped_consumer_holds_a_blocking_producer_without_loss") {
        stopped_consumer_block(CUDA);
    }
}

/// Checks that descriptors stay equal and resident memory grows by less
/// than `rss_slack_kb` between two reports of one process.
fn assert_flat(what: &str, early: &Report, late: &Report, rss_slack_kb: u64) {
    assert_eq!(
        late.num("fds"),
        early.num("fds"),
        "{what}: descriptors changed\nearly {early:?}\nlate {late:?}"
    );
    assert!(
        late.num("rss_kb") <= early.num("rss_kb") + rss_slack_kb,
        "{what}: resident memory grew from {} to {} KiB",
        early.num("rss_kb"),
        late.num("rss_kb")
    );
}

/// A consumer reporting `src` stats (`on-producer-lost=eos`) waiting on
/// `channel`, then a producer reporting `sink` stats that sends a moving
/// `videotestsrc` in `caps` with `sink_props`.
fn reporting_pair(
    t: Transport,
    channel: &str,
    caps: &str,
    sink_props: &str,
) -> (PipelineChild, PipelineChild) {
    let consumer = PipelineChild::spawn(
        &format!(
            "rscudaipcsrc name=src channel={channel} on-producer-lost=eos connect-timeout=120000 ! fakesink"
        ),
        &["src"],
    );
    wait_for_waiting_consumers(channel, 1, LIMIT);
    let producer = PipelineChild::spawn(
        &format!(
            "videotestsrc pattern=ball ! {caps} ! rscudaipcsink name=sink channel={channel} {sink_props} sync=false {}",
            t.sink
        ),
        &["sink"],
    );
    (consumer, producer)
}

/// when-full=drop: a stopped consumer does not hold the producer, which
/// counts what it drops; descriptors and memory stay flat over thousands of
/// frames; after SIGCONT the consumer goes on with new frames.
fn stopped_consumer_drop(t: Transport, small_caps: &str) {
    let channel = unique_channel("stop-drop");
    let (mut consumer, mut producer) = reporting_pair(t, &channel, small_caps, "when-full=drop");
    let cb = block(&channel);
    wait_until(LIMIT, "frames flow", || cb.published() >= 100);
    let before_stop = consumer.wait_report(LIMIT, "the consumer gets frames", |r| {
        r.num("src.frames") >= 50
    });
    consumer.signal(libc::SIGSTOP);
    let early = producer.wait_report(LIMIT, "the producer goes on", |r| {
        r.num("sink.frames") >= 500
    });
    let late = producer.wait_report(LIMIT, "the producer goes on at full rate", |r| {
        r.num("sink.frames") >= early.num("sink.frames") + 5000
    });
    assert!(
        late.num("sink.dropped") >= early.num("sink.dropped") + 1000,
        "frames lost to the stopped consumer are not counted: {early:?} {late:?}"
    );
    assert_flat("producer", &early, &late, 4096);
    consumer.signal(libc::SIGCONT);
    // Reports written before the stop may still be in the pipe.
    let resumed = consumer.wait_report(LIMIT, "the consumer goes on after SIGCONT", |r| {
        r.num("src.frames") >= before_stop.num("src.frames") + 100
    });
    assert!(resumed.num("src.missed") > 0, "{resumed:?}");
    producer.send("quit");
    producer.finish(LIMIT).assert_success("producer");
    let end = consumer.finish(LIMIT);
    end.assert_success("consumer");
    let report = end.report.expect("final report");
    assert_eq!(report.get("state"), Some("eos"), "{report:?}");
}

#[test]
fn host_stopped_consumer_does_not_hold_a_dropping_producer() {
    stopped_consumer_drop(
        HOST,
        "video/x-raw,format=RGB,width=160,height=120,framerate=30/1",
    );
}

#[test]
fn cuda_stopped_consumer_does_not_hold_a_dropping_producer() {
    if gpu("cuda_stopped_consumer_does_not_hold_a_dropping_producer") {
        stopped_consumer_drop(
            CUDA,
            "video/x-raw,format=RGB,width=640,height=480,framerate=30/1",
        );
    }
}

/// Thousands of frames through a blocking producer and a consumer: both
/// processes keep their descriptors and memory, and nothing is lost.
fn resources_stay_flat(t: Transport, small_caps: &str) {
    let channel = unique_channel("flat");
    let (mut consumer, mut producer) = reporting_pair(t, &channel, small_caps, "");
    let early_p = producer.wait_report(LIMIT, "frames flow", |r| r.num("sink.frames") >= 500);
    let early_c = consumer.wait_report(LIMIT, "frames arrive", |r| r.num("src.frames") >= 500);
    let late_p = producer.wait_report(LIMIT, "many frames flow", |r| {
        r.num("sink.frames") >= early_p.num("sink.frames") + 5000
    });
    let late_c = consumer.wait_report(LIMIT, "many frames arrive", |r| {
        r.num("src.frames") >= early_c.num("src.frames") + 5000
    });
    assert_flat("producer", &early_p, &late_p, 4096);
    assert_flat("consumer", &early_c, &late_c, 4096);
    producer.send("quit");
    let end_p = producer.finish(LIMIT);
    end_p.assert_success("producer");
    let end_c = consumer.finish(LIMIT);
    end_c.assert_success("consumer");
    let (p, c) = (end_p.report.unwrap(), end_c.report.unwrap());
    assert_eq!(p.num("sink.dropped"), 0);
    assert_eq!(c.num("src.missed"), 0);
    assert_eq!(c.num("src.frames"), p.num("sink.frames"));
}

#[test]
fn host_resources_stay_flat_over_many_frames() {
    resources_stay_flat(
        HOST,
        "video/x-raw,format=RGB,width=160,height=120,framerate=30/1",
    );
}

#[test]
fn cuda_resources_stay_flat_over_many_frames() {
    if gpu("cuda_resources_stay_flat_over_many_frames") {
        resources_stay_flat(
            CUDA,
            "video/x-raw,format=RGB,width=640,height=480,framerate=30/1",
        );
    }
}

// ---------------------------------------------------------------------------
// Channel ownership

/// The channel of a SIGKILLed producer stays behind; a new producer replaces
/// it, a consumer gets its frames, and its clean end leaves no file.
fn stale_channel_replaced(t: Transport) {
    let channel = unique_channel("stale");
    let producer = live_producer(t, &channel);
    let cb = block(&channel);
    wait_until(LIMIT, "a frame is published", || cb.published() >= 1);
    producer.signal(libc::SIGKILL);
    drop(producer);
    drop(cb);
    let path = cudaipc_channel::shm::control_path(&channel);
    assert!(path.exists(), "a killed producer cannot remove its channel");
    // With the source's debug lines: once on the GPU host (1.26, fresh
    // machine) this consumer never came to wait; they will say where it was.
    let consumer = launch_with(
        &[],
        &[("GST_DEBUG", "cudaipcsrc:6,cudaipc*:5")],
        &format!("rscudaipcsrc channel={channel} connect-timeout=120000 ! checksumsink"),
    );
    if !consumers_wait(&channel, 1, LIMIT) {
        let done = consumer.finish(Duration::from_secs(1));
        panic!(
            "the consumer never waited on the stale channel '{channel}':\n{}\n{}",
            done.stdout, done.stderr
        );
    }
    let expected = produce_for_waiting_consumer(t, &channel, 20, "a producer on a stale channel");
    let done = consumer.finish(LIMIT);
    done.assert_success("consumer");
    assert_eq!(done.checksums(), expected);
    assert!(!path.exists(), "the control block outlived a clean stop");
    assert_eq!(data_files(&channel), Vec::<String>::new());
}

#[test]
fn host_stale_channel_of_a_killed_producer_is_replaced() {
    stale_channel_replaced(HOST);
}

#[test]
fn cuda_stale_channel_of_a_killed_producer_is_replaced() {
    if gpu("cuda_stale_channel_of_a_killed_producer_is_replaced") {
        stale_channel_replaced(CUDA);
    }
}

/// A copy of a live producer's control block (this process's, unlocked)
/// under a new channel name: the channel, its control file, and the
/// producer (the copy's recorded producer while it lives).
fn copy_of_a_live_block(tag: &str) -> (String, std::path::PathBuf, cudaipc_channel::Producer) {
    use cudaipc_channel::{Producer, ProducerConfig};
    let live = Producer::create(ProducerConfig {
        channel: unique_channel("donor"),
        ..Default::default()
    })
    .unwrap();
    let channel = unique_channel(tag);
    let path = cudaipc_channel::shm::control_path(&channel);
    std::fs::copy(live.path(), &path).unwrap();
    (channel, path, live)
}

/// A consumer of `channel` finds no producer within its connect timeout.
fn assert_no_producer_appears(channel: &str) {
    let done = launch(&format!(
        "rscudaipcsrc channel={channel} is-live=true connect-timeout=500 ! fakesink"
    ))
    .finish(LIMIT);
    assert!(!done.success);
    assert!(
        format!("{}{}", done.stdout, done.stderr).contains("no producer appeared"),
        "{}\n{}",
        done.stdout,
        done.stderr
    );
}

/// Liveness is the kernel's lock, not the pid: a control block that names a
/// live process (this one, with its true start time) as its producer but
/// whose lock nobody holds is stale. Consumers do not attach to it, and a
/// new producer replaces it instead of reporting the channel in use.
#[test]
fn a_recorded_live_pid_does_not_keep_a_channel_alive() {
    let (channel, _, live) = copy_of_a_live_block("pidreuse");
    let copy = ControlBlock::open(&channel).unwrap();
    let h = copy.header();
    assert_eq!(
        h.producer_pid.load(std::sync::atomic::Ordering::SeqCst),
        std::process::id()
    );
    assert_eq!(
        h.producer_start_time
            .load(std::sync::atomic::Ordering::SeqCst),
        cudaipc_channel::shm::process_start_time(std::process::id()).unwrap()
    );
    drop(copy);
    assert_no_producer_appears(&channel);
    let consumer = launch(&format!(
        "rscudaipcsrc channel={channel} connect-timeout=120000 ! checksumsink"
    ));
    wait_for_waiting_consumers(&channel, 1, LIMIT);
    let src = source(HOST, 10);
    launch(&format!(
        "{src} ! rscudaipcsink channel={channel} transport=host sync=false"
    ))
    .finish(LIMIT)
    .assert_success("a producer replacing a block whose recorded pid lives");
    let done = consumer.finish(LIMIT);
    done.assert_success("consumer");
    assert_eq!(done.checksums(), reference_checksums(&src));
    drop(live);
}

/// The liveness lock can outlive a killed producer for a moment (the
/// kernel drops it with the last reference to the open file; on the GPU
/// host a consumer attached then and failed 100 ms later with "the
/// producer died"). A block whose lock is held but whose recorded producer
/// process is gone is stale: a consumer waits for the next producer, and a
/// new producer takes the channel as soon as the lock goes instead of
/// reporting it in use.
#[test]
fn a_lock_that_outlives_its_producer_keeps_no_channel_alive() {
    use cudaipc_channel::{Producer, ProducerConfig};
    let (channel, path, live) = copy_of_a_live_block("lingering");
    drop(live);
    // Its recorded producer: a process that has exited and been reaped.
    let mut gone = std::process::Command::new("true").spawn().unwrap();
    let (gone_pid, gone_start) = (
        gone.id(),
        cudaipc_channel::shm::process_start_time(gone.id()).unwrap_or(0),
    );
    gone.wait().unwrap();
    {
        let copy = ControlBlock::open(&channel).unwrap();
        let h = copy.header();
        h.producer_pid
            .store(gone_pid, std::sync::atomic::Ordering::SeqCst);
        h.producer_start_time
            .store(gone_start, std::sync::atomic::Ordering::SeqCst);
    }
    // Its lock, held as a dead process's lingering teardown holds it.
    let lingering = hold_producer_lock(&path).unwrap();
    assert_no_producer_appears(&channel);
    let claim = std::thread::spawn(move || {
        Producer::create(ProducerConfig {
            channel,
            ..Default::default()
        })
    });
    std::thread::sleep(Duration::from_millis(300));
    drop(lingering);
    let producer = claim
        .join()
        .unwrap()
        .expect("a new producer takes the channel once the lock goes");
    drop(producer);
}

// ---------------------------------------------------------------------------
// Permissions

const NOBODY: [&str; 4] = [
    "setpriv",
    "--reuid=65534",
    "--regid=65534",
    "--clear-groups",
];

/// Environment for a gst-launch run as nobody: a registry it may write.
fn nobody_env() -> (tempdir::Dir, Vec<(String, String)>) {
    let dir = tempdir::Dir::new("nobody");
    let env = vec![
        (
            "GST_REGISTRY".to_string(),
            dir.path.join("registry.bin").display().to_string(),
        ),
        ("HOME".to_string(), dir.path.display().to_string()),
    ];
    (dir, env)
}

mod tempdir {
    use std::os::unix::fs::PermissionsExt;

    /// A folder any user may write, removed on drop.
    pub struct Dir {
        pub path: std::path::PathBuf,
    }

    impl Dir {
        pub fn new(tag: &str) -> Self {
            let path = std::env::temp_dir().join(format!(
                "cudaipc-{tag}-{:x}",
                cudaipc_channel::shm::random_u64()
            ));
            std::fs::create_dir(&path).unwrap();
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o777)).unwrap();
            Self { path }
        }
    }

    impl Drop for Dir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.path);
        }
    }
}

fn mode_of(path: &std::path::Path) -> u32 {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(path).unwrap().mode() & 0o777
}

/// A run that failed and said each of `words` (in its output or errors).
fn assert_refused(done: &Finished, what: &str, words: &[&str]) {
    assert!(!done.success, "{what}");
    let text = format!("{}{}", done.stdout, done.stderr);
    assert!(
        words.iter().all(|w| text.contains(w)),
        "{words:?} not in: {text}"
    );
}

/// A consumer of another user cannot open a channel with the default mode
/// 0600 and says why; with `permissions=438` (0o666) it can. The shared
/// files' modes follow the property.
fn other_user(t: Transport) {
    // SAFETY: geteuid has no preconditions and cannot fail.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("SKIPPED: other_user needs root to run a consumer as nobody");
        return;
    }
    let (_dir, env) = nobody_env();
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    // CUDA's interprocess events live in files only their creator's user can
    // map, so between users the cuda transport needs the timeline (the
    // default: a data file of the channel's mode) or gpu-sync=host; with
    // events the consumer must say so.
    let mut cases = vec![(None, 0o600, ""), (Some(438), 0o666, "")];
    if t.sink.contains("cuda") {
        cases = vec![
            (None, 0o600, ""),
            (Some(438), 0o666, "gpu-sync=event"),
            (Some(438), 0o666, "gpu-sync=host"),
            (Some(438), 0o666, ""),
        ];
    }
    for (permissions, mode, sync) in cases {
        let channel = unique_channel("perm");
        let property = permissions
            .map(|p| format!("permissions={p}"))
            .unwrap_or_default();
        let producer = launch(&format!(
            "videotestsrc is-live=true pattern=ball ! {} ! rscudaipcsink channel={channel} {} {property} {sync}",
            t.caps, t.sink
        ));
        let cb = block(&channel);
        wait_until(LIMIT, "a frame is published", || cb.published() >= 1);
        let path = cudaipc_channel::shm::control_path(&channel);
        assert_eq!(mode_of(&path), mode, "control block of {property:?}");
        for data in data_files(&channel) {
            let data = cudaipc_channel::shm::shm_dir().join(data);
            assert_eq!(mode_of(&data), mode, "{} of {property:?}", data.display());
        }
        let consumer_as_nobody = |trust: &str| {
            launch_with(
                &NOBODY,
                &env,
                &format!(
                    "rscudaipcsrc channel={channel} is-live=true connect-timeout=5000 num-buffers=5 {trust} ! checksumsink"
                ),
            )
            .finish(LIMIT)
        };
        if mode != 0o600 {
            // Opening is not trusting: another user's channel is refused
            // until the consumer names its owner.
            assert_refused(
                &consumer_as_nobody(""),
                "nobody trusted root's channel unasked",
                &[
                    "belongs to uid 0",
                    "refuses a producer of another user by default",
                    "'allowed-producers=UID'",
                    "'permissions'",
                ],
            );
        }
        if mode == 0o600 {
            // The first error names both settings sharing takes, so that a
            // user learns them from one failure.
            assert_refused(
                &consumer_as_nobody(""),
                "nobody opened a 0600 channel",
                &[
                    "no permission to open channel",
                    "'permissions'",
                    "'allowed-producers=UID'",
                ],
            );
        }
        let done = consumer_as_nobody("allowed-producers=0");
        if mode == 0o600 {
            assert!(!done.success, "nobody opened a 0600 channel");
            let text = format!("{}{}", done.stdout, done.stderr);
            assert!(text.contains("no permission to open channel"), "{text}");
        } else if sync == "gpu-sync=event" {
            assert!(!done.success, "CUDA events cannot cross users");
            let text = format!("{}{}", done.stdout, done.stderr);
            assert!(
                text.contains("need gpu-sync=timeline (the default where the device supports it) or host on the sink"),
                "{text}"
            );
        } else {
            done.assert_success("nobody on a 0666 channel");
            assert_eq!(done.checksums().len(), 5);
        }
        producer.signal(libc::SIGINT);
        let _ = producer.finish(LIMIT);
    }
}

/// Another user who creates a channel's name before its producer (widened,
/// so that everyone can open it) feeds nobody: a consumer, root included,
/// refuses a control block it does not own unless `allowed-producers`
/// names its owner, and says whose it is. The real producer is told whose
/// the name is.
fn a_channel_of_another_user_is_refused(t: Transport) {
    if !other_user_or_skip("a_channel_of_another_user_is_refused") {
        return;
    }
    let (_dir, env) = nobody_env();
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let channel = unique_channel("spoof");
    let spoofer = launch_with(
        &NOBODY,
        &env,
        &format!(
            "videotestsrc is-live=true pattern=ball ! {} ! rscudaipcsink channel={channel} {} permissions=438 gpu-sync=host",
            t.caps, t.sink
        ),
    );
    let cb = block(&channel);
    wait_until(LIMIT, "the spoofer publishes a frame", || {
        cb.published() >= 1
    });
    let consumer = |trust: &str| {
        launch(&format!(
            "rscudaipcsrc channel={channel} is-live=true connect-timeout=5000 num-buffers=5 {trust} ! checksumsink"
        ))
        .finish(LIMIT)
    };
    let refused = consumer("");
    assert_refused(
        &refused,
        "root read frames of nobody's channel",
        &["belongs to uid 65534", "allowed-producers"],
    );
    assert!(
        refused.checksums().is_empty(),
        "no frame of the spoofer went through"
    );
    let real = launch(&format!(
        "videotestsrc num-buffers=1 ! {} ! rscudaipcsink channel={channel} {}",
        t.caps, t.sink
    ))
    .finish(LIMIT);
    assert_refused(
        &real,
        "the real producer took a live channel of another user",
        &[
            "belongs to uid 65534",
            "another user created it",
            "choose another channel name",
        ],
    );
    // Said once, and never "remove it": the file is another user's, and
    // its producer runs.
    let text = format!("{}{}", real.stdout, real.stderr);
    assert_eq!(
        text.matches(&format!("cannot create channel '{channel}'"))
            .count(),
        1,
        "{text}"
    );
    assert!(!text.contains("remove it"), "{text}");
    // Trusting the owner explicitly is the way to share between users.
    let trusting = consumer("allowed-producers=65534");
    trusting.assert_success("root trusting nobody's channel");
    assert_eq!(trusting.checksums().len(), 5);
    spoofer.signal(libc::SIGINT);
    let _ = spoofer.finish(LIMIT);
}

#[test]
fn host_a_channel_of_another_user_is_refused() {
    a_channel_of_another_user_is_refused(HOST);
}

#[test]
fn cuda_a_channel_of_another_user_is_refused() {
    if gpu("cuda_a_channel_of_another_user_is_refused") {
        a_channel_of_another_user_is_refused(CUDA);
    }
}

#[test]
fn host_other_users_need_widened_permissions() {
    other_user(HOST);
}

#[test]
fn cuda_other_users_need_widened_permissions() {
    if gpu("cuda_other_users_need_widened_permissions") {
        other_user(CUDA);
    }
}

// ---------------------------------------------------------------------------
// PID namespaces

/// Whether this process may make PID namespaces (root, or a permissive
/// container).
fn can_unshare() -> bool {
    std::process::Command::new("unshare")
        .args(["--pid", "--fork", "--mount-proc", "true"])
        .status()
        .is_ok_and(|s| s.success())
}

/// A consumer in another PID namespace is refused with a clear error.
fn other_pid_namespace(t: Transport) {
    if !can_unshare() {
        eprintln!(
            "SKIPPED: cannot create a PID namespace here (unshare failed); the check itself is unit-tested in crates/cudaipc-channel/src/tests.rs"
        );
        return;
    }
    let channel = unique_channel("pidns");
    let producer = live_producer(t, &channel);
    let cb = block(&channel);
    wait_until(LIMIT, "a frame is published", || cb.published() >= 1);
    let done = launch_with(
        &["unshare", "--pid", "--fork", "--mount-proc"],
        &[],
        &format!("rscudaipcsrc channel={channel} is-live=true connect-timeout=5000 ! fakesink"),
    )
    .finish(LIMIT);
    assert!(
        !done.success,
        "a consumer in another PID namespace attached"
    );
    let text = format!("{}{}", done.stdout, done.stderr);
    assert!(text.contains("another PID namespace"), "{text}");
    producer.signal(libc::SIGINT);
    let _ = producer.finish(LIMIT);
}

#[test]
fn host_consumer_in_another_pid_namespace_fails_clearly() {
    other_pid_namespace(HOST);
}

#[test]
fn cuda_consumer_in_another_pid_namespace_fails_clearly() {
    if gpu("cuda_consumer_in_another_pid_namespace_fails_clearly") {
        other_pid_namespace(CUDA);
    }
}
