//! One SVG chart per target (plotters' SVG backend, no fonts or network
//! needed to view it): above, the 10 ms histograms of full against resumed
//! handshakes, as in seed 003's figures; below, the daily medians of both
//! over time.

use plotters::prelude::*;

use crate::report::{BUCKET_MS, TargetReport};
use crate::sample::{Phase, Transport};

const FULL: RGBColor = RGBColor(0x1f, 0x77, 0xb4);
const RESUMED: RGBColor = RGBColor(0xff, 0x7f, 0x0e);

/// The chart of `t`, or `None` when it has no handshake to draw.
pub fn target_svg(t: &TargetReport) -> Option<String> {
    let hist = |phase: Phase| {
        t.phases
            .iter()
            .find(|p| p.phase == phase)
            .map(|p| p.histogram_10ms.clone())
            .unwrap_or_default()
    };
    let (full, resumed) = (hist(Phase::TlsFull), hist(Phase::TlsResumed));
    if full.is_empty() && resumed.is_empty() {
        return None;
    }
    let mut svg = String::new();
    let drawn = (|| -> Result<(), Box<dyn std::error::Error + '_>> {
        let root = SVGBackend::with_string(&mut svg, (760, 760)).into_drawing_area();
        root.fill(&WHITE)?;
        let (top, bottom) = root.split_vertically(420);

        // Histograms: bucket i holds [10 i, 10 (i + 1)) ms; the two kinds
        // side by side in each bucket.
        let n = full.len().max(resumed.len());
        let peak = full
            .iter()
            .chain(&resumed)
            .copied()
            .max()
            .unwrap_or(1)
            .max(1);
        let x_max = (n as f64) * BUCKET_MS;
        let mut chart = ChartBuilder::on(&top)
            .caption(
                match t.transport {
                    Transport::Tcp => format!("{}: handshake time (client-observed)", t.target),
                    Transport::H3 => format!(
                        "{} over HTTP/3: QUIC handshake time (client-observed)",
                        t.target
                    ),
                },
                ("sans-serif", 16),
            )
            .margin(12)
            .x_label_area_size(40)
            .y_label_area_size(60)
            .build_cartesian_2d(0.0..x_max, 0.0..(peak as f64 * 1.1))?;
        chart
            .configure_mesh()
            .disable_x_mesh()
            .x_desc("handshake time, ms (10 ms buckets; the last holds all slower)")
            .y_desc("samples")
            .draw()?;
        let bars = |counts: &[u64], offset: f64, color: RGBColor| {
            counts
                .iter()
                .enumerate()
                .filter(|(_, c)| **c > 0)
                .map(move |(i, c)| {
                    let x = i as f64 * BUCKET_MS + offset;
                    Rectangle::new(
                        [(x, 0.0), (x + BUCKET_MS * 0.45, *c as f64)],
                        color.filled(),
                    )
                })
                .collect::<Vec<_>>()
        };
        chart
            .draw_series(bars(&full, BUCKET_MS * 0.05, FULL))?
            .label("full")
            .legend(|(x, y)| Rectangle::new([(x, y - 5), (x + 14, y + 5)], FULL.filled()));
        chart
            .draw_series(bars(&resumed, BUCKET_MS * 0.5, RESUMED))?
            .label("resumed (accepted)")
            .legend(|(x, y)| Rectangle::new([(x, y - 5), (x + 14, y + 5)], RESUMED.filled()));
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperRight)
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK)
            .draw()?;

        // Daily medians; day i at x = i.
        let days = &t.days;
        let y_max = days
            .iter()
            .flat_map(|d| [d.tls_full_median_ms, d.tls_resumed_median_ms])
            .flatten()
            .fold(0.0_f64, f64::max)
            .max(1e-3)
            * 1.15;
        let labels: Vec<String> = days.iter().map(|d| d.day.clone()).collect();
        let mut chart = ChartBuilder::on(&bottom)
            .caption("median handshake time per UTC day", ("sans-serif", 16))
            .margin(12)
            .x_label_area_size(40)
            .y_label_area_size(60)
            .build_cartesian_2d(-0.5..(days.len().max(1) as f64 - 0.5), 0.0..y_max)?;
        chart
            .configure_mesh()
            .x_labels(days.len().clamp(1, 12))
            .x_label_formatter(&|x| tlslab_report::html::category_label(&labels, *x))
            .y_desc("median, ms")
            .draw()?;
        for (name, color, pick) in [
            (
                "full",
                FULL,
                (|d: &crate::report::Day| d.tls_full_median_ms) as fn(&crate::report::Day) -> _,
            ),
            ("resumed (accepted)", RESUMED, |d| d.tls_resumed_median_ms),
        ] {
            let pts: Vec<(f64, f64)> = days
                .iter()
                .enumerate()
                .filter_map(|(i, d)| Some((i as f64, pick(d)?)))
                .collect();
            chart
                .draw_series(LineSeries::new(pts.clone(), color.stroke_width(2)))?
                .label(name)
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], color));
            chart.draw_series(pts.iter().map(|p| Circle::new(*p, 3, color.filled())))?;
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::LowerRight)
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK)
            .draw()?;
        root.present()?;
        Ok(())
    })();
    drawn.ok()?;
    Some(svg)
}

/// A file name for the chart of `target` over `transport`: its URL with
/// anything but letters, digits, `.` and `-` replaced by `_`, and `-h3`
/// after it over HTTP/3.
pub fn file_name(target: &str, transport: Transport) -> String {
    let stem: String = target
        .trim_start_matches("https://")
        .trim_start_matches("http://")
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '.' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect();
    let suffix = match transport {
        Transport::Tcp => "",
        Transport::H3 => "-h3",
    };
    format!("{}{suffix}.svg", stem.trim_matches('_'))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sample::Sample;

    #[test]
    fn a_target_with_handshakes_draws_both_kinds() {
        let samples: Vec<Sample> = (0..20)
            .map(|i| Sample {
                target: "https://a.example/x?y".into(),
                started_at_ms: 1_700_000_000_000 + i * 86_400_000 / 4,
                tls_full_us: Some(12_000 + i * 1000),
                tls_resumed_us: Some(4_000 + i * 100),
                resumption_offered: Some(true),
                resumption_accepted: Some(true),
                ..Sample::default()
            })
            .collect();
        let r = crate::report::build(&samples, None, None);
        let svg = target_svg(&r.targets[0]).expect("drawn");
        assert!(svg.starts_with("<svg") && svg.contains("</svg>"), "{svg}");
        assert!(svg.contains("resumed (accepted)") && svg.contains("<rect"));
        assert!(
            svg.contains("<polyline") || svg.contains("<path"),
            "no lines"
        );
        assert_eq!(
            file_name("https://a.example/x?y", Transport::Tcp),
            "a.example_x_y.svg"
        );
        assert_eq!(
            file_name("https://a.example/x?y", Transport::H3),
            "a.example_x_y-h3.svg"
        );
        let none = crate::report::build(&[], None, None);
        assert!(none.targets.is_empty());
    }
}
