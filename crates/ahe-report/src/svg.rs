//! Inline SVG charts of the report: pass@1 with error bars, the task × iteration heatmap,
//! stacked bars (tokens, dollars, phase times). Plain strings, no scripts; every text is
//! escaped; colours come from the page's CSS classes.

use std::fmt::Write;

/// Escapes text for XML/HTML content and attribute values.
pub fn esc(s: &str) -> String {
    let mut o = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => o.push_str("&amp;"),
            '<' => o.push_str("&lt;"),
            '>' => o.push_str("&gt;"),
            '"' => o.push_str("&quot;"),
            '\'' => o.push_str("&#39;"),
            _ => o.push(c),
        }
    }
    o
}

/// One iteration's point of the pass@1 chart.
#[derive(Debug, Clone)]
pub struct PassPoint {
    /// Iteration number.
    pub iteration: u32,
    /// Axis label (e.g. `3` or `4 final`).
    pub label: String,
    /// Visible pass@1 and its 95% interval.
    pub visible: Option<(f64, [f64; 2])>,
    /// Held-out pass@1 and its 95% interval.
    pub holdout: Option<(f64, [f64; 2])>,
    /// The best iteration.
    pub best: bool,
}

const PLOT_H: f64 = 220.0;
const TOP: f64 = 24.0;
const LEFT: f64 = 52.0;

fn y_of(v: f64) -> f64 {
    TOP + (1.0 - v.clamp(0.0, 1.0)) * PLOT_H
}

/// The x of point `i` of the pass@1 chart.
fn pass_x(i: usize, slot: f64) -> f64 {
    LEFT + (i as f64 + 0.5) * slot
}

/// The pass@1 chart's grid (0 to 1 by quarters), iteration labels and axis title.
fn pass_axes(s: &mut String, points: &[PassPoint], slot: f64, plot_w: f64) {
    for i in 0..=4 {
        let v = i as f64 / 4.0;
        let y = y_of(v);
        let _ = write!(
            s,
            r#"<line class="grid" x1="{LEFT}" x2="{:.1}" y1="{y:.1}" y2="{y:.1}"/><text class="axis" x="{:.1}" y="{:.1}" text-anchor="end">{v:.2}</text>"#,
            LEFT + plot_w,
            LEFT - 6.0,
            y + 4.0
        );
    }
    for (i, p) in points.iter().enumerate() {
        let _ = write!(
            s,
            r#"<text class="axis" x="{:.1}" y="{:.1}" text-anchor="middle">{}</text>"#,
            pass_x(i, slot),
            TOP + PLOT_H + 18.0,
            esc(&p.label)
        );
    }
    let _ = write!(
        s,
        r#"<text class="axis-title" x="{:.1}" y="{:.1}" text-anchor="middle">iteration</text>"#,
        LEFT + plot_w / 2.0,
        TOP + PLOT_H + 38.0
    );
}

/// One point of the pass@1 chart (`kind`: `visible`, a circle, or `holdout`, a square)
/// with its 95% error bar, at `cx`.
fn pass_point(s: &mut String, p: &PassPoint, kind: &str, (v, ci): (f64, [f64; 2]), cx: f64) {
    let (ylo, yhi) = (y_of(ci[0]), y_of(ci[1]));
    let _ = write!(
        s,
        r#"<g class="point {kind}" data-iteration="{}" data-value="{v:.4}" data-lo="{:.4}" data-hi="{:.4}"><title>iteration {}: {} pass@1 {v:.3} (95% CI {:.3}–{:.3})</title><line class="ci" x1="{cx:.1}" x2="{cx:.1}" y1="{ylo:.1}" y2="{yhi:.1}"/><line class="ci" x1="{:.1}" x2="{:.1}" y1="{ylo:.1}" y2="{ylo:.1}"/><line class="ci" x1="{:.1}" x2="{:.1}" y1="{yhi:.1}" y2="{yhi:.1}"/>"#,
        p.iteration,
        ci[0],
        ci[1],
        esc(&p.label),
        if kind == "visible" {
            "visible"
        } else {
            "held-out"
        },
        ci[0],
        ci[1],
        cx - 4.0,
        cx + 4.0,
        cx - 4.0,
        cx + 4.0,
    );
    let y = y_of(v);
    if kind == "visible" {
        let _ = write!(s, r#"<circle cx="{cx:.1}" cy="{y:.1}" r="5"/>"#);
    } else {
        let _ = write!(
            s,
            r#"<rect x="{:.1}" y="{:.1}" width="9" height="9"/>"#,
            cx - 4.5,
            y - 4.5
        );
    }
    s.push_str("</g>");
}

/// The pass@1 chart's legend at `lx` (the held-out square only when `both` are drawn); it
/// closes the chart.
fn pass_legend(s: &mut String, lx: f64, both: bool) {
    let _ = write!(
        s,
        r#"<g class="legend"><g class="point visible"><circle cx="{:.1}" cy="{:.1}" r="5"/></g><text x="{:.1}" y="{:.1}">visible pass@1</text>"#,
        lx + 5.0,
        TOP + 10.0,
        lx + 16.0,
        TOP + 14.0
    );
    if both {
        let _ = write!(
            s,
            r#"<g class="point holdout"><rect x="{:.1}" y="{:.1}" width="9" height="9"/></g><text x="{:.1}" y="{:.1}">held-out pass@1</text>"#,
            lx + 0.5,
            TOP + 25.5,
            lx + 16.0,
            TOP + 34.0
        );
    }
    let _ = write!(
        s,
        r#"<circle class="best-ring" cx="{:.1}" cy="{:.1}" r="7"/><text x="{:.1}" y="{:.1}">best</text><line class="ci" x1="{:.1}" x2="{:.1}" y1="{:.1}" y2="{:.1}"/><text x="{:.1}" y="{:.1}">95% interval</text></g></svg>"#,
        lx + 5.0,
        TOP + 50.0,
        lx + 16.0,
        TOP + 54.0,
        lx + 5.0,
        lx + 5.0,
        TOP + 62.0,
        TOP + 78.0,
        lx + 16.0,
        TOP + 74.0
    );
}

/// pass@1 per iteration: visible (circles, joined) and held-out (squares) with 95% error
/// bars; the best iteration ringed. Each point is a `<g class="point …">` with
/// `data-iteration`, `data-value`, `data-lo`, `data-hi`.
pub fn pass_chart(points: &[PassPoint]) -> String {
    let n = points.len().max(1);
    let slot = (560.0 / n as f64).clamp(36.0, 90.0);
    let plot_w = slot * n as f64;
    let w = LEFT + plot_w + 150.0;
    let h = TOP + PLOT_H + 44.0;
    let mut s = String::new();
    let _ = write!(
        s,
        r#"<svg class="chart pass-chart" xmlns="http://www.w3.org/2000/svg" width="{w:.0}" height="{h:.0}" viewBox="0 0 {w:.0} {h:.0}" role="img" aria-label="pass@1 per iteration">"#
    );
    pass_axes(&mut s, points, slot, plot_w);
    let x_of = |i: usize| pass_x(i, slot);
    let both = points.iter().any(|p| p.holdout.is_some());
    let off = if both { 7.0 } else { 0.0 };
    let line: Vec<String> = points
        .iter()
        .enumerate()
        .filter_map(|(i, p)| {
            p.visible
                .map(|(v, _)| format!("{:.1},{:.1}", x_of(i) - off, y_of(v)))
        })
        .collect();
    if line.len() > 1 {
        let _ = write!(
            s,
            r#"<polyline class="line-visible" points="{}"/>"#,
            line.join(" ")
        );
    }
    for (i, p) in points.iter().enumerate() {
        let x = x_of(i);
        if p.best {
            if let Some((v, _)) = p.visible {
                let _ = write!(
                    s,
                    r#"<g class="best-mark" data-iteration="{}"><circle class="best-ring" cx="{:.1}" cy="{:.1}" r="10"/><text class="best-label" x="{:.1}" y="{:.1}" text-anchor="middle">best</text></g>"#,
                    p.iteration,
                    x - off,
                    y_of(v),
                    x - off,
                    (y_of(v) - 14.0).max(10.0)
                );
            }
        }
        for (kind, val, dx) in [("visible", p.visible, -off), ("holdout", p.holdout, off)] {
            if let Some(val) = val {
                pass_point(&mut s, p, kind, val, x + dx);
            }
        }
    }
    pass_legend(&mut s, LEFT + plot_w + 20.0, both);
    s
}

/// One cell of the heatmap.
#[derive(Debug, Clone)]
pub struct HeatCell {
    /// Text in the cell (e.g. `1/2`).
    pub text: String,
    /// CSS class: `c-pass`, `c-partial`, `c-fail`, `c-infra`, `c-running`.
    pub class: &'static str,
    /// Tooltip.
    pub title: String,
    /// Link (a trial page), if any.
    pub href: Option<String>,
}

/// Width and height of a heatmap cell.
const HEAT_CELL: (f64, f64) = (46.0, 20.0);

/// One cell of the heatmap at `(x, y)`: a grey box where the task was not run, else its
/// result (linked when it has a link).
fn heat_cell(s: &mut String, task: &str, iter: u32, cell: Option<&HeatCell>, (x, y): (f64, f64)) {
    let (cw, ch) = HEAT_CELL;
    let Some(cell) = cell else {
        let _ = write!(
            s,
            r#"<rect class="cell c-none" x="{:.1}" y="{:.1}" width="{:.1}" height="{:.1}"/>"#,
            x + 1.0,
            y + 1.0,
            cw - 2.0,
            ch - 2.0
        );
        return;
    };
    if let Some(href) = &cell.href {
        let _ = write!(s, r#"<a href="{}">"#, esc(href));
    }
    let _ = write!(
        s,
        r#"<rect class="cell {}" data-task="{}" data-iteration="{iter}" x="{:.1}" y="{:.1}" width="{:.1}" height="{:.1}"><title>{}</title></rect><text class="cell-text t{}" x="{:.1}" y="{:.1}" text-anchor="middle">{}</text>"#,
        cell.class,
        esc(task),
        x + 1.0,
        y + 1.0,
        cw - 2.0,
        ch - 2.0,
        esc(&cell.title),
        cell.class,
        x + cw / 2.0,
        y + ch / 2.0 + 4.0,
        esc(&cell.text)
    );
    if cell.href.is_some() {
        s.push_str("</a>");
    }
}

/// A task × iteration grid of k-trial results. Rows are `(task, held_out)`; `cells[r][c]`
/// is None where the task was not run. Each cell is a `<rect class="cell …">` with
/// `data-task` and `data-iteration`.
pub fn heatmap(
    rows: &[(String, bool)],
    cols: &[(u32, String)],
    cells: &[Vec<Option<HeatCell>>],
) -> String {
    const CW: f64 = HEAT_CELL.0;
    const CH: f64 = HEAT_CELL.1;
    const HEAD: f64 = 26.0;
    let max_chars = rows
        .iter()
        .map(|(t, _)| t.chars().count())
        .max()
        .unwrap_or(4)
        .max(4);
    // Names up to 40 characters are shown whole; longer ones are cut (full name in the tooltip).
    let max_label = max_chars.min(40);
    let label_w = max_label as f64 * 7.0 + 24.0;
    let w = label_w + CW * cols.len() as f64 + 8.0;
    let h = HEAD + CH * rows.len() as f64 + 4.0;
    let mut s = String::with_capacity(rows.len() * cols.len() * 220);
    let _ = write!(
        s,
        r#"<svg class="chart heatmap" xmlns="http://www.w3.org/2000/svg" width="{w:.0}" height="{h:.0}" viewBox="0 0 {w:.0} {h:.0}" role="img" aria-label="task by iteration results">"#
    );
    for (c, (_, label)) in cols.iter().enumerate() {
        let _ = write!(
            s,
            r#"<text class="axis" x="{:.1}" y="{:.1}" text-anchor="middle">{}</text>"#,
            label_w + (c as f64 + 0.5) * CW,
            HEAD - 9.0,
            esc(label)
        );
    }
    for (r, (task, held)) in rows.iter().enumerate() {
        let y = HEAD + r as f64 * CH;
        let shown: String = if task.chars().count() > max_label {
            let mut t: String = task.chars().take(max_label.saturating_sub(1)).collect();
            t.push('…');
            t
        } else {
            task.clone()
        };
        let _ = write!(
            s,
            r#"<text class="row-label{}" x="{:.1}" y="{:.1}" text-anchor="end"><title>{}{}</title>{}</text>"#,
            if *held { " holdout" } else { "" },
            label_w - 8.0,
            y + CH / 2.0 + 4.0,
            esc(task),
            if *held { " (held out)" } else { "" },
            esc(&shown)
        );
        for (c, (iter, _)) in cols.iter().enumerate() {
            let x = label_w + c as f64 * CW;
            let cell = cells
                .get(r)
                .and_then(|row| row.get(c))
                .and_then(|x| x.as_ref());
            heat_cell(&mut s, task, *iter, cell, (x, y));
        }
    }
    s.push_str("</svg>");
    s
}

/// One series of a stacked bar chart.
#[derive(Debug, Clone)]
pub struct Series {
    /// Legend label.
    pub label: String,
    /// One value per category.
    pub values: Vec<f64>,
}

/// Top margin of a stacked bar chart.
const BARS_TOP: f64 = 20.0;
/// Left margin of a stacked bar chart (room for the value labels).
const BARS_LEFT: f64 = 64.0;

/// A stacked bar chart's grid: five lines from 0 to `top`, labelled with `fmt`.
fn bar_grid(
    s: &mut String,
    top: f64,
    pw: f64,
    y_of: &dyn Fn(f64) -> f64,
    fmt: &dyn Fn(f64) -> String,
) {
    const L: f64 = BARS_LEFT;
    for i in 0..=4 {
        let v = top * i as f64 / 4.0;
        let y = y_of(v);
        let _ = write!(
            s,
            r#"<line class="grid" x1="{L}" x2="{:.1}" y1="{y:.1}" y2="{y:.1}"/><text class="axis" x="{:.1}" y="{:.1}" text-anchor="end">{}</text>"#,
            L + pw,
            L - 6.0,
            y + 4.0,
            esc(&fmt(v))
        );
    }
}

/// A stacked bar chart's legend at `lx`: one swatch and label per series.
fn bar_legend(s: &mut String, lx: f64, series: &[Series]) {
    for (i, se) in series.iter().enumerate() {
        let y = BARS_TOP + 4.0 + i as f64 * 18.0;
        let _ = write!(
            s,
            r#"<rect class="seg s{i}" x="{lx:.1}" y="{y:.1}" width="11" height="11"/><text x="{:.1}" y="{:.1}">{}</text>"#,
            lx + 16.0,
            y + 10.0,
            esc(&se.label)
        );
    }
}

/// Height of a stacked bar chart's plot area.
const BARS_PH: f64 = 160.0;

/// Where a stacked bar chart puts things: the width of a category's slot, of its bar, and
/// the value at the top of the scale.
struct BarLayout {
    slot: f64,
    bw: f64,
    top: f64,
}

impl BarLayout {
    /// The y of value `v` (the plot's bottom for 0, its top for `top`).
    fn y_of(&self, v: f64) -> f64 {
        BARS_TOP + BARS_PH
            - if self.top > 0.0 {
                v / self.top * BARS_PH
            } else {
                0.0
            }
    }
}

/// Stacked vertical bars, one per category (iteration), one segment per series. Segments are
/// `<rect class="seg s<i>" data-series data-category data-value>`; `fmt` formats values.
pub fn stacked_bars(
    aria: &str,
    categories: &[String],
    series: &[Series],
    fmt: &dyn Fn(f64) -> String,
) -> String {
    const PH: f64 = BARS_PH;
    const T: f64 = BARS_TOP;
    const L: f64 = BARS_LEFT;
    let n = categories.len().max(1);
    let slot = (520.0 / n as f64).clamp(34.0, 80.0);
    let pw = slot * n as f64;
    let w = L + pw + 160.0;
    let h = T + PH + 40.0;
    let totals: Vec<f64> = (0..categories.len())
        .map(|c| {
            series
                .iter()
                .map(|s| s.values.get(c).copied().unwrap_or(0.0))
                .sum()
        })
        .collect();
    let max = totals.iter().copied().fold(0.0f64, f64::max);
    let lay = BarLayout {
        slot,
        bw: (slot * 0.6).min(40.0),
        top: nice_ceiling(max),
    };
    let mut s = String::new();
    let _ = write!(
        s,
        r#"<svg class="chart bars" xmlns="http://www.w3.org/2000/svg" width="{w:.0}" height="{h:.0}" viewBox="0 0 {w:.0} {h:.0}" role="img" aria-label="{}">"#,
        esc(aria)
    );
    bar_grid(&mut s, lay.top, pw, &|v| lay.y_of(v), fmt);
    for (c, cat) in categories.iter().enumerate() {
        bar(&mut s, &lay, c, cat, series, totals[c], fmt);
    }
    let _ = write!(
        s,
        r#"<text class="axis-title" x="{:.1}" y="{:.1}" text-anchor="middle">iteration</text>"#,
        L + pw / 2.0,
        T + PH + 34.0
    );
    bar_legend(&mut s, BARS_LEFT + pw + 20.0, series);
    s.push_str("</svg>");
    s
}

/// The bar of category `c`: one segment per series with a positive value, the category
/// below it and, when it fits in the slot, the total above it.
fn bar(
    s: &mut String,
    lay: &BarLayout,
    c: usize,
    cat: &str,
    series: &[Series],
    total: f64,
    fmt: &dyn Fn(f64) -> String,
) {
    let bw = lay.bw;
    let x = BARS_LEFT + (c as f64 + 0.5) * lay.slot - bw / 2.0;
    let mut acc = 0.0;
    for (i, se) in series.iter().enumerate() {
        let v = se.values.get(c).copied().unwrap_or(0.0);
        if v <= 0.0 {
            continue;
        }
        let (y0, y1) = (lay.y_of(acc), lay.y_of(acc + v));
        acc += v;
        let _ = write!(
            s,
            r#"<rect class="seg s{i}" data-series="{}" data-category="{}" data-value="{v}" x="{x:.1}" y="{y1:.1}" width="{bw:.1}" height="{:.1}"><title>{}: {} {}</title></rect>"#,
            esc(&se.label),
            esc(cat),
            (y0 - y1).max(0.5),
            esc(cat),
            esc(&se.label),
            esc(&fmt(v))
        );
    }
    let _ = write!(
        s,
        r#"<text class="axis" x="{:.1}" y="{:.1}" text-anchor="middle">{}</text>"#,
        x + bw / 2.0,
        BARS_TOP + BARS_PH + 16.0,
        esc(cat)
    );
    // The total above the bar, when it fits in the slot (the tooltips have it anyway).
    let label = fmt(total);
    if label.chars().count() as f64 * 5.6 <= lay.slot - 2.0 {
        let _ = write!(
            s,
            r#"<text class="bar-total" x="{:.1}" y="{:.1}" text-anchor="middle">{}</text>"#,
            x + bw / 2.0,
            lay.y_of(total) - 4.0,
            esc(&label)
        );
    }
}

/// The smallest 1/2/2.5/5 × 10^k at or above `v` (1 for 0).
fn nice_ceiling(v: f64) -> f64 {
    if v <= 0.0 || !v.is_finite() {
        return 1.0;
    }
    let e = 10f64.powf(v.log10().floor());
    for m in [1.0, 2.0, 2.5, 5.0, 10.0] {
        if m * e >= v * (1.0 - 1e-9) {
            return m * e;
        }
    }
    10.0 * e
}

#[cfg(test)]
#[path = "svg_tests.rs"]
mod tests;
