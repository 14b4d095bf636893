//! The self-contained HTML page of one or more study documents.

use std::fmt::Write;

use super::cells::{cell_columns, cell_links, esc, fmt_num, fold_links};
use super::charts::charts;
use crate::study::StudyResults;

/// Renders the HTML page of every document in `docs`.
pub fn render_html(docs: &[StudyResults]) -> String {
    let mut h = String::new();
    let title = docs
        .iter()
        .map(|d| d.study.as_str())
        .collect::<Vec<_>>()
        .join(", ");
    let _ = write!(
        h,
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\
         <link rel=\"icon\" href=\"data:,\">\
         <title>tlslab report: {}</title><style>\
         body{{font-family:system-ui,sans-serif;margin:2em auto;max-width:1100px;padding:0 1em;color:#222}}\
         table{{border-collapse:collapse;margin:1em 0;font-size:0.85em}}\
         .wide{{overflow-x:auto;max-width:100%}} svg{{max-width:100%;height:auto}}\
         th,td{{border:1px solid #ccc;padding:3px 6px;text-align:right}}\
         th{{background:#f3f3f3}} td.l,th.l{{text-align:left}}\
         tr:target{{background:#ffef9f}} figure{{margin:1.5em 0}} figcaption{{font-size:0.85em;color:#555;max-width:720px}}\
         code{{background:#f5f5f5;padding:1px 3px}} .note{{color:#8a5a00}}\
         </style></head><body>\n<h1>tlslab report: {}</h1>\n",
        esc(&title),
        esc(&title)
    );
    for (di, d) in docs.iter().enumerate() {
        let prefix = if docs.len() > 1 {
            format!("d{di}-")
        } else {
            String::new()
        };
        let _ = writeln!(
            h,
            "<section id=\"{prefix}study\"><h2>{}</h2>",
            esc(&d.title)
        );
        if d.quick {
            let _ = writeln!(
                h,
                "<p class=\"note\"><b>Quick run</b> (<code>--quick</code>): short cells and few \
                 levels; figures are indicative, not the full study.</p>"
            );
        }
        if !d.complete {
            let _ = writeln!(
                h,
                "<p class=\"note\"><b>Incomplete</b>: the run was interrupted; resume it with \
                 <code>--resume</code>.</p>"
            );
        }
        if !d.seed.is_empty() {
            let _ = writeln!(h, "<p>Redoes: {}</p>", esc(&d.seed));
        }
        if !d.command_line.is_empty() {
            let _ = writeln!(
                h,
                "<p>Command: <code>{}</code></p>",
                esc(&d.command_line.join(" "))
            );
        }
        let e = &d.environment;
        if !e.cpu_model.is_empty() {
            let _ = writeln!(
                h,
                "<p>Machine: {} ({} CPUs usable), {}; {}; {}; {}{}.</p>",
                esc(&e.cpu_model),
                e.cores,
                esc(&e.kernel),
                esc(&e.tlslab_version),
                esc(&e.tls_library),
                esc(&e.placement),
                e.loadavg_1m
                    .map(|l| format!("; load average at start {l:.2} (a shared machine is noisy)"))
                    .unwrap_or_default()
            );
        }
        if !d.comparisons.is_empty() {
            let _ = writeln!(
                h,
                "<h3>Paper against today</h3><div class=\"wide\"><table><tr><th class=\"l\">quantity</th>\
                 <th>paper</th><th class=\"l\">where</th><th>today</th><th class=\"l\">measured</th>\
                 <th class=\"l\">why they differ</th></tr>"
            );
            for c in &d.comparisons {
                let today = match (c.today, c.cells.first()) {
                    (Some(v), Some(cell)) => format!(
                        "<a href=\"#{prefix}cell-{}\">{} {}</a>",
                        esc(cell),
                        fmt_num(v),
                        esc(&c.unit)
                    ),
                    (Some(v), None) => format!("{} {}", fmt_num(v), esc(&c.unit)),
                    (None, _) => "not measured".into(),
                };
                let _ = writeln!(
                    h,
                    "<tr><td class=\"l\">{}</td><td>{}</td><td class=\"l\">{}</td><td>{}</td>\
                     <td class=\"l\">{}{}</td><td class=\"l\">{}</td></tr>",
                    esc(&c.quantity),
                    esc(&c.paper),
                    esc(&c.source),
                    today,
                    esc(&c.measured),
                    if c.cells.len() > 1 {
                        let links: Vec<String> = c
                            .cells
                            .iter()
                            .map(|id| cell_links(&prefix, std::slice::from_ref(id)))
                            .collect();
                        format!("; cells {}", fold_links(&links, " "))
                    } else {
                        String::new()
                    },
                    esc(&c.reason)
                );
            }
            let _ = writeln!(h, "</table></div>");
        }
        if !d.notes.is_empty() {
            let _ = writeln!(
                h,
                "<p>Notes of the run (what was not run, and why):</p><ul>"
            );
            for n in &d.notes {
                let _ = writeln!(h, "<li>{}</li>", esc(n));
            }
            let _ = writeln!(h, "</ul>");
        }
        let (charts, missing) = charts(d);
        for (ci, c) in charts.iter().enumerate() {
            let _ = writeln!(
                h,
                "<figure class=\"chart\" id=\"{prefix}chart-{}\">{}<figcaption><b>{}</b>. {}</figcaption>",
                ci + 1,
                c.svg,
                esc(&c.title),
                esc(&c.caption)
            );
            let _ = write!(
                h,
                "<details><summary>Data of this chart ({} points; each links to its cells)</summary>\
                 <div class=\"wide\"><table><tr><th class=\"l\">series</th><th>{}</th><th>{}</th>{}<th class=\"l\">cells</th></tr>",
                c.data.len(),
                esc(&c.x_label),
                esc(&c.y_label),
                c.columns
                    .iter()
                    .map(|(head, _)| format!("<th>{}</th>", esc(head)))
                    .collect::<String>()
            );
            for (pi, p) in c.data.iter().enumerate() {
                let y = match p.cells.first() {
                    Some(id) => {
                        format!("<a href=\"#{prefix}cell-{}\">{}</a>", esc(id), fmt_num(p.y))
                    }
                    None => fmt_num(p.y),
                };
                let _ = write!(
                    h,
                    "<tr><td class=\"l\">{}</td><td>{}</td><td>{y}</td>{}<td class=\"l\">{}</td></tr>",
                    esc(&p.series),
                    fmt_num(p.x),
                    (0..c.columns.len())
                        .map(|ci| format!("<td>{}</td>", esc(c.column_value(ci, pi))))
                        .collect::<String>(),
                    cell_links(&prefix, &p.cells)
                );
            }
            let _ = writeln!(h, "</table></div></details></figure>");
        }
        if !missing.is_empty() {
            let _ = writeln!(h, "<p>Charts not drawn:</p><ul>");
            for m in &missing {
                let _ = writeln!(h, "<li>{}</li>", esc(m));
            }
            let _ = writeln!(h, "</ul>");
        }
        if !d.cells.is_empty() {
            let factor_names: Vec<String> = {
                let mut v: Vec<String> = Vec::new();
                for c in &d.cells {
                    for k in c.factors.keys() {
                        if !v.contains(k) {
                            v.push(k.clone());
                        }
                    }
                }
                v
            };
            let _ = write!(
                h,
                "<h3 id=\"{prefix}cells\">Appendix: cells</h3><p>Every cell, in run order, with the \
                 command lines that reproduce it. Throughput and latency are \
                 client-observed over the cell's window; server CPU is server-observed over \
                 the whole cell.</p><div class=\"wide\"><table><tr><th class=\"l\">cell</th>"
            );
            for f in &factor_names {
                let _ = write!(h, "<th class=\"l\">{}</th>", esc(f));
            }
            for (name, _) in cell_columns(&d.cells[0]) {
                let _ = write!(h, "<th>{}</th>", esc(name));
            }
            let _ = writeln!(h, "<th class=\"l\">command</th></tr>");
            for c in &d.cells {
                let _ = write!(
                    h,
                    "<tr id=\"{prefix}cell-{}\"><td class=\"l\">{}</td>",
                    esc(&c.id),
                    esc(&c.id)
                );
                for f in &factor_names {
                    let _ = write!(
                        h,
                        "<td class=\"l\">{}</td>",
                        esc(c.factors.get(f).map_or("", |s| s.as_str()))
                    );
                }
                for (_, v) in cell_columns(c) {
                    let _ = write!(h, "<td>{v}</td>");
                }
                let _ = writeln!(
                    h,
                    "<td class=\"l\"><code>{}</code></td></tr>",
                    esc(&c.command_line)
                );
            }
            let _ = writeln!(h, "</table></div>");
        }
        let _ = writeln!(h, "</section>");
    }
    let _ = writeln!(
        h,
        "<p><small>Generated by tlslab {}. Self-contained: no script, no network fetch.</small></p>\
         </body></html>",
        env!("CARGO_PKG_VERSION")
    );
    h
}
