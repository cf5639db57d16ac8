//! SVG plots drawn with `plotters` (SVG backend only, no font files: text is written
//! as SVG `<text>` for the browser to render, and plotters' built-in estimate sizes
//! it). Every data series is drawn in a colour of `PALETTE`; axes, grid, reference
//! lines and labels are black or grey, so a reader (and the report test) can tell data
//! from decoration.

use anyhow::{anyhow, Result};
use plotters::coord::types::RangedCoordf64;
use plotters::prelude::*;

/// Colours of data series (Tableau 10, its grey replaced by indigo, then five of
/// Tableau 20's light tones): none is a grey, the colours of axes, grid and reference
/// lines; 15 of them, one per operation of a time breakdown.
pub const PALETTE: [RGBColor; 15] = [
    RGBColor(0x1f, 0x77, 0xb4),
    RGBColor(0xff, 0x7f, 0x0e),
    RGBColor(0x2c, 0xa0, 0x2c),
    RGBColor(0xd6, 0x27, 0x28),
    RGBColor(0x94, 0x67, 0xbd),
    RGBColor(0x8c, 0x56, 0x4b),
    RGBColor(0xe3, 0x77, 0xc2),
    RGBColor(0x39, 0x3b, 0x79),
    RGBColor(0xbc, 0xbd, 0x22),
    RGBColor(0x17, 0xbe, 0xcf),
    RGBColor(0xae, 0xc7, 0xe8),
    RGBColor(0xff, 0xbb, 0x78),
    RGBColor(0x98, 0xdf, 0x8a),
    RGBColor(0xff, 0x98, 0x96),
    RGBColor(0xc5, 0xb0, 0xd5),
];

const SIZE: (u32, u32) = (760, 430);
const REFERENCE: RGBColor = RGBColor(0x44, 0x44, 0x44);

/// How a series is drawn.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Mark {
    Line,
    Points,
    /// Crosses: points that fail (infeasible candidates).
    Crosses,
    LinePoints,
}

#[derive(Debug, Clone)]
pub struct Series {
    pub name: String,
    pub points: Vec<(f64, f64)>,
    pub mark: Mark,
    /// Index into `PALETTE`.
    pub color: usize,
}

/// A reference line: horizontal (`y`) or vertical (`x`), with its label.
#[derive(Debug, Clone)]
pub enum Rule {
    X(f64, String),
    Y(f64, String),
    /// y = x.
    Diagonal(String),
}

/// An x-y chart.
#[derive(Debug, Clone)]
pub struct Chart {
    pub title: String,
    pub x_label: String,
    pub y_label: String,
    pub series: Vec<Series>,
    pub rules: Vec<Rule>,
    /// Both axes logarithmic (values must be > 0).
    pub log: bool,
}

fn err<E: std::fmt::Debug>(e: E) -> anyhow::Error {
    anyhow!("drawing a plot: {e:?}")
}

/// The range of `vals` padded by 5% (and by `top` more above), never empty.
fn range(vals: impl Iterator<Item = f64>, top: f64, from_zero: bool) -> (f64, f64) {
    let (mut lo, mut hi) = (f64::INFINITY, f64::NEG_INFINITY);
    for v in vals.filter(|v| v.is_finite()) {
        lo = lo.min(v);
        hi = hi.max(v);
    }
    if !lo.is_finite() {
        return (0.0, 1.0);
    }
    if from_zero && lo > 0.0 {
        lo = 0.0;
    }
    if hi - lo < 1e-12 * hi.abs().max(1.0) {
        hi = lo + hi.abs().max(1.0) * 0.5;
        lo -= (hi - lo) * 0.5;
    }
    let pad = (hi - lo) * 0.05;
    (
        lo - if from_zero && lo >= 0.0 { 0.0 } else { pad },
        hi + pad + (hi - lo) * top,
    )
}

/// An axis label for `v`: `1.2M`, `950K`, `12.5`, without trailing zeros.
pub fn tick(v: &f64) -> String {
    let a = v.abs();
    let trim = |s: String| {
        if s.contains('.') {
            s.trim_end_matches('0').trim_end_matches('.').to_string()
        } else {
            s
        }
    };
    if a >= 1e6 {
        format!("{}M", trim(format!("{:.2}", v / 1e6)))
    } else if a >= 1e4 {
        format!("{}K", trim(format!("{:.1}", v / 1e3)))
    } else if a >= 100.0 {
        format!("{v:.0}")
    } else if a == 0.0 {
        "0".into()
    } else {
        // Three significant digits.
        let d = (2.0 - a.log10().floor()).max(0.0) as usize;
        trim(format!("{v:.d$}"))
    }
}

/// Draws `c` as an SVG document.
pub fn xy(c: &Chart) -> Result<String> {
    let xs = c.series.iter().flat_map(|s| s.points.iter().map(|p| p.0));
    let ys = c.series.iter().flat_map(|s| s.points.iter().map(|p| p.1));
    let rx = c.rules.iter().filter_map(|r| match r {
        Rule::X(x, _) => Some(*x),
        _ => None,
    });
    let ry = c.rules.iter().filter_map(|r| match r {
        Rule::Y(y, _) => Some(*y),
        _ => None,
    });
    if c.log {
        let all: Vec<f64> = xs
            .chain(ys)
            .chain(rx)
            .chain(ry)
            .filter(|v| *v > 0.0)
            .collect();
        let lo = all.iter().cloned().fold(f64::INFINITY, f64::min);
        let hi = all.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
        let (lo, hi) = if lo.is_finite() {
            (lo / 1.5, hi * 3.0)
        } else {
            (0.1, 10.0)
        };
        return xy_log(c, lo, hi);
    }
    let diagonal = c.rules.iter().any(|r| matches!(r, Rule::Diagonal(_)));
    let ranges = if diagonal {
        // One range for both axes, so equality is the diagonal.
        let r = range(xs.chain(ys), 0.15, false);
        (r, r)
    } else {
        (
            range(xs.chain(rx), 0.0, false),
            range(ys.chain(ry), 0.3, true),
        )
    };
    xy_linear(c, ranges)
}

/// Draws `c` on logarithmic axes, both over `lo..hi`, as an SVG document.
fn xy_log(c: &Chart, lo: f64, hi: f64) -> Result<String> {
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, SIZE).into_drawing_area();
        root.fill(&WHITE).map_err(err)?;
        let mut ch = builder(&root, &c.title)
            .build_cartesian_2d((lo..hi).log_scale(), (lo..hi).log_scale())
            .map_err(err)?;
        ch.configure_mesh()
            .x_desc(&c.x_label)
            .y_desc(&c.y_label)
            .light_line_style(RGBColor(0xee, 0xee, 0xee))
            .draw()
            .map_err(err)?;
        for r in &c.rules {
            if let Rule::Diagonal(label) = r {
                ch.draw_series(LineSeries::new(vec![(lo, lo), (hi, hi)], REFERENCE))
                    .map_err(err)?
                    .label(label)
                    .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], REFERENCE));
            }
        }
        series_and_legend(&mut ch, &c.series, SeriesLabelPosition::UpperLeft)?;
        root.present().map_err(err)?;
    }
    Ok(svg)
}

/// Draws `c` on linear axes over `(x0, x1)` and `(y0, y1)`, as an SVG document.
fn xy_linear(c: &Chart, ((x0, x1), (y0, y1)): ((f64, f64), (f64, f64))) -> Result<String> {
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, SIZE).into_drawing_area();
        root.fill(&WHITE).map_err(err)?;
        let mut ch = builder(&root, &c.title)
            .build_cartesian_2d(x0..x1, y0..y1)
            .map_err(err)?;
        ch.configure_mesh()
            .x_desc(&c.x_label)
            .y_desc(&c.y_label)
            .x_label_formatter(&tick)
            .y_label_formatter(&tick)
            .light_line_style(RGBColor(0xee, 0xee, 0xee))
            .draw()
            .map_err(err)?;
        for r in &c.rules {
            let (pts, label) = match r {
                Rule::X(x, l) => (vec![(*x, y0), (*x, y1)], l),
                Rule::Y(y, l) => (vec![(x0, *y), (x1, *y)], l),
                Rule::Diagonal(l) => {
                    let (a, b) = (x0.max(y0), x1.min(y1));
                    (vec![(a, a), (b, b)], l)
                }
            };
            ch.draw_series(DashedLineSeries::new(pts, 6, 4, REFERENCE.stroke_width(2)))
                .map_err(err)?
                .label(label)
                .legend(|(x, y)| {
                    PathElement::new(vec![(x, y), (x + 18, y)], REFERENCE.stroke_width(2))
                });
        }
        series_and_legend(&mut ch, &c.series, SeriesLabelPosition::UpperRight)?;
        root.present().map_err(err)?;
    }
    Ok(svg)
}

/// A chart's frame: its caption, margin and room for the axes' labels.
fn builder<'a, 'b, DB: DrawingBackend>(
    root: &'a DrawingArea<DB, plotters::coord::Shift>,
    title: &'b str,
) -> ChartBuilder<'a, 'b, DB> {
    let mut b = ChartBuilder::on(root);
    b.caption(title, ("sans-serif", 18))
        .margin(12)
        .x_label_area_size(44)
        .y_label_area_size(72);
    b
}

/// Draws every series, then the legend at `pos`.
fn series_and_legend<'a, DB, X, Y>(
    ch: &mut ChartContext<'a, DB, Cartesian2d<X, Y>>,
    series: &[Series],
    pos: SeriesLabelPosition,
) -> Result<()>
where
    DB: DrawingBackend + 'a,
    X: Ranged<ValueType = f64>,
    Y: Ranged<ValueType = f64>,
{
    for s in series {
        draw_series(ch, s)?;
    }
    ch.configure_series_labels()
        .position(pos)
        .background_style(WHITE.mix(0.85))
        .border_style(REFERENCE)
        .draw()
        .map_err(err)?;
    Ok(())
}

fn draw_series<'a, DB, X, Y>(
    ch: &mut ChartContext<'a, DB, Cartesian2d<X, Y>>,
    s: &Series,
) -> Result<()>
where
    DB: DrawingBackend + 'a,
    X: Ranged<ValueType = f64>,
    Y: Ranged<ValueType = f64>,
{
    // An empty series is not drawn at all, not even in the legend: a plot without data
    // has no mark in a series colour.
    if s.points.is_empty() {
        return Ok(());
    }
    let color = PALETTE[s.color % PALETTE.len()];
    let pts = s.points.clone();
    match s.mark {
        Mark::Line | Mark::LinePoints => {
            ch.draw_series(LineSeries::new(pts.clone(), color.stroke_width(2)))
                .map_err(err)?
                .label(&s.name)
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 18, y)], color.stroke_width(2))
                });
            if s.mark == Mark::LinePoints {
                // Rings, so points drawn on top stay visible.
                ch.draw_series(
                    pts.iter()
                        .map(|&p| Circle::new(p, 8, color.stroke_width(2))),
                )
                .map_err(err)?;
            }
        }
        Mark::Points => {
            ch.draw_series(pts.iter().map(|&p| Circle::new(p, 5, color.filled())))
                .map_err(err)?
                .label(&s.name)
                .legend(move |(x, y)| Circle::new((x + 9, y), 5, color.filled()));
        }
        Mark::Crosses => {
            ch.draw_series(pts.iter().map(|&p| Cross::new(p, 5, color.stroke_width(2))))
                .map_err(err)?
                .label(&s.name)
                .legend(move |(x, y)| Cross::new((x + 9, y), 5, color.stroke_width(2)));
        }
    }
    Ok(())
}

/// Horizontal stacked bars: one bar per category, one segment per component.
#[derive(Debug, Clone)]
pub struct Bars {
    pub title: String,
    pub value_label: String,
    pub categories: Vec<String>,
    /// (component name, value per category).
    pub components: Vec<(String, Vec<f64>)>,
}

/// Draws `b` as an SVG document; the categories are labelled in the plot, left of
/// their bars.
pub fn stacked_bars(b: &Bars) -> Result<String> {
    let n = b.categories.len().max(1);
    let total = (0..n)
        .map(|i| {
            b.components
                .iter()
                .map(|c| c.1.get(i).copied().unwrap_or(0.0))
                .sum::<f64>()
        })
        .fold(0.0, f64::max);
    let x1 = if total > 0.0 { total * 1.45 } else { 1.0 };
    let height = (110 + 46 * n as u32 + 22 * b.components.len().div_ceil(3) as u32).max(240);
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (SIZE.0, height)).into_drawing_area();
        root.fill(&WHITE).map_err(err)?;
        let mut ch: ChartContext<_, Cartesian2d<RangedCoordf64, RangedCoordf64>> =
            ChartBuilder::on(&root)
                .caption(&b.title, ("sans-serif", 18))
                .margin(12)
                .x_label_area_size(44)
                .y_label_area_size(16)
                .build_cartesian_2d(0.0..x1, 0.0..n as f64)
                .map_err(err)?;
        ch.configure_mesh()
            .disable_y_mesh()
            .disable_y_axis()
            .x_desc(&b.value_label)
            .x_label_formatter(&tick)
            .light_line_style(RGBColor(0xee, 0xee, 0xee))
            .draw()
            .map_err(err)?;
        draw_segments(&mut ch, b, n)?;
        for (i, cat) in b.categories.iter().enumerate() {
            let y = (n - 1 - i) as f64 + 0.9;
            ch.draw_series(std::iter::once(Text::new(
                cat.clone(),
                (0.0, y),
                ("sans-serif", 13).into_font().color(&BLACK),
            )))
            .map_err(err)?;
        }
        ch.configure_series_labels()
            .position(SeriesLabelPosition::LowerRight)
            .background_style(WHITE.mix(0.85))
            .border_style(REFERENCE)
            .draw()
            .map_err(err)?;
        root.present().map_err(err)?;
    }
    Ok(svg)
}

/// Draws each component's segments of the `n` bars (each starting where the earlier
/// components' end), with its legend entry; a component with no segment is left out.
fn draw_segments<'a, DB>(
    ch: &mut ChartContext<'a, DB, Cartesian2d<RangedCoordf64, RangedCoordf64>>,
    b: &Bars,
    n: usize,
) -> Result<()>
where
    DB: DrawingBackend + 'a,
{
    for (k, (name, vals)) in b.components.iter().enumerate() {
        let color = PALETTE[k % PALETTE.len()];
        let rects: Vec<Rectangle<(f64, f64)>> = (0..n)
            .filter_map(|i| {
                let v = vals.get(i).copied().unwrap_or(0.0);
                if v <= 0.0 {
                    return None;
                }
                let start: f64 = b.components[..k]
                    .iter()
                    .map(|c| c.1.get(i).copied().unwrap_or(0.0))
                    .sum();
                let y = (n - 1 - i) as f64;
                Some(Rectangle::new(
                    [(start, y + 0.22), (start + v, y + 0.78)],
                    color.filled(),
                ))
            })
            .collect();
        if rects.is_empty() {
            continue;
        }
        ch.draw_series(rects)
            .map_err(err)?
            .label(name)
            .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 14, y + 5)], color.filled()));
    }
    Ok(())
}
