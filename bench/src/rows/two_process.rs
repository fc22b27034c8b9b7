// SPDX-License-Identifier: MPL-2.0

//! Rows 1-6: one process against two, the seed configuration against the
//! default, slot counts, descriptor channels, a consumer of another user,
//! the transport alone, GStreamer's CUDA memory at either end, and system
//! memory at either end. 4K RGB from `cudatestsrc`, every frame inverted
//! and verified by the consumer unless the row says otherwise.

use std::cell::Cell;

use crate::measure::{
    QUEUED_FRAMES, Row, nobody_uid, other_user, queue_of_frames, single, two_independent,
    two_process, two_process_as,
};
use crate::names::id_of;
use crate::options::{Options, left_out};
use crate::rows::channel;
use crate::rows::copy::frame_copy;
use crate::{HEIGHT, WIDTH};

/// The rows of a run: `--two-gpu` keeps only rows 2 and 5 default.
pub fn rows(o: &Options, env: &[(String, String)]) -> Vec<Row> {
    let pairs = Pairs {
        o,
        env,
        made: Cell::new(0),
    };
    let mut rows = Vec::new();
    if !o.two_gpu {
        rows.extend(one_process_rows(&pairs));
    }
    rows.push(frame_copy(o.frames + o.warmup, env, o.consumer_device));
    let slow = (o.frames / 4).max(50);
    if !o.two_gpu {
        rows.push(pairs.two(
            "3 seed: slots=1 gpu-sync=host spin",
            slow,
            o.warmup / 4,
            "slots=1 gpu-sync=host wait-mode=spin",
            &verifying("wait-mode=spin"),
        ));
        rows.push(pairs.two(
            "4 seed with sleep wait",
            slow,
            o.warmup / 4,
            "slots=1 gpu-sync=host wait-mode=sleep",
            &verifying("wait-mode=sleep"),
        ));
    }
    rows.push(pairs.two(
        "5 default: slots=auto gpu-sync=auto hybrid",
        o.frames,
        o.warmup,
        "",
        &verifying(""),
    ));
    if o.two_gpu {
        return rows;
    }
    rows.extend(default_variants(&pairs));
    beside_row_5(&mut rows, "5m", 99.0);
    rows.extend(other_user_rows(&pairs));
    // The transport alone: the consumer takes frames and drops them (no GPU
    // work of its own), which bounds what the channel itself costs.
    rows.push(pairs.two(
        "5t default, transport only (consumer drops frames)",
        o.frames,
        o.warmup,
        "",
        DROPS,
    ));
    if gstcudaipc::gstcuda::available() {
        rows.extend(gst_cuda_memory_rows(&pairs));
    }
    rows.extend(system_memory_rows(&pairs));
    rows
}

/// Notes on row `id` its frame rate as a share of row 5's, measured in the
/// same run, beside its `target` (percent).
fn beside_row_5(rows: &mut [Row], id: &str, target: f64) {
    let Some(default_fps) = rows.iter().find(|r| id_of(&r.config) == "5").map(|r| r.fps) else {
        return;
    };
    for row in rows.iter_mut().filter(|r| id_of(&r.config) == id) {
        if default_fps > 0.0 {
            let share = 100.0 * row.fps / default_fps;
            row.note = format!("{share:.1}% of row 5's (target >= {target}%); {}", row.note);
        }
    }
}

/// A consumer that takes frames and drops them.
const DROPS: &str = "! fakesink name=sink sync=false";

/// The consumer's elements after `rscudaipcsrc` (with `src_props`): invert
/// and verify every frame.
fn verifying(src_props: &str) -> String {
    format!(
        "{src_props} ! cudaprocess name=check operation=invert verify=true ! fakesink name=sink sync=false"
    )
}

/// The pairs of a run: a producer (`cudatestsrc`, with `source_props`)
/// into `rscudaipcsink` (with `sink_props`) and a consumer `rscudaipcsrc`
/// followed by `consumer` (its own properties first), each on a channel of
/// its own.
struct Pairs<'a> {
    o: &'a Options,
    env: &'a [(String, String)],
    made: Cell<u32>,
}

impl Pairs<'_> {
    fn generate_with(&self, frames: u64, props: &str) -> String {
        format!(
            "cudatestsrc num-buffers={frames} pattern=counter {props} ! video/x-raw(memory:CUDAMemory),format=RGB,width={WIDTH},height={HEIGHT},framerate=0/1"
        )
    }

    fn next_channel(&self) -> String {
        self.made.set(self.made.get() + 1);
        channel(&self.made.get().to_string())
    }

    #[allow(clippy::too_many_arguments)]
    fn two_from(
        &self,
        env: &[(String, String)],
        config: &str,
        frames: u64,
        warmup: u64,
        source_props: &str,
        sink_props: &str,
        consumer: &str,
    ) -> Row {
        let ch = self.next_channel();
        two_process(
            config,
            &format!(
                "{} ! rscudaipcsink name=ipcsink channel={ch} sync=false {sink_props} {}",
                self.generate_with(frames + warmup, source_props),
                std::env::var("CUDAIPC_BENCH_SINK_PROPS").unwrap_or_default()
            ),
            &format!("rscudaipcsrc name=src channel={ch} connect-timeout=60000 {consumer}"),
            warmup,
            env,
            self.o.consumer_device,
        )
    }

    fn two(&self, config: &str, frames: u64, warmup: u64, sink_props: &str, consumer: &str) -> Row {
        self.two_from(self.env, config, frames, warmup, "", sink_props, consumer)
    }

    /// Row 5's frames and warm-up, with `sink_props` and `consumer`.
    fn like_default(&self, config: &str, sink_props: &str, consumer: &str) -> Row {
        self.two(config, self.o.frames, self.o.warmup, sink_props, consumer)
    }
}

/// Rows 1: both halves in one process (and two such processes side by side).
fn one_process_rows(pairs: &Pairs) -> Vec<Row> {
    let (o, env) = (pairs.o, pairs.env);
    let total = o.frames + o.warmup;
    let generate = pairs.generate_with(total, "");
    let invert_verify =
        "cudaprocess name=check operation=invert verify=true ! fakesink name=sink sync=false";
    vec![
        single(
            "1a one process: generate + invert",
            &format!("{generate} ! cudaprocess operation=invert ! fakesink name=sink sync=false"),
            o.warmup,
            env,
        ),
        single(
            "1b one process: generate + invert + verify",
            &format!("{generate} ! {invert_verify}"),
            o.warmup,
            env,
        ),
        single(
            "1c one process: generate + verify (read only)",
            &format!(
                "{generate} ! cudaprocess name=check verify=true ! fakesink name=sink sync=false enable-last-sample=false"
            ),
            o.warmup,
            env,
        ),
        // The halves as far apart as the deep ring puts them across two
        // processes: each frame is inverted long after it was written, no
        // longer in the L2 cache.
        single(
            &format!(
                "1q one process, the halves {QUEUED_FRAMES} frames apart: generate ! queue ! invert + verify"
            ),
            &format!(
                "{generate} ! {} ! {invert_verify}",
                queue_of_frames(QUEUED_FRAMES)
            ),
            o.warmup,
            env,
        ),
        two_independent(
            "1t two independent processes: each generate + invert + verify, half the frames",
            &format!(
                "{} ! {invert_verify}",
                pairs.generate_with(total / 2 + o.warmup / 2, "")
            ),
            o.warmup / 2,
            env,
        ),
    ]
}

/// Rows 5 by slot count, and row 5 with a read-only consumer or over a
/// descriptor channel.
fn default_variants(pairs: &Pairs) -> Vec<Row> {
    let mut rows: Vec<Row> = (pairs.o.slots.iter())
        .map(|slots| {
            pairs.like_default(
                &format!("5 slots={slots} gpu-sync=auto hybrid"),
                &format!("slots={slots}"),
                &verifying(""),
            )
        })
        .collect();
    // The consumer only checks (reads) the frames: no second buffer to
    // write, so the frame can stay in the L2 cache between the processes.
    rows.push(pairs.like_default(
        "5v default, consumer verifies only (read only)",
        "",
        "! cudaprocess name=check verify=true ! fakesink name=sink sync=false enable-last-sample=false",
    ));
    // Row 5 with a capture time and 1 KiB of the application's data on
    // every frame (roles/metas.rs), side by side with row 5.
    let mut with_metas = pairs.env.to_vec();
    with_metas.push(("CUDAIPC_BENCH_METAS".into(), "1".into()));
    rows.push(pairs.two_from(
        &with_metas,
        "5m default, a reference timestamp and 1 KiB of data on every frame",
        pairs.o.frames,
        pairs.o.warmup,
        "",
        "",
        &verifying(""),
    ));
    // Row 5 over a descriptor channel (ipc-mode=fd): the control block
    // handed over the channel's socket; the slots as in row 5. Then ordered
    // by interprocess events instead of the timeline, and the descriptor
    // channel's transport alone (to compare with 5t).
    for (config, sink_props, consumer) in [
        (
            "5d default over a descriptor channel (ipc-mode=fd)",
            "ipc-mode=fd",
            verifying(""),
        ),
        (
            "5de descriptor channel with events (ipc-mode=fd gpu-sync=event)",
            "ipc-mode=fd gpu-sync=event",
            verifying(""),
        ),
        (
            "5dt descriptor channel, transport only (consumer drops frames)",
            "ipc-mode=fd",
            DROPS.to_string(),
        ),
    ] {
        rows.push(pairs.like_default(config, sink_props, &consumer));
    }
    rows
}

/// Rows 5u and 5du: a consumer of another user (nobody). On a named channel
/// only host synchronisation crosses users (events live in files of their
/// creator's user); a descriptor channel orders by the timeline. The
/// producer waits for it to attach: it starts slower than the producer
/// runs, and another user's waiting consumer is not counted.
fn other_user_rows(pairs: &Pairs) -> Vec<Row> {
    let (o, env) = (pairs.o, pairs.env);
    let me = cudaipc_channel::shm::effective_uid();
    let mut rows = Vec::new();
    for (config, sink_props) in [
        (
            "5u consumer of another user, named channel (permissions=0666 gpu-sync=host)",
            "permissions=438 gpu-sync=host wait-for-connection=1".to_string(),
        ),
        (
            "5du consumer of another user, descriptor channel (timeline)",
            format!(
                "ipc-mode=fd permissions=438 allowed-uids={} wait-for-connection=1",
                nobody_uid().unwrap_or(65534)
            ),
        ),
    ] {
        let under_mps = env.iter().any(|(k, _)| k == "CUDA_MPS_PIPE_DIRECTORY");
        let not_run = |why: &str| Row {
            config: config.into(),
            error: why.into(),
            ..Default::default()
        };
        let (wrapper, user_env) = match other_user() {
            _ if left_out(config) => {
                rows.push(Row::left_out(config));
                continue;
            }
            // An MPS server serves one user: another user's client waits
            // until it ends.
            _ if under_mps => {
                rows.push(not_run(
                    "not run under MPS: an MPS server serves one user at a time",
                ));
                continue;
            }
            Some(other) => other,
            None => {
                rows.push(not_run(
                    "needs root (setpriv) to run the consumer as another user",
                ));
                continue;
            }
        };
        let ch = pairs.next_channel();
        rows.push(two_process_as(
            config,
            &format!(
                "{} ! rscudaipcsink name=ipcsink channel={ch} sync=false {sink_props}",
                pairs.generate_with(o.frames + o.warmup, "")
            ),
            &format!(
                "rscudaipcsrc name=src channel={ch} connect-timeout=60000 {}",
                verifying(&format!("allowed-producers={me}"))
            ),
            o.warmup,
            env,
            o.consumer_device,
            (&wrapper, &user_env),
        ));
    }
    rows
}

/// Rows 5g, 5l, 5c and 5lv, for GStreamer's CUDA elements (nvcodec): the
/// consumer copies every frame into GstCudaMemory (GStreamer 1.22 cannot
/// wrap the slots); the producer writes GstCudaMemory, as nvcodec's
/// elements do, into the GstCudaBufferPool the sink proposes, whose buffers
/// are lent as slots (no copy), or copied with lending off
/// (CUDAIPC_LEND=0). The transport-only ones compare with 5t.
fn gst_cuda_memory_rows(pairs: &Pairs) -> Vec<Row> {
    let (o, env) = (pairs.o, pairs.env);
    let mut no_lending = env.to_vec();
    no_lending.push(("CUDAIPC_LEND".into(), "0".into()));
    let gstcuda = "output-memory=gstcuda";
    let lent = |env: &[(String, String)], config: &str, consumer: &str| {
        pairs.two_from(env, config, o.frames, o.warmup, gstcuda, "", consumer)
    };
    vec![
        pairs.like_default(
            "5g default, consumer outputs GstCudaMemory (one copy)",
            "",
            &format!("{gstcuda} {DROPS}"),
        ),
        lent(
            env,
            "5l producer writes GstCudaMemory (lent slots), transport only",
            DROPS,
        ),
        lent(
            &no_lending,
            "5c producer writes GstCudaMemory, copied (CUDAIPC_LEND=0), transport only",
            DROPS,
        ),
        lent(
            env,
            "5lv lent slots, consumer inverts + verifies",
            &verifying(""),
        ),
    ]
}

/// Rows 6: system memory at the ends: one frame uploaded again and again
/// (no CPU generation cost in the figure), and a download into system
/// memory.
fn system_memory_rows(pairs: &Pairs) -> Vec<Row> {
    let few = (pairs.o.frames / 40).max(30);
    let ch = channel("upload");
    vec![
        two_process(
            "6a system-memory producer (upload)",
            &format!(
                "videotestsrc num-buffers=1 pattern=smpte ! video/x-raw,format=RGB,width={WIDTH},height={HEIGHT},framerate=0/1 ! imagefreeze num-buffers={} ! rscudaipcsink name=ipcsink channel={ch} sync=false",
                few + 10
            ),
            &format!(
                "rscudaipcsrc name=src channel={ch} connect-timeout=60000 ! cudaprocess operation=invert ! fakesink name=sink sync=false"
            ),
            10,
            pairs.env,
            pairs.o.consumer_device,
        ),
        pairs.two(
            "6b system-memory consumer (download)",
            few,
            10,
            "",
            "! video/x-raw,format=RGB ! fakesink name=sink sync=false",
        ),
    ]
}

/// Without a GPU (CI): rows 3, 4, 5 and 5d's pipelines on the host transport, small
/// frames, so that the benchmark cannot rot. Figures are not asserted.
pub fn host_rows(o: &Options) -> Vec<Row> {
    let mut rows = Vec::new();
    let total = o.frames + o.warmup;
    let source = format!(
        "videotestsrc num-buffers=1 ! video/x-raw,format=RGB,width=320,height=240,framerate=0/1 ! imagefreeze num-buffers={total}"
    );
    let configs = [
        (
            "3 seed: slots=1 spin (host transport)",
            "slots=1 wait-mode=spin",
            "wait-mode=spin",
        ),
        (
            "4 seed with sleep wait (host transport)",
            "slots=1 wait-mode=sleep",
            "wait-mode=sleep",
        ),
        ("5 default (host transport)", "", ""),
        // Row 5 with a meta and 1 KiB of data on every frame (roles/metas.rs).
        ("5m metas on every frame (host transport)", "", ""),
        // The same over a descriptor channel: only the attach differs.
        (
            "5d descriptor channel, ipc-mode=fd (host transport)",
            "ipc-mode=fd",
            "",
        ),
    ];
    for (config, sink_props, src_props) in configs {
        let ch = channel(&format!("host{}", rows.len()));
        rows.push(two_process(
            config,
            &format!("{source} ! rscudaipcsink name=ipcsink channel={ch} transport=host sync=false {sink_props}"),
            &format!("rscudaipcsrc name=src channel={ch} connect-timeout=60000 {src_props} ! fakesink name=sink sync=false"),
            o.warmup,
            &metas_env(config),
            None,
        ));
    }
    beside_row_5(&mut rows, "5m", 99.0);
    rows
}

/// The environment of a row's processes: row 5m's producer adds metas.
fn metas_env(config: &str) -> Vec<(String, String)> {
    if id_of(config) == "5m" {
        vec![("CUDAIPC_BENCH_METAS".into(), "1".into())]
    } else {
        Vec::new()
    }
}
