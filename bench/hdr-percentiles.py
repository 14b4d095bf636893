#!/usr/bin/env python3
# Usage: bench/hdr-percentiles.py RUN.hlog OUT.png   (pip install hdrhistogram matplotlib)
# The percentile distribution of a `tlslab load --hdr-log` file, drawn as
# HdrHistogram's plotter draws it (latency against 1/(1-percentile)).
import sys
import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt
from hdrh.histogram import HdrHistogram
from hdrh.log import HistogramLogReader

log, out = sys.argv[1], sys.argv[2]
series = {}
acc = HdrHistogram(1, 3600000000, 3)
r = HistogramLogReader(log, acc)
while (h := r.get_next_interval_histogram()) is not None:
    series.setdefault(h.get_tag(), HdrHistogram(1, 3600000000, 3)).add(h)
fig, ax = plt.subplots(figsize=(8, 4.5))
ps = [50, 75, 90, 95, 99, 99.5, 99.9, 99.95, 99.99]
for tag, h in sorted(series.items()):
    xs = [1 / (1 - p / 100) for p in ps]
    ys = [h.get_value_at_percentile(p) / 1000 for p in ps]
    ax.plot(xs, ys, marker="o", label=f"{tag} ({h.get_total_count()} requests)")
    print(tag, [f"p{p}={y:.2f}ms" for p, y in zip(ps, ys)])
ax.set_xscale("log")
ax.set_xticks([1 / (1 - p / 100) for p in ps])
ax.set_xticklabels([f"{p}%" for p in ps], rotation=45)
ax.set_ylabel("latency (ms)")
ax.set_xlabel("percentile")
ax.set_title("tlslab load --hdr-log: latency by percentile (whole run)")
ax.grid(True, which="both", alpha=0.3)
ax.legend()
fig.tight_layout()
fig.savefig(out, dpi=100)
