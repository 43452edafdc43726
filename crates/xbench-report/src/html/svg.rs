//! A chart of the `chart` module ([`ChartData`]: the same panels, series, points and error
//! bars `xbench report --plot` draws) as a figure of the page: inline SVG, drawn twice — once
//! laid out for a desktop window, once for a phone, CSS showing one — with the key as HTML
//! buttons (click or keyboard to hide a line) and the points as a JSON block the page script
//! reads to show a hovered point's value and n. Without the script the chart still reads: the
//! SVG is static, and the tables beside it hold every figure.
//!
//! Drawing only: which charts a comparison gets, and their data, are `html`'s and `chart`'s.

use std::fmt::Write as _;

use serde_json::json;

use super::markup::esc;
use crate::chart::{ChartData, ChartKind, NEUTRAL, Panel, Point, Series, XAxis};

/// Tableau 10, as `chart` draws with: distinguishable, and kind to the common colour-vision
/// deficiencies.
const PALETTE: [&str; 10] = [
    "#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
    "#bcbd22", "#17becf",
];

fn colour(i: usize) -> &'static str {
    if i == NEUTRAL {
        "#3c3c3c"
    } else {
        PALETTE[i % PALETTE.len()]
    }
}

/// One way to lay a panel out.
struct Layout {
    class: &'static str,
    width: f64,
    height: f64,
    left: f64,
    right: f64,
    top: f64,
    bottom: f64,
    font: f64,
    y_ticks: usize,
    x_ticks: usize,
}

const WIDE: Layout = Layout {
    class: "v-wide",
    width: 760.0,
    height: 340.0,
    left: 72.0,
    right: 24.0,
    top: 14.0,
    bottom: 54.0,
    font: 13.0,
    y_ticks: 6,
    x_ticks: 10,
};

const NARROW: Layout = Layout {
    class: "v-narrow",
    width: 360.0,
    height: 260.0,
    left: 54.0,
    right: 12.0,
    top: 12.0,
    bottom: 48.0,
    font: 12.0,
    y_ticks: 4,
    x_ticks: 5,
};

/// `data` as a `<figure>`: caption, key, one plot per panel, the points for the script, and a
/// sentence saying where the same figures are in a table (`table_id`, when there is one).
pub(crate) fn figure(id: &str, data: &ChartData, table_id: Option<&str>) -> String {
    let names = series_names(data);
    let mut s = String::new();
    let _ = write!(
        s,
        "<figure class=\"chart\" id=\"{}\" data-kind=\"{}\"><figcaption><span class=\"ct\">{}\
         </span>",
        esc(id),
        data.kind.name(),
        esc(&data.title)
    );
    if !data.subtitle.is_empty() {
        let _ = write!(s, "<span class=\"cs\">{}</span>", esc(&data.subtitle));
    }
    s.push_str("</figcaption>");
    s.push_str(&key(&names, data));
    let mut points = Vec::new();
    for (pi, panel) in data.panels.iter().enumerate() {
        s.push_str("<div class=\"panel\">");
        if !panel.title.is_empty() {
            let _ = write!(s, "<p class=\"pt\">{}</p>", esc(&panel.title));
        }
        s.push_str("<div class=\"plot\">");
        let tall = data.panels.len() > 1;
        for layout in [&WIDE, &NARROW] {
            s.push_str(&plot(id, pi, data, panel, &names, layout, tall));
        }
        s.push_str("<div class=\"tip\" role=\"status\" aria-live=\"polite\" hidden></div>");
        s.push_str("</div></div>");
        points.push(panel_points(panel, &names, data.kind));
    }
    let blob = json!({ "names": names, "panels": points });
    // No `<` inside the block (it can only be in a string, where `\u003c` means the same): a
    // label like `</script>` must not end it early.
    let blob = blob.to_string().replace('<', "\\u003c");
    let _ = write!(
        s,
        "<script type=\"application/json\" class=\"pts\">{blob}</script>"
    );
    let lines = names.join(", ");
    let _ = write!(
        s,
        "<p class=\"alt\">Lines: {}.{}</p></figure>",
        esc(&lines),
        table_id
            .map(|t| format!(
                " The figures are in <a href=\"#{}\">the table below</a>.",
                esc(t)
            ))
            .unwrap_or_default()
    );
    s
}

/// Every series name of the chart, once, in order: a line that appears in several panels (a
/// run on a timeline) is one entry of the key.
fn series_names(data: &ChartData) -> Vec<String> {
    let mut names: Vec<String> = Vec::new();
    for s in data.panels.iter().flat_map(|p| &p.series) {
        if !names.contains(&s.name) {
            names.push(s.name.clone());
        }
    }
    names
}

fn index_of(names: &[String], s: &Series) -> usize {
    names.iter().position(|n| *n == s.name).unwrap_or(0)
}

/// The key: a button per line, with its stroke, pressed while the line shows.
fn key(names: &[String], data: &ChartData) -> String {
    let mut s = String::from(
        "<div class=\"key\" role=\"group\" aria-label=\"Lines (press to hide or show)\">",
    );
    for (i, name) in names.iter().enumerate() {
        let Some(series) = data
            .panels
            .iter()
            .flat_map(|p| &p.series)
            .find(|x| x.name == *name)
        else {
            continue;
        };
        let dash = if series.dashed {
            " stroke-dasharray=\"5 3\""
        } else {
            ""
        };
        let marker = if series.markers {
            format!(
                "<circle cx=\"13\" cy=\"6\" r=\"3.5\" fill=\"{}\"/>",
                colour(series.colour)
            )
        } else {
            String::new()
        };
        let _ = write!(
            s,
            "<button type=\"button\" class=\"k\" data-s=\"{i}\" aria-pressed=\"true\">\
             <svg class=\"sw\" viewBox=\"0 0 26 12\" width=\"26\" height=\"12\" aria-hidden=\"true\">\
             <line x1=\"1\" y1=\"6\" x2=\"25\" y2=\"6\" stroke=\"{}\" stroke-width=\"2.5\"{dash}/>\
             {marker}</svg>{}</button>",
            colour(series.colour),
            esc(name)
        );
    }
    // What shading means, once for the chart: a note, not a button (there is no line to hide).
    let mut notes: Vec<String> = data
        .panels
        .iter()
        .filter_map(|p| crate::chart::key::bands_note(&p.bands))
        .collect();
    notes.dedup();
    for n in notes {
        let _ = write!(s, "<span class=\"kn\">{}</span>", esc(&n));
    }
    s.push_str("</div>");
    s
}

/// The axes' ranges of a panel.
struct Ranges {
    x0: f64,
    x1: f64,
    y0: f64,
    y1: f64,
    log: bool,
}

fn ranges(panel: &Panel) -> Ranges {
    let points = || panel.series.iter().flat_map(|s| s.points.iter());
    let (x0, x1) = match &panel.x_axis {
        XAxis::Categories(c) => (-0.5, c.len().max(1) as f64 - 0.5),
        XAxis::Nines | XAxis::Linear => {
            let lo = points().map(|p| p.x).fold(f64::INFINITY, f64::min).min(0.0);
            let hi = points().map(|p| p.x).fold(f64::NEG_INFINITY, f64::max);
            let hi = if matches!(panel.x_axis, XAxis::Nines) {
                hi.ceil().max(1.0)
            } else {
                hi
            };
            (lo, if hi > lo { hi } else { lo + 1.0 })
        }
    };
    let ys = || {
        points().flat_map(|p| {
            let (lo, hi) = p.bar.unwrap_or((p.y, p.y));
            [p.y, lo, hi]
        })
    };
    if panel.log_y {
        let lo = ys()
            .filter(|v| *v > 0.0)
            .fold(f64::INFINITY, f64::min)
            .min(f64::MAX);
        let hi = ys().fold(0.0, f64::max);
        let (lo, hi) = if lo.is_finite() && hi > 0.0 {
            (lo, hi)
        } else {
            (1.0, 10.0)
        };
        let (d0, d1) = (lo.log10().floor(), hi.log10().ceil());
        return Ranges {
            x0,
            x1,
            y0: 10f64.powf(d0),
            y1: 10f64.powf(if d1 > d0 { d1 } else { d0 + 1.0 }),
            log: true,
        };
    }
    // A figure that cannot be negative (a rate, a loss, a jitter) starts its axis at zero even
    // where a two-run confidence interval reaches below it: the bar is cut at the axis, the
    // table keeps its full interval.
    let floor = if points().all(|p| p.y >= 0.0) {
        0.0
    } else {
        ys().fold(0.0, f64::min)
    };
    let lo = floor;
    let hi = ys().fold(0.0, f64::max);
    let (y0, y1) = if hi > lo { (lo, hi) } else { (0.0, 1.0) };
    // Room above the highest point, to the next tick.
    let step = nice_step(y1 - y0, 5);
    Ranges {
        x0,
        x1,
        y0: (y0 / step).floor() * step,
        y1: (y1 / step).ceil() * step,
        log: false,
    }
}

/// 1, 2 or 5 times a power of ten, giving about `target` steps over `range`.
fn nice_step(range: f64, target: usize) -> f64 {
    let raw = range / target.max(1) as f64;
    if raw <= 0.0 || !raw.is_finite() {
        return 1.0;
    }
    let p = 10f64.powf(raw.log10().floor());
    let m = raw / p;
    p * if m <= 1.0 {
        1.0
    } else if m <= 2.0 {
        2.0
    } else if m <= 5.0 {
        5.0
    } else {
        10.0
    }
}

/// A tick's label with as many decimals as its step needs, thousands grouped.
fn tick_label(v: f64, step: f64) -> String {
    let decimals = if step >= 1.0 {
        0
    } else {
        (-step.log10().floor()) as usize
    };
    let v = if v.abs() < step * 1e-6 { 0.0 } else { v };
    let s = format!("{v:.decimals$}");
    let (sign, digits) = s.strip_prefix('-').map_or(("", s.as_str()), |d| ("-", d));
    let (int, frac) = digits.split_once('.').unwrap_or((digits, ""));
    let mut grouped = String::new();
    for (i, c) in int.chars().enumerate() {
        if i > 0 && (int.len() - i).is_multiple_of(3) {
            grouped.push(',');
        }
        grouped.push(c);
    }
    if frac.is_empty() {
        format!("{sign}{grouped}")
    } else {
        format!("{sign}{grouped}.{frac}")
    }
}

/// A percentile on a "nines" axis: 0, 90, 99, 99.9…
fn nines_label(k: f64) -> String {
    let k = k.round() as usize;
    match k {
        0 => "0".into(),
        1 => "90".into(),
        _ => format!("99.{}", "9".repeat(k - 2))
            .trim_end_matches('.')
            .to_owned(),
    }
}

/// One panel as an `<svg>` in `layout`.
fn plot(
    id: &str,
    pi: usize,
    data: &ChartData,
    panel: &Panel,
    names: &[String],
    l: &Layout,
    tall: bool,
) -> String {
    let f = Frame::new(panel, l, tall);
    let mut s = svg_open(id, pi, data, panel, &f);
    bands(&mut s, panel, &f);
    axes(&mut s, panel, &f);
    for series in &panel.series {
        series_group(&mut s, series, names, &f);
    }
    s.push_str("<circle class=\"hl\" r=\"6\" cx=\"-99\" cy=\"-99\"/></svg>");
    s
}

/// A panel's plot area in one layout and the mapping from figures to its pixels: what every
/// step of [`plot`] draws with, computed once.
struct Frame<'l> {
    l: &'l Layout,
    r: Ranges,
    /// The whole SVG's height: shorter when a chart stacks several panels.
    height: f64,
    /// The plot area's width and height, inside the margins.
    pw: f64,
    ph: f64,
}

impl<'l> Frame<'l> {
    /// `panel` in layout `l`; `tall` when the chart stacks several panels.
    fn new(panel: &Panel, l: &'l Layout, tall: bool) -> Self {
        let height = if tall { l.height * 0.8 } else { l.height };
        Frame {
            l,
            r: ranges(panel),
            height,
            pw: l.width - l.left - l.right,
            ph: height - l.top - l.bottom,
        }
    }

    /// `x` in pixels from the left.
    fn sx(&self, x: f64) -> f64 {
        let (l, r) = (self.l, &self.r);
        l.left + (x - r.x0) / (r.x1 - r.x0) * self.pw
    }

    /// `y` in pixels from the top; on a log axis, a figure below the axis sits on it.
    fn sy(&self, y: f64) -> f64 {
        let (l, r) = (self.l, &self.r);
        let f = if r.log {
            let y = y.max(r.y0);
            (y.log10() - r.y0.log10()) / (r.y1.log10() - r.y0.log10())
        } else {
            (y - r.y0) / (r.y1 - r.y0)
        };
        l.top + (1.0 - f) * self.ph
    }
}

/// The `<svg>` tag, with the mapping the page script reads to place a hovered point, and its
/// `<title>` for screen readers: apart from the drawing, which a reader only sees.
fn svg_open(id: &str, pi: usize, data: &ChartData, panel: &Panel, f: &Frame<'_>) -> String {
    let (l, r, height, pw, ph) = (f.l, &f.r, f.height, f.pw, f.ph);
    let title_id = format!("{id}-{pi}-{}", l.class);
    let mut s = String::new();
    let _ = write!(
        s,
        "<svg class=\"{}\" viewBox=\"0 0 {} {height}\" role=\"img\" aria-labelledby=\"{title_id}\" \
         data-map=\"{} {} {pw} {ph} {} {} {} {} {}\" font-size=\"{}\">",
        l.class,
        l.width,
        l.left,
        l.top,
        r.x0,
        r.x1,
        r.y0,
        r.y1,
        u8::from(r.log),
        l.font
    );
    let what = if panel.title.is_empty() {
        data.title.clone()
    } else {
        format!("{}: {}", data.title, panel.title)
    };
    let _ = write!(
        s,
        "<title id=\"{title_id}\">{}. x: {}; y: {}. Lines: {}.</title>",
        esc(&what),
        esc(&panel.x_desc),
        esc(&panel.y_desc),
        esc(&panel
            .series
            .iter()
            .map(|x| x.name.as_str())
            .collect::<Vec<_>>()
            .join(", "))
    );
    s
}

/// Shaded stretches (a load's phases): drawn first, so they sit behind the grid and the lines.
fn bands(s: &mut String, panel: &Panel, f: &Frame<'_>) {
    for b in &panel.bands {
        let (x0, x1) = (f.sx(b.from.max(f.r.x0)), f.sx(b.to.min(f.r.x1)));
        if x1 > x0 {
            let (red, green, blue) = crate::chart::band_rgb(b);
            let _ = write!(
                s,
                "<rect class=\"band\" x=\"{x0:.1}\" y=\"{:.1}\" width=\"{:.1}\" height=\"{:.1}\" \
                 fill=\"#{red:02x}{green:02x}{blue:02x}\"><title>{}</title></rect>",
                f.l.top,
                x1 - x0,
                f.ph,
                esc(&b.name)
            );
        }
    }
}

/// The grid, both axes with their ticks and descriptions: everything of a panel but its data,
/// drawn under the lines.
fn axes(s: &mut String, panel: &Panel, f: &Frame<'_>) {
    let (l, pw, ph) = (f.l, f.pw, f.ph);
    s.push_str("<g class=\"ax\">");
    for (v, label) in &y_ticks(f) {
        let y = f.sy(*v);
        let _ = write!(
            s,
            "<line class=\"grid\" x1=\"{:.1}\" x2=\"{:.1}\" y1=\"{y:.1}\" y2=\"{y:.1}\"/>\
             <text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\">{}</text>",
            l.left,
            l.left + pw,
            l.left - 6.0,
            y + l.font * 0.35,
            esc(label)
        );
    }
    let base = l.top + ph;
    for (v, label) in &x_ticks(panel, f) {
        let x = f.sx(*v);
        let _ = write!(
            s,
            "<line class=\"tk\" x1=\"{x:.1}\" x2=\"{x:.1}\" y1=\"{base:.1}\" y2=\"{:.1}\"/>\
             <text x=\"{x:.1}\" y=\"{:.1}\" text-anchor=\"middle\">{}</text>",
            base + 5.0,
            base + 6.0 + l.font,
            esc(label)
        );
    }
    let _ = write!(
        s,
        "<line class=\"axl\" x1=\"{:.1}\" x2=\"{:.1}\" y1=\"{base:.1}\" y2=\"{base:.1}\"/>\
         <line class=\"axl\" x1=\"{:.1}\" x2=\"{:.1}\" y1=\"{:.1}\" y2=\"{base:.1}\"/>",
        l.left,
        l.left + pw,
        l.left,
        l.left,
        l.top
    );
    let _ = write!(
        s,
        "<text class=\"desc\" x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\">{}</text>\
         <text class=\"desc\" transform=\"rotate(-90)\" x=\"{:.1}\" y=\"{:.1}\" \
         text-anchor=\"middle\">{}</text></g>",
        l.left + pw / 2.0,
        f.height - 8.0,
        esc(&panel.x_desc),
        -(l.top + ph / 2.0),
        l.font + 2.0,
        esc(&panel.y_desc)
    );
}

/// The y axis's ticks and their labels: each decade on a log axis, round steps on a linear one.
fn y_ticks(f: &Frame<'_>) -> Vec<(f64, String)> {
    let r = &f.r;
    if !r.log {
        return linear_ticks(r.y0, r.y1, f.l.y_ticks);
    }
    let (d0, d1) = (r.y0.log10().round() as i32, r.y1.log10().round() as i32);
    let mut t = Vec::new();
    for d in d0..=d1 {
        let v = 10f64.powi(d);
        t.push((v, tick_label(v, v.min(1.0))));
        // With few decades, 2 and 5 between them help read a value.
        if d1 - d0 <= 2 && d < d1 {
            for m in [2.0, 5.0] {
                t.push((v * m, tick_label(v * m, (v * m).min(1.0))));
            }
        }
    }
    t
}

/// The x axis's ticks and their labels, as its kind reads: categories, nines or figures.
fn x_ticks(panel: &Panel, f: &Frame<'_>) -> Vec<(f64, String)> {
    let (l, r) = (f.l, &f.r);
    match &panel.x_axis {
        XAxis::Categories(c) => {
            // Every label that fits: a phone gets every other one when they would touch.
            let widest = c.iter().map(|x| x.chars().count()).max().unwrap_or(1) as f64;
            let spacing = f.pw / c.len().max(1) as f64;
            let every = ((widest * l.font * 0.62 + 4.0) / spacing).ceil().max(1.0) as usize;
            c.iter()
                .enumerate()
                .filter(|(i, _)| i % every == 0)
                .map(|(i, name)| (i as f64, name.clone()))
                .collect()
        }
        XAxis::Nines => (r.x0.round() as i64..=r.x1.round() as i64)
            .map(|k| (k as f64, nines_label(k as f64)))
            .collect(),
        XAxis::Linear => linear_ticks(r.x0, r.x1, l.x_ticks),
    }
}

/// Ticks at a round step, about `target` of them, from `lo` to `hi`: one rule for both axes.
fn linear_ticks(lo: f64, hi: f64, target: usize) -> Vec<(f64, String)> {
    let step = nice_step(hi - lo, target);
    let mut t = Vec::new();
    let mut v = (lo / step).ceil() * step;
    while v <= hi + step * 1e-9 {
        t.push((v, tick_label(v, step)));
        v += step;
    }
    t
}

/// One series as a group the page script can hide: its line, its error bars, its markers.
fn series_group(s: &mut String, series: &Series, names: &[String], f: &Frame<'_>) {
    let c = colour(series.colour);
    let _ = write!(s, "<g class=\"s\" data-s=\"{}\">", index_of(names, series));
    let mut d = String::new();
    for (i, p) in series.points.iter().enumerate() {
        let _ = write!(
            d,
            "{}{:.1} {:.1}",
            if i == 0 { "M" } else { "L" },
            f.sx(p.x),
            f.sy(p.y)
        );
    }
    let dash = if series.dashed {
        " stroke-dasharray=\"7 4\""
    } else {
        ""
    };
    let _ = write!(
        s,
        "<path d=\"{d}\" fill=\"none\" stroke=\"{c}\" stroke-width=\"2\"{dash}/>"
    );
    let bars = error_bars(series, f);
    if !bars.is_empty() {
        let _ = write!(
            s,
            "<path class=\"bar\" d=\"{bars}\" fill=\"none\" stroke=\"{c}\" stroke-width=\"1.3\"/>"
        );
    }
    if series.markers {
        for p in &series.points {
            let _ = write!(
                s,
                "<circle cx=\"{:.1}\" cy=\"{:.1}\" r=\"3.5\" fill=\"{c}\"/>",
                f.sx(p.x),
                f.sy(p.y)
            );
        }
    }
    s.push_str("</g>");
}

/// The path data of a series' error bars, empty when it has none; apart from
/// [`series_group`] for its own rule: a bar that leaves the axis is cut there, without a cap.
fn error_bars(series: &Series, f: &Frame<'_>) -> String {
    series
        .points
        .iter()
        .filter_map(|p| {
            let (lo, hi) = p.bar?;
            let x = f.sx(p.x);
            let cap = |y: f64| format!("M{:.1} {y:.1}H{:.1}", x - 4.0, x + 4.0);
            // An end past the axis is cut there, without its cap: the interval goes on.
            let (y0, low_cap) = if lo < f.r.y0 {
                (f.sy(f.r.y0), String::new())
            } else {
                (f.sy(lo), cap(f.sy(lo)))
            };
            let y1 = f.sy(hi);
            Some(format!("M{x:.1} {y0:.1}V{y1:.1}{low_cap}{}", cap(y1)))
        })
        .collect()
}

/// A panel's points for the page script: per series its index in the key and its points as
/// `[x, y, low, high, n]` (nulls where missing), rounded to what a reader sees.
fn panel_points(panel: &Panel, names: &[String], kind: ChartKind) -> serde_json::Value {
    let round = |v: f64| {
        if v == 0.0 || !v.is_finite() {
            return json!(0);
        }
        // Five significant digits: more than any label shows, a fraction of the bytes.
        let digits = 4 - v.abs().log10().floor() as i32;
        let f = 10f64.powi(digits);
        json!((v * f).round() / f)
    };
    let point = |p: &Point| {
        let (lo, hi) = p
            .bar
            .map_or((json!(null), json!(null)), |(a, b)| (round(a), round(b)));
        json!([round(p.x), round(p.y), lo, hi, p.n])
    };
    let x = match &panel.x_axis {
        XAxis::Categories(c) => json!({ "cats": c }),
        XAxis::Nines => json!("nines"),
        XAxis::Linear => json!("linear"),
    };
    json!({
        "x": x,
        "xd": panel.x_desc,
        "u": unit_of(&panel.y_desc),
        // What a point's n counts.
        "nof": match (kind, &panel.x_axis) {
            (ChartKind::Latency, _) => "transactions",
            (ChartKind::UnderLoad, XAxis::Nines) => "probes",
            _ => "runs",
        },
        "s": panel.series.iter().map(|s| json!([
            index_of(names, s),
            s.points.iter().map(point).collect::<Vec<_>>(),
        ])).collect::<Vec<_>>(),
    })
}

/// The unit a y axis's description names in parentheses (`Receiver throughput (Mbit/s)`,
/// `Latency (ms, log scale)`), for a hovered value; the description itself when it has none.
fn unit_of(desc: &str) -> String {
    match (desc.rfind('('), desc.rfind(')')) {
        (Some(a), Some(b)) if a < b => desc[a + 1..b]
            .split(',')
            .next()
            .unwrap_or("")
            .trim()
            .to_owned(),
        _ => desc.to_lowercase(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chart() -> ChartData {
        let series = |name: &str, colour, ys: &[f64]| Series {
            name: name.into(),
            colour,
            dashed: false,
            markers: true,
            points: ys
                .iter()
                .enumerate()
                .map(|(i, y)| Point {
                    x: i as f64,
                    y: *y,
                    bar: Some((y - 5.0, y + 5.0)),
                    n: Some(3),
                })
                .collect(),
        };
        ChartData {
            kind: ChartKind::Streams,
            title: "Throughput vs parallel streams".into(),
            subtitle: "6 runs".into(),
            rate_unit: None,
            panels: vec![Panel {
                title: String::new(),
                x_desc: "Parallel TCP streams (-P)".into(),
                y_desc: "Receiver throughput (Mbit/s)".into(),
                x_axis: XAxis::Categories(vec!["1".into(), "2".into(), "4".into()]),
                log_y: false,
                bands: Vec::new(),
                series: vec![
                    series("peering", 0, &[100.0, 190.0, 380.0]),
                    series("vpn <&>", 1, &[50.0, 60.0, 61.0]),
                ],
            }],
            left_out: 0,
            not_drawn: 0,
        }
    }

    /// Both layouts hold every line, the key a button per line, and the script its points;
    /// what a label holds is escaped everywhere.
    #[test]
    fn a_figure_holds_every_series_in_both_layouts() {
        let f = figure("fig-x", &chart(), Some("tbl"));
        for class in ["v-wide", "v-narrow"] {
            assert_eq!(
                f.matches(&format!("<svg class=\"{class}\"")).count(),
                1,
                "{f}"
            );
        }
        assert_eq!(f.matches("<g class=\"s\" data-s=\"0\">").count(), 2);
        assert_eq!(f.matches("<g class=\"s\" data-s=\"1\">").count(), 2);
        assert_eq!(f.matches("class=\"k\" data-s=").count(), 2);
        assert!(f.contains(">vpn &lt;&amp;&gt;</button>"), "{f}");
        assert!(!f.contains("vpn <&>"), "{f}");
        let blob = f
            .split("class=\"pts\">")
            .nth(1)
            .and_then(|b| b.split("</script>").next())
            .unwrap();
        let v: serde_json::Value = serde_json::from_str(blob).unwrap();
        assert_eq!(v["panels"][0]["u"], "Mbit/s");
        assert_eq!(
            v["panels"][0]["s"][0][1][2],
            json!([2.0, 380.0, 375.0, 385.0, 3])
        );
        assert!(f.contains("href=\"#tbl\""));
    }

    /// The SVG is well-formed XML, whatever the labels hold.
    #[test]
    fn the_svg_parses() {
        let f = figure("fig-x", &chart(), None);
        for part in f.split("<svg class=\"v-").skip(1) {
            let svg = format!(
                "<svg class=\"v-{}</svg>",
                part.split("</svg>").next().unwrap()
            );
            let svg = svg.replacen("<svg ", "<svg xmlns=\"http://www.w3.org/2000/svg\" ", 1);
            roxmltree::Document::parse(&svg).unwrap_or_else(|e| panic!("{e}: {svg}"));
        }
    }

    #[test]
    fn ticks_read_as_people_write_them() {
        assert_eq!(nice_step(1000.0, 5), 200.0);
        assert_eq!(nice_step(0.9, 4), 0.5);
        assert_eq!(tick_label(1200.0, 200.0), "1,200");
        assert_eq!(tick_label(0.25, 0.05), "0.25");
        assert_eq!(tick_label(-0.0000001, 0.5), "0.0");
        assert_eq!(nines_label(0.0), "0");
        assert_eq!(nines_label(2.0), "99");
        assert_eq!(nines_label(3.0), "99.9");
        assert_eq!(unit_of("Latency (ms, log scale)"), "ms");
        assert_eq!(unit_of("Segments per interval"), "segments per interval");
    }
}
