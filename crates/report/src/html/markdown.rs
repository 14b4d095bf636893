//! The Markdown version of the report: the same tables, no charts.

use std::fmt::Write;

use super::cells::{cell_columns, fmt_num, fold_links};
use super::charts::charts;
use crate::study::StudyResults;

/// Renders the Markdown version (tables, no charts).
pub fn render_markdown(docs: &[StudyResults]) -> String {
    let mut s = String::new();
    for d in docs {
        let _ = writeln!(s, "# {}\n", d.title);
        if d.quick {
            let _ = writeln!(s, "**Quick run**: short cells, few levels.\n");
        }
        if !d.seed.is_empty() {
            let _ = writeln!(s, "Redoes: {}\n", d.seed);
        }
        if !d.command_line.is_empty() {
            let _ = writeln!(s, "Command: `{}`\n", d.command_line.join(" "));
        }
        let e = &d.environment;
        if !e.cpu_model.is_empty() {
            let _ = writeln!(
                s,
                "Machine: {} ({} CPUs usable), {}; {}; {}.\n",
                e.cpu_model, e.cores, e.kernel, e.tls_library, e.placement
            );
        }
        if !d.comparisons.is_empty() {
            let _ = writeln!(
                s,
                "## Paper against today\n\n| quantity | paper | where | today | measured | why they differ |\n|---|---:|---|---:|---|---|"
            );
            for c in &d.comparisons {
                let today = c.today.map_or("not measured".into(), |v| {
                    let links: Vec<String> = c
                        .cells
                        .iter()
                        .map(|id| format!("[{id}](#cell-{id})"))
                        .collect();
                    format!("{} {} ({})", fmt_num(v), c.unit, fold_links(&links, ", "))
                });
                let _ = writeln!(
                    s,
                    "| {} | {} | {} | {} | {} | {} |",
                    c.quantity, c.paper, c.source, today, c.measured, c.reason
                );
            }
            let _ = writeln!(s);
        }
        let (charts, missing) = charts(d);
        if !charts.is_empty() {
            let _ = writeln!(
                s,
                "## Charts\n\nThe HTML report (`--html`) draws these; here are their data, \
                 each value linked to the cells it came from.\n"
            );
        }
        for c in &charts {
            let _ = writeln!(
                s,
                "### {}\n\n{}\n\n| series | {} | {} |{} cells |\n|---|---:|---:|{}---|",
                c.title,
                c.caption,
                c.x_label,
                c.y_label,
                c.columns
                    .iter()
                    .map(|(head, _)| format!(" {head} |"))
                    .collect::<String>(),
                "---:|".repeat(c.columns.len())
            );
            for (pi, p) in c.data.iter().enumerate() {
                let y = match p.cells.first() {
                    Some(id) => format!("[{}](#cell-{id})", fmt_num(p.y)),
                    None => fmt_num(p.y),
                };
                let _ = writeln!(
                    s,
                    "| {} | {} | {y} |{} {} |",
                    p.series,
                    fmt_num(p.x),
                    (0..c.columns.len())
                        .map(|ci| format!(" {} |", c.column_value(ci, pi)))
                        .collect::<String>(),
                    p.cells
                        .iter()
                        .map(|id| format!("[{id}](#cell-{id})"))
                        .collect::<Vec<_>>()
                        .join(" ")
                );
            }
            let _ = writeln!(s);
        }
        if !missing.is_empty() {
            let _ = writeln!(s, "Charts not drawn:\n");
            for m in &missing {
                let _ = writeln!(s, "- {m}");
            }
            let _ = writeln!(s);
        }
        if !d.cells.is_empty() {
            let _ = writeln!(s, "## Appendix: cells\n");
            let cols = cell_columns(&d.cells[0]);
            let _ = writeln!(
                s,
                "| cell | factors | {} | command |\n|---|---|{}---|",
                cols.iter().map(|c| c.0).collect::<Vec<_>>().join(" | "),
                "---:|".repeat(cols.len())
            );
            for c in &d.cells {
                let f: Vec<String> = c.factors.iter().map(|(k, v)| format!("{k}={v}")).collect();
                let _ = writeln!(
                    s,
                    "| <a id=\"cell-{}\"></a>{} | {} | {} | `{}` |",
                    c.id,
                    c.id,
                    f.join(" "),
                    cell_columns(c)
                        .into_iter()
                        .map(|c| c.1)
                        .collect::<Vec<_>>()
                        .join(" | "),
                    c.command_line.replace('`', "'")
                );
            }
            let _ = writeln!(s);
        }
    }
    s
}
