//! The chart primitives of the report: line and bar charts drawn as SVG
//! with plotters' SVG backend, and the [`Chart`] a page shows with its
//! data.

use std::collections::BTreeMap;

use plotters::prelude::*;

/// A chart: its title and the SVG.
#[derive(Clone, Debug)]
pub struct Chart {
    /// Title.
    pub title: String,
    /// What it shows and how it was measured.
    pub caption: String,
    /// The `<svg>` element.
    pub svg: String,
    /// X axis name (the data table's header).
    pub x_label: String,
    /// Y axis name.
    pub y_label: String,
    /// The plotted points, each with the cells it came from.
    pub data: Vec<DataPoint>,
    /// More figures measured at each point, for the data table: (header,
    /// one value per point of `data`, in its order). Usually empty.
    pub columns: Vec<(String, Vec<String>)>,
}

impl Chart {
    /// A drawn chart with its title and caption, its axis names and its
    /// points.
    pub fn new(
        (title, caption): (&str, &str),
        (x_label, y_label): (&str, &str),
        svg: String,
        data: Vec<DataPoint>,
    ) -> Chart {
        Chart {
            title: title.into(),
            caption: caption.into(),
            svg,
            x_label: x_label.into(),
            y_label: y_label.into(),
            data,
            columns: Vec::new(),
        }
    }

    /// The value of extra column `col` at point `i`, or `""`.
    pub fn column_value(&self, col: usize, i: usize) -> &str {
        self.columns
            .get(col)
            .and_then(|c| c.1.get(i))
            .map_or("", String::as_str)
    }
}

/// One line of a chart.
pub type Series = (String, Vec<(f64, f64)>);

const PALETTE: [RGBColor; 8] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(127, 127, 127),
];

fn bounds(series: &[Series], log_x: bool) -> Option<(f64, f64, f64, f64)> {
    let pts: Vec<(f64, f64)> = series
        .iter()
        .flat_map(|(_, p)| p.iter().copied())
        .filter(|(x, y)| x.is_finite() && y.is_finite() && (!log_x || *x > 0.0))
        .collect();
    if pts.is_empty() {
        return None;
    }
    let (mut x0, mut x1) = (f64::INFINITY, f64::NEG_INFINITY);
    let mut y1 = f64::NEG_INFINITY;
    for (x, y) in &pts {
        x0 = x0.min(*x);
        x1 = x1.max(*x);
        y1 = y1.max(*y);
    }
    if x1 <= x0 {
        if log_x {
            x0 /= 2.0;
            x1 *= 2.0;
        } else {
            x0 -= 1.0;
            x1 += 1.0;
        }
    }
    let pad = if log_x { 1.0 } else { (x1 - x0) * 0.03 };
    if !log_x {
        x0 -= pad;
        x1 += pad;
    }
    Some((x0, x1, 0.0, if y1 > 0.0 { y1 * 1.1 } else { 1.0 }))
}

/// A tick label with the decimals its value needs and no more: `1000`,
/// `2.5`, `0.125` (plotters' default prints `1000.0`).
pub(super) fn tick(v: &f64) -> String {
    if *v != 0.0 && v.abs() < 0.001 {
        return format!("{v:.1e}");
    }
    let s = format!("{v:.3}");
    let s = s.trim_end_matches('0').trim_end_matches('.');
    if s == "-0" { "0".into() } else { s.into() }
}

/// The size in pixels of plotters' legend box for `names` (its text
/// estimate, a 30 px sample and a 10 px margin each side).
pub(super) fn legend_size(names: &[&str]) -> (i32, i32) {
    let font: TextStyle = ("sans-serif", 12).into_font().into();
    let mut text = MultiLineText::<_, &str>::new((0, 0), &font);
    for n in names {
        text.push_line(*n);
    }
    let (w, h) = text
        .estimate_dimension()
        .unwrap_or((8 * 40, 16 * names.len() as i32));
    (w + 30 + 20, h + 20)
}

/// A place for the legend box (`size`) in a plotting area of `area`
/// pixels that covers none of the points (pixels from the area's top
/// left), corners first; `None` when every place covers one.
pub(super) fn legend_place(
    size: (i32, i32),
    area: (i32, i32),
    points: &[(i32, i32)],
) -> Option<(i32, i32)> {
    let (w, h) = size;
    let (right, bottom, mid) = (area.0 - w - 5, area.1 - h - 5, (area.1 - h) / 2);
    let free = |(x, y): (i32, i32)| {
        points
            .iter()
            .all(|&(px, py)| px < x - 5 || px > x + w + 5 || py < y - 5 || py > y + h + 5)
    };
    [
        (right, 5),
        (5, 5),
        (right, bottom),
        (5, bottom),
        (right, mid),
        (5, mid),
        ((area.0 - w) / 2, 5),
    ]
    .into_iter()
    .find(|&p| p.0 >= 0 && p.1 >= 0 && free(p))
}

/// Draws a line chart (points joined by lines) as SVG. `log_x` draws the x
/// axis on a log scale. `None` if no series has a finite point. The legend
/// goes where it covers no point: a free corner, else above the data, the
/// y axis raised to make room.
pub fn line_chart(
    title: &str,
    x_label: &str,
    y_label: &str,
    series: &[Series],
    log_x: bool,
) -> Option<String> {
    let (x0, x1, y0, y1) = bounds(series, log_x)?;
    match draw_lines(
        title,
        x_label,
        y_label,
        series,
        log_x,
        (x0, x1, y0, y1),
        false,
    )? {
        Ok(svg) => Some(svg),
        Err(raise) => draw_lines(
            title,
            x_label,
            y_label,
            series,
            log_x,
            (x0, x1, y0, y1 * raise),
            true,
        )?
        .ok(),
    }
}

/// [`line_chart`] in the ranges `r`: `Err(factor)` when the legend has no
/// free place and the y axis should grow by `factor` (unless `last`).
fn draw_lines(
    title: &str,
    x_label: &str,
    y_label: &str,
    series: &[Series],
    log_x: bool,
    r: (f64, f64, f64, f64),
    last: bool,
) -> Option<Result<String, f64>> {
    let (x0, x1, y0, y1) = r;
    let finite = |&(x, y): &(f64, f64)| x.is_finite() && y.is_finite() && (!log_x || x > 0.0);
    let names: Vec<&str> = series.iter().map(|s| s.0.as_str()).collect();
    let legend = legend_size(&names);
    let mut svg = String::new();
    let mut raise = None;
    let drawn = (|| -> Result<(), Box<dyn std::error::Error + '_>> {
        let root = SVGBackend::with_string(&mut svg, (720, 420)).into_drawing_area();
        root.fill(&WHITE)?;
        let mut builder = ChartBuilder::on(&root);
        builder
            .caption(title, ("sans-serif", 18))
            .margin(12)
            .x_label_area_size(44)
            .y_label_area_size(70);
        let style = |series_i: usize| PALETTE[series_i % PALETTE.len()];
        macro_rules! body {
            ($chart:expr) => {{
                let mut chart = $chart;
                chart
                    .configure_mesh()
                    .x_desc(x_label)
                    .y_desc(y_label)
                    .x_label_formatter(&tick)
                    .y_label_formatter(&tick)
                    .draw()?;
                for (i, (name, pts)) in series.iter().enumerate() {
                    let c = style(i);
                    let pts: Vec<(f64, f64)> = pts.iter().copied().filter(finite).collect();
                    chart
                        .draw_series(LineSeries::new(pts.clone(), c.stroke_width(2)))?
                        .label(name.as_str())
                        .legend(move |(x, y)| {
                            PathElement::new(vec![(x, y), (x + 18, y)], c.stroke_width(2))
                        });
                    chart.draw_series(pts.iter().map(|p| Circle::new(*p, 3, c.filled())))?;
                }
                let (xs, ys) = chart.plotting_area().get_pixel_range();
                let area = (xs.end - xs.start, ys.end - ys.start);
                let points: Vec<(i32, i32)> = series
                    .iter()
                    .flat_map(|s| s.1.iter().filter(|p| finite(p)))
                    .map(|p| {
                        let (x, y) = chart.backend_coord(p);
                        (x - xs.start, y - ys.start)
                    })
                    .collect();
                let place = legend_place(legend, area, &points);
                if place.is_none() && !last {
                    raise = Some(f64::from(area.1) / f64::from((area.1 - legend.1 - 15).max(1)));
                }
                let (lx, ly) = place.unwrap_or((area.0 - legend.0 - 5, 5));
                chart
                    .configure_series_labels()
                    .position(SeriesLabelPosition::Coordinate(lx, ly))
                    .background_style(WHITE.mix(0.85))
                    .border_style(BLACK)
                    .draw()?;
            }};
        }
        if log_x {
            body!(builder.build_cartesian_2d((x0..x1).log_scale(), y0..y1)?);
        } else {
            body!(builder.build_cartesian_2d(x0..x1, y0..y1)?);
        }
        root.present()?;
        Ok(())
    })();
    drawn.ok()?;
    Some(match raise {
        Some(f) => Err(f),
        None => Ok(svg),
    })
}

/// The label of category `x` on an axis whose categories sit at 0, 1, 2,
/// …: `labels[x]` at a whole `x`, empty between categories.
pub fn category_label(labels: &[String], x: f64) -> String {
    let i = x.round();
    if (x - i).abs() < 1e-6 && i >= 0.0 && (i as usize) < labels.len() {
        labels[i as usize].clone()
    } else {
        String::new()
    }
}

/// Draws a bar chart with ± error bars (`(label, value, half-width)`).
pub fn bar_chart(title: &str, y_label: &str, bars: &[(String, f64, f64)]) -> Option<String> {
    let bars: Vec<&(String, f64, f64)> = bars.iter().filter(|b| b.1.is_finite()).collect();
    if bars.is_empty() {
        return None;
    }
    let hi = bars
        .iter()
        .map(|b| b.1 + if b.2.is_finite() { b.2 } else { 0.0 })
        .fold(0.0_f64, f64::max)
        * 1.15;
    let lo = bars
        .iter()
        .map(|b| b.1 - if b.2.is_finite() { b.2 } else { 0.0 })
        .fold(0.0_f64, f64::min)
        * 1.15;
    let n = bars.len();
    let labels: Vec<String> = bars.iter().map(|b| b.0.clone()).collect();
    let mut svg = String::new();
    let drawn = (|| -> Result<(), Box<dyn std::error::Error + '_>> {
        let root = SVGBackend::with_string(&mut svg, (720, 420)).into_drawing_area();
        root.fill(&WHITE)?;
        let mut chart = ChartBuilder::on(&root)
            .caption(title, ("sans-serif", 18))
            .margin(12)
            .x_label_area_size(60)
            .y_label_area_size(70)
            .build_cartesian_2d(-0.5f64..(n as f64 - 0.5), lo..hi.max(1e-9))?;
        chart
            .configure_mesh()
            .disable_x_mesh()
            .x_labels(n)
            .y_label_formatter(&tick)
            .x_label_formatter(&|x| category_label(&labels, *x))
            .y_desc(y_label)
            .draw()?;
        chart.draw_series(bars.iter().enumerate().map(|(i, b)| {
            let x = i as f64;
            Rectangle::new(
                [(x - 0.35, 0.0), (x + 0.35, b.1)],
                PALETTE[i % PALETTE.len()].filled(),
            )
        }))?;
        chart.draw_series(
            bars.iter()
                .enumerate()
                .filter(|(_, b)| b.2.is_finite() && b.2 > 0.0)
                .map(|(i, b)| {
                    ErrorBar::new_vertical(i as f64, b.1 - b.2, b.1, b.1 + b.2, BLACK.filled(), 10)
                }),
        )?;
        root.present()?;
        Ok(())
    })();
    drawn.ok()?;
    Some(svg)
}

/// One plotted point and the cells that produced it (the report links each
/// to its row of the cell table).
#[derive(Clone, Debug, PartialEq)]
pub struct DataPoint {
    /// The series (legend entry).
    pub series: String,
    /// X value.
    pub x: f64,
    /// Y value.
    pub y: f64,
    /// Ids of the cells the point is computed from (empty for model curves
    /// and engine reports without cells).
    pub cells: Vec<String>,
}

/// The series of a set of points, in name order, each sorted by x.
pub(super) fn to_series(points: &[DataPoint]) -> Vec<Series> {
    let mut by: BTreeMap<String, Vec<(f64, f64)>> = BTreeMap::new();
    for p in points {
        by.entry(p.series.clone()).or_default().push((p.x, p.y));
    }
    by.into_iter()
        .map(|(k, mut v)| {
            v.sort_by(|a, b| a.0.total_cmp(&b.0));
            (k, v)
        })
        .collect()
}

/// Adds a line chart of `data` to `out`, or a note to `missing` when it has
/// no line of two points.
#[allow(clippy::too_many_arguments)]
pub(super) fn push_line(
    out: &mut Vec<Chart>,
    missing: &mut Vec<String>,
    title: &str,
    x_label: &str,
    y_label: &str,
    caption: &str,
    data: Vec<DataPoint>,
    why_missing: &str,
) {
    let series = to_series(&data);
    if !series.iter().any(|s| s.1.len() > 1) {
        missing.push(format!("{title}: {why_missing}"));
        return;
    }
    match line_chart(title, x_label, y_label, &series, false) {
        Some(svg) => out.push(Chart::new((title, caption), (x_label, y_label), svg, data)),
        None => missing.push(format!("{title}: the chart could not be drawn")),
    }
}

/// A bar per row (its label, its value and the cells behind it) as a
/// [`Chart`] with its title and caption and its x and y labels, into `out`;
/// or, when no row has a value, "{title}: {none}" into `missing`.
pub(crate) fn push_bars(
    out: &mut Vec<Chart>,
    missing: &mut Vec<String>,
    (title, caption): (&str, &str),
    (x_label, y_label): (&str, &str),
    rows: Vec<(String, f64, Vec<String>)>,
    none: &str,
) {
    let b: Vec<(String, f64, f64)> = rows.iter().map(|r| (r.0.clone(), r.1, 0.0)).collect();
    match bar_chart(title, y_label, &b) {
        Some(svg) => {
            let data = rows
                .into_iter()
                .enumerate()
                .map(|(i, (series, y, cells))| DataPoint {
                    series,
                    x: i as f64,
                    y,
                    cells,
                })
                .collect();
            out.push(Chart::new((title, caption), (x_label, y_label), svg, data));
        }
        None => missing.push(format!("{title}: {none}")),
    }
}
