// SPDX-License-Identifier: MPL-2.0

//! The benchmark's output: the table, the CSV (and reading one back for
//! `--replot`), the summaries under the table; the plot in `plot`.

mod plot;

use std::path::Path;
use std::process::Command;

use crate::FRAME_BYTES;
use crate::measure::Row;
use crate::names;
use crate::names::{PAIR_ALONE, PAIR_OURS, PAIR_UPSTREAM};

pub use plot::plot;

pub fn opt(v: Option<u64>) -> String {
    v.map(|v| v.to_string()).unwrap_or_else(|| "-".into())
}

pub fn print_row(r: &Row) {
    eprintln!(
        "{:<44} mps={:<5} {:>9.0} FPS  {}",
        r.config,
        r.mps,
        r.fps,
        if r.error.is_empty() {
            &r.note
        } else {
            &r.error
        }
    );
}

pub fn print_table(rows: &[Row], gpu: bool) {
    println!(
        "| configuration | row | MPS | FPS | GB/s | latency p50 / p99 / max (us) | CPU consumer / producer (cores) | corrupt / missing | note |"
    );
    println!("|---|---|---|---|---|---|---|---|---|");
    for r in rows {
        println!(
            "| {} | {} | {} | {:.0} | {:.1} | {:.0} / {:.0} / {:.0} | {:.2} / {:.2} | {} / {} | {}{} |",
            r.config,
            names::name_of(&r.config),
            if r.mps { "on" } else { "off" },
            r.fps,
            r.gbps(),
            r.latency_p50_us,
            r.latency_p99_us,
            r.latency_max_us,
            r.consumer_cpu,
            r.producer_cpu,
            opt(r.corrupt),
            opt(r.missing),
            r.note,
            r.error
        );
    }
    if gpu {
        let find = |prefix: &str, mps: bool| {
            rows.iter()
                .find(|r| r.config.starts_with(prefix) && r.mps == mps)
                .map(|r| r.fps)
        };
        for mps in [false, true] {
            if let (Some(one), Some(default), Some(seed)) =
                (find("1b", mps), find("5 default", mps), find("3 seed", mps))
            {
                println!(
                    "\nMPS {}: default two-process = {:.0}% of one process (invert + verify), {:.1}x the seed configuration",
                    if mps { "on" } else { "off" },
                    100.0 * default / one.max(1.0),
                    default / seed.max(1.0)
                );
            }
            if let (Some(one), Some(two)) = (find("1c", mps), find("5v", mps)) {
                println!(
                    "MPS {}: verify-only consumer = {:.0}% of one process (verify only)",
                    if mps { "on" } else { "off" },
                    100.0 * two / one.max(1.0)
                );
            }
        }
        gst_cuda_summary(rows);
    }
}

/// Rows 13: this pair against upstream's pair and the producer alone (same
/// producer, consumer and MPS setting), and the cudaconvert consumer against
/// the one that drops frames.
pub fn gst_cuda_summary(rows: &[Row]) {
    // A config of rows 13: "<id> <producer> > <pair> > <consumer>".
    let parts = |r: &Row| -> Option<(String, String, String)> {
        let mut p = r.config.split(" > ");
        let (producer, pair, consumer) = (p.next()?, p.next()?, p.next()?);
        let id = producer.split_whitespace().next()?;
        id.starts_with("13")
            .then(|| (id.to_string(), pair.to_string(), consumer.to_string()))
    };
    let fps = |id: &str, pair: &str, consumer: &str, mps: bool| {
        rows.iter()
            .filter(|r| r.mps == mps && r.fps > 0.0)
            .find(|r| parts(r).is_some_and(|(i, p, c)| i == id && p == pair && c == consumer))
            .map(|r| r.fps)
    };
    for r in rows.iter().filter(|r| r.fps > 0.0) {
        let Some((id, pair, consumer)) = parts(r) else {
            continue;
        };
        if pair != PAIR_OURS {
            continue;
        }
        let mut found = Vec::new();
        if let Some(up) = fps(&id, PAIR_UPSTREAM, &consumer, r.mps) {
            found.push(format!("{:.2}x upstream import", r.fps / up));
        }
        if let Some(alone) = fps(&id, PAIR_ALONE, &consumer, r.mps) {
            found.push(format!(
                "{:.0}% of the producer alone",
                100.0 * r.fps / alone
            ));
        }
        if consumer != "drops"
            && let Some(drops) = fps(&id, PAIR_OURS, "drops", r.mps)
        {
            found.push(format!(
                "{:.0}% of the consumer that drops",
                100.0 * r.fps / drops
            ));
        }
        println!(
            "{id} MPS {}, consumer {consumer}: this pair {:.0} FPS = {}",
            if r.mps { "on" } else { "off" },
            r.fps,
            if found.is_empty() {
                "nothing to compare with".to_string()
            } else {
                found.join(", ")
            }
        );
    }
}

/// The GPU (from `nvidia-smi`: the parent holds no CUDA context) and the
/// GStreamer runtime, for the CSV and the plot's title.
pub fn machine_description(gpu: bool) -> String {
    let gstreamer = format!(
        "GStreamer {}",
        gst::version_string().replace("GStreamer ", "")
    );
    if !gpu {
        return format!("no GPU (host transport), {gstreamer}");
    }
    let name = Command::new("nvidia-smi")
        .args([
            "--query-gpu=name,driver_version",
            "--format=csv,noheader",
            "-i",
            "0",
        ])
        .output()
        .ok()
        .filter(|out| out.status.success())
        .and_then(|out| {
            let text = String::from_utf8_lossy(&out.stdout).trim().to_string();
            let (name, driver) = text.split_once(", ")?;
            Some(format!("{name} (driver {driver})"))
        });
    let gpu = name.unwrap_or_else(|| "GPU 0".into());
    let connections = std::env::var("CUDA_DEVICE_MAX_CONNECTIONS").ok();
    format!(
        "{gpu}, {gstreamer}{}",
        connections_note(connections.as_deref())
    )
}

/// Every process of a run inherits `CUDA_DEVICE_MAX_CONNECTIONS`, which sets
/// how many contexts the GPU holds (docs/performance.md, "Streams per
/// GPU"): a run with it set says so beside the machine.
fn connections_note(value: Option<&str>) -> String {
    value
        .map(|v| format!(", CUDA_DEVICE_MAX_CONNECTIONS={v}"))
        .unwrap_or_default()
}

/// The line of a CSV that names the machine (`read_csv` knows it).
pub const MACHINE_LINE: &str = "# machine: ";

pub fn write_csv(path: &Path, rows: &[Row], machine: &str) {
    let mut out = format!("{MACHINE_LINE}{machine}\n");
    out.push_str(
        "configuration,mps,fps,gb_per_s,latency_p50_us,latency_p99_us,latency_max_us,cpu_consumer,cpu_producer,corrupt,missing,frames,note\n",
    );
    for r in rows {
        out.push_str(&format!(
            "\"{}\",{},{:.1},{:.3},{:.1},{:.1},{:.1},{:.3},{:.3},{},{},{},\"{}\"\n",
            r.config,
            r.mps,
            r.fps,
            r.gbps(),
            r.latency_p50_us,
            r.latency_p99_us,
            r.latency_max_us,
            r.consumer_cpu,
            r.producer_cpu,
            opt(r.corrupt),
            opt(r.missing),
            r.frames,
            format!("{}{}", r.note, r.error)
                .replace('"', "'")
                .replace('\n', " ")
        ));
    }
    std::fs::write(path, out).expect("cannot write the CSV");
}

/// Reads a CSV written by `write_csv`: its rows and the machine it names
/// (CSVs written before that line have none).
pub fn read_csv(path: &Path) -> Result<(Vec<Row>, Option<String>), String> {
    let text = std::fs::read_to_string(path).map_err(|e| e.to_string())?;
    let machine = text
        .lines()
        .find_map(|l| l.strip_prefix(MACHINE_LINE))
        .map(str::to_string);
    let rows = text
        .lines()
        .filter(|l| l.starts_with('"'))
        .map(|line| {
            // The configuration and the note are quoted; the rest are plain.
            let (config, rest) = line[1..]
                .split_once("\",")
                .ok_or_else(|| format!("no quoted configuration in: {line}"))?;
            let (numbers, note) = rest.split_once(",\"").unwrap_or((rest, "\""));
            let f: Vec<&str> = numbers.split(',').collect();
            let num = |i: usize| f.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
            let count = |i: usize| f.get(i).and_then(|v| v.parse::<u64>().ok());
            Ok(Row {
                config: config.to_string(),
                mps: f.first() == Some(&"true"),
                fps: num(1),
                latency_p50_us: num(3),
                latency_p99_us: num(4),
                latency_max_us: num(5),
                consumer_cpu: num(6),
                producer_cpu: num(7),
                corrupt: count(8),
                missing: count(9),
                frames: count(10).unwrap_or(0),
                frame_bytes: if num(1) > 0.0 {
                    num(2) * 1e9 / num(1)
                } else {
                    FRAME_BYTES
                },
                note: note.trim_end_matches('"').to_string(),
                ..Row::default()
            })
        })
        .collect::<Result<_, String>>()?;
    Ok((rows, machine))
}

/// `--replot CSV PNG [--machine TEXT]`: draws the plot (and prints the
/// table) of a CSV an earlier run wrote, e.g. one fetched from a GPU host
/// without fonts. `--machine` names the GPU and GStreamer version for the
/// title when the CSV does not (those written before it recorded them).
pub fn replot(args: &[String]) -> i32 {
    let [csv, png, rest @ ..] = args else {
        eprintln!("usage: bench --replot CSV PNG [--machine TEXT]");
        return 2;
    };
    let machine_arg = match rest {
        [] => None,
        [flag, text] if flag == "--machine" => Some(text.clone()),
        _ => {
            eprintln!("usage: bench --replot CSV PNG [--machine TEXT]");
            return 2;
        }
    };
    let (rows, recorded) = match read_csv(Path::new(csv)) {
        Ok(read) => read,
        Err(e) => {
            eprintln!("cannot read {csv}: {e}");
            return 1;
        }
    };
    print_table(&rows, true);
    match plot::plot(Path::new(png), &rows, machine_arg.or(recorded).as_deref()) {
        Ok(()) => {
            println!("wrote {png}");
            0
        }
        Err(e) => {
            eprintln!("no plot: {e}");
            1
        }
    }
}
