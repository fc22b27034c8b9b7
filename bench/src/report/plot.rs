//! The benchmark's plot (`bench.png`): one group of bars per scenario, on a
//! logarithmic frames-per-second axis so that a bar of a million FPS does
//! not flatten one of a thousand.
//!
//! A scenario is a producer and a consumer. Rows 13 (`<id> <producer> >
//! <pair> > <consumer>`) give up to three bars per scenario and MPS setting:
//! the producer alone in one process, this pair, upstream's pair. Rows 1-12
//! are a scenario each; a two-process row whose consumer does the work of a
//! one-process row (1b, 1c) gets that row as its "alone" bar. This pair's
//! bars carry their ratio to upstream's pair and their share of the
//! producer alone. Publish-to-receive latency is drawn on the right.

use std::path::Path;

use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use crate::measure::Row;
use crate::names::{PAIR_ALONE, PAIR_OURS, PAIR_UPSTREAM};

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Kind {
    Alone,
    Ours,
    Upstream,
}

impl Kind {
    fn colour(self, mps: bool) -> RGBColor {
        match (self, mps) {
            (Kind::Alone, false) => RGBColor(105, 105, 105),
            (Kind::Alone, true) => RGBColor(180, 180, 180),
            (Kind::Ours, false) => RGBColor(30, 100, 190),
            (Kind::Ours, true) => RGBColor(115, 170, 235),
            (Kind::Upstream, false) => RGBColor(210, 90, 20),
            (Kind::Upstream, true) => RGBColor(245, 170, 115),
        }
    }
}

struct Bar<'a> {
    kind: Kind,
    row: &'a Row,
}

struct Group<'a> {
    title: String,
    /// Rows 13 compare with the producer alone; rows 1-12 with one process.
    gst_cuda: bool,
    bars: Vec<Bar<'a>>,
}

impl Group<'_> {
    fn fps_of(&self, kind: Kind, mps: bool) -> Option<f64> {
        self.bars
            .iter()
            .find(|b| b.kind == kind && b.row.mps == mps)
            .map(|b| b.row.fps)
    }

    /// What is written after this pair's FPS: against upstream and alone.
    fn comparison(&self, bar: &Bar) -> String {
        let mut parts = Vec::new();
        if let Some(upstream) = self.fps_of(Kind::Upstream, bar.row.mps) {
            parts.push(format!("{} upstream", ratio(bar.row.fps / upstream)));
        }
        if let Some(alone) = self.fps_of(Kind::Alone, bar.row.mps) {
            parts.push(format!(
                "{:.0}% of {}",
                100.0 * bar.row.fps / alone,
                if self.gst_cuda {
                    "alone"
                } else {
                    "one process"
                }
            ));
        }
        parts.join(", ")
    }
}

/// "13.7x", "125x".
fn ratio(r: f64) -> String {
    if r >= 100.0 {
        format!("{r:.0}x")
    } else {
        format!("{r:.1}x")
    }
}

/// A row of rows 13: (producer, pair, consumer).
fn gst_cuda_parts(config: &str) -> Option<(&str, &str, &str)> {
    let mut parts = config.split(" > ");
    let (producer, pair, consumer) = (parts.next()?, parts.next()?, parts.next()?);
    producer
        .starts_with("13")
        .then_some((producer, pair, consumer))
}

fn row_id(config: &str) -> &str {
    config.split_whitespace().next().unwrap_or_default()
}

/// The one-process row whose pipeline does what the consumer of two-process
/// row `id` does (`gpu_rows`: the consumers that invert and verify, and the
/// one that only verifies).
fn one_process_equivalent(id: &str) -> Option<&'static str> {
    match id {
        "3" | "4" | "5" | "5d" | "5de" | "5u" | "5du" | "5lv" => Some("1b"),
        "5v" => Some("1c"),
        _ => None,
    }
}

/// The group of rows 14 and 14u.
const STREAMS_TITLE: &str = "14 streams per GPU, 4K@30 with no late frame";

/// One process (1a, 1b, 1q, ...) and the device copy (2): rows that the
/// pairs are compared with.
fn is_reference(id: &str) -> bool {
    let mut chars = id.chars();
    id == "2"
        || (chars.next() == Some('1')
            && chars.next().is_some_and(|c| c.is_ascii_alphabetic())
            && chars.next().is_none())
}

fn groups(rows: &[Row]) -> Vec<Group<'_>> {
    let mut groups: Vec<Group> = Vec::new();
    for row in rows.iter().filter(|r| r.fps > 0.0) {
        let (title, kind, gst_cuda) = match gst_cuda_parts(&row.config) {
            Some((producer, pair, consumer)) => {
                let kind = match pair {
                    PAIR_ALONE => Kind::Alone,
                    PAIR_UPSTREAM => Kind::Upstream,
                    PAIR_OURS => Kind::Ours,
                    _ => continue,
                };
                (format!("{producer}, consumer {consumer}"), kind, true)
            }
            None => match row_id(&row.config) {
                // Streams per GPU: this pair's and upstream's side by side
                // (their FPS are 30 times the streams).
                "14" => (STREAMS_TITLE.to_string(), Kind::Ours, false),
                "14u" => (STREAMS_TITLE.to_string(), Kind::Upstream, false),
                id => {
                    // One process (1a-1c) and the device copy (2) are
                    // references, not pairs.
                    let kind = if is_reference(id) {
                        Kind::Alone
                    } else {
                        Kind::Ours
                    };
                    (row.config.clone(), kind, false)
                }
            },
        };
        let bar = Bar { kind, row };
        match groups.iter_mut().find(|g| g.title == title) {
            Some(group) => group.bars.push(bar),
            None => groups.push(Group {
                title,
                gst_cuda,
                bars: vec![bar],
            }),
        }
    }
    // A one-process row drawn beside the pairs it compares with is not
    // drawn again on its own.
    let mut drawn_beside = Vec::new();
    for group in groups.iter_mut().filter(|g| !g.gst_cuda) {
        let Some(reference) = one_process_equivalent(row_id(&group.title)) else {
            continue;
        };
        for row in rows
            .iter()
            .filter(|r| r.fps > 0.0 && row_id(&r.config) == reference)
        {
            group.bars.push(Bar {
                kind: Kind::Alone,
                row,
            });
            drawn_beside.push(reference);
        }
    }
    groups.retain(|g| g.gst_cuda || !drawn_beside.contains(&row_id(&g.title)));
    for group in &mut groups {
        group.bars.sort_by_key(|b| (b.kind, b.row.mps));
    }
    groups
}

/// Where each bar sits: the group's title on one line, then one line per
/// bar, a half line between groups. y grows downwards from 0.
struct Layout {
    /// (y of the title, y of each bar) per group.
    positions: Vec<(f64, Vec<f64>)>,
    lines: f64,
}

impl Layout {
    fn of(groups: &[Group]) -> Layout {
        let mut y = 0.0;
        let positions = groups
            .iter()
            .map(|g| {
                let title = y + 0.5;
                let bars = (0..g.bars.len()).map(|i| y + 1.5 + i as f64).collect();
                y += 1.5 + g.bars.len() as f64;
                (title, bars)
            })
            .collect();
        Layout {
            positions,
            lines: y,
        }
    }
}

const LINE_PX: u32 = 24;
const TITLE_PX: u32 = 90;
const AXIS_PX: u32 = 45;

fn err(e: impl std::fmt::Display) -> String {
    e.to_string()
}

/// Draws `rows` into `path`. `machine`: the GPU and GStreamer version, for
/// the title, when known.
pub fn plot(path: &Path, rows: &[Row], machine: Option<&str>) -> Result<(), String> {
    load_font()?;
    let groups = groups(rows);
    if groups.is_empty() {
        return Err("nothing to plot".into());
    }
    let layout = Layout::of(&groups);
    let height = TITLE_PX + AXIS_PX + 20 + (layout.lines * LINE_PX as f64) as u32;
    let root = BitMapBackend::new(path, (1600, height)).into_drawing_area();
    root.fill(&WHITE).map_err(err)?;
    let (header, body) = root.split_vertically(TITLE_PX);
    draw_header(&header, rows, &groups, machine)?;
    let (fps_area, latency_area) = body.split_horizontally(1180);
    let with_mps = rows.iter().any(|r| r.mps);
    draw_fps(&fps_area, &groups, &layout, with_mps)?;
    draw_latency(&latency_area, &groups, &layout)?;
    root.present().map_err(err)
}

fn draw_header(
    area: &DrawingArea<BitMapBackend, Shift>,
    rows: &[Row],
    groups: &[Group],
    machine: Option<&str>,
) -> Result<(), String> {
    let title = match machine {
        Some(m) => format!("gst-cudaipc benchmark, {m}"),
        None => "gst-cudaipc benchmark".to_string(),
    };
    area.draw(&Text::new(title, (20, 10), ("sans-serif", 24)))
        .map_err(err)?;
    let present = |kind: Kind| groups.iter().any(|g| g.bars.iter().any(|b| b.kind == kind));
    let alone = if groups.iter().all(|g| g.gst_cuda) {
        "producer alone (into the consumer's elements in one process)"
    } else {
        "one process (the same work without IPC)"
    };
    let entries = [
        (Kind::Alone, alone),
        (Kind::Ours, "this pair (rscudaipcsink > rscudaipcsrc)"),
        (
            Kind::Upstream,
            "upstream's cudaipcsink > cudaipcsrc io-mode=import",
        ),
    ]
    .into_iter()
    .filter(|(kind, _)| present(*kind));
    let with_mps = rows.iter().any(|r| r.mps);
    let mut x = 20;
    for (kind, text) in entries {
        let swatches: &[bool] = if with_mps { &[false, true] } else { &[false] };
        for &mps in swatches {
            area.draw(&Rectangle::new(
                [(x, 48), (x + 14, 62)],
                kind.colour(mps).filled(),
            ))
            .map_err(err)?;
            x += 16;
        }
        area.draw(&Text::new(text, (x + 4, 47), ("sans-serif", 15)))
            .map_err(err)?;
        x += 12 + 7 * text.len() as i32 + 30;
    }
    if with_mps {
        area.draw(&Text::new(
            "darker: MPS off, lighter: MPS on",
            (20, 70),
            ("sans-serif", 14).into_font().color(&RGBColor(80, 80, 80)),
        ))
        .map_err(err)?;
    }
    Ok(())
}

/// A log axis from the decade under `low` to room for text after `high`:
/// the longest bar ends at `fill` of the width.
fn log_span(low: f64, high: f64, fill: f64) -> (f64, f64) {
    // A bar at the axis's start would not show.
    let start = 10f64.powf((0.9 * low).max(0.1).log10().floor());
    let decades = (high.log10() - start.log10()).max(1.0) / fill;
    (start, start * 10f64.powf(decades))
}

fn axis_label(v: &f64) -> String {
    match *v {
        v if v >= 1e6 => format!("{}M", v / 1e6),
        v if v >= 1e3 => format!("{}k", v / 1e3),
        v => format!("{v}"),
    }
}

type LogChart<'a> = ChartContext<
    'a,
    BitMapBackend<'a>,
    Cartesian2d<LogCoord<f64>, plotters::coord::types::RangedCoordf64>,
>;

/// A chart with a logarithmic x axis (`span`) and one row per layout line,
/// its mesh drawn: the FPS and the latency panels share it.
fn log_chart<'a, 'b>(
    builder: &mut ChartBuilder<'a, 'b, BitMapBackend<'b>>,
    (start, end): (f64, f64),
    layout: &Layout,
    x_desc: &str,
) -> Result<LogChart<'b>, String> {
    let mut chart = builder
        .margin_right(20)
        .x_label_area_size(AXIS_PX)
        .build_cartesian_2d((start..end).log_scale(), layout.lines..0.0)
        .map_err(err)?;
    chart
        .configure_mesh()
        .disable_y_mesh()
        .y_labels(0)
        .x_label_formatter(&axis_label)
        .x_desc(x_desc)
        .axis_desc_style(("sans-serif", 15))
        .label_style(("sans-serif", 14))
        .draw()
        .map_err(err)?;
    Ok(chart)
}

fn draw_fps(
    area: &DrawingArea<BitMapBackend, Shift>,
    groups: &[Group],
    layout: &Layout,
    with_mps: bool,
) -> Result<(), String> {
    let fps = groups.iter().flat_map(|g| g.bars.iter().map(|b| b.row.fps));
    let low = fps.clone().fold(f64::INFINITY, f64::min);
    let high = fps.fold(0.0, f64::max);
    let (start, end) = log_span(low, high, 0.8);
    let mut chart = log_chart(
        ChartBuilder::on(area)
            .margin_left(10)
            .y_label_area_size(200),
        (start, end),
        layout,
        "frames per second (logarithmic)",
    )?;
    let text = |size| ("sans-serif", size).into_font().color(&BLACK);
    for (group, (title_y, bar_ys)) in groups.iter().zip(&layout.positions) {
        chart
            .draw_series(std::iter::once(
                EmptyElement::at((start, *title_y))
                    + Text::new(
                        group.title.clone(),
                        (-190, 0),
                        text(16).pos(Pos::new(HPos::Left, VPos::Center)),
                    ),
            ))
            .map_err(err)?;
        for (bar, &y) in group.bars.iter().zip(bar_ys) {
            let r = bar.row;
            let name = match bar.kind {
                Kind::Alone if group.gst_cuda => "alone".to_string(),
                Kind::Alone => format!("one process ({})", row_id(&r.config)),
                Kind::Ours => "this pair".to_string(),
                Kind::Upstream => "upstream pair".to_string(),
            };
            let name = if with_mps {
                format!("{name}, MPS {}", if r.mps { "on" } else { "off" })
            } else {
                name
            };
            let mut value = thousands(r.fps);
            if bar.kind == Kind::Ours {
                let comparison = group.comparison(bar);
                if !comparison.is_empty() {
                    value = format!("{value}  ({comparison})");
                }
            }
            chart
                .draw_series(std::iter::once(Rectangle::new(
                    [(start, y - 0.4), (r.fps, y + 0.4)],
                    bar.kind.colour(r.mps).filled(),
                )))
                .map_err(err)?;
            chart
                .draw_series(std::iter::once(
                    EmptyElement::at((start, y))
                        + Text::new(
                            name,
                            (-8, 0),
                            text(14).pos(Pos::new(HPos::Right, VPos::Center)),
                        ),
                ))
                .map_err(err)?;
            chart
                .draw_series(std::iter::once(
                    EmptyElement::at((r.fps, y))
                        + Text::new(
                            value,
                            (6, 0),
                            text(14).pos(Pos::new(HPos::Left, VPos::Center)),
                        ),
                ))
                .map_err(err)?;
        }
    }
    Ok(())
}

/// Median and p99 publish-to-receive latency of the bars that measured it.
fn draw_latency(
    area: &DrawingArea<BitMapBackend, Shift>,
    groups: &[Group],
    layout: &Layout,
) -> Result<(), String> {
    let measured: Vec<(&Row, f64)> = groups
        .iter()
        .zip(&layout.positions)
        .flat_map(|(g, (_, ys))| g.bars.iter().zip(ys).map(|(b, &y)| (b.row, y)))
        .filter(|(r, _)| r.latency_p50_us > 0.0)
        .collect();
    if measured.is_empty() {
        return Ok(());
    }
    let low = measured
        .iter()
        .map(|(r, _)| r.latency_p50_us)
        .fold(f64::INFINITY, f64::min);
    let high = measured
        .iter()
        .map(|(r, _)| r.latency_p99_us)
        .fold(0.0, f64::max);
    let (start, end) = log_span(low, high, 0.6);
    let mut chart = log_chart(
        ChartBuilder::on(area).y_label_area_size(5),
        (start, end),
        layout,
        "latency p50 (green) / p99 (grey), us",
    )?;
    for (r, y) in measured {
        for (value, colour) in [
            (r.latency_p99_us, RGBColor(200, 200, 200)),
            (r.latency_p50_us, RGBColor(60, 160, 90)),
        ] {
            chart
                .draw_series(std::iter::once(Rectangle::new(
                    [(start, y - 0.4), (value.max(start), y + 0.4)],
                    colour.filled(),
                )))
                .map_err(err)?;
        }
        chart
            .draw_series(std::iter::once(
                EmptyElement::at((r.latency_p99_us.max(start), y))
                    + Text::new(
                        format!("{:.0} / {:.0}", r.latency_p50_us, r.latency_p99_us),
                        (6, 0),
                        ("sans-serif", 13)
                            .into_font()
                            .color(&BLACK)
                            .pos(Pos::new(HPos::Left, VPos::Center)),
                    ),
            ))
            .map_err(err)?;
    }
    Ok(())
}

/// Registers a TrueType font for the plot's text, from the usual places.
fn load_font() -> Result<(), String> {
    let mut candidates = vec![
        std::path::PathBuf::from("/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf"),
        std::path::PathBuf::from("/usr/share/fonts/TTF/DejaVuSans.ttf"),
    ];
    // matplotlib ships DejaVu Sans (the GPU hosts have it).
    for root in ["/opt/torch/.venv/lib", "/usr/lib", "/usr/local/lib"] {
        if let Ok(entries) = std::fs::read_dir(root) {
            for e in entries.flatten() {
                for site in ["site-packages", "dist-packages"] {
                    candidates.push(
                        e.path()
                            .join(site)
                            .join("matplotlib/mpl-data/fonts/ttf/DejaVuSans.ttf"),
                    );
                }
            }
        }
    }
    let bytes = candidates
        .iter()
        .find_map(|p| std::fs::read(p).ok())
        .ok_or("no TrueType font found (install fonts-dejavu-core)")?;
    plotters::style::register_font(
        "sans-serif",
        plotters::style::FontStyle::Normal,
        Box::leak(bytes.into_boxed_slice()),
    )
    .map_err(|_| "unusable font".to_string())
}

/// 20859.4 -> "20,859".
fn thousands(v: f64) -> String {
    let digits = format!("{:.0}", v.max(0.0));
    let groups: Vec<&str> = (0..digits.len())
        .rev()
        .step_by(3)
        .map(|end| &digits[end.saturating_sub(2)..=end])
        .collect();
    groups.into_iter().rev().collect::<Vec<_>>().join(",")
}

#[cfg(test)]
mod tests {
    use super::{Kind, STREAMS_TITLE, groups};
    use crate::measure::Row;

    fn row(config: &str, fps: f64) -> Row {
        Row {
            config: config.to_string(),
            fps,
            ..Default::default()
        }
    }

    #[test]
    fn streams_rows_are_pairs_beside_upstream_and_one_process_rows_are_references() {
        let rows = [
            row("14 streams per GPU, this pair", 3000.0),
            row("14u streams per GPU, upstream pair", 210.0),
            row("1q one process, the halves 32 frames apart", 31_975.0),
            row("5 default: slots=auto", 24_586.0),
            row("1b one process: generate + invert + verify", 39_098.0),
        ];
        let groups = groups(&rows);
        let streams = groups.iter().find(|g| g.title == STREAMS_TITLE).unwrap();
        let kinds: Vec<Kind> = streams.bars.iter().map(|b| b.kind).collect();
        assert_eq!(kinds, [Kind::Ours, Kind::Upstream]);
        assert_eq!(streams.comparison(&streams.bars[0]), "14.3x upstream");
        let queued = groups.iter().find(|g| g.title.starts_with("1q")).unwrap();
        assert_eq!(queued.bars[0].kind, Kind::Alone);
        // 1b is drawn beside row 5, not on its own.
        let pair = groups.iter().find(|g| g.title.starts_with("5 ")).unwrap();
        let ours = pair.bars.iter().find(|b| b.kind == Kind::Ours).unwrap();
        assert_eq!(pair.comparison(ours), "63% of one process");
        assert!(!groups.iter().any(|g| g.title.starts_with("1b")));
    }
}
