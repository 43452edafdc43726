//! The charts people drew by hand from their tables, rendered to SVG or PNG with `plotters`:
//!
//! - **streams**: throughput vs parallel streams, mean with 95 % CI error bars, one line per
//!   path;
//! - **window**: throughput vs window size, with each path's ceiling window ÷ RTT dashed
//!   beside it (the bandwidth-delay product);
//! - **latency**: request/response latency by percentile, one curve per path, from the runs'
//!   merged HDR histograms;
//! - **timeline**: runs per interval: throughput, congestion window and retransmits. One run
//!   shows each stream's window; several (up to [`MAX_TIMELINE_RUNS`]) are overlaid from their
//!   starts, a line per run, each window the sum of the run's streams;
//! - **udp**: UDP loss (% of datagrams sent) and jitter vs the offered rate (`-b`), mean with
//!   95 % CI bars, one line per path (and datagram size, where it varies);
//! - **under-load**: latency under load (`--under-load`): the UDP probes' median per timeline
//!   interval, one line per path, with the load's phases shaded; under it the probes' latency
//!   by percentile, idle (dashed) against loaded, from the runs' merged HDR histograms.
//!
//! A link's capacity ([`add_ceiling`]) is a dashed, named line across a throughput panel.
//!
//! Every line is named at its end in its own colour, so no legend needs hunting, and a key
//! under each panel shows each line's stroke beside its name and says what a dash or an arrow
//! means (see `key`); titles and axes carry units. Text is drawn with DejaVu Sans, embedded, so a PNG looks the same on a
//! machine with no fonts; in SVG it stays `<text>`. Charts never mix request/response, TCP
//! throughput, UDP and under-load runs. This module turns runs into series ([`ChartData`]) and draws them; it does
//! not read files.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use plotters::coord::Shift;
use plotters::coord::ranged1d::{Ranged, ValueFormatter};
use plotters::coord::types::RangedCoordf64;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};
use xbench::config::StreamDirection;
use xbench::latency::Distribution;

use self::key::Key;
use crate::cell::{CellKey, Dimension, short_size};
use crate::compare::median;
use crate::run::{DirectionResult, Measure, Run, TimelinePoint, UnderLoadResult};
use crate::stats::Stats;
use crate::units::{RateScale, ThroughputUnit, TimeUnit, largest, number};

pub(crate) mod key;

/// Which chart to draw.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChartKind {
    /// Throughput vs parallel streams.
    Streams,
    /// Throughput vs window size, with the window ÷ RTT ceiling.
    Window,
    /// Latency by percentile.
    Latency,
    /// Runs' intervals: one in detail, or several overlaid.
    Timeline,
    /// UDP loss and jitter vs the offered rate.
    Udp,
    /// Latency under load: over time with the load's phases shaded, and idle against loaded
    /// by percentile.
    UnderLoad,
}

impl ChartKind {
    /// The name used on the command line.
    pub fn name(self) -> &'static str {
        match self {
            ChartKind::Streams => "streams",
            ChartKind::Window => "window",
            ChartKind::Latency => "latency",
            ChartKind::Timeline => "timeline",
            ChartKind::Udp => "udp",
            ChartKind::UnderLoad => "under-load",
        }
    }
}

/// The file format, from the file name's extension.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ImageFormat {
    /// Scalable vector graphics, text as `<text>`.
    Svg,
    /// A 1200 × 750 (timeline: 1200 × 900) bitmap, taller by the rows of its keys.
    Png,
}

impl ImageFormat {
    /// The format `path`'s extension names.
    pub fn of_path(path: &Path) -> Result<ImageFormat, ChartError> {
        let ext = path
            .extension()
            .map(|e| e.to_string_lossy().to_ascii_lowercase());
        match ext.as_deref() {
            Some("svg") => Ok(ImageFormat::Svg),
            Some("png") => Ok(ImageFormat::Png),
            _ => Err(ChartError::Format(path.to_path_buf())),
        }
    }
}

/// Why a chart was not drawn.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ChartError {
    /// Request/response and throughput runs were given to one chart.
    #[error(
        "cannot draw request/response and throughput results in one chart: request/response \
         in {rr}; throughput in {throughput}. Pick one with --chart latency or --chart \
         streams/window/timeline, or report the directories separately"
    )]
    Mixed {
        /// Request/response files (a few, and how many more).
        rr: String,
        /// Throughput files.
        throughput: String,
    },
    /// The runs do not have what the chart shows.
    #[error("nothing to draw for a {kind} chart: {reason}")]
    Nothing {
        /// The chart.
        kind: &'static str,
        /// What is missing.
        reason: String,
    },
    /// UDP runs and TCP or request/response runs were given to one chart.
    #[error(
        "cannot draw UDP and {other_kind} results in one chart: UDP in {udp}; {other_kind} in \
         {other}. Pick one with --chart udp or --chart {other_chart}, or report the directories \
         separately"
    )]
    MixedUdp {
        /// UDP files (a few, and how many more).
        udp: String,
        /// The other kind: "TCP throughput" or "request/response".
        other_kind: &'static str,
        /// Its files.
        other: String,
        /// A chart for the other kind.
        other_chart: &'static str,
    },
    /// Latency-under-load runs and runs of another kind were given to one chart.
    #[error(
        "cannot draw latency-under-load results with other results in one chart: under load \
         in {under_load}; other runs in {other}. Report the under-load runs on their own for \
         their chart, or pick a chart of the others with --chart"
    )]
    MixedUnderLoad {
        /// Under-load files (a few, and how many more).
        under_load: String,
        /// The other files.
        other: String,
    },
    /// A ceiling was asked of a chart with no throughput axis.
    #[error(
        "a {0} chart has no throughput axis to draw a ceiling on; --ceiling applies to the \
         streams, window and timeline charts"
    )]
    NoRateAxis(&'static str),
    /// The file name has no known image extension.
    #[error("{0}: name the chart file .svg or .png")]
    Format(PathBuf),
    /// plotters failed.
    #[error("drawing the chart failed: {0}")]
    Draw(String),
    /// The file could not be written.
    #[error("cannot write {path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The system's error.
        source: std::io::Error,
    },
}

/// A chart ready to draw: its panels and what it left out.
#[derive(Debug, Clone)]
pub struct ChartData {
    /// Which chart.
    pub kind: ChartKind,
    /// The title over the whole image.
    pub title: String,
    /// The line under the title: how many runs of what length, when, and which paths.
    pub subtitle: String,
    /// The unit of the throughput axis (the first panel's), chosen by its largest figure
    /// unless one was fixed; `None` for charts without one (latency, UDP).
    pub rate_unit: Option<ThroughputUnit>,
    /// One panel, or three for a timeline.
    pub panels: Vec<Panel>,
    /// Runs not drawn because they are of the other kind (request/response vs throughput).
    pub left_out: usize,
    /// Runs of the chart's kind not drawn because a timeline overlays at most
    /// [`MAX_TIMELINE_RUNS`].
    pub not_drawn: usize,
}

impl ChartData {
    /// A chart of `kind` with no subtitle and nothing left out yet: [`plan`] adds those once
    /// it knows the runs the chart was drawn from.
    fn new(
        kind: ChartKind,
        title: String,
        rate_unit: Option<ThroughputUnit>,
        panels: Vec<Panel>,
    ) -> Self {
        ChartData {
            kind,
            title,
            subtitle: String::new(),
            rate_unit,
            panels,
            left_out: 0,
            not_drawn: 0,
        }
    }
}

/// The most runs a timeline overlays. Ten palette colours and a dashed second round keep a
/// dozen lines apart; more would be a tangle no key can untie. Each path gets its share: the
/// first run of every path, then the second, and so on.
pub const MAX_TIMELINE_RUNS: usize = 12;

/// One set of axes.
#[derive(Debug, Clone)]
pub struct Panel {
    /// Panel title (empty for a single-panel chart).
    pub title: String,
    /// X axis description, with unit.
    pub x_desc: String,
    /// Y axis description, with unit.
    pub y_desc: String,
    /// How x values read.
    pub x_axis: XAxis,
    /// Logarithmic y.
    pub log_y: bool,
    /// Stretches of the x axis shaded behind the lines (a load's phases); none on most
    /// charts.
    pub bands: Vec<Band>,
    /// The lines.
    pub series: Vec<Series>,
}

impl Panel {
    /// Latency against the percentile on a log scale in `unit`, as the request/response and
    /// latency-under-load charts both draw it.
    fn by_percentile(title: String, unit: TimeUnit, series: Vec<Series>) -> Self {
        Panel {
            title,
            x_desc: "Percentile".into(),
            y_desc: format!("Latency ({}, log scale)", unit.label()),
            x_axis: XAxis::Nines,
            log_y: true,
            bands: Vec::new(),
            series,
        }
    }
}

/// A shaded stretch of a panel's x axis, from `from` to `to` in x's units.
#[derive(Debug, Clone, PartialEq)]
pub struct Band {
    /// Start.
    pub from: f64,
    /// End.
    pub to: f64,
    /// What it is, as the key says it (`loaded`).
    pub name: String,
    /// Shaded darker: the stretch the figures are about (the measured loaded phase), where
    /// the lighter ones lead into and out of it (the ramp and the drain).
    pub strong: bool,
}

/// How an x axis is labelled.
#[derive(Debug, Clone, PartialEq)]
pub enum XAxis {
    /// Evenly spaced categories at x = 0, 1, …, named.
    Categories(Vec<String>),
    /// Percentiles as "nines": x = −log10(1 − q), so 1 is p90, 2 p99, 3 p99.9.
    Nines,
    /// Plain numbers.
    Linear,
}

/// [`Series::colour`] of a reference line that belongs to no path (a link's capacity): drawn in
/// dark grey, a colour no path gets.
pub const NEUTRAL: usize = usize::MAX;

/// One line.
#[derive(Debug, Clone)]
pub struct Series {
    /// Its name, written at its end.
    pub name: String,
    /// Palette index: the same path keeps its colour across lines (its ceiling, its streams);
    /// [`NEUTRAL`] for a reference line.
    pub colour: usize,
    /// Dashed: a ceiling, not a measurement; or, on an overlaid timeline, a run whose colour
    /// an earlier run already has.
    pub dashed: bool,
    /// Draw a marker at each point.
    pub markers: bool,
    /// The points, x ascending.
    pub points: Vec<Point>,
}

/// One point, with the ends of its error bar when it has one.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Point {
    /// x.
    pub x: f64,
    /// y.
    pub y: f64,
    /// Error bar from, to.
    pub bar: Option<(f64, f64)>,
    /// What the point summarises, for a reader who hovers it: the runs averaged (streams,
    /// window, UDP charts) or the transactions of the merged histogram (latency); `None` for
    /// one measurement (a timeline's interval) or a reference line.
    pub n: Option<u64>,
}

/// Builds the chart for `runs`: `kind`, or the one the data calls for — streams if stream
/// counts vary, else window if windows vary, else latency for request/response runs, else the
/// timeline of the runs (overlaid when there are several). Rates are in `unit`, a
/// [`ThroughputUnit`] or [`RateScale::AUTO`] for the one that suits the largest figure.
pub fn plan(
    runs: &[Run],
    kind: Option<ChartKind>,
    unit: impl Into<RateScale>,
) -> Result<ChartData, ChartError> {
    let unit = unit.into();
    let (ul, runs): (Vec<&Run>, Vec<&Run>) = runs.iter().partition(|r| r.is_under_load());
    let (udp, runs): (Vec<&Run>, Vec<&Run>) = runs.into_iter().partition(|r| r.is_udp());
    let (rr, tp): (Vec<&Run>, Vec<&Run>) = runs.into_iter().partition(|r| r.is_rr());
    let kind = chosen_kind(kind, &tp, &rr, &udp, &ul)?;
    drawable(kind, &tp, &udp, &ul)?;
    let (mine, others) = match kind {
        ChartKind::Latency => (rr, tp.len() + udp.len() + ul.len()),
        ChartKind::Udp => (udp, tp.len() + rr.len() + ul.len()),
        ChartKind::UnderLoad => (ul, tp.len() + rr.len() + udp.len()),
        _ => (tp, rr.len() + udp.len() + ul.len()),
    };
    let subtitle = subtitle(&mine);
    let mut data = match kind {
        ChartKind::Udp => udp_chart(&mine)?,
        ChartKind::Streams => sweep_chart(&mine, Dimension::Streams, unit)?,
        ChartKind::Window => sweep_chart(&mine, Dimension::Window, unit)?,
        ChartKind::Latency => latency_chart(&mine)?,
        ChartKind::Timeline => timeline_chart(&mine, unit)?,
        ChartKind::UnderLoad => under_load_chart(&mine)?,
    };
    data.left_out = others;
    data.subtitle = subtitle;
    Ok(data)
}

/// The chart `plan` draws: `kind` if given, else the one the runs call for. Runs of kinds that
/// cannot share a chart (latency under load, UDP, request/response beside TCP) are an error
/// naming some files of each.
fn chosen_kind(
    kind: Option<ChartKind>,
    tp: &[&Run],
    rr: &[&Run],
    udp: &[&Run],
    ul: &[&Run],
) -> Result<ChartKind, ChartError> {
    let kind = match kind {
        Some(k) => k,
        None if !ul.is_empty() => {
            let others: Vec<&Run> = tp.iter().chain(rr).chain(udp).copied().collect();
            if !others.is_empty() {
                return Err(ChartError::MixedUnderLoad {
                    under_load: some_files(ul),
                    other: some_files(&others),
                });
            }
            ChartKind::UnderLoad
        }
        None if !udp.is_empty() => {
            let (other_kind, other, other_chart) = if !tp.is_empty() {
                ("TCP throughput", tp, "streams/window/timeline")
            } else {
                ("request/response", rr, "latency")
            };
            if !other.is_empty() {
                return Err(ChartError::MixedUdp {
                    udp: some_files(udp),
                    other_kind,
                    other: some_files(other),
                    other_chart,
                });
            }
            ChartKind::Udp
        }
        None => {
            if !rr.is_empty() && !tp.is_empty() {
                return Err(ChartError::Mixed {
                    rr: some_files(rr),
                    throughput: some_files(tp),
                });
            }
            if !rr.is_empty() {
                ChartKind::Latency
            } else if distinct(tp, |r| r.key.streams) > 1 {
                ChartKind::Streams
            } else if distinct(tp, |r| r.key.window) > 1 {
                ChartKind::Window
            } else {
                ChartKind::Timeline
            }
        }
    };
    Ok(kind)
}

/// An error when `kind` draws TCP throughput and there is none, only latency-under-load or UDP
/// runs: the message says which chart those take.
fn drawable(kind: ChartKind, tp: &[&Run], udp: &[&Run], ul: &[&Run]) -> Result<(), ChartError> {
    let draws_tcp = matches!(
        kind,
        ChartKind::Streams | ChartKind::Window | ChartKind::Timeline
    );
    if !draws_tcp || !tp.is_empty() {
        return Ok(());
    }
    let reason = if !ul.is_empty() {
        format!(
            "it draws TCP throughput runs, and these are latency-under-load runs ({}); \
             without --chart they get their own chart",
            some_files(ul)
        )
    } else if !udp.is_empty() {
        format!(
            "it draws TCP throughput runs, and these are UDP ({}); use --chart udp",
            some_files(udp)
        )
    } else {
        return Ok(());
    };
    Err(ChartError::Nothing {
        kind: kind.name(),
        reason,
    })
}

/// What a reader of a report needs under the title: `24 runs × 2 s, 2026-11-27, paths:
/// direct-connect, vpn`. Lengths and dates that vary are given as ranges.
fn subtitle(runs: &[&Run]) -> String {
    let mut parts = vec![format!(
        "{} run{}",
        runs.len(),
        if runs.len() == 1 { "" } else { "s" }
    )];
    let lengths: Vec<f64> = runs.iter().filter_map(|r| r.length_s).collect();
    let (lo, hi) = (
        lengths.iter().copied().fold(f64::INFINITY, f64::min),
        lengths.iter().copied().fold(0.0, f64::max),
    );
    if !lengths.is_empty() {
        parts[0] += &if lo == hi {
            format!(" × {}", seconds(hi))
        } else {
            format!(" × {}–{}", seconds(lo), seconds(hi))
        };
    }
    let mut dates: Vec<&str> = runs
        .iter()
        .filter_map(|r| r.started_at.get(..10))
        .filter(|d| d.as_bytes().get(4) == Some(&b'-'))
        .collect();
    dates.sort_unstable();
    match (dates.first(), dates.last()) {
        (Some(a), Some(b)) if a == b => parts.push((*a).to_owned()),
        (Some(a), Some(b)) => parts.push(format!("{a} to {b}")),
        _ => {}
    }
    let labels = crate::table::labels_in_order(runs);
    if !labels.is_empty() {
        parts.push(format!(
            "path{}: {}",
            if labels.len() == 1 { "" } else { "s" },
            labels.join(", ")
        ));
    }
    parts.join(", ")
}

/// A test length as `-t` gives it: `10 s`, `0.5 s`, `2 min` from two minutes up.
fn seconds(s: f64) -> String {
    if s >= 120.0 && (s / 60.0).fract() == 0.0 {
        format!("{} min", s / 60.0)
    } else {
        format!("{} s", trim_number(s))
    }
}

/// Adds a link's capacity to `data`'s throughput panel: a dashed horizontal line across it,
/// named with the rate in the axis's unit ("capacity 125 MB/s"), so each path reads as a
/// share of what the link can carry. The y axis grows to show it. A latency chart has no
/// throughput axis: refused.
pub fn add_ceiling(data: &mut ChartData, bits_per_second: f64) -> Result<(), ChartError> {
    let Some(unit) = data.rate_unit else {
        return Err(ChartError::NoRateAxis(data.kind.name()));
    };
    // Streams and window charts have one panel; a timeline's first is its throughput.
    let Some(panel) = data.panels.first_mut() else {
        return Err(ChartError::NoRateAxis(data.kind.name()));
    };
    let (x0, x1) = match &panel.x_axis {
        XAxis::Categories(c) => (-0.5, c.len().max(1) as f64 - 0.5),
        XAxis::Nines | XAxis::Linear => {
            let xs = || {
                panel
                    .series
                    .iter()
                    .flat_map(|s| s.points.iter().map(|p| p.x))
            };
            let lo = xs().fold(f64::INFINITY, f64::min).min(0.0);
            let hi = xs().fold(f64::NEG_INFINITY, f64::max);
            (lo, if hi > lo { hi } else { lo + 1.0 })
        }
    };
    let y = bits_per_second * unit.factor();
    panel.series.push(Series {
        name: format!("capacity {}", unit.format_with_label(bits_per_second)),
        colour: NEUTRAL,
        dashed: true,
        markers: false,
        points: [x0, x1]
            .into_iter()
            .map(|x| Point {
                x,
                y,
                bar: None,
                n: None,
            })
            .collect(),
    });
    Ok(())
}

/// Draws `data` into an SVG document.
pub fn to_svg(data: &ChartData) -> Result<String, ChartError> {
    fonts()?;
    let (w, h) = size(data);
    let mut s = String::new();
    {
        let root = SVGBackend::with_string(&mut s, (w, h)).into_drawing_area();
        draw(&root, data)?;
        root.present().map_err(draw_err)?;
    }
    // The text was laid out with DejaVu Sans's metrics: a viewer with the font shows it as
    // the PNG does, one without falls back to its own sans-serif rather than a serif.
    Ok(s.replace(
        &format!("font-family=\"{FONT}\""),
        &format!("font-family=\"{FONT}, sans-serif\""),
    ))
}

/// Draws `data` into a PNG file's bytes.
pub fn to_png(data: &ChartData) -> Result<Vec<u8>, ChartError> {
    fonts()?;
    let (w, h) = size(data);
    let mut rgb = vec![0u8; w as usize * h as usize * 3];
    {
        let root = BitMapBackend::with_buffer(&mut rgb, (w, h)).into_drawing_area();
        draw(&root, data)?;
        root.present().map_err(draw_err)?;
    }
    let mut out = Vec::new();
    let mut enc = png::Encoder::new(&mut out, w, h);
    enc.set_color(png::ColorType::Rgb);
    enc.set_depth(png::BitDepth::Eight);
    let encoded = enc
        .write_header()
        .and_then(|mut w| w.write_image_data(&rgb).and_then(|()| w.finish()));
    encoded.map_err(|e| ChartError::Draw(format!("PNG encoding: {e}")))?;
    Ok(out)
}

/// Draws `data` to `path`, SVG or PNG by its extension, written atomically.
pub fn write(data: &ChartData, path: &Path) -> Result<(), ChartError> {
    let bytes = match ImageFormat::of_path(path)? {
        ImageFormat::Svg => to_svg(data)?.into_bytes(),
        ImageFormat::Png => to_png(data)?,
    };
    xbench::file::write_atomically(path, &bytes).map_err(|source| ChartError::Io {
        path: path.to_path_buf(),
        source,
    })
}

// ---- series from runs --------------------------------------------------------------------

/// One run's figures at a point of a sweep chart: bits/s, RTT µs, and the window ceiling it
/// measured, bits/s.
type SweepRun = (f64, Option<f64>, Option<f64>);

/// A sweep chart's runs: series key (label index, other settings, direction) → swept value →
/// the runs there.
type SweepGroups = BTreeMap<(usize, CellKey, StreamDirection), BTreeMap<u64, Vec<SweepRun>>>;

/// Throughput vs one swept dimension: a series per (label, other settings, direction).
fn sweep_chart(runs: &[&Run], dim: Dimension, scale: RateScale) -> Result<ChartData, ChartError> {
    let labels = crate::table::labels_in_order(runs);
    let groups = sweep_groups(runs, dim, &labels);
    if groups.is_empty() {
        return Err(ChartError::Nothing {
            kind: if dim == Dimension::Streams {
                "streams"
            } else {
                "window"
            },
            reason: if dim == Dimension::Window {
                "no throughput run set a window (-w)".into()
            } else {
                "no throughput runs".into()
            },
        });
    }
    let xs = x_values(&groups);
    let pos = |x: u64| xs.iter().position(|v| *v == x).unwrap_or(0) as f64;
    let namer = SeriesNamer::for_lines(&labels, &groups);
    let unit = scale.unit_for(largest(groups.values().flat_map(|by_x| {
        by_x.values()
            .filter_map(|vals| Stats::of(&vals.iter().map(|v| v.0).collect::<Vec<_>>()))
            .map(|s| s.mean)
    })));
    let mut series = Vec::new();
    for ((li, rest, dir), by_x) in &groups {
        let name = namer.name(&labels[*li], rest, *dir);
        let colour = namer.colour(&labels[*li], rest, *dir);
        series.extend(sweep_series(name, colour, by_x, &pos, dim, unit.factor()));
    }
    Ok(sweep_data(dim, &xs, unit, series))
}

/// The throughput runs that set `dim`, grouped into a sweep chart's series and points; a run
/// without the dimension is left out. Apart so that [`sweep_chart`] reads as its steps.
fn sweep_groups(runs: &[&Run], dim: Dimension, labels: &[String]) -> SweepGroups {
    let mut groups = SweepGroups::new();
    for r in runs {
        let x = match dim {
            Dimension::Streams => r.key.streams.map(u64::from),
            Dimension::Window => r.key.window,
        };
        let Some(x) = x else { continue };
        let Measure::Throughput(dirs) = &r.measure else {
            continue;
        };
        let li = label_index(labels, &r.label);
        for d in dirs {
            groups
                .entry((li, r.key.without(dim), d.direction))
                .or_default()
                .entry(x)
                .or_default()
                .push((d.bits_per_second, d.rtt_mean_us, d.window_ceiling_bps));
        }
    }
    groups
}

/// Every x value of a chart's groups, once, in order: the categories of its x axis, shared
/// by the sweep and UDP charts.
fn x_values<K, V>(groups: &BTreeMap<K, BTreeMap<u64, V>>) -> Vec<u64> {
    let mut v: Vec<u64> = groups.values().flat_map(|m| m.keys().copied()).collect();
    v.sort_unstable();
    v.dedup();
    v
}

/// One series of a sweep chart: its line of means with 95 % CI bars (rates times `f`, the
/// unit's factor) and, on a window chart, the window ÷ RTT ceiling dashed beside it; the two
/// share their points' x, so they are built together.
fn sweep_series(
    name: String,
    colour: usize,
    by_x: &BTreeMap<u64, Vec<SweepRun>>,
    pos: &impl Fn(u64) -> f64,
    dim: Dimension,
    f: f64,
) -> Vec<Series> {
    let mut points = Vec::new();
    let mut ceiling = Vec::new();
    for (x, vals) in by_x {
        let bps: Vec<f64> = vals.iter().map(|v| v.0).collect();
        let Some(s) = Stats::of(&bps) else { continue };
        points.push(Point {
            x: pos(*x),
            y: s.mean * f,
            bar: s.ci95_low.zip(s.ci95_high).map(|(lo, hi)| (lo * f, hi * f)),
            n: Some(s.n as u64),
        });
        if dim == Dimension::Window
            && let Some(c) = window_ceiling(*x, vals)
        {
            ceiling.push(Point {
                x: pos(*x),
                y: c * f,
                bar: None,
                n: Some(vals.len() as u64),
            });
        }
    }
    let mut series = vec![Series {
        name: name.clone(),
        colour,
        dashed: false,
        markers: true,
        points,
    }];
    if !ceiling.is_empty() {
        series.push(Series {
            name: format!("{name} ceiling"),
            colour,
            dashed: true,
            markers: false,
            points: ceiling,
        });
    }
    series
}

/// The ceiling of the runs at window `window` (bytes), bits/s: the window the receiver
/// really advertised, over the RTT, as each run measured it; for runs without that
/// (iperf3's), the asked size over the RTT. Apart: it is the chart's one rule about windows.
fn window_ceiling(window: u64, vals: &[SweepRun]) -> Option<f64> {
    let measured: Vec<f64> = vals.iter().filter_map(|v| v.2).collect();
    let rtts: Vec<f64> = vals.iter().filter_map(|v| v.1).collect();
    match Stats::of(&measured) {
        Some(m) if measured.len() == vals.len() => Some(m.mean),
        _ => Stats::of(&rtts)
            .filter(|s| s.mean > 0.0)
            .map(|rtt| window as f64 * 8.0 / (rtt.mean * 1e-6)),
    }
}

/// A sweep chart's one panel around `series`: the titles and x categories `dim` calls for,
/// the only part of the chart that differs between streams and windows.
fn sweep_data(dim: Dimension, xs: &[u64], unit: ThroughputUnit, series: Vec<Series>) -> ChartData {
    let (title, x_desc, cats) = match dim {
        Dimension::Streams => (
            "Throughput vs parallel streams (mean of runs, bars: 95 % CI)".to_owned(),
            "Parallel TCP streams (-P)".to_owned(),
            xs.iter().map(u64::to_string).collect(),
        ),
        Dimension::Window => (
            "Throughput vs window size (mean of runs, bars: 95 % CI; dashed: window ÷ RTT ceiling)"
                .to_owned(),
            "Socket buffer / TCP window (-w), bytes".to_owned(),
            xs.iter().map(|w| short_size(*w)).collect(),
        ),
    };
    ChartData::new(
        if dim == Dimension::Streams {
            ChartKind::Streams
        } else {
            ChartKind::Window
        },
        title,
        Some(unit),
        vec![Panel {
            title: String::new(),
            x_desc,
            y_desc: format!("Receiver throughput ({})", unit.label()),
            x_axis: XAxis::Categories(cats),
            log_y: false,
            bands: Vec::new(),
            series,
        }],
    )
}

/// UDP loss and jitter vs the offered rate (`-b`): two panels, a line per (label, other
/// settings, direction), each point the mean of the runs with its 95 % CI. The x axis is the
/// offered rates as `-b` writes them, in order (unpaced last: it offers whatever the sender
/// can).
fn udp_chart(runs: &[&Run]) -> Result<ChartData, ChartError> {
    let labels = crate::table::labels_in_order(runs);
    let groups = udp_groups(runs, &labels);
    if groups.is_empty() {
        return Err(ChartError::Nothing {
            kind: "udp",
            reason: "no UDP runs (xbench client -u, iperf3 -u -J)".into(),
        });
    }
    let xs = x_values(&groups);
    let (loss, mut jitter) = udp_series(&groups, &labels, &xs);
    let cats = xs
        .iter()
        .map(|x| {
            if *x == u64::MAX {
                "unpaced".to_owned()
            } else {
                crate::cell::short_rate(*x)
            }
        })
        .collect::<Vec<_>>();
    let jitter_unit = TimeUnit::for_micros(largest(
        jitter
            .iter()
            .flat_map(|s| s.points.iter().map(|p| p.y * 1e3)),
    ));
    let per_ms = jitter_unit.of_micros(1e3);
    for p in jitter.iter_mut().flat_map(|s| s.points.iter_mut()) {
        p.y *= per_ms;
        p.bar = p.bar.map(|(lo, hi)| (lo * per_ms, hi * per_ms));
    }
    let jitter_desc = format!("RFC 3550 jitter ({})", jitter_unit.label());
    let panel = |title: &str, y_desc: &str, series| Panel {
        title: title.into(),
        x_desc: "Offered rate (-b, all streams of a direction), bit/s".into(),
        y_desc: y_desc.into(),
        x_axis: XAxis::Categories(cats.clone()),
        log_y: false,
        bands: Vec::new(),
        series,
    };
    Ok(ChartData::new(
        ChartKind::Udp,
        "UDP loss and jitter vs offered rate (mean of runs, bars: 95 % CI)".into(),
        None,
        vec![
            panel("Loss", "Datagrams lost (% of sent)", loss),
            panel("Jitter", &jitter_desc, jitter),
        ],
    ))
}

/// UDP runs' figures by line of the chart: series key (label index, the cell without its
/// rate, direction) → offered rate → per-run (lost %, jitter ms).
type UdpGroups = BTreeMap<(usize, CellKey, StreamDirection), BTreeMap<u64, Vec<(f64, f64)>>>;

/// Each UDP run's (lost %, jitter ms) per direction, grouped by line and offered rate.
fn udp_groups(runs: &[&Run], labels: &[String]) -> UdpGroups {
    let mut groups: UdpGroups = BTreeMap::new();
    for r in runs {
        let Measure::Udp(dirs) = &r.measure else {
            continue;
        };
        // Unpaced (0) sorts after every rate.
        let x = match r.key.bitrate {
            Some(0) | None => u64::MAX,
            Some(b) => b,
        };
        let li = label_index(labels, &r.label);
        let rest = CellKey {
            bitrate: None,
            ..r.key.clone()
        };
        for d in dirs {
            groups
                .entry((li, rest.clone(), d.direction))
                .or_default()
                .entry(x)
                .or_default()
                .push((d.lost_pct, d.jitter_ms));
        }
    }
    groups
}

/// The loss and jitter lines of a UDP chart (jitter in ms), a point per offered rate in `xs`:
/// the mean of the runs with its 95 % CI.
fn udp_series(groups: &UdpGroups, labels: &[String], xs: &[u64]) -> (Vec<Series>, Vec<Series>) {
    let pos = |x: u64| xs.iter().position(|v| *v == x).unwrap_or(0) as f64;
    let namer = SeriesNamer::for_lines(labels, groups);
    let mut loss = Vec::new();
    let mut jitter = Vec::new();
    for ((li, rest, dir), by_x) in groups {
        let line = |points| Series {
            name: namer.name(&labels[*li], rest, *dir),
            colour: namer.colour(&labels[*li], rest, *dir),
            dashed: false,
            markers: true,
            points,
        };
        let point = |x: u64, values: Vec<f64>| {
            let s = Stats::of(&values)?;
            Some(Point {
                x: pos(x),
                y: s.mean,
                bar: s.ci95_low.zip(s.ci95_high),
                n: Some(s.n as u64),
            })
        };
        let mut l = Vec::new();
        let mut j = Vec::new();
        for (x, vals) in by_x {
            l.extend(point(*x, vals.iter().map(|v| v.0).collect()));
            j.extend(point(*x, vals.iter().map(|v| v.1).collect()));
        }
        loss.push(line(l));
        jitter.push(line(j));
    }
    (loss, jitter)
}

/// Latency by percentile: a curve per (label, cell) from the runs' merged histograms.
fn latency_chart(runs: &[&Run]) -> Result<ChartData, ChartError> {
    let labels = crate::table::labels_in_order(runs);
    let mut groups: BTreeMap<(usize, CellKey), Distribution> = BTreeMap::new();
    for r in runs {
        let Measure::Rr(rr) = &r.measure else {
            continue;
        };
        // A histogram that does not decode leaves that run out of the curve, not the chart.
        let Ok(d) = Distribution::decode(&rr.histogram) else {
            continue;
        };
        let li = label_index(&labels, &r.label);
        groups.entry((li, r.key.clone())).or_default().add(&d);
    }
    groups.retain(|_, d| d.count() > 0);
    if groups.is_empty() {
        return Err(ChartError::Nothing {
            kind: "latency",
            reason: "no request/response runs with latency histograms".into(),
        });
    }
    let namer = SeriesNamer::for_c2s_lines(&labels, &groups);
    // One unit for the axis, by the largest median: a 20 ms path reads 20, not 20,000 µs.
    let unit = TimeUnit::for_micros(largest(
        groups.values().map(|d| d.quantile_ns(0.5) as f64 / 1e3),
    ));
    let mut series = Vec::new();
    for ((li, key), d) in &groups {
        // Up to the percentile the sample supports: 1,000 transactions reach p99.9.
        let points = percentile_points(d, unit);
        let dir = StreamDirection::ClientToServer;
        series.push(Series {
            name: namer.name(&labels[*li], key, dir),
            colour: namer.colour(&labels[*li], key, dir),
            dashed: false,
            markers: false,
            points,
        });
    }
    Ok(ChartData::new(
        ChartKind::Latency,
        "Request/response latency by percentile (all runs of a path merged)".into(),
        None,
        vec![Panel::by_percentile(String::new(), unit, series)],
    ))
}

/// Latency under load: two panels, a line per (label, cell).
///
/// Over time: each run's timeline rows, the UDP probes' median in each; the runs of a line
/// are taken row by row (their rows share the spec's intervals), the median of their medians
/// drawn as a step over the row's mean span, so one slow run does not move the line. A row
/// where no probe of any run was answered is left out (the line joins its neighbours; the
/// table's loss says what happened there). The load's phases are shaded behind the lines at
/// the median over the drawn runs of each boundary: the loaded phase darker, the ramp (`-O`)
/// and the drain lighter.
///
/// By percentile: the probes of each phase from the runs' merged HDR histograms, loaded solid
/// and idle (before the load) dashed in the line's colour, on a log scale as the
/// request/response latency chart draws them. Left out when no histogram decodes.
/// The runs of each line (a label's cell), by the label's position.
type UnderLoadGroups<'a> = BTreeMap<(usize, CellKey), Vec<&'a UnderLoadResult>>;

fn under_load_chart(runs: &[&Run]) -> Result<ChartData, ChartError> {
    let labels = crate::table::labels_in_order(runs);
    let mut groups: UnderLoadGroups<'_> = BTreeMap::new();
    for r in runs {
        let Measure::UnderLoad(u) = &r.measure else {
            continue;
        };
        let li = label_index(&labels, &r.label);
        groups.entry((li, r.key.clone())).or_default().push(u);
    }
    groups.retain(|_, g| {
        g.iter()
            .any(|u| u.probes.timeline.iter().any(|row| row.udp.p50_us.is_some()))
    });
    if groups.is_empty() {
        return Err(ChartError::Nothing {
            kind: "under-load",
            reason: "no latency-under-load run with an answered probe in its timeline".into(),
        });
    }
    let namer = SeriesNamer::for_c2s_lines(&labels, &groups);
    let lines = Lines {
        groups: &groups,
        labels: &labels,
        namer: &namer,
    };
    let mut panels = vec![lines.over_time()];
    panels.extend(lines.by_percentile());
    Ok(ChartData::new(
        ChartKind::UnderLoad,
        "Latency under load: probes' median over time, the load's phases shaded".into(),
        None,
        panels,
    ))
}

/// The under-load chart's lines: each label's cell, its runs, its name and colour.
struct Lines<'a> {
    groups: &'a UnderLoadGroups<'a>,
    labels: &'a [String],
    namer: &'a SeriesNamer,
}

impl Lines<'_> {
    fn name(&self, li: usize, key: &CellKey) -> (String, usize) {
        let dir = StreamDirection::ClientToServer;
        let label = &self.labels[li];
        (
            self.namer.name(label, key, dir),
            self.namer.colour(label, key, dir),
        )
    }

    /// The probes' median per timeline row, each line's runs' median row by row, with the
    /// load's phases shaded at their median times over all runs.
    fn over_time(&self) -> Panel {
        // Per line, (start, end, median µs, runs) per row index.
        type Steps = Vec<(f64, f64, f64, u64)>;
        let mut rows_of: Vec<(usize, CellKey, Steps)> = Vec::new();
        for ((li, key), group) in self.groups {
            let most = (group.iter())
                .map(|u| u.probes.timeline.len())
                .max()
                .unwrap_or(0);
            let mut rows = Vec::new();
            for k in 0..most {
                let at: Vec<(f64, f64, f64)> = group
                    .iter()
                    .filter_map(|u| {
                        let row = u.probes.timeline.get(k)?;
                        Some((row.start_s, row.end_s, row.udp.p50_us?))
                    })
                    .collect();
                if at.is_empty() {
                    continue;
                }
                let n = at.len() as f64;
                let start = at.iter().map(|a| a.0).sum::<f64>() / n;
                let end = at.iter().map(|a| a.1).sum::<f64>() / n;
                let p50 = median(&at.iter().map(|a| a.2).collect::<Vec<_>>());
                rows.push((start, end, p50, at.len() as u64));
            }
            rows_of.push((*li, key.clone(), rows));
        }
        let unit = TimeUnit::for_micros(largest(
            (rows_of.iter()).flat_map(|(_, _, rows)| rows.iter().map(|r| r.2)),
        ));
        let series = rows_of
            .iter()
            .map(|(li, key, rows)| {
                let (name, colour) = self.name(*li, key);
                Series {
                    name,
                    colour,
                    dashed: false,
                    markers: false,
                    points: rows
                        .iter()
                        .flat_map(|&(start, end, p50, n)| {
                            [start, end].map(|x| Point {
                                x,
                                y: unit.of_micros(p50),
                                bar: None,
                                n: Some(n),
                            })
                        })
                        .collect(),
                }
            })
            .collect();
        Panel {
            title: "UDP probes' median per interval".into(),
            x_desc: "Time since the probes started (s)".into(),
            y_desc: format!("Latency ({})", unit.label()),
            x_axis: XAxis::Linear,
            log_y: false,
            bands: self.bands(),
            series,
        }
    }

    /// The ramp, loaded and drain phases at their median times over every run.
    fn bands(&self) -> Vec<Band> {
        let all: Vec<&UnderLoadResult> = self.groups.values().flatten().copied().collect();
        let at = |f: fn(&xbench::under_load::Phases) -> f64| {
            median(&all.iter().map(|u| f(&u.probes.phases)).collect::<Vec<_>>())
        };
        let (load, loaded, loaded_end, after) = (
            at(|p| p.load_start_s),
            at(|p| p.loaded_start_s),
            at(|p| p.loaded_end_s),
            at(|p| p.idle_after_start_s),
        );
        [
            (load, loaded, "ramp (-O)", false),
            (loaded, loaded_end, "loaded", true),
            (loaded_end, after, "drain", false),
        ]
        .into_iter()
        .filter(|(from, to, _, _)| to > from)
        .map(|(from, to, name, strong)| Band {
            from,
            to,
            name: name.into(),
            strong,
        })
        .collect()
    }

    /// Idle and loaded by percentile, each line's runs merged; `None` when no phase of any
    /// line has an answered probe.
    fn by_percentile(&self) -> Option<Panel> {
        let mut dists: Vec<(usize, CellKey, Distribution, Distribution)> = Vec::new();
        for ((li, key), group) in self.groups {
            let (mut idle, mut loaded) = (Distribution::new(), Distribution::new());
            for u in group {
                // A histogram that does not decode leaves that run out of the curve, not the
                // chart; an empty one (no probe answered in the phase) adds nothing.
                if let Ok(d) = Distribution::decode(&u.probes.udp.idle.histogram) {
                    idle.add(&d);
                }
                if let Ok(d) = Distribution::decode(&u.probes.udp.loaded.histogram) {
                    loaded.add(&d);
                }
            }
            dists.push((*li, key.clone(), idle, loaded));
        }
        let unit = TimeUnit::for_micros(largest(
            (dists.iter())
                .filter(|d| d.3.count() > 0)
                .map(|d| d.3.quantile_ns(0.5) as f64 / 1e3),
        ));
        let mut cdf = Vec::new();
        for (li, key, idle, loaded) in &dists {
            let (name, colour) = self.name(*li, key);
            for (phase, d, dashed) in [("loaded", loaded, false), ("idle", idle, true)] {
                if d.count() == 0 {
                    continue;
                }
                cdf.push(Series {
                    name: format!("{name} {phase}"),
                    colour,
                    dashed,
                    markers: false,
                    points: percentile_points(d, unit),
                });
            }
        }
        (!cdf.is_empty()).then(|| {
            Panel::by_percentile(
                "UDP probes by percentile: loaded (solid) against idle before the load \
                 (dashed), runs merged"
                    .into(),
                unit,
                cdf,
            )
        })
    }
}

/// A distribution's latency at percentiles from 0 up to what its count supports (1,000
/// samples reach p99.9), in steps of 0.05 nines.
fn percentile_points(d: &Distribution, unit: TimeUnit) -> Vec<Point> {
    let top = (d.count() as f64).log10().clamp(0.0, 5.0);
    let steps = (top / 0.05).floor() as usize;
    (0..=steps)
        .map(|i| {
            let x = i as f64 * 0.05;
            let q = 1.0 - 10f64.powf(-x);
            Point {
                x,
                y: unit.of_micros(d.quantile_ns(q) as f64 / 1e3),
                bar: None,
                n: Some(d.count()),
            }
        })
        .collect()
}

/// The timeline: one run in detail, or several overlaid (see [`MAX_TIMELINE_RUNS`]).
fn timeline_chart(runs: &[&Run], scale: RateScale) -> Result<ChartData, ChartError> {
    let with_intervals: Vec<&Run> = runs
        .iter()
        .copied()
        .filter(|r| intervals(r).next().is_some())
        .collect();
    let chosen = pick_runs(&with_intervals, MAX_TIMELINE_RUNS);
    let unit = scale.unit_for(largest(chosen.iter().flat_map(|r| {
        intervals(r).flat_map(|d| d.timeline.iter().map(|p| p.bits_per_second))
    })));
    let mut data = match chosen.as_slice() {
        [] => {
            return Err(ChartError::Nothing {
                kind: "timeline",
                reason: "no throughput run with interval figures (was -i 0 given?)".into(),
            });
        }
        [one] => single_timeline(one, unit),
        several => overlaid_timeline(several, unit),
    };
    data.not_drawn = with_intervals.len() - chosen.len();
    Ok(data)
}

/// One run's intervals: throughput and retransmits per direction, each stream's congestion
/// window.
fn single_timeline(run: &Run, unit: ThroughputUnit) -> ChartData {
    let f = unit.factor();
    let dirs: Vec<&DirectionResult> = intervals(run).collect();
    let mut rate = Vec::new();
    let mut cwnd = Vec::new();
    let mut retr = Vec::new();
    for (di, d) in dirs.iter().enumerate() {
        let line = |points| Series {
            name: d.direction.label().into(),
            colour: di,
            dashed: false,
            markers: false,
            points,
        };
        rate.push(line(steps(d, |p| p.bits_per_second * f)));
        retr.push(line(steps(d, |p| p.retransmits as f64)));
        let arrow = (dirs.len() > 1).then(|| arrow(d.direction));
        cwnd.extend(stream_cwnds(d, arrow, cwnd.len()));
    }
    let cwnd_desc = scale_sizes(&mut cwnd);
    ChartData::new(
        ChartKind::Timeline,
        format!(
            "One run per interval: {} — {} ({})",
            run.label,
            run.key.describe(),
            run.path.display()
        ),
        Some(unit),
        vec![
            timeline_panel("Throughput", format!("Rate ({})", unit.label()), rate),
            timeline_panel("Congestion window per stream", cwnd_desc, cwnd),
            timeline_panel("Retransmits", "Segments per interval".into(), retr),
        ],
    )
}

/// Several runs' intervals overlaid from each run's start, a line per run (and direction) in
/// every panel. The congestion window panel shows each run's sum over its streams: a line per
/// stream of a dozen runs would be a tangle, and the sum (what the run kept in flight) compares
/// paths whatever their -P.
fn overlaid_timeline(runs: &[&Run], unit: ThroughputUnit) -> ChartData {
    let f = unit.factor();
    let mut rate = Vec::new();
    let mut cwnd = Vec::new();
    let mut retr = Vec::new();
    for (run, name) in runs.iter().zip(run_names(runs)) {
        let dirs: Vec<&DirectionResult> = intervals(run).collect();
        for d in &dirs {
            let i = rate.len();
            let line = |points| Series {
                name: if dirs.len() > 1 {
                    format!("{name} {}", arrow(d.direction))
                } else {
                    name.clone()
                },
                colour: i,
                // The palette's colours come round again after ten lines; dashes tell those apart.
                dashed: i >= PALETTE.len(),
                markers: false,
                points,
            };
            rate.push(line(steps(d, |p| p.bits_per_second * f)));
            cwnd.push(line(total_cwnd(d)));
            retr.push(line(steps(d, |p| p.retransmits as f64)));
        }
    }
    let labels = crate::table::labels_in_order(runs);
    let cwnd_desc = scale_sizes(&mut cwnd);
    let cell = if distinct(runs, |r| Some(r.key.clone())) == 1 {
        format!(" — {}", runs[0].key.describe())
    } else {
        String::new()
    };
    ChartData::new(
        ChartKind::Timeline,
        format!(
            "{} runs per interval, overlaid: {}{cell}",
            runs.len(),
            labels.join(", ")
        ),
        Some(unit),
        vec![
            timeline_panel("Throughput", format!("Rate ({})", unit.label()), rate),
            timeline_panel("Congestion window, all streams of a run", cwnd_desc, cwnd),
            timeline_panel("Retransmits", "Segments per interval".into(), retr),
        ],
    )
}

/// Congestion windows, drawn in KiB, rescaled to MiB when the largest is a MiB or more; the
/// axis's description, with the unit.
fn scale_sizes(series: &mut [Series]) -> String {
    let top = largest(series.iter().flat_map(|s| s.points.iter().map(|p| p.y)));
    if top < 1024.0 {
        return "cwnd (KiB)".into();
    }
    for p in series.iter_mut().flat_map(|s| s.points.iter_mut()) {
        p.y /= 1024.0;
    }
    "cwnd (MiB)".into()
}

fn timeline_panel(title: &str, y_desc: String, series: Vec<Series>) -> Panel {
    Panel {
        title: title.into(),
        x_desc: "Time since start (s)".into(),
        y_desc,
        x_axis: XAxis::Linear,
        log_y: false,
        bands: Vec::new(),
        series,
    }
}

/// The directions of `run` that have interval figures.
fn intervals(run: &Run) -> impl Iterator<Item = &DirectionResult> {
    let dirs: &[DirectionResult] = match &run.measure {
        Measure::Throughput(d) => d,
        Measure::Rr(_) | Measure::Udp(_) | Measure::UnderLoad(_) => &[],
    };
    dirs.iter().filter(|d| !d.timeline.is_empty())
}

/// At most `max` of `runs`, in their order, taking each path's first run, then each one's
/// second, and so on, so that every path shows.
fn pick_runs<'a>(runs: &[&'a Run], max: usize) -> Vec<&'a Run> {
    let mut ranked: Vec<(usize, usize)> = runs
        .iter()
        .enumerate()
        .map(|(i, r)| (runs[..i].iter().filter(|o| o.label == r.label).count(), i))
        .collect();
    ranked.sort_unstable();
    let mut kept: Vec<usize> = ranked.into_iter().take(max).map(|(_, i)| i).collect();
    kept.sort_unstable();
    kept.into_iter().map(|i| runs[i]).collect()
}

/// "vpn run 3": the path, the cell when the runs' cells differ, and the run from the file name
/// (`run-3.json`, as `--save` writes it; another file's name as it is).
fn run_names(runs: &[&Run]) -> Vec<String> {
    let cells_vary = distinct(runs, |r| Some(r.key.clone())) > 1;
    let names: Vec<String> = runs
        .iter()
        .map(|r| {
            let stem = r
                .path
                .file_stem()
                .map(|s| s.to_string_lossy().into_owned())
                .unwrap_or_default();
            let run = match stem.strip_prefix("run-") {
                Some(n) if n.parse::<u64>().is_ok() => format!("run {n}"),
                _ => stem,
            };
            let cell = cells_vary.then(|| r.key.describe());
            [Some(r.label.clone()), cell, Some(run)]
                .into_iter()
                .flatten()
                .filter(|s| !s.is_empty())
                .collect::<Vec<_>>()
                .join(" ")
        })
        .collect();
    // Two files of one name in one path's cell (from two directories): numbered apart.
    names
        .iter()
        .enumerate()
        .map(|(i, n)| {
            if names.iter().filter(|m| *m == n).count() > 1 {
                format!("{n} #{}", i + 1)
            } else {
                n.clone()
            }
        })
        .collect()
}

/// Rates and counts hold over an interval: steps, not points.
fn steps(d: &DirectionResult, y: impl Fn(&TimelinePoint) -> f64) -> Vec<Point> {
    d.timeline
        .iter()
        .flat_map(|p| {
            [p.start_s, p.end_s].map(|x| Point {
                x,
                y: y(p),
                bar: None,
                n: None,
            })
        })
        .collect()
}

/// A line per stream's congestion window, KiB at each interval's end, coloured from
/// `first_colour` on; `arrow` names the direction when a run has two.
fn stream_cwnds(d: &DirectionResult, arrow: Option<&str>, first_colour: usize) -> Vec<Series> {
    let streams = d
        .timeline
        .iter()
        .map(|p| p.cwnd_bytes.len())
        .max()
        .unwrap_or(0);
    (0..streams)
        .map(|s| Series {
            name: match arrow {
                Some(a) => format!("{a} stream {s}"),
                None => format!("stream {s}"),
            },
            colour: first_colour + s,
            dashed: false,
            markers: true,
            points: d
                .timeline
                .iter()
                .filter_map(|p| {
                    Some(Point {
                        x: p.end_s,
                        y: *p.cwnd_bytes.get(s)? as f64 / 1024.0,
                        bar: None,
                        n: None,
                    })
                })
                .collect(),
        })
        .collect()
}

/// The sum of the streams' congestion windows, KiB at each interval's end.
fn total_cwnd(d: &DirectionResult) -> Vec<Point> {
    d.timeline
        .iter()
        .filter(|p| !p.cwnd_bytes.is_empty())
        .map(|p| Point {
            x: p.end_s,
            y: p.cwnd_bytes.iter().sum::<u64>() as f64 / 1024.0,
            bar: None,
            n: None,
        })
        .collect()
}

fn arrow(dir: StreamDirection) -> &'static str {
    if dir == StreamDirection::ClientToServer {
        "↑"
    } else {
        "↓"
    }
}

/// Names series by label, adding the other settings or the direction only where they vary,
/// and gives each label its own colour.
struct SeriesNamer {
    keys: Vec<(String, CellKey, StreamDirection)>,
}

/// Where `label` stands in `labels` (the runs' labels in order): the first part of a line's
/// key, so lines sort, and take their colours, in the order the paths were given.
fn label_index(labels: &[String], label: &str) -> usize {
    labels.iter().position(|l| l == label).unwrap_or(0)
}

impl SeriesNamer {
    fn new(keys: impl Iterator<Item = (String, CellKey, StreamDirection)>) -> Self {
        SeriesNamer {
            keys: keys.collect(),
        }
    }

    /// For lines keyed (label index, cell, direction), as the sweep and UDP charts group
    /// their runs.
    fn for_lines<V>(
        labels: &[String],
        groups: &BTreeMap<(usize, CellKey, StreamDirection), V>,
    ) -> Self {
        Self::new(
            groups
                .keys()
                .map(|(l, k, d)| (labels[*l].clone(), k.clone(), *d)),
        )
    }

    /// For lines keyed (label index, cell), all client → server: request/response latency
    /// and latency under load.
    fn for_c2s_lines<V>(labels: &[String], groups: &BTreeMap<(usize, CellKey), V>) -> Self {
        Self::new(groups.keys().map(|(l, k)| {
            (
                labels[*l].clone(),
                k.clone(),
                StreamDirection::ClientToServer,
            )
        }))
    }

    fn name(&self, label: &str, rest: &CellKey, dir: StreamDirection) -> String {
        let mut name = label.to_owned();
        let mut rests: Vec<&CellKey> = self.keys.iter().map(|k| &k.1).collect();
        rests.dedup();
        if rests.len() > 1 {
            let r = rest.describe();
            if r != "default" {
                name.push(' ');
                name.push_str(&r);
            }
        }
        let dirs = self.keys.iter().any(|k| k.2 != dir);
        if dirs {
            name.push(' ');
            name.push_str(arrow(dir));
        }
        name
    }

    fn colour(&self, label: &str, rest: &CellKey, dir: StreamDirection) -> usize {
        self.keys
            .iter()
            .position(|k| k.0 == label && &k.1 == rest && k.2 == dir)
            .unwrap_or(0)
    }
}

fn distinct<T: PartialEq>(runs: &[&Run], f: impl Fn(&Run) -> Option<T>) -> usize {
    let mut seen: Vec<T> = Vec::new();
    for r in runs {
        if let Some(v) = f(r)
            && !seen.contains(&v)
        {
            seen.push(v);
        }
    }
    seen.len()
}

fn some_files(runs: &[&Run]) -> String {
    let mut s: Vec<String> = runs
        .iter()
        .take(3)
        .map(|r| r.path.display().to_string())
        .collect();
    if runs.len() > 3 {
        s.push(format!("and {} more", runs.len() - 3));
    }
    s.join(", ")
}

// ---- drawing -----------------------------------------------------------------------------

/// Tableau 10: distinguishable, and kind to the common colour-vision deficiencies.
const PALETTE: [RGBColor; 10] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(127, 127, 127),
    RGBColor(188, 189, 34),
    RGBColor(23, 190, 207),
];

/// The family every text is drawn in: DejaVu Sans, embedded (`dejavu`) and registered under
/// its own name, so an SVG names the font its text was measured with.
const FONT: &str = "DejaVu Sans";

/// A band's shade: a light grey-blue no line is drawn in, darker for a strong band.
pub(crate) fn band_rgb(b: &Band) -> (u8, u8, u8) {
    if b.strong {
        (214, 222, 235)
    } else {
        (236, 240, 246)
    }
}

fn band_colour(b: &Band) -> RGBColor {
    let (r, g, bl) = band_rgb(b);
    RGBColor(r, g, bl)
}

fn colour(i: usize) -> RGBColor {
    if i == NEUTRAL {
        return RGBColor(60, 60, 60);
    }
    PALETTE[i % PALETTE.len()]
}

/// The image's width, pixels.
const WIDTH: u32 = 1200;

/// The image's size: each panel's height and its key's. Needs the font registered: the keys
/// are laid out with its metrics.
fn size(data: &ChartData) -> (u32, u32) {
    let keys: u32 = (0..data.panels.len())
        .map(|i| Key::of(data, i).height())
        .sum();
    (
        WIDTH,
        HEADER + panel_height(data) * data.panels.len() as u32 + keys,
    )
}

/// Height of the title and subtitle band above the panels, pixels.
const HEADER: u32 = 84;

/// A panel's height without its key: stacked panels are shorter than a chart's only one.
fn panel_height(data: &ChartData) -> u32 {
    if data.panels.len() > 1 { 300 } else { 750 }
}

fn draw_err(e: impl std::fmt::Display) -> ChartError {
    ChartError::Draw(e.to_string())
}

/// Registers the embedded font once per process; plotters' `ab_glyph` text looks fonts up by
/// family name in a global table.
fn fonts() -> Result<(), ChartError> {
    static REGISTERED: OnceLock<bool> = OnceLock::new();
    let ok = *REGISTERED.get_or_init(|| {
        plotters::style::register_font(FONT, FontStyle::Normal, dejavu::sans::regular()).is_ok()
            && plotters::style::register_font(FONT, FontStyle::Bold, dejavu::sans::bold()).is_ok()
    });
    if ok {
        Ok(())
    } else {
        Err(ChartError::Draw("the embedded font did not load".into()))
    }
}

fn draw<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    data: &ChartData,
) -> Result<(), ChartError> {
    fonts()?;
    root.fill(&WHITE).map_err(draw_err)?;
    let (head, body) = root.split_vertically(HEADER);
    draw_header(&head, data)?;
    // One right margin for all panels, wide enough for every line's name, so that stacked
    // panels share their x positions.
    let label_style: TextStyle<'_> = (FONT, 15).into_font().into();
    let name_w = data
        .panels
        .iter()
        .flat_map(|p| &p.series)
        .filter_map(|s| root.estimate_text_size(&s.name, &label_style).ok())
        .map(|(w, _)| w)
        .max()
        .unwrap_or(0);
    let keys: Vec<Key<'_>> = (0..data.panels.len()).map(|i| Key::of(data, i)).collect();
    let heights: Vec<u32> = keys
        .iter()
        .map(|k| panel_height(data) + k.height())
        .collect();
    for ((area, panel), key) in split_rows(&body, &heights)
        .iter()
        .zip(&data.panels)
        .zip(&keys)
    {
        let h = area.dim_in_pixel().1.saturating_sub(key.height());
        let (plot, under) = area.split_vertically(h);
        draw_panel(&plot, panel, name_w)?;
        key.draw(&under)?;
    }
    Ok(())
}

/// The title, and under it the subtitle in grey, left-aligned with a margin from the image's
/// edges; a title too long for the width is set smaller rather than cut.
fn draw_header<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    data: &ChartData,
) -> Result<(), ChartError> {
    const LEFT: i32 = 24;
    let room = WIDTH.saturating_sub(2 * LEFT as u32);
    let fits = |text: &str, size: u32| {
        area.estimate_text_size(text, &(FONT, size).into_font().into())
            .is_ok_and(|(w, _)| w <= room)
    };
    let size = (16..=26)
        .rev()
        .find(|s| fits(&data.title, *s))
        .unwrap_or(16);
    let top = Pos::new(HPos::Left, VPos::Top);
    area.draw(&Text::new(
        data.title.clone(),
        (LEFT, 18),
        (FONT, size).into_font().color(&BLACK).pos(top),
    ))
    .map_err(draw_err)?;
    if !data.subtitle.is_empty() {
        let size = (13..=18)
            .rev()
            .find(|s| fits(&data.subtitle, *s))
            .unwrap_or(13);
        area.draw(&Text::new(
            data.subtitle.clone(),
            (LEFT, 54),
            (FONT, size)
                .into_font()
                .color(&RGBColor(80, 80, 80))
                .pos(top),
        ))
        .map_err(draw_err)?;
    }
    Ok(())
}

/// `area` cut into rows in proportion to `heights`.
fn split_rows<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    heights: &[u32],
) -> Vec<DrawingArea<DB, Shift>> {
    let total = heights.iter().sum::<u32>().max(1) as f64;
    let scale = area.dim_in_pixel().1 as f64 / total;
    let mut rows = Vec::new();
    let mut rest = area.clone();
    for (i, h) in heights.iter().enumerate() {
        if i + 1 == heights.len() {
            rows.push(rest);
            break;
        }
        let (top, below) = rest.split_vertically((*h as f64 * scale).round() as u32);
        rows.push(top);
        rest = below;
    }
    rows
}

fn draw_panel<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    p: &Panel,
    name_w: u32,
) -> Result<(), ChartError> {
    let pts = || p.series.iter().flat_map(|s| s.points.iter());
    let (mut x0, mut x1) = match &p.x_axis {
        XAxis::Categories(c) => (-0.5, c.len().max(1) as f64 - 0.5),
        _ => (
            pts().map(|q| q.x).fold(f64::INFINITY, f64::min),
            pts().map(|q| q.x).fold(f64::NEG_INFINITY, f64::max),
        ),
    };
    if !x0.is_finite() || !x1.is_finite() {
        (x0, x1) = (0.0, 1.0);
    }
    if matches!(p.x_axis, XAxis::Linear) {
        x0 = x0.min(0.0);
    }
    if x1 <= x0 {
        x1 = x0 + 1.0;
    }
    let y_hi = pts()
        .map(|q| q.bar.map_or(q.y, |b| b.1.max(q.y)))
        .fold(0.0f64, f64::max);
    let mut builder = ChartBuilder::on(area);
    builder
        .margin_top(8)
        .margin_left(8)
        .margin_bottom(4)
        .margin_right(name_w + 28)
        .x_label_area_size(48)
        .y_label_area_size(80);
    if !p.title.is_empty() {
        builder.caption(&p.title, (FONT, 17));
    }
    if p.log_y {
        let y_lo = pts()
            .map(|q| q.y)
            .filter(|y| *y > 0.0)
            .fold(f64::INFINITY, f64::min);
        let y_lo = if y_lo.is_finite() { y_lo * 0.8 } else { 1.0 };
        let y_hi = (y_hi * 1.25).max(y_lo * 10.0);
        let chart = builder
            .build_cartesian_2d(
                x0..x1,
                (y_lo..y_hi)
                    .log_scale()
                    .with_key_points(log_ticks(y_lo, y_hi)),
            )
            .map_err(draw_err)?;
        draw_body(area, chart, p, (y_lo, y_hi))
    } else {
        let y_hi = if y_hi > 0.0 { y_hi * 1.1 } else { 1.0 };
        let chart = builder
            .build_cartesian_2d(x0..x1, 0.0..y_hi)
            .map_err(draw_err)?;
        draw_body(area, chart, p, (0.0, y_hi))
    }
}

fn draw_body<DB, Y>(
    area: &DrawingArea<DB, Shift>,
    mut chart: ChartContext<'_, DB, Cartesian2d<RangedCoordf64, Y>>,
    p: &Panel,
    (y_lo, y_hi): (f64, f64),
) -> Result<(), ChartError>
where
    DB: DrawingBackend,
    Y: Ranged<ValueType = f64> + ValueFormatter<f64>,
{
    draw_mesh(&mut chart, p)?;
    let categories = matches!(p.x_axis, XAxis::Categories(_));

    // Shaded stretches first, so that every line and the grid's labels stay on top.
    chart
        .draw_series(
            p.bands
                .iter()
                .map(|b| Rectangle::new([(b.from, y_lo), (b.to, y_hi)], band_colour(b).filled())),
        )
        .map_err(draw_err)?;

    // Categories: shift each path's points a little sideways so error bars do not overlap.
    let measured: Vec<&Series> = p.series.iter().filter(|s| !s.dashed).collect();
    let dodge = |s: &Series| -> f64 {
        if !categories || measured.len() < 2 {
            return 0.0;
        }
        let i = measured
            .iter()
            .position(|m| std::ptr::eq(*m, s))
            .map_or(0.0, |i| i as f64);
        (i - (measured.len() - 1) as f64 / 2.0) * (0.3 / measured.len() as f64).min(0.06)
    };
    for s in &p.series {
        draw_line(&mut chart, s, dodge(s))?;
    }

    draw_end_names(area, &chart, p, &dodge)
}

/// The grid, the axes' labels and their descriptions: categories (UDP's offered rates) by name
/// and without light lines between them, nines (99 %, 99.9 %) only where whole.
fn draw_mesh<DB, Y>(
    chart: &mut ChartContext<'_, DB, Cartesian2d<RangedCoordf64, Y>>,
    p: &Panel,
) -> Result<(), ChartError>
where
    DB: DrawingBackend,
    Y: Ranged<ValueType = f64> + ValueFormatter<f64>,
{
    let x_fmt = |x: &f64| -> String {
        match &p.x_axis {
            XAxis::Categories(c) => {
                let i = x.round();
                if (x - i).abs() < 1e-6 && i >= 0.0 {
                    c.get(i as usize).cloned().unwrap_or_default()
                } else {
                    String::new()
                }
            }
            // Only whole nines (90 %, 99 %, …): 68.3772 % helps nobody.
            XAxis::Nines if (x - x.round()).abs() < 1e-6 => nines_label(x.round()),
            XAxis::Nines => String::new(),
            XAxis::Linear => trim_number(*x),
        }
    };
    let x_labels = match &p.x_axis {
        XAxis::Categories(c) => c.len().max(1),
        XAxis::Nines => 7,
        XAxis::Linear => 10,
    };
    let categories = matches!(p.x_axis, XAxis::Categories(_));
    chart
        .configure_mesh()
        .x_max_light_lines(if categories { 0 } else { 4 })
        .y_max_light_lines(4)
        .x_desc(p.x_desc.as_str())
        .y_desc(p.y_desc.as_str())
        .x_labels(x_labels)
        .y_labels(8)
        .x_label_formatter(&x_fmt)
        .y_label_formatter(&|y: &f64| trim_number(*y))
        .axis_desc_style((FONT, 18))
        .label_style((FONT, 16))
        .light_line_style(RGBColor(235, 235, 235))
        .bold_line_style(RGBColor(210, 210, 210))
        .draw()
        .map_err(draw_err)?;
    Ok(())
}

/// One series: its line (dashed for a reference), its markers and its error bars, moved `dx`
/// sideways.
fn draw_line<DB, Y>(
    chart: &mut ChartContext<'_, DB, Cartesian2d<RangedCoordf64, Y>>,
    s: &Series,
    dx: f64,
) -> Result<(), ChartError>
where
    DB: DrawingBackend,
    Y: Ranged<ValueType = f64> + ValueFormatter<f64>,
{
    let c = colour(s.colour);
    let pts: Vec<(f64, f64)> = s.points.iter().map(|q| (q.x + dx, q.y)).collect();
    if s.dashed {
        chart
            .draw_series(DashedLineSeries::new(pts.clone(), 8, 5, c.stroke_width(2)))
            .map_err(draw_err)?;
    } else {
        chart
            .draw_series(LineSeries::new(pts.clone(), c.stroke_width(2)))
            .map_err(draw_err)?;
    }
    if s.markers {
        chart
            .draw_series(pts.iter().map(|&(x, y)| Circle::new((x, y), 4, c.filled())))
            .map_err(draw_err)?;
    }
    chart
        .draw_series(s.points.iter().filter_map(|q| {
            let (lo, hi) = q.bar?;
            Some(ErrorBar::new_vertical(
                q.x + dx,
                lo,
                q.y,
                hi,
                c.stroke_width(2),
                12,
            ))
        }))
        .map_err(draw_err)?;
    Ok(())
}

/// Names at the lines' ends, nudged apart so that two close lines stay readable. When they
/// cannot all fit beside the plot (a dozen runs ending together), none is written: the key
/// under the panel names every line, and a pile of names would hide which is which.
fn draw_end_names<DB, Y>(
    area: &DrawingArea<DB, Shift>,
    chart: &ChartContext<'_, DB, Cartesian2d<RangedCoordf64, Y>>,
    p: &Panel,
    dodge: &dyn Fn(&Series) -> f64,
) -> Result<(), ChartError>
where
    DB: DrawingBackend,
    Y: Ranged<ValueType = f64> + ValueFormatter<f64>,
{
    let base = area.get_base_pixel();
    let mut ends: Vec<(i32, i32, &Series)> = p
        .series
        .iter()
        .filter_map(|s| {
            let last = s.points.last()?;
            let (x, y) = chart.backend_coord(&(last.x + dodge(s), last.y));
            Some((x - base.0, y - base.1, s))
        })
        .collect();
    ends.sort_by_key(|e| e.1);
    let gap = 17;
    let close = |a: (i32, i32, &Series), b: (i32, i32, &Series)| (a.0 - b.0).abs() < 200;
    for i in 1..ends.len() {
        if ends[i].1 < ends[i - 1].1 + gap && close(ends[i], ends[i - 1]) {
            ends[i].1 = ends[i - 1].1 + gap;
        }
    }
    // Names pushed below the plot move up together, as far as its top.
    let rows = chart.plotting_area().get_pixel_range().1;
    let (top, bottom) = (rows.start - base.1, rows.end - base.1 + gap / 2);
    if let Some(last) = ends.last_mut() {
        last.1 = last.1.min(bottom);
    }
    for i in (0..ends.len().saturating_sub(1)).rev() {
        if ends[i].1 > ends[i + 1].1 - gap && close(ends[i], ends[i + 1]) {
            ends[i].1 = ends[i + 1].1 - gap;
        }
    }
    if ends.first().is_some_and(|e| e.1 < top - gap / 2) {
        return Ok(());
    }
    for (x, y, s) in ends {
        let style = (FONT, 15)
            .into_font()
            .color(&colour(s.colour))
            .pos(Pos::new(HPos::Left, VPos::Center));
        area.draw(&Text::new(s.name.clone(), (x + 14, y), style))
            .map_err(draw_err)?;
    }
    Ok(())
}

/// Ticks of a log axis at 1, 2 and 5 times powers of ten, fewer when the range is wide.
fn log_ticks(lo: f64, hi: f64) -> Vec<f64> {
    let decades = (hi / lo).log10();
    let mantissas: &[f64] = if decades > 4.0 {
        &[1.0]
    } else {
        &[1.0, 2.0, 5.0]
    };
    let mut out = Vec::new();
    let mut e = lo.log10().floor() as i32;
    while 10f64.powi(e) <= hi {
        for m in mantissas {
            let v = m * 10f64.powi(e);
            if v >= lo && v <= hi {
                out.push(v);
            }
        }
        e += 1;
    }
    out
}

/// `0` → "0%", `1` → "90%", `2` → "99%", `3` → "99.9%".
fn nines_label(x: f64) -> String {
    let q = 100.0 * (1.0 - 10f64.powf(-x));
    let s = format!("{q:.4}");
    let s = s.trim_end_matches('0').trim_end_matches('.');
    format!("{s}%")
}

/// An axis tick: as [`number`] writes it (grouped thousands), without the trailing zeros a
/// tick needs no more than a round number does (`0.5`, `1`, `2.5`).
fn trim_number(v: f64) -> String {
    if v.abs() >= 100.0 {
        number(v.round())
    } else if v == v.round() {
        format!("{v:.0}")
    } else if v.abs() >= 10.0 {
        format!("{v:.1}")
    } else {
        let s = format!("{v:.2}");
        s.trim_end_matches('0').trim_end_matches('.').to_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cell::{Kind, Tool};
    use crate::run::{RrResult, TimelinePoint};

    /// Every text of a drawn SVG, trimmed, in document order.
    fn svg_texts<'a>(doc: &'a roxmltree::Document<'a>) -> Vec<&'a str> {
        doc.descendants()
            .filter(|n| n.has_tag_name("text"))
            .filter_map(|n| n.text())
            .map(str::trim)
            .collect()
    }

    fn tp(label: &str, p: u16, w: Option<u64>, mbps: f64) -> Run {
        let mut r = crate::run::fixtures::tcp(label, p, mbps, 1, Some(1000.0));
        r.path = format!("{label}/P{p}.json").into();
        r.key.window = w;
        if let Measure::Throughput(dirs) = &mut r.measure {
            dirs[0].timeline = vec![TimelinePoint {
                start_s: 0.0,
                end_s: 1.0,
                bits_per_second: mbps * 1e6,
                retransmits: 1,
                cwnd_bytes: vec![65536; p as usize],
            }];
        }
        r
    }

    /// Issue 31: the title sat against the top edge, nothing said how many runs of what length,
    /// when or where, the axis read "80000" Mbit/s, and the SVG named plain `sans-serif` though
    /// its text was laid out with DejaVu Sans.
    #[test]
    fn a_chart_reads_as_in_a_report() {
        let runs: Vec<Run> = [("direct", 1), ("direct", 2), ("vpn", 1), ("vpn", 2)]
            .into_iter()
            .map(|(l, p)| Run {
                started_at: "2026-11-27T10:00:00.000Z".into(),
                length_s: Some(2.0),
                ..tp(l, p, None, 80_000.0)
            })
            .collect();
        let c = plan(&runs, None, RateScale::AUTO).unwrap();
        assert_eq!(c.subtitle, "4 runs × 2 s, 2026-11-27, paths: direct, vpn");
        assert_eq!(c.rate_unit, Some(ThroughputUnit::Gbits));
        assert_eq!(c.panels[0].y_desc, "Receiver throughput (Gbit/s)");
        let svg = to_svg(&c).unwrap();
        let doc = roxmltree::Document::parse(&svg).unwrap();
        let texts: Vec<roxmltree::Node<'_, '_>> = doc
            .descendants()
            .filter(|n| n.has_tag_name("text"))
            .collect();
        let text = |t: &roxmltree::Node<'_, '_>| t.text().unwrap_or_default().trim().to_owned();
        let title = texts
            .iter()
            .find(|t| text(t) == c.title)
            .expect("the title");
        let y: f64 = title.attribute("y").unwrap().parse().unwrap();
        assert!(y >= 12.0, "the title's top is {y} px from the edge");
        assert!(texts.iter().any(|t| text(t) == c.subtitle));
        for t in &texts {
            assert_eq!(t.attribute("font-family"), Some("DejaVu Sans, sans-serif"));
        }
        // The axis's ticks read in Gbit/s: 80, not 80,000.
        assert!(texts.iter().any(|t| text(t) == "80"), "{svg}");
    }

    fn rr(label: &str) -> Run {
        let mut d = Distribution::new();
        let mut r = xbench::latency::Recorder::new();
        for ns in [20_000u64, 21_000, 22_000, 40_000, 90_000] {
            for _ in 0..40 {
                r.record(ns);
            }
        }
        d.add_recorder(&r);
        Run {
            path: format!("{label}/rr.json").into(),
            label: label.into(),
            key: CellKey::of_spec(&xbench::config::TestSpec::request_response()),
            started_at: String::new(),
            length_s: None,
            facts: Default::default(),
            measure: Measure::Rr(RrResult {
                transactions_per_second: 1000.0,
                p50_us: 22.0,
                p90_us: 90.0,
                p99_us: 90.0,
                p99_9_us: 90.0,
                mean_us: 38.6,
                min_us: 10.0,
                max_us: 95.0,
                stddev_us: 20.0,
                retransmits: 0,
                histogram: d.encode(),
            }),
        }
    }

    #[test]
    fn streams_chart_has_a_line_per_path_with_error_bars() {
        let runs = vec![
            tp("peering", 1, None, 100.0),
            tp("peering", 1, None, 110.0),
            tp("peering", 4, None, 380.0),
            tp("vpn", 1, None, 50.0),
            tp("vpn", 4, None, 120.0),
        ];
        let c = plan(&runs, None, ThroughputUnit::Mbits).unwrap();
        assert_eq!(c.kind, ChartKind::Streams);
        let s = &c.panels[0].series;
        let names: Vec<&str> = s.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names, ["peering", "vpn"]);
        assert_eq!(s[0].points[0].y, 105.0);
        assert!(s[0].points[0].bar.is_some(), "two runs give a CI");
        assert!(s[1].points[0].bar.is_none(), "one run gives none");
        assert_ne!(s[0].colour, s[1].colour);
        let svg = to_svg(&c).unwrap();
        let doc = roxmltree::Document::parse(&svg).unwrap();
        let texts = svg_texts(&doc);
        for want in [
            "peering",
            "vpn",
            "Parallel TCP streams (-P)",
            "Receiver throughput (Mbit/s)",
        ] {
            assert!(texts.contains(&want), "{want} in {texts:?}");
        }
        let png = to_png(&c).unwrap();
        assert_eq!(&png[1..4], b"PNG");
    }

    #[test]
    fn window_chart_draws_the_ceiling() {
        let runs = vec![
            tp("a", 1, Some(64 << 10), 400.0),
            tp("a", 1, Some(256 << 10), 900.0),
        ];
        let c = plan(&runs, None, ThroughputUnit::Mbits).unwrap();
        assert_eq!(c.kind, ChartKind::Window);
        let s = &c.panels[0].series;
        assert_eq!(s[1].name, "a ceiling");
        assert!(s[1].dashed);
        // 64 KiB ÷ 1 ms = 524.288 Mbit/s.
        assert!((s[1].points[0].y - 524.288).abs() < 1e-6);

        // A run that measured its advertised window draws that ceiling, not the asked size's:
        // Linux grants -w about 1.3 times over (a regression test: the asked size put the
        // ceiling under the measured rate).
        let mut runs = runs;
        for r in &mut runs {
            if let Measure::Throughput(dirs) = &mut r.measure {
                dirs[0].window_ceiling_bps = Some(dirs[0].bits_per_second * 1.02);
            }
        }
        let c = plan(&runs, None, ThroughputUnit::Mbits).unwrap();
        let s = &c.panels[0].series;
        assert!((s[1].points[0].y - 408.0).abs() < 1e-6);
        assert!((s[1].points[1].y - 918.0).abs() < 1e-6);
    }

    /// The key frames' rectangles: x, y, width, height.
    fn key_frames(doc: &roxmltree::Document<'_>) -> Vec<[f64; 4]> {
        doc.descendants()
            .filter(|n| n.has_tag_name("rect") && n.attribute("stroke") == Some("#606060"))
            .map(|n| {
                ["x", "y", "width", "height"].map(|a| n.attribute(a).unwrap().parse().unwrap())
            })
            .collect()
    }

    /// Whether the element `n` starts inside one of `frames`.
    fn in_key(frames: &[[f64; 4]], n: roxmltree::Node<'_, '_>) -> bool {
        let (x, y): (f64, f64) = match n.attribute("points") {
            Some(p) => {
                let first = p.split_whitespace().next().unwrap();
                let (x, y) = first.split_once(',').unwrap();
                (x.parse().unwrap(), y.parse().unwrap())
            }
            None => {
                let at = |a: &str, b: &str| n.attribute(a).or(n.attribute(b)).unwrap().parse();
                (at("x", "x1").unwrap(), at("y", "y1").unwrap())
            }
        };
        frames
            .iter()
            .any(|[fx, fy, w, h]| x >= *fx && x <= fx + w && y >= *fy && y <= fy + h)
    }

    /// Every element of the plots (not the keys) drawn in `colour` (`#RRGGBB`) and the y
    /// pixels of its points.
    fn stroked_ys(svg: &str, colour: &str) -> Vec<f64> {
        let doc = roxmltree::Document::parse(svg).unwrap();
        let frames = key_frames(&doc);
        let mut ys = Vec::new();
        for n in doc
            .descendants()
            .filter(|n| n.attribute("stroke") == Some(colour) && !in_key(&frames, *n))
        {
            match n.tag_name().name() {
                "line" => {
                    for a in ["y1", "y2"] {
                        ys.push(n.attribute(a).unwrap().parse().unwrap());
                    }
                }
                "polyline" => {
                    for pair in n.attribute("points").unwrap().split_whitespace() {
                        ys.push(pair.split(',').nth(1).unwrap().parse().unwrap());
                    }
                }
                other => panic!("a {other} in the ceiling's colour"),
            }
        }
        ys
    }

    /// `--ceiling`: a dashed horizontal line named with the rate in the table's unit, above
    /// the measured lines when the paths run below it; refused on a latency chart.
    #[test]
    fn a_ceiling_is_a_named_horizontal_line_in_the_charts_unit() {
        let runs = vec![
            tp("peering", 1, None, 300.0),
            tp("peering", 4, None, 900.0),
            tp("vpn", 1, None, 100.0),
            tp("vpn", 4, None, 200.0),
        ];
        let mut c = plan(&runs, None, ThroughputUnit::MBytes).unwrap();
        add_ceiling(&mut c, 1e9).unwrap();
        let line = c.panels[0].series.last().unwrap();
        assert_eq!(line.name, "capacity 125 MB/s");
        assert!(line.dashed && line.colour == NEUTRAL);
        assert!(line.points.iter().all(|p| p.y == 125.0));

        let svg = to_svg(&c).unwrap();
        let doc = roxmltree::Document::parse(&svg).unwrap();
        let label = doc
            .descendants()
            .find(|n| {
                n.has_tag_name("text") && n.text().map(str::trim) == Some("capacity 125 MB/s")
            })
            .expect("the ceiling's label");
        let ys = stroked_ys(&svg, "#3C3C3C");
        assert!(ys.len() >= 4, "dashes of the ceiling: {ys:?}");
        assert!(
            ys.iter().all(|y| (y - ys[0]).abs() < 0.5),
            "not horizontal: {ys:?}"
        );
        // Labelled at its own height, and above every path (smaller y is higher up).
        let label_y: f64 = label.attribute("y").unwrap().parse().unwrap();
        assert!(
            (label_y - ys[0]).abs() < 20.0,
            "label at {label_y}, line at {}",
            ys[0]
        );
        let peering = stroked_ys(&svg, "#1F77B4");
        assert!(
            !peering.is_empty() && peering.iter().all(|y| *y > ys[0]),
            "{peering:?}"
        );

        // The timeline's throughput panel takes it too; the latency chart has no rate axis.
        let mut t = plan(&[tp("a", 2, None, 10.0)], None, ThroughputUnit::Gbits).unwrap();
        add_ceiling(&mut t, 25e9).unwrap();
        assert_eq!(
            t.panels[0].series.last().unwrap().name,
            "capacity 25.0 Gbit/s"
        );
        assert_eq!(t.panels[1].series.len(), 2, "cwnd panel untouched");
        let mut l = plan(&[rr("b")], None, ThroughputUnit::Mbits).unwrap();
        let e = add_ceiling(&mut l, 1e9).unwrap_err();
        assert!(e.to_string().contains("no throughput axis"), "{e}");
    }

    /// The texts inside the key frames of `data`'s SVG, and how many frames there are.
    fn key_texts(data: &ChartData) -> (Vec<String>, usize) {
        let svg = to_svg(data).unwrap();
        let doc = roxmltree::Document::parse(&svg).unwrap();
        let frames = key_frames(&doc);
        let texts = doc
            .descendants()
            .filter(|n| n.has_tag_name("text") && in_key(&frames, *n))
            .filter_map(|n| n.text())
            .map(|t| t.trim().to_owned())
            .collect();
        (texts, frames.len())
    }

    /// A run of both directions (--bidir), the second at half the rate.
    fn bidir(mut r: Run) -> Run {
        if let Measure::Throughput(d) = &mut r.measure {
            let mut back = d[0].clone();
            back.direction = StreamDirection::ServerToClient;
            back.bits_per_second /= 2.0;
            d.push(back);
        }
        r
    }

    /// Keys on every chart (issue 21): each chart kind's key names every line it draws, the
    /// capacity line too, and says what ↑ and ↓ mean where names use them.
    #[test]
    fn every_chart_has_a_key_naming_each_line() {
        let streams = vec![
            tp("peering", 1, None, 100.0),
            tp("peering", 4, None, 380.0),
            tp("vpn", 1, None, 50.0),
            tp("vpn", 4, None, 120.0),
        ];
        let window = vec![
            bidir(tp("a", 1, Some(64 << 10), 400.0)),
            bidir(tp("a", 1, Some(256 << 10), 900.0)),
        ];
        let several = vec![saved("peering", 1, 900.0), saved("vpn", 1, 300.0)];
        let unit = ThroughputUnit::Mbits;
        let mut charts = vec![
            plan(&streams, None, unit).unwrap(),
            plan(&window, None, unit).unwrap(),
            plan(&[rr("a"), rr("b")], None, unit).unwrap(),
            plan(&[bidir(tp("a", 2, None, 10.0))], None, unit).unwrap(),
            plan(&several, None, unit).unwrap(),
        ];
        for c in &mut charts[..2] {
            add_ceiling(c, 1e9).unwrap();
        }
        add_ceiling(&mut charts[4], 1e9).unwrap();
        let kinds: Vec<ChartKind> = charts.iter().map(|c| c.kind).collect();
        use ChartKind::*;
        assert_eq!(kinds, [Streams, Window, Latency, Timeline, Timeline]);
        for c in &charts {
            let (texts, frames) = key_texts(c);
            assert!(frames >= 1, "{}: no key", c.title);
            for s in c.panels.iter().flat_map(|p| &p.series) {
                assert!(
                    texts.contains(&s.name),
                    "{}: {} not in {texts:?}",
                    c.title,
                    s.name
                );
            }
            let arrows = c
                .panels
                .iter()
                .flat_map(|p| &p.series)
                .any(|s| s.name.contains('↑'));
            let note = texts
                .iter()
                .any(|t| t == "↑ client→server, ↓ server→client");
            assert_eq!(arrows, note, "{}: {texts:?}", c.title);
        }
        // The window chart's lines are named with arrows; the overlaid timeline's panels share
        // one key, under the throughput panel.
        assert!(key_texts(&charts[1]).0.contains(&"a ↓ ceiling".to_owned()));
        assert_eq!(key_texts(&charts[4]).1, 1);
        assert!(
            key_texts(&charts[4])
                .0
                .contains(&"capacity 1,000 Mbit/s".to_owned())
        );
    }

    /// A UDP run at `mbps` offered with `loss` % lost and `jitter` ms.
    fn udp(label: &str, mbps: u64, loss: f64, jitter: f64) -> Run {
        let lost = (loss * 10.0) as u64;
        let mut r = crate::run::fixtures::udp(label, mbps * 1_000_000, 1000, lost, loss, jitter);
        r.path = format!("{label}/udp-{mbps}.json").into();
        r
    }

    /// Loss and jitter vs offered rate: two panels, a line per path with a point per rate in
    /// rate order, each the mean of its runs; the key names every line; the SVG's lines climb
    /// where the loss does.
    #[test]
    fn udp_chart_draws_loss_and_jitter_vs_offered_rate() {
        let runs = vec![
            udp("vpn", 500, 40.0, 2.0),
            udp("vpn", 100, 0.0, 0.1),
            udp("vpn", 200, 10.0, 0.5),
            udp("vpn", 200, 20.0, 0.7),
            udp("peering", 100, 0.0, 0.01),
            udp("peering", 200, 0.0, 0.02),
            udp("peering", 500, 1.0, 0.05),
        ];
        let c = plan(&runs, None, ThroughputUnit::Mbits).unwrap();
        assert_eq!(c.kind, ChartKind::Udp);
        assert_eq!(c.panels.len(), 2);
        assert_eq!(
            c.panels[0].x_axis,
            XAxis::Categories(vec!["100M".into(), "200M".into(), "500M".into()])
        );
        let loss = &c.panels[0].series;
        let names: Vec<&str> = loss.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names, ["vpn", "peering"]);
        let ys = |s: &Series| s.points.iter().map(|p| (p.x, p.y)).collect::<Vec<_>>();
        assert_eq!(ys(&loss[0]), [(0.0, 0.0), (1.0, 15.0), (2.0, 40.0)]);
        assert!(loss[0].points[1].bar.is_some(), "two runs: a CI bar");
        let jitter = &c.panels[1].series;
        assert_eq!(ys(&jitter[1]), [(0.0, 0.01), (1.0, 0.02), (2.0, 0.05)]);
        assert!(add_ceiling(&mut c.clone(), 1e9).is_err());

        let (texts, frames) = key_texts(&c);
        assert!(frames >= 1, "no key");
        for n in ["vpn", "peering"] {
            assert!(texts.contains(&n.to_owned()), "{n} not in {texts:?}");
        }
        let svg = to_svg(&c).unwrap();
        assert!(svg.contains("Datagrams lost (% of sent)") && svg.contains("RFC 3550 jitter (ms)"));
        // vpn's loss line (first colour, first panel): three points, each higher on the image
        // (smaller y) than the one before.
        let vpn = format!(
            "#{:02X}{:02X}{:02X}",
            PALETTE[0].0, PALETTE[0].1, PALETTE[0].2
        );
        let lines = polylines(&svg, &vpn, 3);
        assert_eq!(lines.len(), 2, "a loss and a jitter line in vpn's colour");
        let l = &lines[0];
        assert!(l[0] > l[1] && l[1] > l[2], "{l:?}");

        // With TCP runs and no --chart: refused, naming both; --chart udp leaves TCP out.
        let mut mixed = runs.clone();
        mixed.push(tp("a", 1, None, 1.0));
        let e = plan(&mixed, None, ThroughputUnit::Mbits)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("vpn/udp-500.json") && e.contains("a/P1.json"),
            "{e}"
        );
        let c = plan(&mixed, Some(ChartKind::Udp), ThroughputUnit::Mbits).unwrap();
        assert_eq!(c.left_out, 1);
        assert!(plan(&mixed[7..], Some(ChartKind::Udp), ThroughputUnit::Mbits).is_err());
        // A TCP chart of UDP runs says which chart draws them.
        let e = plan(&runs, Some(ChartKind::Timeline), ThroughputUnit::Mbits).unwrap_err();
        assert!(e.to_string().contains("use --chart udp"), "{e}");
    }

    #[test]
    fn mixed_kinds_name_the_files() {
        let runs = vec![tp("a", 1, None, 1.0), rr("b")];
        let e = plan(&runs, None, ThroughputUnit::Mbits).unwrap_err();
        let msg = e.to_string();
        assert!(
            msg.contains("b/rr.json") && msg.contains("a/P1.json"),
            "{msg}"
        );
        // Asking for one kind leaves the other out instead.
        let c = plan(&runs, Some(ChartKind::Latency), ThroughputUnit::Mbits).unwrap();
        assert_eq!(c.left_out, 1);
        assert_eq!(c.panels[0].series[0].name, "b");
        to_svg(&c).unwrap();
    }

    #[test]
    fn one_cell_gives_a_timeline() {
        let c = plan(&[tp("a", 2, None, 10.0)], None, ThroughputUnit::Gbits).unwrap();
        assert_eq!(c.kind, ChartKind::Timeline);
        assert_eq!(c.panels.len(), 3);
        assert_eq!(c.panels[1].series.len(), 2, "a cwnd line per stream");
        to_svg(&c).unwrap();
        let _ = (Kind::Rr, Tool::Xbench);
    }

    /// A run as `--save` names it (`label/P2/run-N.json`): three one-second intervals at
    /// `mbps`, two streams whose windows grow by 64 KiB each interval.
    fn saved(label: &str, n: u32, mbps: f64) -> Run {
        let mut r = tp(label, 2, None, mbps);
        r.path = format!("{label}/P2/run-{n}.json").into();
        if let Measure::Throughput(d) = &mut r.measure {
            d[0].timeline = (0..3u64)
                .map(|i| TimelinePoint {
                    start_s: i as f64,
                    end_s: i as f64 + 1.0,
                    bits_per_second: mbps * 1e6,
                    retransmits: i,
                    cwnd_bytes: vec![65536 * (i + 1); 2],
                })
                .collect();
        }
        r
    }

    /// The polylines drawn in `colour` with at least `min_points` points (a key's sample has
    /// two), as their points' y pixels.
    fn polylines(svg: &str, colour: &str, min_points: usize) -> Vec<Vec<f64>> {
        let doc = roxmltree::Document::parse(svg).unwrap();
        doc.descendants()
            .filter(|n| n.has_tag_name("polyline") && n.attribute("stroke") == Some(colour))
            .map(|n| {
                n.attribute("points")
                    .unwrap()
                    .split_whitespace()
                    .map(|pair| pair.split(',').nth(1).unwrap().parse().unwrap())
                    .collect::<Vec<f64>>()
            })
            .filter(|ys| ys.len() >= min_points)
            .collect()
    }

    /// Two runs given to a timeline used to draw the first alone (issue 21): now each run is
    /// a line of its own in every panel, named after its path and run.
    #[test]
    fn a_timeline_of_several_runs_draws_a_line_per_run() {
        let runs = vec![
            saved("peering", 1, 900.0),
            saved("peering", 2, 850.0),
            saved("vpn", 1, 300.0),
        ];
        let c = plan(&runs, None, ThroughputUnit::Mbits).unwrap();
        assert_eq!(c.kind, ChartKind::Timeline);
        assert_eq!(c.not_drawn, 0);
        assert!(c.title.contains("peering, vpn"), "{}", c.title);
        for p in &c.panels {
            let names: Vec<&str> = p.series.iter().map(|s| s.name.as_str()).collect();
            assert_eq!(
                names,
                ["peering run 1", "peering run 2", "vpn run 1"],
                "{}",
                p.title
            );
        }
        // The window panel sums a run's two streams: 2 × 64 KiB after the first second.
        assert_eq!(c.panels[1].series[0].points[0].y, 128.0);
        assert_eq!(c.panels[2].series[2].points.last().unwrap().y, 2.0);

        let svg = to_svg(&c).unwrap();
        let doc = roxmltree::Document::parse(&svg).unwrap();
        let texts = svg_texts(&doc);
        // One polyline per run in each of the three panels, in the run's own colour; in the
        // throughput panel (drawn first) the faster path above the slower (smaller y).
        let mut tops = Vec::new();
        for (name, colour) in [
            ("peering run 1", "#1F77B4"),
            ("peering run 2", "#FF7F0E"),
            ("vpn run 1", "#2CA02C"),
        ] {
            assert!(texts.contains(&name), "{name} in {texts:?}");
            let lines = polylines(&svg, colour, 3);
            assert_eq!(lines.len(), 3, "{name}: {lines:?}");
            tops.push(lines[0][0]);
        }
        assert!(tops[0] < tops[1] && tops[1] < tops[2], "{tops:?}");
    }

    /// More runs than a timeline overlays: each path keeps its share, the rest are counted,
    /// and the lines past the palette's ten colours are dashed.
    #[test]
    fn a_timeline_overlays_at_most_twelve_runs_shared_between_paths() {
        let runs: Vec<Run> = (1..=10)
            .map(|n| saved("peering", n, 900.0))
            .chain((1..=4).map(|n| saved("vpn", n, 300.0)))
            .collect();
        let c = plan(&runs, Some(ChartKind::Timeline), ThroughputUnit::Mbits).unwrap();
        assert_eq!(c.not_drawn, 2);
        let s = &c.panels[0].series;
        assert_eq!(s.len(), MAX_TIMELINE_RUNS);
        assert_eq!(s.iter().filter(|s| s.name.starts_with("vpn")).count(), 4);
        assert_eq!(s.last().unwrap().name, "vpn run 4");
        let dashed: Vec<&str> = s
            .iter()
            .filter(|s| s.dashed)
            .map(|s| s.name.as_str())
            .collect();
        assert_eq!(dashed, ["vpn run 3", "vpn run 4"]);
    }

    /// Twelve runs' names at the ends of lines all ending at 0 were nudged apart downwards,
    /// off the bottom of the image: they now stack upwards from the plot's bottom edge.
    #[test]
    fn names_of_lines_ending_together_stay_in_the_image() {
        let runs: Vec<Run> = (1..=12)
            .map(|n| {
                let mut r = saved("vpn", n, 100.0 + n as f64);
                if let Measure::Throughput(d) = &mut r.measure {
                    d[0].timeline.iter_mut().for_each(|p| p.retransmits = 0);
                }
                r
            })
            .collect();
        let c = plan(&runs, None, ThroughputUnit::Mbits).unwrap();
        let svg = to_svg(&c).unwrap();
        let doc = roxmltree::Document::parse(&svg).unwrap();
        let height: f64 = doc
            .root_element()
            .attribute("height")
            .unwrap()
            .parse()
            .unwrap();
        let frames = key_frames(&doc);
        let names: Vec<(f64, &str)> = doc
            .descendants()
            .filter(|n| n.has_tag_name("text") && !in_key(&frames, *n))
            .filter(|n| n.text().is_some_and(|t| t.trim().starts_with("vpn run")))
            .map(|n| {
                (
                    n.attribute("y").unwrap().parse().unwrap(),
                    n.text().unwrap().trim(),
                )
            })
            .collect();
        assert_eq!(names.len(), 3 * 12, "{names:?}");
        assert!(
            names.iter().all(|(y, _)| *y < height - 10.0),
            "{height}: {names:?}"
        );
    }

    /// Issue 34: the under-load chart. Over time, a line per path of the probes' median per
    /// interval (the median over runs), the load's phases shaded where the runs had them; by
    /// percentile, each path's loaded curve solid and its idle one dashed in the same colour.
    #[test]
    fn under_load_chart_draws_latency_over_time_with_the_phases_shaded() {
        use crate::run::fixtures;
        let runs = vec![
            fixtures::run("vpn", 1, 300.0, 20_000.0, 0),
            fixtures::run("vpn", 2, 300.0, 30_000.0, 0),
            fixtures::run("vpn", 3, 300.0, 22_000.0, 0),
            fixtures::run("peering", 1, 100.0, 1_000.0, 0),
        ];
        let c = plan(&runs, None, RateScale::AUTO).unwrap();
        assert_eq!(c.kind, ChartKind::UnderLoad);
        assert_eq!(c.rate_unit, None);
        assert_eq!(c.panels.len(), 2);
        let time = &c.panels[0];
        assert_eq!(time.y_desc, "Latency (ms)");
        let names: Vec<&str> = time.series.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names, ["vpn", "peering"]);
        // Row 5 (loaded) of vpn: the median of 20, 30 and 22 ms, a step from 5 s to 6 s.
        let vpn = &time.series[0].points;
        assert_eq!((vpn[10].x, vpn[10].y, vpn[11].x), (5.0, 22.0, 6.0));
        assert_eq!(vpn[10].n, Some(3));
        assert_eq!(vpn[0].y, 0.3, "idle, in ms");
        let bands: Vec<(f64, f64, &str, bool)> = time
            .bands
            .iter()
            .map(|b| (b.from, b.to, b.name.as_str(), b.strong))
            .collect();
        assert_eq!(
            bands,
            [
                (3.0, 3.5, "ramp (-O)", false),
                (3.5, 8.5, "loaded", true),
                (8.5, 8.7, "drain", false)
            ]
        );
        let cdf = &c.panels[1];
        assert_eq!(cdf.x_axis, XAxis::Nines);
        let lines: Vec<(&str, usize, bool)> = cdf
            .series
            .iter()
            .map(|s| (s.name.as_str(), s.colour, s.dashed))
            .collect();
        let (v, p) = (time.series[0].colour, time.series[1].colour);
        assert_eq!(
            lines,
            [
                ("vpn loaded", v, false),
                ("vpn idle", v, true),
                ("peering loaded", p, false),
                ("peering idle", p, true)
            ]
        );
        // 120 loaded probes of vpn merged: the curve reaches p99 (2 nines) and sits above
        // the idle one everywhere.
        let (loaded, idle) = (&cdf.series[0].points, &cdf.series[1].points);
        assert_eq!(loaded.last().unwrap().n, Some(120));
        assert!((loaded.last().unwrap().x - 2.05).abs() < 1e-9, "{loaded:?}");
        assert!(loaded.iter().zip(idle).all(|(l, i)| l.y > 10.0 * i.y));

        // Drawn: the bands behind the lines in both SVG and PNG, and the key says what the
        // shading is.
        let svg = to_svg(&c).unwrap();
        let (r, g, b) = band_rgb(&time.bands[1]);
        assert!(
            svg.contains(&format!("fill=\"#{r:02X}{g:02X}{b:02X}\"")),
            "no loaded band in the SVG"
        );
        let (texts, _) = key_texts(&c);
        assert!(
            texts.contains(&"shaded: loaded (dark); ramp (-O), drain (light)".to_owned()),
            "{texts:?}"
        );
        for s in c.panels.iter().flat_map(|p| &p.series) {
            assert!(texts.contains(&s.name), "{} not in {texts:?}", s.name);
        }
        assert_eq!(&to_png(&c).unwrap()[1..4], b"PNG");
    }

    /// Under-load runs never join another kind's chart: refused without --chart, and a TCP
    /// chart of them alone says where they are drawn.
    #[test]
    fn under_load_runs_are_not_drawn_with_other_kinds() {
        use crate::run::fixtures;
        let ul = fixtures::run("vpn", 1, 300.0, 20_000.0, 0);
        let mixed = vec![ul.clone(), tp("vpn", 1, None, 100.0)];
        let e = plan(&mixed, None, ThroughputUnit::Mbits)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("vpn/ul-up-P1/run-1.json") && e.contains("vpn/P1.json"),
            "{e}"
        );
        let t = plan(&mixed, Some(ChartKind::Timeline), ThroughputUnit::Mbits).unwrap();
        assert_eq!((t.kind, t.left_out), (ChartKind::Timeline, 1));
        let e = plan(
            std::slice::from_ref(&ul),
            Some(ChartKind::Streams),
            ThroughputUnit::Mbits,
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("latency-under-load runs"), "{e}");
        // A run whose timeline has no answered probe draws nothing, and says so.
        let mut silent = ul;
        if let Measure::UnderLoad(u) = &mut silent.measure {
            u.probes
                .timeline
                .iter_mut()
                .for_each(|r| r.udp.p50_us = None);
        }
        let e = plan(&[silent], None, ThroughputUnit::Mbits)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("no latency-under-load run with an answered probe"),
            "{e}"
        );
    }

    #[test]
    fn log_axis_ticks_at_one_two_five() {
        assert_eq!(
            log_ticks(150.0, 5000.0),
            [200.0, 500.0, 1000.0, 2000.0, 5000.0]
        );
        assert_eq!(log_ticks(1.0, 1e6), [1.0, 10.0, 100.0, 1e3, 1e4, 1e5, 1e6]);
    }

    #[test]
    fn percentile_labels() {
        assert_eq!(nines_label(0.0), "0%");
        assert_eq!(nines_label(1.0), "90%");
        assert_eq!(nines_label(3.0), "99.9%");
    }
}
