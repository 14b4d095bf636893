//! `tlslab report`: a self-contained HTML page (inline SVG charts drawn with
//! plotters' SVG backend, inline CSS, no script, no network fetch) and a
//! Markdown version of the same tables, from one or more
//! [`StudyResults`](crate::study::StudyResults).
//!
//! Every number in a table links to the cell that produced it (`#cell-ID`
//! anchors in the cell table). A chart is drawn only when its data exists;
//! the page says which charts were left out and why.

mod breakdown_pair;
mod cells;
mod charts;
mod h3;
mod markdown;
mod overload_pair;
mod page;
mod pq;
mod svg;
mod table2;
#[cfg(test)]
pub(crate) mod tests;

pub use breakdown_pair::{BREAKDOWN_DIFFERENCE_CHART, BREAKDOWN_PAIR_CHART};
pub use charts::{charts, goodput};
pub use h3::QUIC_TTFB_CHART;
pub use markdown::render_markdown;
pub use overload_pair::{OVERLOAD_PAIR_CHART, OVERLOAD_QUIC_CHART, OVERLOAD_TCP_CHART};
pub use page::render_html;
pub use svg::{Chart, DataPoint, Series, bar_chart, category_label, line_chart};
pub use table2::TABLE2_CHART;
