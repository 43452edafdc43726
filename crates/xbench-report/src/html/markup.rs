//! The few HTML pieces the page is built of: escaping, and a table whose columns are a list of
//! (heading, cell) pairs, so that a figure another part of xbench adds becomes one more line
//! here rather than a new renderer. Sorting is the page script's; this module only marks each
//! cell's sort value.

use std::fmt::Write as _;

/// Text escaped for an HTML element or a double-quoted attribute.
pub(crate) fn esc(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// One cell: its text and, for figures, the number it sorts by.
#[derive(Debug, Clone, Default)]
pub(crate) struct Cell {
    /// Shown as text (escaped).
    pub(crate) text: String,
    /// Sorts by this rather than by the text; `None` sorts after every number.
    pub(crate) sort: Option<f64>,
    /// Raw HTML instead of text (a link); the caller escaped what it holds.
    pub(crate) html: Option<String>,
}

impl Cell {
    pub(crate) fn text(s: impl Into<String>) -> Cell {
        Cell {
            text: s.into(),
            ..Cell::default()
        }
    }

    pub(crate) fn num(text: impl Into<String>, v: f64) -> Cell {
        Cell {
            text: text.into(),
            sort: v.is_finite().then_some(v),
            html: None,
        }
    }

    /// A figure that may be missing: `-`, sorted last.
    pub(crate) fn opt(v: Option<f64>, f: impl Fn(f64) -> String) -> Cell {
        match v {
            Some(v) => Cell::num(f(v), v),
            None => Cell::text("-"),
        }
    }

    pub(crate) fn html(html: String, sort_text: impl Into<String>) -> Cell {
        Cell {
            text: sort_text.into(),
            sort: None,
            html: Some(html),
        }
    }
}

/// A column: its heading, what its figures mean (shown on hover and read by screen readers),
/// and whether it holds figures (right-aligned, sorted as numbers).
pub(crate) struct Column<'a, R> {
    pub(crate) head: String,
    pub(crate) help: String,
    pub(crate) numeric: bool,
    pub(crate) cell: Box<dyn Fn(&R) -> Cell + 'a>,
}

/// A text column.
pub(crate) fn text_col<'a, R>(head: &str, cell: impl Fn(&R) -> Cell + 'a) -> Column<'a, R> {
    Column {
        head: head.to_owned(),
        help: String::new(),
        numeric: false,
        cell: Box::new(cell),
    }
}

/// A column of figures.
pub(crate) fn num_col<'a, R>(
    head: &str,
    help: &str,
    cell: impl Fn(&R) -> Cell + 'a,
) -> Column<'a, R> {
    Column {
        head: head.to_owned(),
        help: help.to_owned(),
        numeric: true,
        cell: Box::new(cell),
    }
}

/// A sortable table of `rows`: a caption, then one `<tr>` per row. `id` names it for links
/// and tests.
pub(crate) fn table<R>(id: &str, caption: &str, columns: &[Column<'_, R>], rows: &[R]) -> String {
    let mut s = String::new();
    // The caption above the scrolling box, so a phone shows it whole beside a wide table.
    let _ = write!(
        s,
        "<p class=\"tcap\" id=\"{id}-cap\">{}</p><div class=\"scroll\"><table class=\"data \
         sortable\" id=\"{id}\" aria-labelledby=\"{id}-cap\"><thead><tr>",
        esc(caption),
        id = esc(id)
    );
    for c in columns {
        let class = if c.numeric { " class=\"n\"" } else { "" };
        let title = if c.help.is_empty() {
            String::new()
        } else {
            format!(" title=\"{}\"", esc(&c.help))
        };
        let _ = write!(
            s,
            "<th scope=\"col\"{class}{title}><button type=\"button\">{}</button></th>",
            esc(&c.head)
        );
    }
    s.push_str("</tr></thead><tbody>");
    for r in rows {
        s.push_str("<tr>");
        for c in columns {
            let cell = (c.cell)(r);
            let class = if c.numeric { " class=\"n\"" } else { "" };
            let sort = cell
                .sort
                .map(|v| format!(" data-v=\"{v}\""))
                .unwrap_or_default();
            let body = cell.html.unwrap_or_else(|| esc(&cell.text));
            let _ = write!(s, "<td{class}{sort}>{body}</td>");
        }
        s.push_str("</tr>");
    }
    s.push_str("</tbody></table></div>");
    s
}

/// A relative path as an `href`: every byte outside the unreserved set and `/` percent-encoded,
/// so a label with a space or a `#` still links to its file.
pub(crate) fn href(path: &str) -> String {
    let mut out = String::new();
    for b in path.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~/".contains(&b) {
            out.push(b as char);
        } else {
            let _ = write!(out, "%{b:02X}");
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escaping_and_links() {
        assert_eq!(
            esc("<a href=\"x\">&'"),
            "&lt;a href=&quot;x&quot;&gt;&amp;&#39;"
        );
        assert_eq!(
            href("../runs/my vpn#2/run-1.json"),
            "../runs/my%20vpn%232/run-1.json"
        );
        assert_eq!(href("é"), "%C3%A9");
    }

    #[test]
    fn a_table_marks_figures_for_sorting() {
        let cols = [
            text_col("path", |r: &(&str, f64)| Cell::text(r.0)),
            num_col("mean", "Mbit/s", |r: &(&str, f64)| {
                Cell::num(format!("{}", r.1), r.1)
            }),
        ];
        let t = table("t", "cap <1>", &cols, &[("a<b", 2.5), ("c", f64::NAN)]);
        assert!(
            t.contains("<p class=\"tcap\" id=\"t-cap\">cap &lt;1&gt;</p>"),
            "{t}"
        );
        assert!(t.contains("aria-labelledby=\"t-cap\""), "{t}");
        assert!(
            t.contains("<td>a&lt;b</td><td class=\"n\" data-v=\"2.5\">2.5</td>"),
            "{t}"
        );
        // No sort value for a figure that is not a number.
        assert!(t.contains("<td class=\"n\">NaN</td>"), "{t}");
        assert!(t.contains("title=\"Mbit/s\""), "{t}");
    }
}
