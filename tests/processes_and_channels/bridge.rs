// The UCX bridge between two hosts, played by two network namespaces
// joined by a veth pair (common/two_hosts.rs), on the host transport with
// UCX over TCP: every frame's checksum and a caps change across; a killed
// sender, a killed receiver; a refused peer, a wrong secret, and garbage on
// the receiver's port. Each host has its own shm folder, so both channels
// are `cam0`, as on two machines.

use crate::common;
use crate::travelling;

use std::time::{Duration, Instant};

use common::*;

const LIMIT: Duration = Duration::from_secs(60);

struct Bridge {
    hosts: TwoHosts,
    dir_a: ShmDir,
    dir_b: ShmDir,
    /// The transports UCX may use: TCP, so that frames cross the veth as
    /// between hosts (and CUDA copies for device memory).
    ucx_tls: &'static str,
}

impl Bridge {
    fn new(test: &str) -> Option<Self> {
        Some(Self {
            hosts: TwoHosts::new(test)?,
            dir_a: ShmDir::new("bridge-a"),
            dir_b: ShmDir::new("bridge-b"),
            ucx_tls: "tcp",
        })
    }

    fn on_a(&self) -> [&str; 4] {
        self.hosts.on(&self.hosts.a)
    }

    fn on_b(&self) -> [&str; 4] {
        self.hosts.on(&self.hosts.b)
    }

    /// A `gst-launch-1.0` pipeline on host A.
    fn launch_a(&self, pipeline: &str) -> Launch {
        launch_with(&self.on_a(), &self.dir_a.env(), pipeline)
    }

    fn launch_b(&self, pipeline: &str) -> Launch {
        launch_with(&self.on_b(), &self.dir_b.env(), pipeline)
    }

    /// A receiver on host B, publishing channel cam0 there, once listening.
    fn receiver(&self, options: &[&str]) -> BridgeProcess {
        let listen = format!("{ADDRESS_B}:{BRIDGE_PORT}");
        let mut args = vec!["receive", "--listen", &listen, "--channel", "cam0"];
        args.extend_from_slice(options);
        let env = [self.dir_b.env()[0], ("UCX_TLS", self.ucx_tls)];
        let mut receiver = BridgeProcess::start(&self.on_b(), &env, &args);
        receiver.wait_for("receiving channel 'cam0'", LIMIT);
        receiver
    }

    /// A sender on host A of its channel cam0.
    fn sender(&self, options: &[&str]) -> BridgeProcess {
        let to = format!("{ADDRESS_B}:{BRIDGE_PORT}");
        let mut args = vec!["send", "--to", &to, "--channel", "cam0"];
        args.extend_from_slice(options);
        let env = [self.dir_a.env()[0], ("UCX_TLS", self.ucx_tls)];
        BridgeProcess::start(&self.on_a(), &env, &args)
    }

    /// A live 30 FPS producer of channel cam0 on host A.
    fn live_producer(&self) -> Launch {
        self.launch_a(
            "videotestsrc is-live=true pattern=ball ! video/x-raw,format=RGB,width=160,height=120,framerate=30/1 ! rscudaipcsink channel=cam0 transport=host",
        )
    }
}

/// Every frame of a stream whose format and size change mid-stream (two
/// sources one after the other) reaches host B's consumer intact and in
/// order, with both caps; lossless end to end (every frame taken on both
/// hosts: `--frames every` and `frames=every`; both ends waiting for their
/// consumer), and the end of stream ends it.
#[test]
fn every_frame_and_a_caps_change_cross_the_bridge() {
    let Some(bridge) = Bridge::new("every_frame_and_a_caps_change_cross_the_bridge") else {
        return;
    };
    let mut receiver = bridge.receiver(&["--allow", ADDRESS_A, "--wait-for-connection", "1"]);
    let consumer = bridge.launch_b(
        "-v rscudaipcsrc channel=cam0 connect-timeout=60000 timestamp-mode=producer frames=every ! checksumsink",
    );
    let _sender = bridge.sender(&["--frames", "every"]);
    let producer = bridge.launch_a(
        "concat name=c ! tee name=t ! queue ! rscudaipcsink channel=cam0 transport=host wait-for-connection=1 \
         t. ! queue ! checksumsink \
         videotestsrc pattern=ball num-buffers=20 ! video/x-raw,format=RGB,width=320,height=240,framerate=30/1 ! c. \
         videotestsrc pattern=snow num-buffers=20 ! video/x-raw,format=GRAY8,width=160,height=120,framerate=30/1 ! c.",
    );
    let sent = producer.finish(LIMIT);
    sent.assert_success("producer on host A");
    let got = consumer.finish(LIMIT);
    got.assert_success("consumer on host B");
    let expected = sent.checksums();
    assert_eq!(expected.len(), 40, "{}", sent.stdout);
    assert_eq!(
        got.checksums(),
        expected,
        "frames on host B differ from host A's:\n{}",
        got.stdout
    );
    for caps in [
        "format=(string)RGB, width=(int)320, height=(int)240",
        "format=(string)GRAY8, width=(int)160, height=(int)120",
    ] {
        assert!(
            got.stdout.contains(caps),
            "{caps} not negotiated on host B:\n{}",
            got.stdout
        );
    }
    let said = receiver.output();
    assert!(
        !said.contains(" lost:"),
        "one connection carried it all:\n{said}"
    );
}

/// On a GPU host: 4K RGB frames in CUDA memory on both sides (UCX's TCP
/// and CUDA copies: the CUDA-enabled UCX of scripts/gpu-host/stage-ucx.sh),
/// every one verified on host B by `cudaprocess verify=true` (the counter
/// pattern: a corrupt, missing or stale frame fails the consumer).
#[test]
fn cuda_frames_cross_the_bridge_verified_on_host_b() {
    const FRAMES: usize = 60;
    if !gpu("cuda_frames_cross_the_bridge_verified_on_host_b") {
        return;
    }
    let Some(mut bridge) = Bridge::new("cuda_frames_cross_the_bridge_verified_on_host_b") else {
        return;
    };
    bridge.ucx_tls = "tcp,cuda_copy";
    let _receiver = bridge.receiver(&[
        "--allow",
        ADDRESS_A,
        "--transport",
        "cuda",
        "--wait-for-connection",
        "1",
    ]);
    let consumer = bridge.launch_b(
        "-v rscudaipcsrc channel=cam0 connect-timeout=120000 frames=every ! cudaprocess verify=true verify-fatal=true ! fakesink name=sink silent=false sync=false",
    );
    let mut sender = bridge.sender(&["--frames", "every"]);
    sender.wait_for("waiting for a producer", CUDA.limit);
    let producer = bridge.launch_a(&format!(
        "cudatestsrc num-buffers={FRAMES} pattern=counter ! video/x-raw(memory:CUDAMemory),format=RGB,width=3840,height=2160,framerate=30/1 ! rscudaipcsink channel=cam0 transport=cuda wait-for-connection=1 sync=false"
    ));
    producer
        .finish(CUDA.limit)
        .assert_success("producer on host A");
    let got = consumer.finish(CUDA.limit);
    got.assert_success("verifying consumer on host B");
    let frames = got
        .stdout
        .lines()
        .filter(|l| l.contains("/GstFakeSink:sink: last-message = chain"))
        .count();
    assert_eq!(frames, FRAMES, "{}", got.stdout);
}

/// A reference timestamp and a custom meta on every frame, a tag event
/// before the first and a custom event between two, as the travelling test
/// sends them through one channel, arrive on host B through the bridge.
#[test]
fn metas_tags_and_events_cross_the_bridge_in_order() {
    let Some(bridge) = Bridge::new("metas_tags_and_events_cross_the_bridge_in_order") else {
        return;
    };
    let _receiver = bridge.receiver(&["--allow", ADDRESS_A, "--wait-for-connection", "1"]);
    let own = std::env::current_exe().unwrap();
    let on_b = bridge.on_b();
    let consumer = travelling::start_with(&on_b, &bridge.dir_b.env(), &own, "consumer", "cam0", "");
    let mut sender = bridge.sender(&["--frames", "every"]);
    // Attached before the producer starts: it gets the events published
    // before the first frame too.
    sender.wait_for("waiting for a producer", LIMIT);
    let on_a = bridge.on_a();
    let producer = travelling::start_with(
        &on_a,
        &bridge.dir_a.env(),
        &own,
        "producer",
        "cam0",
        "transport=host wait-for-connection=1",
    );
    travelling::finish(producer, "the producer on host A", LIMIT);
    let seen = travelling::finish(consumer, "the consumer on host B", LIMIT);
    assert_eq!(
        travelling::seen_lines(&seen),
        travelling::expected_seen(),
        "what host B's sink got:\n{seen}"
    );
}

/// A link too slow for the stream (host A's side of the veth shaped to
/// 8 Mbit/s, a sixth of what 30 FPS needs): the sender misses frames,
/// counted in its row of `cudaipc-channels watch` on host A (and as host
/// B's channel's dropped frames), while a local
/// consumer beside it misses none (or one a busy machine costs it) and host
/// B still gets frames.
#[test]
fn a_slow_link_costs_the_sender_frames_not_the_producer() {
    let Some(bridge) = Bridge::new("a_slow_link_costs_the_sender_frames_not_the_producer") else {
        return;
    };
    if !bridge.hosts.shape_a(8) {
        eprintln!(
            "SKIPPED: a_slow_link_costs_the_sender_frames_not_the_producer: no tc shaping here"
        );
        return;
    }
    let _producer = bridge.launch_a(
        "videotestsrc is-live=true pattern=snow ! video/x-raw,format=RGB,width=320,height=240,framerate=30/1 ! rscudaipcsink channel=cam0 transport=host",
    );
    let _receiver = bridge.receiver(&["--allow", ADDRESS_A]);
    let sender = bridge.sender(&[]);
    let local = bridge
        .launch_a("rscudaipcsrc channel=cam0 connect-timeout=30000 num-buffers=90 ! fakesink");
    let remote =
        bridge.launch_b("rscudaipcsrc channel=cam0 connect-timeout=30000 num-buffers=5 ! fakesink");
    let mut sender_row = serde_json::Value::Null;
    let mut local_row = serde_json::Value::Null;
    wait_until(LIMIT, "the sender misses frames", || {
        let channel = watch_cam0(&bridge.dir_a);
        let row = |pid: u32| {
            channel["consumers"]
                .as_array()
                .and_then(|all| all.iter().find(|c| c["pid"] == pid).cloned())
                .unwrap_or_default()
        };
        sender_row = row(sender.pid());
        local_row = row(local.pid());
        sender_row["missed"].as_u64() > Some(10)
    });
    // A live consumer may miss a frame when this busy machine stalls it;
    // the link's slowness costs the sender alone.
    let local_missed = local_row["missed"].as_u64().unwrap_or(u64::MAX);
    assert!(local_missed <= 2, "the local consumer: {local_row}");
    assert_eq!(local_row["holds_producer_back"], false, "{local_row}");
    local
        .finish(LIMIT)
        .assert_success("the local consumer on host A");
    remote
        .finish(LIMIT)
        .assert_success("host B's consumer, over the slow link");
    // Host B's watch shows what the sender missed as its channel's drops.
    let on_b = watch_cam0(&bridge.dir_b);
    assert!(on_b["dropped"].as_u64() > Some(0), "host B: {on_b}");
}

/// A sender killed mid-stream: host B's consumer sees its producer lost
/// within a second or two, as if a local producer had died; a new sender
/// opens the channel again and frames flow.
#[test]
fn a_killed_sender_loses_the_producer_on_host_b_and_a_new_one_resumes() {
    let Some(bridge) = Bridge::new("a_killed_sender_loses_the_producer_on_host_b") else {
        return;
    };
    let _producer = bridge.live_producer();
    let _receiver = bridge.receiver(&["--allow", ADDRESS_A]);
    let mut sender = bridge.sender(&[]);
    sender.wait_for("sending channel 'cam0'", LIMIT);
    let first = bridge.launch_b(
        "rscudaipcsrc channel=cam0 connect-timeout=30000 on-producer-lost=error ! identity name=seen ! fakesink",
    );
    // Frames are flowing once the consumer is attached and has one.
    wait_until(LIMIT, "host B's consumer attaches", || {
        consumers_of_cam0(&bridge.dir_b) > 0
    });
    std::thread::sleep(Duration::from_millis(500));
    let killed = Instant::now();
    sender.kill();
    let lost = first.finish(LIMIT);
    let noticed = killed.elapsed();
    assert!(!lost.success, "the consumer went on without its producer");
    assert!(
        lost.stderr.contains("producer") && lost.stderr.contains("closed the channel"),
        "{}",
        lost.stderr
    );
    assert!(
        noticed < Duration::from_secs(4),
        "noticed after {noticed:?}"
    );

    let _again = bridge.sender(&[]);
    let resumed = bridge
        .launch_b("rscudaipcsrc channel=cam0 connect-timeout=30000 num-buffers=15 ! fakesink");
    resumed
        .finish(LIMIT)
        .assert_success("a consumer after the new sender");
}

/// A receiver killed mid-stream: the sender says so and reconnects to the
/// next receiver on the port, and frames reach host B again.
#[test]
fn a_killed_receiver_is_reconnected_by_the_sender() {
    let Some(bridge) = Bridge::new("a_killed_receiver_is_reconnected_by_the_sender") else {
        return;
    };
    let _producer = bridge.live_producer();
    let mut receiver = bridge.receiver(&["--allow", ADDRESS_A]);
    let mut sender = bridge.sender(&[]);
    sender.wait_for("sending channel 'cam0'", LIMIT);
    bridge
        .launch_b("rscudaipcsrc channel=cam0 connect-timeout=30000 num-buffers=10 ! fakesink")
        .finish(LIMIT)
        .assert_success("a consumer of the first receiver");
    receiver.kill();
    sender.wait_for("is gone", LIMIT);
    let _receiver = bridge.receiver(&["--allow", ADDRESS_A]);
    bridge
        .launch_b("rscudaipcsrc channel=cam0 connect-timeout=30000 num-buffers=10 ! fakesink")
        .finish(LIMIT)
        .assert_success("a consumer of the second receiver");
    assert!(
        sender.output().contains("reconnecting"),
        "{}",
        sender.output()
    );
}

/// A sender whose address is not allowed, one without the secret and one
/// with the wrong one are refused with the reason, and end; garbage sent
/// to the port gets no bytes back and harms nothing: the right sender is
/// served after all of them.
#[test]
fn refused_senders_and_garbage_on_the_port_get_nothing() {
    let Some(bridge) = Bridge::new("refused_senders_and_garbage_on_the_port_get_nothing") else {
        return;
    };
    let _producer = bridge.live_producer();
    {
        let _receiver = bridge.receiver(&["--allow", "10.213.0.9"]);
        let (code, said) = bridge.sender(&[]).finish(LIMIT);
        assert_eq!(code, Some(1), "{said}");
        assert!(
            said.contains(&format!(
                "refused this sender: {ADDRESS_A} is not in --allow"
            )),
            "{said}"
        );
    }
    let secret = secret_file(&bridge.dir_a, "secret", "the right secret, 32 bytes long..");
    let wrong = secret_file(&bridge.dir_a, "wrong", "a wrong secret, also long enough.");
    let mut receiver = bridge.receiver(&["--secret-file", &secret]);
    let (code, said) = bridge.sender(&[]).finish(LIMIT);
    assert_eq!(code, Some(1), "{said}");
    assert!(said.contains("give --secret-file"), "{said}");
    let (code, said) = bridge.sender(&["--secret-file", &wrong]).finish(LIMIT);
    assert_eq!(code, Some(1), "{said}");
    assert!(said.contains("does not know the secret"), "{said}");

    let garbage = std::process::Command::new("ip")
        .args(bridge.on_a()[1..].iter().copied())
        .args([
            "python3",
            "-c",
            GARBAGE,
            ADDRESS_B,
            &BRIDGE_PORT.to_string(),
        ])
        .output()
        .unwrap();
    let answer = String::from_utf8_lossy(&garbage.stdout);
    assert!(garbage.status.success(), "{garbage:?}");
    assert_eq!(answer.trim(), "received 0 bytes", "{garbage:?}");

    let _sender = bridge.sender(&["--secret-file", &secret]);
    bridge
        .launch_b("rscudaipcsrc channel=cam0 connect-timeout=30000 num-buffers=10 ! fakesink")
        .finish(LIMIT)
        .assert_success("a consumer after the refusals");
    let said = receiver.output();
    assert!(said.contains("does not know the secret"), "{said}");
}

/// Connects, sends 1 MiB of random bytes, and counts what comes back in
/// 2 s of reading.
const GARBAGE: &str = r#"
import os, socket, sys, time
s = socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=5)
try:
    s.sendall(os.urandom(1 << 20))
except OSError:
    pass
got, end = 0, time.time() + 2
s.settimeout(0.2)
while time.time() < end:
    try:
        data = s.recv(65536)
    except socket.timeout:
        continue
    except OSError:
        break
    if not data:
        break
    got += len(data)
print("received %d bytes" % got)
"#;

/// Channel cam0 in `dir`, as `cudaipc-channels watch --json` shows it.
fn watch_cam0(dir: &ShmDir) -> serde_json::Value {
    let out = std::process::Command::new(crate::channels_binary())
        .args(["watch", "--once", "--json", "--interval", "0.2", "cam0"])
        .envs(dir.env())
        .output()
        .unwrap();
    let all: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
    all["channels"][0].clone()
}

fn consumers_of_cam0(dir: &ShmDir) -> usize {
    watch_cam0(dir)["consumers"].as_array().map_or(0, Vec::len)
}

fn secret_file(dir: &ShmDir, name: &str, secret: &str) -> String {
    use std::os::unix::fs::PermissionsExt;
    let path = dir.path(name);
    std::fs::write(&path, secret).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
    path.to_str().unwrap().to_owned()
}
