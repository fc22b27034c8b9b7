// Soak: one producer and two verifying consumers at full speed for
// CUDAIPC_SOAK_SECONDS on a GPU host (see scripts/soak.sh):
//
//   cudatestsrc pattern=counter ! video/x-raw(memory:CUDAMemory),format=RGB,
//     width=3840,height=2160,framerate=0/1 ! cudaipcsink
//   2 x  cudaipcsrc ! cudaprocess verify=true ! fakesink
//
// Each pipeline runs in a child process (this test binary, re-executed), so
// that the elements' `stats` can be read; the children report them, their
// descriptors and resident memory every second, and this test samples GPU
// memory per process with nvidia-smi. It asserts zero corrupt and zero
// missing frames, every frame received by both consumers, and flat memory
// and handle counts; it prints one `SOAK-SAMPLE` line per sample and one
// `SOAK-RESULT {json}` line at the end.
//
// Without CUDAIPC_SOAK_SECONDS it prints SKIPPED and passes; without a GPU
// it prints SKIPPED (and fails with CUDAIPC_REQUIRE_GPU=1).

use crate::common;

use std::time::{Duration, Instant};

use common::*;

/// GPU memory (MiB) of each process using the GPU, by pid.
fn gpu_memory_mib() -> std::collections::HashMap<u32, u64> {
    let out = std::process::Command::new("nvidia-smi")
        .args([
            "--query-compute-apps=pid,used_memory",
            "--format=csv,noheader,nounits",
        ])
        .output();
    let mut map = std::collections::HashMap::new();
    if let Ok(out) = out {
        for line in String::from_utf8_lossy(&out.stdout).lines() {
            let mut parts = line.split(',').map(str::trim);
            if let (Some(Some(pid)), Some(Some(mib))) = (
                parts.next().map(|p| p.parse().ok()),
                parts.next().map(|m| m.parse().ok()),
            ) {
                map.insert(pid, mib);
            }
        }
    }
    map
}

/// One sample of one process.
#[derive(Debug, Clone, Copy, Default)]
struct Sample {
    frames: u64,
    fds: u64,
    rss_kb: u64,
    gpu_mib: u64,
}

fn sample(report: &Report, frames_key: &str, gpu: &std::collections::HashMap<u32, u64>) -> Sample {
    Sample {
        frames: report.num(frames_key),
        fds: report.num("fds"),
        rss_kb: report.num("rss_kb"),
        gpu_mib: gpu.get(&(report.num("pid") as u32)).copied().unwrap_or(0),
    }
}

/// Resident memory may wander a little (allocator, GStreamer caches); a
/// leak of even a few bytes per frame at thousands of frames per second
/// would not fit in this.
const RSS_SLACK_KB: u64 = 32 * 1024;

fn assert_flat(what: &str, early: Sample, late: Sample) {
    assert_eq!(
        late.fds, early.fds,
        "{what}: descriptors {early:?} -> {late:?}"
    );
    assert_eq!(
        late.gpu_mib, early.gpu_mib,
        "{what}: GPU memory {early:?} -> {late:?}"
    );
    assert!(
        late.rss_kb <= early.rss_kb + RSS_SLACK_KB,
        "{what}: resident memory {early:?} -> {late:?}"
    );
}

#[test]
fn soak_one_producer_two_verifying_consumers() {
    let Some(seconds) = std::env::var("CUDAIPC_SOAK_SECONDS")
        .ok()
        .and_then(|s| s.parse::<u64>().ok())
    else {
        eprintln!("SKIPPED: set CUDAIPC_SOAK_SECONDS to run the soak (GPU host; scripts/soak.sh)");
        return;
    };
    if !gpu("soak_one_producer_two_verifying_consumers") {
        return;
    }
    let every = std::env::var("CUDAIPC_SOAK_SAMPLE_SECONDS")
        .ok()
        .and_then(|s| s.parse::<u64>().ok())
        .unwrap_or(30)
        .max(1);
    let channel = unique_channel("soak");
    let env = [("CUDAIPC_CHILD_REPORT_MS", "1000")];
    let mut consumers: Vec<PipelineChild> = (0..2)
        .map(|_| {
            PipelineChild::spawn_with(
                &format!(
                    "rscudaipcsrc name=src channel={channel} on-producer-lost=eos connect-timeout=60000 ! cudaprocess name=proc verify=true ! fakesink"
                ),
                &["src", "proc"],
                &env,
            )
        })
        .collect();
    wait_for_waiting_consumers(&channel, 2, Duration::from_secs(60));
    // E.g. output-memory=gstcuda: the sink then lends the producer's
    // GstCudaMemory buffers as slots.
    let producer_props = std::env::var("CUDAIPC_SOAK_PRODUCER_PROPS").unwrap_or_default();
    let mut producer = PipelineChild::spawn_with(
        &format!(
            "cudatestsrc pattern=counter {producer_props} ! video/x-raw(memory:CUDAMemory),format=RGB,width=3840,height=2160,framerate=0/1 ! rscudaipcsink name=sink channel={channel} sync=false"
        ),
        &["sink"],
        &env,
    );
    let start = Instant::now();
    let end = start + Duration::from_secs(seconds);
    // Flatness is judged from the first sample after a warm-up.
    let warm_up = Duration::from_secs((seconds / 10).clamp(5, 60));
    let mut first: Option<[Sample; 3]> = None;
    let mut last = [Sample::default(); 3];
    let mut next_sample = start + warm_up.min(Duration::from_secs(every));
    while Instant::now() < end {
        std::thread::sleep(
            next_sample
                .min(end)
                .saturating_duration_since(Instant::now())
                .max(Duration::from_millis(100)),
        );
        if Instant::now() < next_sample {
            continue;
        }
        next_sample += Duration::from_secs(every);
        let gpu = gpu_memory_mib();
        let p = producer.latest_report();
        let c: Vec<Option<Report>> = consumers.iter_mut().map(|c| c.latest_report()).collect();
        let (Some(p), Some(c0), Some(c1)) = (p, c[0].clone(), c[1].clone()) else {
            continue;
        };
        let now = [
            sample(&p, "sink.frames", &gpu),
            sample(&c0, "proc.frames", &gpu),
            sample(&c1, "proc.frames", &gpu),
        ];
        for (name, r) in [("consumer 0", &c0), ("consumer 1", &c1)] {
            assert_eq!(r.num("proc.corrupt"), 0, "{name}: {r:?}");
            assert_eq!(r.num("proc.missing"), 0, "{name}: {r:?}");
        }
        let t = start.elapsed().as_secs_f64();
        println!(
            "SOAK-SAMPLE t={t:.0}s fps={:.0} producer={:?} consumer0={:?} consumer1={:?}",
            now[0].frames as f64 / t,
            now[0],
            now[1],
            now[2]
        );
        if first.is_none() && start.elapsed() >= warm_up {
            first = Some(now);
        }
        last = now;
    }
    producer.send("quit");
    let p = producer.finish(Duration::from_secs(120));
    p.assert_success("producer");
    let p = p.report.expect("producer report");
    let mut finals = Vec::new();
    for (i, c) in consumers.into_iter().enumerate() {
        let done = c.finish(Duration::from_secs(120));
        done.assert_success(&format!("consumer {i}"));
        finals.push(done.report.expect("consumer report"));
    }
    let frames = p.num("sink.frames");
    println!(
        "SOAK-RESULT {{\"seconds\":{seconds},\"frames\":{frames},\"fps\":{:.1},\"dropped\":{},\"zero_copy\":{},\"copied\":{},\"consumers\":[{}]}}",
        frames as f64 / seconds as f64,
        p.num("sink.dropped"),
        p.num("sink.zero-copy"),
        p.num("sink.copied"),
        finals
            .iter()
            .map(|c| format!(
                "{{\"frames\":{},\"verified\":{},\"corrupt\":{},\"missing\":{},\"missed\":{}}}",
                c.num("proc.frames"),
                c.num("proc.verified"),
                c.num("proc.corrupt"),
                c.num("proc.missing"),
                c.num("src.missed")
            ))
            .collect::<Vec<_>>()
            .join(",")
    );
    assert!(frames > 0, "no frame published");
    assert_eq!(p.num("sink.dropped"), 0);
    for (i, c) in finals.iter().enumerate() {
        assert_eq!(c.num("proc.corrupt"), 0, "consumer {i}");
        assert_eq!(c.num("proc.missing"), 0, "consumer {i}");
        assert_eq!(c.num("src.missed"), 0, "consumer {i}");
        assert_eq!(c.num("src.frames"), frames, "consumer {i} lost frames");
    }
    let first = first.expect("no sample after the warm-up: run longer");
    for (i, name) in ["producer", "consumer 0", "consumer 1"].iter().enumerate() {
        assert_flat(name, first[i], last[i]);
    }
}
