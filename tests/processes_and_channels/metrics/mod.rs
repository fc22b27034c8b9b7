// SPDX-License-Identifier: MPL-2.0

// `cudaipc-channels serve-metrics` scraped by a real Prometheus, against
// real processes on the host transport: a live producer with a fast, a
// slow and a frames=every consumer, a producer that a slow frames=every
// consumer holds back, and a file that is no control block. Prometheus
// has what each consumer did, every expression of the Grafana dashboard
// and of the alert rules (read from docs/dashboards/) has data, and the
// alerts fire; then both producers are killed and the live one started
// again, and no counter goes down. Tolerances are those of the watch tests.

mod files;
mod prometheus;

use crate::channels_binary;
use crate::common::*;
use crate::watch::producer;
use files::*;
use prometheus::*;

use std::collections::{BTreeSet, HashMap};
use std::io::BufRead;
use std::process::Command;
use std::time::{Duration, Instant};

const LIMIT: Duration = Duration::from_secs(30);
/// The window of the rates checked, and what the dashboard's
/// `$__rate_interval` stands for here (8 scrapes).
const WINDOW: &str = "8s";

/// The exporter, on a free loopback port, sampling 4 times a second (rates
/// over the window then move in steps of a quarter second's frames).
struct Exporter {
    launch: Launch,
    port: u16,
}

impl Exporter {
    fn start(dir: &ShmDir) -> Self {
        let args = [
            "serve-metrics",
            "--listen",
            "127.0.0.1:0",
            "--interval",
            "0.25",
        ];
        let mut launch = start_program(&channels_binary(), &args, &dir.env());
        let mut stdout = std::io::BufReader::new(launch.child.stdout.take().unwrap());
        let mut line = String::new();
        stdout.read_line(&mut line).unwrap();
        // Whatever else it prints is read, so that it never blocks on it.
        std::thread::spawn(move || std::io::copy(&mut stdout, &mut std::io::sink()));
        let port = line
            .split("http://127.0.0.1:")
            .nth(1)
            .and_then(|rest| rest.split('/').next())
            .and_then(|port| port.parse().ok())
            .unwrap_or_else(|| panic!("the exporter says where it listens: {line:?}"));
        Self { launch, port }
    }
}

/// The channels and the processes on them; each process is stopped when
/// this drops (SIGINT, then SIGKILL: `Launch`), before the folder goes.
struct Scenario {
    live: String,
    paced: String,
    corrupt: String,
    producer_live: Launch,
    fast: Launch,
    slow: Launch,
    every: Launch,
    producer_paced: Launch,
    held_back: Launch,
    dir: ShmDir,
}

impl Scenario {
    fn start() -> Self {
        let dir = ShmDir::new("metrics");
        let env = dir.env();
        let live = unique_channel("metrics-live");
        let paced = unique_channel("metrics-paced");
        let corrupt = unique_channel("metrics-bad");
        // What a hostile or broken process could leave: a file of the
        // channel's name that is no control block.
        std::fs::write(dir.path(&format!("cudaipc-{corrupt}")), [0x5a; 4096]).unwrap();
        let producer_live = producer(&dir, &live, "is-live=true", "");
        // They wait for a new producer when this one dies.
        let source = format!("rscudaipcsrc channel={live} on-producer-lost=wait");
        let consumer = |rest: &str| launch_with(&[], &env, &format!("{source} {rest}"));
        let fast = consumer("! fakesink");
        // At most 10 frames a second: a third of the producer's.
        let slow = consumer("! identity sleep-time=100000 ! fakesink");
        let every = consumer("frames=every ! fakesink");
        // Not live: as fast as its consumer (at most 20 a second) lets it.
        let producer_paced = producer(&dir, &paced, "", "slots=4 sync=false");
        let held_back = launch_with(
            &[],
            &env,
            &format!(
                "rscudaipcsrc channel={paced} frames=every ! identity sleep-time=50000 ! fakesink"
            ),
        );
        Self {
            live,
            paced,
            corrupt,
            producer_live,
            fast,
            slow,
            every,
            producer_paced,
            held_back,
            dir,
        }
    }

    fn running(&self) -> BTreeSet<&str> {
        [self.live.as_str(), self.paced.as_str()].into()
    }
}

/// `expr` with `SELECT` the labels of `channel` and `WINDOW` the window.
fn on(channel: &str, expr: &str) -> String {
    expr.replace("SELECT", &format!("{{channel=\"{channel}\"}}"))
        .replace("WINDOW", WINDOW)
}

/// `expr` (aggregated `by (consumer_pid)`), for each consumer pid.
fn per_consumer(prom: &Prometheus, expr: &str) -> HashMap<u32, f64> {
    prom.query(expr)
        .iter()
        .map(|s| (s.label("consumer_pid").parse().unwrap(), s.value))
        .collect()
}

fn of(values: &HashMap<u32, f64>, pid: u32, what: &str) -> f64 {
    *values
        .get(&pid)
        .unwrap_or_else(|| panic!("{what} of consumer {pid}: {values:?}"))
}

/// The exporter's own page: the broken file shows as such without failing
/// the scrape, and every family is documented.
fn check_exporter_page(s: &Scenario, exporter: &Exporter) {
    let (status, metrics) = http_get(exporter.port, "/metrics").unwrap();
    assert_eq!(status, 200, "{metrics}");
    let line = |prefix: &str| {
        metrics
            .lines()
            .find(|l| l.starts_with(prefix))
            .unwrap_or_else(|| panic!("a line {prefix}...:\n{metrics}"))
            .to_owned()
    };
    let corrupt = line(&format!(
        "cudaipc_channel_corrupt{{channel=\"{}\",",
        s.corrupt
    ));
    assert!(corrupt.ends_with(" 1"), "{corrupt}");
    let state = format!(
        "cudaipc_channel_state{{channel=\"{}\",state=\"unreadable\"}}",
        s.corrupt
    );
    assert!(line(&state).ends_with(" 1"), "{metrics}");
    assert_documented(&metrics);
    assert_eq!(http_get(exporter.port, "/nothing").unwrap().0, 404);
}

/// Each consumer of the live channel as Prometheus has it over a window;
/// the producer's session.
fn check_live_consumers(prom: &Prometheus, s: &Scenario) -> String {
    let live = |expr: &str| on(&s.live, expr);
    let produced = prom.value(&live(
        "sum(rate(cudaipc_channel_frames_published_total SELECT [WINDOW]))",
    ));
    assert!(
        (20.0..=33.0).contains(&produced),
        "the producer's rate near 30: {produced}"
    );
    let each = |expr: &str| per_consumer(prom, &live(expr));
    let rate = each(
        "sum by (consumer_pid) (rate(cudaipc_consumer_frames_received_total SELECT [WINDOW]))",
    );
    let missed = each(
        "sum by (consumer_pid) (increase(cudaipc_consumer_frames_missed_total SELECT [WINDOW]))",
    );
    let lag =
        each("max by (consumer_pid) (avg_over_time(cudaipc_consumer_lag_frames SELECT [WINDOW]))");
    let waits = each("max by (consumer_pid) (cudaipc_consumer_producer_waits SELECT)");
    let holds = each(
        "max by (consumer_pid) (max_over_time(cudaipc_consumer_holds_producer_back SELECT [WINDOW]))",
    );
    let age = each("max by (consumer_pid) (cudaipc_consumer_last_frame_age_seconds SELECT)");
    let mode: HashMap<u32, String> = prom
        .query(&live("cudaipc_consumer_frames_received_total SELECT"))
        .iter()
        .map(|c| {
            (
                c.label("consumer_pid").parse().unwrap(),
                c.label("mode").to_owned(),
            )
        })
        .collect();
    let (fast, slow, every) = (s.fast.pid(), s.slow.pid(), s.every.pid());
    let report = format!(
        "fast {fast}, slow {slow}, every {every}; produced {produced:.1}/s; rate {rate:?}; missed {missed:?}; lag {lag:?}; waits {waits:?}; holds {holds:?}; age {age:?}"
    );
    eprintln!("{report}");

    // The fast one keeps up, misses nothing, is near the newest frame.
    assert_eq!(mode[&fast], "auto");
    assert!(of(&rate, fast, "rate") >= 0.85 * produced, "{report}");
    assert_eq!(of(&missed, fast, "missed"), 0.0, "{report}");
    assert!(of(&lag, fast, "lag") <= 1.5, "{report}");
    assert!(of(&age, fast, "age") <= 1.0, "{report}");
    assert_eq!(of(&waits, fast, "waits"), 0.0, "own pace: {report}");
    assert_eq!(of(&holds, fast, "holds"), 0.0, "{report}");

    // The slow one takes a third, misses the rest, and lags more.
    let slow_rate = of(&rate, slow, "rate");
    assert!((4.0..=10.5).contains(&slow_rate), "near 10: {report}");
    let expected = (produced - slow_rate) * 8.0;
    let slow_missed = of(&missed, slow, "missed");
    assert!(
        slow_missed >= 0.6 * expected && slow_missed <= 1.3 * expected + 3.0,
        "it misses what it cannot take ({expected:.0} in {WINDOW}): {report}"
    );
    assert!(
        of(&lag, slow, "lag") > of(&lag, fast, "lag") + 0.5,
        "{report}"
    );
    assert_eq!(of(&holds, slow, "holds"), 0.0, "own pace: {report}");

    // The frames=every one is waited for, keeps up, holds nobody back.
    assert_eq!(mode[&every], "every");
    assert!(of(&rate, every, "rate") >= 0.85 * produced, "{report}");
    assert_eq!(of(&missed, every, "missed"), 0.0, "{report}");
    assert_eq!(of(&waits, every, "waits"), 1.0, "{report}");
    assert_eq!(of(&holds, every, "holds"), 0.0, "{report}");

    // The channel: live, its producer and caps.
    assert_eq!(prom.value(&live("max(cudaipc_channel_live SELECT)")), 1.0);
    let info = prom.query(&live("cudaipc_channel_info SELECT"));
    assert_eq!(info.len(), 1, "{info:?}");
    for (label, value) in [
        ("producer_pid", s.producer_live.pid().to_string().as_str()),
        ("transport", "host"),
        ("format", "RGB"),
        ("width", "64"),
        ("height", "48"),
        ("framerate", "30/1"),
    ] {
        assert_eq!(info[0].label(label), value, "{info:?}");
    }
    info[0].label("producer_session").to_owned()
}

/// The paced channel goes at its slow frames=every consumer's pace, which
/// holds it back and misses nothing.
fn check_paced_channel(prom: &Prometheus, s: &Scenario) {
    let value = |expr: &str| prom.value(&on(&s.paced, expr));
    let taken = value("sum(rate(cudaipc_consumer_frames_received_total SELECT [WINDOW]))");
    let published = value("sum(rate(cudaipc_channel_frames_published_total SELECT [WINDOW]))");
    assert!(
        (8.0..=20.5).contains(&taken),
        "at most 20 a second: {taken}"
    );
    assert!(published <= taken + 2.0, "{published} {taken}");
    let holds = value("max(cudaipc_consumer_holds_producer_back SELECT)");
    assert_eq!(holds, 1.0);
    let missed = value("sum(increase(cudaipc_consumer_frames_missed_total SELECT [WINDOW]))");
    assert_eq!(missed, 0.0);
    assert_eq!(value("max(cudaipc_channel_live SELECT)"), 0.0);
}

/// The slow consumer's alert fires, and so do the held-back one's and the
/// corrupt channel's; the fast and every consumers have none.
fn check_alerts_fire(prom: &mut Prometheus, s: &Scenario) {
    for (alert, label, value) in [
        (
            "CudaipcConsumerMissesFrames",
            "consumer_pid",
            s.slow.pid().to_string(),
        ),
        (
            "CudaipcConsumerHoldsProducerBack",
            "consumer_pid",
            s.held_back.pid().to_string(),
        ),
        ("CudaipcChannelCorrupt", "channel", s.corrupt.clone()),
    ] {
        let firing =
            format!("ALERTS{{alertname=\"{alert}\",alertstate=\"firing\",{label}=\"{value}\"}}");
        prom.wait_for(LIMIT, "the alert fires", &firing);
    }
    let quiet = format!(
        "ALERTS{{consumer_pid=~\"{}|{}\"}}",
        s.fast.pid(),
        s.every.pid()
    );
    let alerts = prom.query(&quiet);
    assert!(
        alerts.is_empty(),
        "no alert of the fast and every consumers: {alerts:?}"
    );
}

/// Every panel of the dashboard has data for both channels (or, where it
/// counts over channels, counts something of theirs), and so does its
/// channel variable.
fn check_dashboard_has_data(prom: &Prometheus, s: &Scenario) {
    let running = s.running();
    let selected = format!("{}|{}", s.live, s.paced);
    for (title, expr) in dashboard_queries(&selected, WINDOW) {
        let result = prom.query(&expr);
        assert!(!result.is_empty(), "panel {title:?} has no data: {expr}");
        let channels: BTreeSet<&str> = result.iter().map(|r| r.label("channel")).collect();
        if channels.iter().any(|c| !c.is_empty()) {
            assert!(
                channels.is_superset(&running),
                "panel {title:?} has every channel: {result:?}"
            );
        } else {
            assert!(
                result.iter().all(|r| r.value > 0.0),
                "panel {title:?}: {result:?}"
            );
        }
    }
    let (metric, label) = channel_variable();
    let found = prom.query(&metric);
    let values: BTreeSet<&str> = found.iter().map(|r| r.label(&label)).collect();
    assert!(values.is_superset(&running), "{values:?}");
}

/// Every rule of the alert rules file, each exercised by the test: those
/// with data while everything runs, and those after the producers died.
const FIRING_WHILE_RUNNING: [&str; 3] = [
    "CudaipcConsumerMissesFrames",
    "CudaipcConsumerHoldsProducerBack",
    "CudaipcChannelCorrupt",
];
const FIRING_AFTER_KILL: [&str; 2] = ["CudaipcProducerGone", "CudaipcConsumersWithoutProducer"];

/// Every alert rule loaded and evaluates; those of the running channels
/// have data.
fn check_rules_while_running(prom: &Prometheus) -> Vec<Rule> {
    let rules = prom.alert_rules();
    let names: BTreeSet<&str> = rules.iter().map(|r| r.name.as_str()).collect();
    let tested: BTreeSet<&str> = FIRING_WHILE_RUNNING
        .iter()
        .chain(&FIRING_AFTER_KILL)
        .copied()
        .collect();
    assert_eq!(
        names, tested,
        "each rule of {ALERT_RULES} is exercised here"
    );
    for rule in &rules {
        assert_eq!(rule.health, "ok", "{rule:?}");
        if FIRING_WHILE_RUNNING.contains(&rule.name.as_str()) {
            assert!(!prom.query(&rule.query).is_empty(), "data for {rule:?}");
        }
    }
    rules
}

/// Both producers die: the paced one's consumer ends with an error and
/// leaves the channel stale; the live one's wait for a new producer (and
/// remove the dead one's channel). Each case's rule has data.
fn kill_the_producers(prom: &mut Prometheus, s: &mut Scenario, rules: &[Rule]) {
    for producer in [&mut s.producer_live, &mut s.producer_paced] {
        producer.signal(libc::SIGKILL);
        producer.child.wait().unwrap();
    }
    for (name, channel) in FIRING_AFTER_KILL.iter().zip([&s.paced, &s.live]) {
        let rule = rules.iter().find(|r| r.name == *name).unwrap();
        let query = format!(
            "({}) and on (channel) cudaipc_channel_waiting_consumers{{channel=\"{channel}\"}}",
            rule.query
        );
        prom.wait_for(LIMIT, &format!("{name} has data for {channel}"), &query);
    }
}

/// A new producer on the live channel: new series for its counters and
/// its consumers', none of which ever went down, and the dashboard's
/// producer rate over the whole run never below 0 nor above 40.
fn check_restart(prom: &mut Prometheus, s: &mut Scenario, first_session: &str, run: Duration) {
    s.producer_live = producer(&s.dir, &s.live, "is-live=true", "");
    let info = prom.wait_for(
        LIMIT,
        "the new producer",
        &format!(
            "cudaipc_channel_info{{channel=\"{}\",producer_pid=\"{}\"}}",
            s.live,
            s.producer_live.pid()
        ),
    );
    let session = info[0].label("producer_session").to_owned();
    assert_ne!(session, first_session);
    let new = format!("channel=\"{}\",producer_session=\"{session}\"", s.live);
    prom.wait_for(
        LIMIT,
        "the three consumers taking the new producer's frames",
        &format!("count(cudaipc_consumer_frames_received_total{{{new}}} > 10) == 3"),
    );
    std::thread::sleep(Duration::from_secs(4));
    let rate = format!("sum(rate(cudaipc_channel_frames_published_total{{{new}}}[4s]))");
    let again = prom.value(&rate);
    assert!(
        (20.0..=36.0).contains(&again),
        "the new producer near 30: {again}"
    );
    let series = on(
        &s.live,
        "count(count_over_time(cudaipc_channel_frames_published_total SELECT [5m]))",
    );
    assert_eq!(prom.value(&series), 2.0, "a series per producer");
    for counter in [
        "cudaipc_channel_frames_published_total",
        "cudaipc_consumer_frames_received_total",
        "cudaipc_consumer_frames_missed_total",
    ] {
        let resets = prom.value(&format!("max(resets({counter}[5m]))"));
        assert_eq!(resets, 0.0, "no series of {counter} ever went down");
    }
    let (_, fps) = dashboard_queries(&s.live, WINDOW)
        .into_iter()
        .find(|(title, _)| title == "Producer frames per second")
        .expect("the producer's rate panel");
    let values = prom.range_values(&fps, run.as_secs().min(300));
    assert!(values.len() >= 10, "{values:?}");
    assert!(
        values.iter().all(|v| (0.0..=40.0).contains(v)),
        "{fps} over the restart: {values:?}"
    );
}

/// A consumer that takes nothing (stopped) shows its time since its last
/// frame growing; the others' stays near 0.
fn check_time_since_last_frame(prom: &mut Prometheus, s: &Scenario) {
    s.fast.stop();
    let age = |pid: u32| {
        format!(
            "max(cudaipc_consumer_last_frame_age_seconds{{channel=\"{}\",consumer_pid=\"{pid}\"}})",
            s.live
        )
    };
    prom.wait_for(
        LIMIT,
        "the stopped consumer's last frame gets old",
        &format!("{} >= 2", age(s.fast.pid())),
    );
    let every = prom.value(&age(s.every.pid()));
    s.fast.signal(libc::SIGCONT);
    assert!(every <= 1.0, "the every consumer goes on: {every}");
}

#[test]
fn prometheus_scrapes_each_consumers_rate_misses_and_lag_and_every_panel_and_alert_has_data() {
    if !installed("prometheus") {
        eprintln!("SKIPPED: no prometheus");
        return;
    }
    let started = Instant::now();
    assert_promtool_passes_the_rules();
    let mut s = Scenario::start();
    let exporter = Exporter::start(&s.dir);
    let rules_folder = TempFolder::new("rules");
    let mut prom = Prometheus::start(
        &format!("127.0.0.1:{}", exporter.port),
        &rules_firing_at_once(&rules_folder),
    );
    prom.wait_for(
        LIMIT,
        "four consumers taking frames",
        "count(cudaipc_consumer_frames_received_total > 10) == 4",
    );
    let taking = Instant::now();
    check_exporter_page(&s, &exporter);
    // A full window of each consumer at its pace.
    std::thread::sleep(Duration::from_millis(8500).saturating_sub(taking.elapsed()));
    let first_session = check_live_consumers(&prom, &s);
    check_paced_channel(&prom, &s);
    check_alerts_fire(&mut prom, &s);
    check_dashboard_has_data(&prom, &s);
    let rules = check_rules_while_running(&prom);
    kill_the_producers(&mut prom, &mut s, &rules);
    check_restart(&mut prom, &mut s, &first_session, started.elapsed());
    check_time_since_last_frame(&mut prom, &s);

    // SIGTERM ends it well, as Ctrl-C does.
    exporter.launch.signal(libc::SIGTERM);
    let end = exporter.launch.finish(Duration::from_secs(10));
    end.assert_success("the exporter on SIGTERM");
    drop((prom, s));
    eprintln!("took {:.1} s", started.elapsed().as_secs_f64());
}

#[test]
fn serve_metrics_refuses_a_taken_port_and_a_bad_address_with_a_clear_error() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap().port();
    let run = |args: &[&str]| {
        let out = checked(&mut Command::new(channels_binary()))
            .args(args)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        assert!(!stderr.contains("panicked"), "{stderr}");
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        (out.status.code(), stdout, stderr)
    };
    let listen = format!("127.0.0.1:{port}");
    let (code, _, stderr) = run(&["serve-metrics", "--listen", &listen]);
    assert_eq!(code, Some(1), "{stderr}");
    assert!(
        stderr.contains(&format!("cannot listen on {listen}"))
            && stderr.contains("another program"),
        "{stderr}"
    );
    for bad in [
        &["serve-metrics", "--listen", "metrics.example:9464"][..],
        &["serve-metrics", "--listen", "127.0.0.1"],
        &["serve-metrics", "--listen"],
        &["serve-metrics", "--interval", "0"],
        &["serve-metrics", "--bogus"],
    ] {
        let (code, _, stderr) = run(bad);
        assert_eq!(code, Some(2), "{bad:?}: {stderr}");
        assert!(
            stderr.contains("usage: cudaipc-channels serve-metrics"),
            "{stderr}"
        );
    }
    let (code, help, _) = run(&["serve-metrics", "--help"]);
    assert_eq!(code, Some(0));
    assert!(help.contains("default 127.0.0.1:9464"), "{help}");
    assert!(
        help.contains("no authentication"),
        "loopback unless chosen: {help}"
    );
    drop(taken);
}
