//! The key under a chart's panel: each line's colour and stroke (solid, dashed, with markers)
//! beside its name, and what ↑ and ↓ mean where a name uses them.
//!
//! The names written at the lines' ends say which line is which but not what a dash or an
//! arrow means, and they crowd when a dozen lines end together; the key says both, in rows
//! under the panel's x axis so it never covers data. It does not place the end names.

use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use super::{ChartData, ChartError, FONT, Series, WIDTH, colour, draw_err};

/// The key's frame: a grey no line, grid or axis uses, so the key reads apart from the plot
/// (and a test can find it).
pub(super) const FRAME: RGBColor = RGBColor(96, 96, 96);

/// The key's left edge: under the plot's y axis (the panel's left margin and label area).
const LEFT: i32 = 88;
/// Height of a row of entries, pixels.
const ROW: i32 = 26;
/// Padding inside the frame, and the space above it.
const PAD: i32 = 6;
/// Length of a line's sample.
const SAMPLE: i32 = 36;
/// Space between a sample and its name, and between entries.
const GAP: i32 = 8;
const TEXT_SIZE: u32 = 17;

/// What ↑ and ↓ stand for in series names (see `SeriesNamer`).
const ARROWS: &str = "↑ client→server, ↓ server→client";

/// One panel's key, laid out.
pub(super) struct Key<'a> {
    entries: Vec<Entry<'a>>,
    /// Each row's entries and their x offsets from the frame's inner edge.
    rows: Vec<Vec<(usize, i32)>>,
}

/// A line's sample and name, or a note with no sample.
struct Entry<'a> {
    line: Option<&'a Series>,
    text: String,
}

impl<'a> Key<'a> {
    /// The key of `data`'s panel `panel`: each of its lines that no earlier panel's key
    /// already shows (a timeline's panels share their lines' names), so an image names every
    /// line once.
    pub(super) fn of(data: &'a ChartData, panel: usize) -> Key<'a> {
        let earlier = || data.panels[..panel].iter().flat_map(|p| &p.series);
        let mut entries: Vec<Entry<'a>> = data.panels[panel]
            .series
            .iter()
            .filter(|s| !earlier().any(|e| same_line(e, s)))
            .map(|s| Entry {
                line: Some(s),
                text: s.name.clone(),
            })
            .collect();
        if let Some(note) = bands_note(&data.panels[panel].bands) {
            entries.push(Entry {
                line: None,
                text: note,
            });
        }
        if entries.iter().any(|e| e.text.contains(['↑', '↓'])) {
            entries.push(Entry {
                line: None,
                text: ARROWS.into(),
            });
        }
        let rows = layout(&entries, WIDTH as i32 - LEFT - 2 * PAD - 16);
        Key { entries, rows }
    }

    /// Pixels the key takes under its panel; 0 when it has no entries.
    pub(super) fn height(&self) -> u32 {
        if self.rows.is_empty() {
            0
        } else {
            (self.rows.len() as i32 * ROW + 3 * PAD) as u32
        }
    }

    /// Draws the key at the top of `area`.
    pub(super) fn draw<DB: DrawingBackend>(
        &self,
        area: &DrawingArea<DB, Shift>,
    ) -> Result<(), ChartError> {
        if self.rows.is_empty() {
            return Ok(());
        }
        let inner_w = self
            .rows
            .iter()
            .filter_map(|r| r.last().map(|&(i, x)| x + width(&self.entries[i])))
            .max()
            .unwrap_or(0);
        let (top, left) = (PAD, LEFT);
        let bottom = top + self.rows.len() as i32 * ROW + PAD;
        area.draw(&Rectangle::new(
            [(left, top), (left + inner_w + 2 * PAD, bottom)],
            FRAME.stroke_width(1),
        ))
        .map_err(draw_err)?;
        for (r, row) in self.rows.iter().enumerate() {
            let y = top + PAD / 2 + r as i32 * ROW + ROW / 2;
            for &(i, x) in row {
                draw_entry(area, &self.entries[i], (left + PAD + x, y))?;
            }
        }
        Ok(())
    }
}

/// Draws a sample of the line (if any) and the text, starting at `(x, y)`, `y` the middle.
fn draw_entry<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    e: &Entry<'_>,
    (x, y): (i32, i32),
) -> Result<(), ChartError> {
    let mut text_x = x;
    if let Some(s) = e.line {
        let c = colour(s.colour);
        // Dashed like the line: three dashes of 8 with gaps of 3 (the line's are 8 and 5).
        let dashes: Vec<(i32, i32)> = if s.dashed {
            vec![(0, 9), (13, 22), (26, SAMPLE)]
        } else {
            vec![(0, SAMPLE)]
        };
        for (a, b) in dashes {
            area.draw(&PathElement::new(
                vec![(x + a, y), (x + b, y)],
                c.stroke_width(2),
            ))
            .map_err(draw_err)?;
        }
        if s.markers {
            area.draw(&Circle::new((x + SAMPLE / 2, y), 4, c.filled()))
                .map_err(draw_err)?;
        }
        text_x += SAMPLE + GAP;
    }
    let style = (FONT, TEXT_SIZE)
        .into_font()
        .color(&BLACK)
        .pos(Pos::new(HPos::Left, VPos::Center));
    area.draw(&Text::new(e.text.clone(), (text_x, y), style))
        .map_err(draw_err)
}

/// Rows of entries across `width` pixels, each entry with its x offset.
fn layout(entries: &[Entry<'_>], width: i32) -> Vec<Vec<(usize, i32)>> {
    let mut rows = Vec::new();
    let mut row = Vec::new();
    let mut x = 0;
    for (i, e) in entries.iter().enumerate() {
        let w = self::width(e);
        if x > 0 && x + w > width {
            rows.push(std::mem::take(&mut row));
            x = 0;
        }
        row.push((i, x));
        x += w + 3 * GAP;
    }
    if !row.is_empty() {
        rows.push(row);
    }
    rows
}

/// An entry's width in pixels: its sample and its text as the embedded font sets it.
fn width(e: &Entry<'_>) -> i32 {
    let font = (FONT, TEXT_SIZE).into_font();
    // Without the font's metrics (it failed to load, and drawing will say so), a wide guess.
    let text = font
        .box_size(&e.text)
        .map_or(e.text.chars().count() as u32 * 9, |(w, _)| w) as i32;
    if e.line.is_some() {
        SAMPLE + GAP + text
    } else {
        text
    }
}

/// What a panel's shading means: `shaded: loaded (dark); ramp (-O), drain (light)`.
pub(crate) fn bands_note(bands: &[super::Band]) -> Option<String> {
    if bands.is_empty() {
        return None;
    }
    let names = |strong: bool| {
        let mut v: Vec<&str> = bands
            .iter()
            .filter(|b| b.strong == strong)
            .map(|b| b.name.as_str())
            .collect();
        v.dedup();
        v.join(", ")
    };
    let (dark, light) = (names(true), names(false));
    Some(match (dark.is_empty(), light.is_empty()) {
        (false, false) => format!("shaded: {dark} (dark); {light} (light)"),
        (false, true) => format!("shaded: {dark}"),
        _ => format!("shaded: {light}"),
    })
}

/// Two series that a key shows alike: same name, colour and stroke.
fn same_line(a: &Series, b: &Series) -> bool {
    a.name == b.name && a.colour == b.colour && a.dashed == b.dashed && a.markers == b.markers
}
