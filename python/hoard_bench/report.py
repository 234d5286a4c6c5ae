"""Render `hoard bench all`'s results.json as index.html, report.md and PNG plots.

    python -m hoard_bench.report DIR/results.json DIR

writes DIR/plots/*.png (latency CDFs, bars per access type, curves, and a
cost curve per workload, drawn with matplotlib's Agg backend), DIR/index.html
(every plot as an <img> with alt text, a table per experiment of the
papers' figures next to hoard's, the experiment's own tables, machine,
settings, the price parameters of the cost model) and DIR/report.md, the same in Markdown. A failed
experiment is shown as failed with its error. Exits 1 if a plot could not
be drawn (after writing everything else), 2 on bad arguments or input.
"""

from __future__ import annotations

import argparse
import html
import json
import math
import re
import sys
import traceback
from dataclasses import dataclass, field
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt
from matplotlib.ticker import FixedLocator, NullFormatter

from hoard_bench import cost

SCHEMA = 1
PLOT_DIR = "plots"
DASH = "\N{EN DASH}"
FIGSIZE = (8.0, 4.5)
DPI = 100


# --- formatting -----------------------------------------------------------


def fmt_num(v: float | None) -> str:
    """A figure with three significant digits, or an en dash when missing."""
    if v is None or (isinstance(v, float) and (math.isnan(v) or math.isinf(v))):
        return DASH
    if v == 0:
        return "0"
    a = abs(v)
    if a >= 1000:
        return f"{v:,.0f}"
    if a >= 100:
        return f"{v:.0f}"
    return f"{v:.3g}"


def fmt_usd(v: float) -> str:
    if math.isinf(v):
        return "n/a"
    if v >= 1:
        return f"${v:,.2f}"
    return f"${v:.3g}"


def fmt_bytes(n: int | float) -> str:
    """Binary units: whole where exact ("16 MiB"), else one decimal ("23.5 GiB")."""
    n = int(n)
    for unit, mult in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= mult:
            return f"{n // mult} {unit}" if n % mult == 0 else f"{n / mult:.1f} {unit}"
    return f"{n} B"


def fmt_seconds(s: float) -> str:
    if s < 1e-3:
        return f"{s * 1e6:.3g} µs"
    if s < 1:
        return f"{s * 1e3:.3g} ms"
    if s < 120:
        return f"{s:.3g} s"
    return f"{s / 60:.3g} min"


def md_cell(s: str) -> str:
    return str(s).replace("|", "\\|").replace("\n", " ")


def esc(s: object) -> str:
    return html.escape(str(s), quote=True)


# --- plots ----------------------------------------------------------------


@dataclass
class Figure:
    path: str  # relative to the report directory
    title: str
    alt: str
    caption: str = ""
    error: str = ""


def _finish(fig, ax, p: dict, out: Path) -> None:
    ax.set_title(p.get("title", ""), fontsize=11)
    if p.get("xlabel"):
        ax.set_xlabel(p["xlabel"])
    if p.get("ylabel"):
        ax.set_ylabel(p["ylabel"])
    ax.grid(True, which="major", alpha=0.3)
    handles, _ = ax.get_legend_handles_labels()
    if len(handles) > 4:
        # Many series: the legend goes beside the axes, not over the data.
        ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), framealpha=0.8)
    elif handles:
        ax.legend(fontsize=8, loc="best", framealpha=0.8)
    fig.tight_layout()
    fig.savefig(out, dpi=DPI, bbox_inches="tight")


def draw_cdf(p: dict, out: Path) -> None:
    fig, ax = plt.subplots(figsize=FIGSIZE)
    try:
        for s in p["series"]:
            xs = sorted(s["samples"])
            m = len(xs)
            n = s.get("n") or m
            # Thinned series carry evenly spaced quantiles; full ones every sample.
            ys = [i / (m - 1) for i in range(m)] if n > m and m > 1 else [(i + 1) / m for i in range(m)]
            ax.step(xs, ys, where="post", label=f"{s['label']} (n={n})", linewidth=1.4)
        if p.get("xlog"):
            ax.set_xscale("log")
        ax.set_ylim(0, 1.01)
        _finish(fig, ax, p, out)
    finally:
        plt.close(fig)


def draw_bar(p: dict, out: Path) -> None:
    cats = p["categories"]
    series = p["series"]
    fig, ax = plt.subplots(figsize=FIGSIZE)
    try:
        k = max(len(series), 1)
        width = 0.8 / k
        for i, s in enumerate(series):
            xs, ys, errs = [], [], []
            errors = s.get("errors") or [None] * len(cats)
            for j, v in enumerate(s.get("values") or []):
                if v is None or (p.get("ylog") and v <= 0):
                    continue
                xs.append(j - 0.4 + width * (i + 0.5))
                ys.append(v)
                errs.append(errors[j] or 0)
            yerr = errs if any(errs) else None
            if p.get("ylog") and yerr:
                # On a log axis a lower bar reaching zero has no end: a
                # deviation of the mean's size or more is drawn to a tenth of it.
                yerr = [[min(e, y * 0.9) for e, y in zip(errs, ys, strict=True)], errs]
            ax.bar(xs, ys, width=width, label=s["label"], yerr=yerr, capsize=2 if yerr else 0)
        ax.set_xticks(range(len(cats)))
        ax.set_xticklabels(cats, rotation=20 if len(cats) > 5 else 0, ha="right" if len(cats) > 5 else "center")
        if p.get("ylog"):
            ax.set_yscale("log")
        _finish(fig, ax, p, out)
    finally:
        plt.close(fig)


def draw_curve(p: dict, out: Path) -> None:
    fig, ax = plt.subplots(figsize=FIGSIZE)
    try:
        for s in p["series"]:
            ax.plot(s["x"], s["y"], marker="o", markersize=3, label=s["label"], linewidth=1.4)
        if p.get("xlog"):
            ax.set_xscale("log")
            xs = sorted({x for s in p["series"] for x in s["x"]})
            if xs and all(float(x).is_integer() for x in xs):
                # Counts (connections, instances): each measured one as a
                # plain tick rather than powers of ten.
                ax.set_xticks(xs)
                ax.set_xticklabels([str(int(x)) for x in xs])
                ax.minorticks_off()
        if p.get("ylog"):
            ax.set_yscale("log")
        _finish(fig, ax, p, out)
    finally:
        plt.close(fig)


DRAW = {"cdf": draw_cdf, "bar": draw_bar, "curve": draw_curve}

INTERVAL_TICKS = [
    (0.01, "10 ms"),
    (0.1, "100 ms"),
    (1, "1 s"),
    (10, "10 s"),
    (60, "1 min"),
    (600, "10 min"),
    (3600, "1 h"),
]


def draw_cost(a: cost.Analysis, title: str, out: Path) -> None:
    fig, ax = plt.subplots(figsize=FIGSIZE)
    try:
        styles = {"hoard (keep-alive billed)": "--"}
        for name, ys in a.curves.items():
            ax.plot(a.intervals, ys, styles.get(name, "-"), label=name, linewidth=1.6)
        # The decisive crossover of each plain-hoard pair (the last one).
        marks = [(cs[-1], pair) for pair, cs in a.crossovers.items() if pair.startswith("hoard vs") and cs]
        for i, (c, pair) in enumerate(sorted(marks, key=lambda m: m[0].interval_s)):
            ax.axvline(c.interval_s, color="grey", linestyle=":", linewidth=1)
            ax.annotate(
                f" {cost.describe_interval(c.interval_s)}: hoard = {pair.removeprefix('hoard vs ')}",
                (c.interval_s, 0.97 - 0.07 * i),
                xycoords=("data", "axes fraction"),
                fontsize=7,
                va="top",
                ha="left",
                color="dimgrey",
            )
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.xaxis.set_major_locator(FixedLocator([t for t, _ in INTERVAL_TICKS]))
        ax.set_xticklabels([label for _, label in INTERVAL_TICKS])
        ax.xaxis.set_minor_formatter(NullFormatter())
        _finish(
            fig,
            ax,
            {"title": title, "xlabel": "interval between invocations", "ylabel": "USD per hour (log)"},
            out,
        )
    finally:
        plt.close(fig)


# --- the report -------------------------------------------------------------


@dataclass
class CostSection:
    workload: cost.Workload | None
    analysis: cost.Analysis | None
    figure: Figure | None
    error: str = ""


@dataclass
class Section:
    exp: dict
    figures: list[Figure] = field(default_factory=list)
    costs: list[CostSection] = field(default_factory=list)


def render_plots(results: dict, outdir: Path) -> tuple[list[Section], int]:
    plot_dir = outdir / PLOT_DIR
    plot_dir.mkdir(parents=True, exist_ok=True)
    for old in plot_dir.glob("*.png"):
        old.unlink()
    sections, failures = [], 0
    for exp in results.get("experiments", []):
        sec = Section(exp)
        name = exp["experiment"]
        for p in exp.get("plots") or []:
            rel = f"{PLOT_DIR}/{name}-{p['id']}.png"
            fig = Figure(path=rel, title=p.get("title", p["id"]), alt=alt_text(exp, p), caption=p.get("caption", ""))
            try:
                DRAW[p["kind"]](p, outdir / rel)
            except Exception as exc:  # one bad plot must not lose the report
                fig.error = f"{type(exc).__name__}: {exc}"
                failures += 1
                traceback.print_exc()
            sec.figures.append(fig)
        for i, wj in enumerate(exp.get("workloads") or []):
            try:
                w = cost.Workload.from_json(wj)
            except (KeyError, TypeError, ValueError) as exc:
                sec.costs.append(CostSection(None, None, None, error=f"bad workload: {exc!r}"))
                failures += 1
                continue
            rel = f"{PLOT_DIR}/{name}-cost-{i}.png"
            title = f"Cost per hour: {w.name}"
            fig = Figure(
                path=rel,
                title=title,
                alt=f"{exp.get('title', name)}: cost per hour of '{w.name}' on hoard, an always-on VM and "
                "VM + ElastiCache, by interval between invocations (10 ms to 1 h, log scales)",
            )
            cs = CostSection(w, None, fig)
            try:
                cs.analysis = cost.analyze(w)
                draw_cost(cs.analysis, title, outdir / rel)
            except Exception as exc:
                fig.error = f"{type(exc).__name__}: {exc}"
                failures += 1
                traceback.print_exc()
            sec.costs.append(cs)
        sections.append(sec)
    return sections, failures


def alt_text(exp: dict, p: dict) -> str:
    kinds = {"cdf": "cumulative distribution", "bar": "bar chart", "curve": "line chart"}
    labels = ", ".join(s.get("label", "") for s in p.get("series", []))
    unit = f" in {p['unit']}" if p.get("unit") else ""
    what = f"{kinds.get(p['kind'], p['kind'])} of {p.get('title', p['id'])}{unit}"
    return f"{exp.get('title', exp['experiment'])}: {what}; series: {labels}"


def machine_rows(m: dict) -> list[tuple[str, str]]:
    rows = [
        ("CPUs", f"{m.get('nproc', '?')} (GOMAXPROCS {m.get('gomaxprocs', '?')})"),
        ("CPU model", m.get("cpu_model", "")),
        ("memory", fmt_bytes(m["memory_bytes"]) if m.get("memory_bytes") else ""),
        ("OS / arch / kernel", f"{m.get('os', '')} / {m.get('arch', '')} / {m.get('kernel', '')}"),
        ("Go", m.get("go_version", "")),
        ("MinIO", m.get("minio_version", "")),
        ("Redis", m.get("redis_version", "")),
        ("Python", m.get("python", "")),
    ]
    return [(k, v) for k, v in rows if v]


def settings_rows(s: dict) -> list[tuple[str, str]]:
    rows = []
    if s.get("object_sizes"):
        rows.append(("object sizes", ", ".join(fmt_bytes(n) for n in s["object_sizes"])))
    rows.append(("link (store to the rest)", s.get("link", "")))
    if s.get("iterations"):
        rows.append(("iterations", "; ".join(f"{c['what']}: {c['n']}" for c in s["iterations"])))
    for o in s.get("other") or []:
        rows.append((o["name"], o["value"]))
    return rows


def reproduces_text(exp: dict) -> str:
    parts = []
    for r in exp.get("reproduces") or []:
        sec = f", {r['section']}" if r.get("section") else ""
        parts.append(f"{r['paper']} {r['figure']}{sec}")
    return "; ".join(parts)


def citations(results: dict) -> list[str]:
    seen = []
    for exp in results.get("experiments", []):
        for r in exp.get("reproduces") or []:
            c = r.get("citation")
            if c and c not in seen:
                seen.append(c)
    return seen


def ratio_text(row: dict) -> str:
    r = row.get("ratio")
    return DASH if r is None else fmt_num(r)


def workload_rows(w: cost.Workload, a: cost.Analysis | None) -> list[tuple[str, str]]:
    rows = [
        ("one invocation", w.description or w.name),
        ("warm duration (data in the instance's cache)", fmt_seconds(w.warm_s)),
        ("cold duration (data from the store)", fmt_seconds(w.cold_s)),
        ("function memory + cache", f"{fmt_bytes(w.memory_bytes)} + {fmt_bytes(w.cache_bytes)}"),
        (
            "store requests per invocation",
            f"GET {w.store_gets_warm:g} warm, {w.store_gets_cold:g} cold; PUT {w.store_puts:g}",
        ),
        ("keep-alive", fmt_seconds(w.keep_alive_s)),
    ]
    if w.source:
        rows.append(("measured as", w.source))
    if a is not None:
        rows += [
            ("hoard: Lambda memory setting", f"{a.memory_mb} MB" if a.memory_mb else "above Lambda's maximum"),
            ("VM option at 1 h intervals", a.vm.describe()),
            (
                "VM + ElastiCache option at 1 h intervals",
                f"{a.vm_for_cache_option.describe()} + {a.cache_nodes.describe()}",
            ),
        ]
    return rows


def cost_points(a: cost.Analysis) -> list[tuple[str, dict[str, float]]]:
    """Each option's cost at a few intervals, for the tables."""
    out = []
    for t, label in cost.TABLE_INTERVALS:
        out.append((label, {name: f(a.workload, t, cost.DEFAULT_PRICES) for name, f in cost.OPTIONS.items()}))
    return out


COST_METHOD = (
    "After Faa$T §6.1 (cost model) and Fig. 12: the cost per hour of running each experiment's application, "
    "invoked once every interval from 10 ms to 1 h. hoard is billed as serverless functions (duration rounded up "
    "to 1 ms, times memory, which includes the cache since it lives inside the instance, plus the request price and "
    "the store requests it makes); invocations within the keep-alive find the instance loaded and its cache warm, "
    "further apart they read the store. 'hoard (keep-alive billed)' adds the idle keep-alive at Lambda's "
    "provisioned-concurrency price, a bound on what holding the cache would cost. 'VM' is the cheapest always-on "
    "EC2 fleet holding the function and its data (burstable t3 counted at its baseline CPU share); "
    "'VM + ElastiCache' an always-on VM for the function plus the cheapest ElastiCache node holding the data. "
    "The always-on options pay no store requests; cold starts are not priced; no free tier, no discounts."
)


# --- tables -------------------------------------------------------------------


@dataclass
class Cell:
    text: str
    num: bool = False  # a right-aligned figure
    small: bool = False  # long prose
    link: bool = False  # a URL
    html: str = ""  # HTML to show instead of the text (HTML only)


def cells(*values: object) -> list[Cell]:
    return [v if isinstance(v, Cell) else Cell(str(v)) for v in values]


def table_html(head: list[str], rows: list[list[Cell]], row_classes: list[str] | None = None) -> str:
    out = ["<table>"]
    if any(head):
        out.append("<tr>" + "".join(f"<th>{esc(h)}</th>" for h in head) + "</tr>")
    for i, row in enumerate(rows):
        cls = row_classes[i] if row_classes else ""
        tds = []
        for c in row:
            body = c.html or esc(c.text)
            if c.link:
                body = f'<a href="{esc(c.text)}">{esc(c.text)}</a>'
            if c.small:
                body = f"<small>{body}</small>"
            tds.append(f'<td class="num">{body}</td>' if c.num else f"<td>{body}</td>")
        out.append((f'<tr class="{cls}">' if cls else "<tr>") + "".join(tds) + "</tr>")
    out.append("</table>")
    return "\n".join(out)


def table_md(head: list[str], rows: list[list[Cell]]) -> str:
    lines = ["| " + " | ".join(md_cell(h) for h in head) + " |"]
    lines.append("|" + "".join("---:|" if rows and rows[0][i].num else "---|" for i in range(len(head))))
    lines += ["| " + " | ".join(md_cell(c.text) for c in row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def kv_rows(rows: list[tuple[str, str]]) -> list[list[Cell]]:
    return [cells(k, v) for k, v in rows]


SUMMARY_HEAD = ["experiment", "reproduces", "status", "time", "paper rows", "short of the paper"]
PAPER_HEAD = ["metric", "unit", "paper", "hoard", "ratio", "better", "paper's source", "note"]
PRICE_HEAD = ["item", "price", "unit", "note", "source"]


def summary_rows(sections: list[Section], links: bool) -> list[list[Cell]]:
    out = []
    for sec in sections:
        e = sec.exp
        name, st = e["experiment"], e.get("status", "?")
        short = sum(1 for r in e.get("rows") or [] if r.get("short"))
        out.append(
            cells(
                Cell(name, html=f'<a href="#{esc(name)}">{esc(name)}</a>' if links else ""),
                reproduces_text(e),
                Cell(st, html=f'<span class="badge {esc(st)}">{esc(st)}</span>' if links else ""),
                Cell(fmt_seconds(e.get("duration_s", 0)), num=True),
                Cell(str(len(e.get("rows") or [])), num=True),
                Cell(str(short), num=True),
            )
        )
    return out


def paper_rows(rows: list[dict], mark_short: bool) -> list[list[Cell]]:
    out = []
    for r in rows:
        metric = ("**short** " if mark_short and r.get("short") else "") + r["metric"]
        out.append(
            cells(
                metric,
                r.get("unit", ""),
                Cell(fmt_num(r.get("paper")), num=True),
                Cell(fmt_num(r.get("hoard")), num=True),
                Cell(ratio_text(r), num=True),
                r.get("better", ""),
                Cell(r.get("source", ""), small=True),
                Cell(r.get("note", ""), small=True),
            )
        )
    return out


NUMBER_RE = re.compile(r"^[-+]?\d[\d,]*(\.\d+)?\s*(%|x|ms|s|B|KiB|MiB|GiB|KB|MB|GB)?$")


def own_rows(table: dict) -> list[list[Cell]]:
    """An experiment's own table (Result.tables), cells as given; figures right-aligned."""
    return [[Cell(str(c), num=bool(NUMBER_RE.match(str(c)))) for c in row] for row in table.get("rows") or []]


def price_rows() -> list[list[Cell]]:
    return [
        cells(
            p["item"],
            Cell(f"{p['price']:.10g}", num=True),
            p["unit"],
            Cell(p["note"], small=True),
            Cell(p["source"], link=True),
        )
        for p in cost.price_table()
    ]


def cost_rows(a: cost.Analysis) -> tuple[list[str], list[list[Cell]]]:
    names = list(cost.OPTIONS)
    rows = [cells(label, *(Cell(fmt_usd(v[n]), num=True) for n in names)) for label, v in cost_points(a)]
    return ["interval", *names], rows


# --- the documents ----------------------------------------------------------------

CSS = (
    "body{font-family:system-ui,sans-serif;max-width:1100px;margin:2em auto;padding:0 1em;color:#222;"
    "line-height:1.45}table{border-collapse:collapse;margin:.6em 0 1.2em;font-size:.9em}"
    "th,td{border:1px solid #ccc;padding:.25em .5em;text-align:left;vertical-align:top}th{background:#f3f3f3}"
    "td.num{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}tr.short td{background:#fff4e5}"
    ".badge{display:inline-block;padding:0 .5em;border-radius:.3em;font-size:.8em}"
    ".ok{background:#e3f5e1;color:#1b5e20}.failed{background:#fde2e1;color:#b71c1c}"
    ".error{background:#fde2e1;border:1px solid #e57373;padding:.5em 1em;white-space:pre-wrap;overflow-x:auto}"
    "figure{margin:1em 0}figure img{max-width:100%;border:1px solid #ddd}figcaption{font-size:.85em;color:#555}"
    "small,.note{color:#555}"
)

# Counts the images that loaded into body[data-images] = "loaded/total";
# python/tests/test_report.py reads it through headless Chromium.
IMAGES_SCRIPT = """<script>
window.addEventListener('load', function () {
  var imgs = document.images, ok = 0;
  for (var i = 0; i < imgs.length; i++) {
    if (imgs[i].complete && imgs[i].naturalWidth > 0) ok++;
  }
  document.body.dataset.images = ok + '/' + imgs.length;
});
</script>"""

FENCE = "`" * 3


def run_line(results: dict) -> str:
    cmd = results.get("command", "hoard bench all") + (" --quick" if results.get("quick") else "")
    return f"{cmd}, started {results.get('started_at', '')}, took {fmt_seconds(results.get('duration_s', 0))}."


def write_html(results: dict, sections: list[Section], outdir: Path) -> None:
    out: list[str] = []
    w = out.append
    quick = " (quick)" if results.get("quick") else ""
    w('<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">')
    w('<meta name="viewport" content="width=device-width, initial-scale=1">')
    w(f"<title>hoard benchmark report{quick}</title><style>{CSS}</style></head><body>")
    w(f"<h1>hoard benchmark report{quick}</h1>")
    w(f"<p><code>{esc(run_line(results))}</code></p>")
    w("<h2>Experiments</h2>")
    w(table_html(SUMMARY_HEAD, summary_rows(sections, links=True)))
    w("<h2>Machine</h2>")
    w(table_html(["", ""], kv_rows(machine_rows(results.get("machine", {})))))
    for sec in sections:
        e = sec.exp
        name, st = e["experiment"], e.get("status", "?")
        w(f'<h2 id="{esc(name)}">{esc(e.get("title", name))} <span class="badge {esc(st)}">{esc(st)}</span></h2>')
        took = fmt_seconds(e.get("duration_s", 0))
        w(f"<p><b>Reproduces:</b> {esc(reproduces_text(e))}. Experiment <code>{esc(name)}</code>, {esc(took)}.</p>")
        if st != "ok":
            w(f'<div class="error"><b>This experiment failed:</b>\n{esc(e.get("error", ""))}</div>')
        if e.get("method"):
            w(f"<p>{esc(e['method'])}</p>")
        w("<h3>Settings</h3>")
        w(table_html(["", ""], kv_rows(settings_rows(e.get("settings") or {}))))
        rows = e.get("rows") or []
        if rows:
            w("<h3>Paper vs hoard</h3>")
            w("<p class='note'>ratio = hoard / paper; shaded: hoard's figure is worse than the paper's.</p>")
            classes = ["short" if r.get("short") else "" for r in rows]
            w(table_html(PAPER_HEAD, paper_rows(rows, mark_short=False), classes))
        for t in e.get("tables") or []:
            w(f"<h3>{esc(t.get('title') or t['id'])}</h3>")
            w(table_html(t["columns"], own_rows(t)))
            if t.get("caption"):
                w(f"<p class='note'>{esc(t['caption'])}</p>")
        if sec.figures:
            w("<h3>Plots</h3>")
        for f in sec.figures:
            w(figure_html(f))
        for cs in sec.costs:
            w("<h3>Cost per hour</h3>")
            if cs.error or cs.workload is None:
                w(f'<div class="error">{esc(cs.error)}</div>')
                continue
            w(table_html(["", ""], kv_rows(workload_rows(cs.workload, cs.analysis))))
            if cs.analysis is not None:
                w("<ul>" + "".join(f"<li>{esc(s)}</li>" for s in cs.analysis.summary) + "</ul>")
                w(table_html(*cost_rows(cs.analysis)))
            if cs.figure:
                w(figure_html(cs.figure))
        if e.get("notes"):
            w("<h3>Notes</h3><ul>" + "".join(f"<li>{esc(n)}</li>" for n in e["notes"]) + "</ul>")
        if e.get("machine") and e["machine"] != results.get("machine"):
            w("<details><summary>machine of this experiment</summary>")
            w(table_html(["", ""], kv_rows(machine_rows(e["machine"]))))
            w("</details>")
    w("<h2>Cost model</h2>")
    w(f"<p>{esc(COST_METHOD)}</p>")
    w(f"<p><b>Prices:</b> {esc(cost.REGION)}, as of {esc(cost.PRICES_AS_OF)}.</p>")
    w(table_html(PRICE_HEAD, price_rows()))
    cites = citations(results)
    if cites:
        w("<h2>Papers</h2><ul>" + "".join(f"<li>{esc(c)}</li>" for c in cites) + "</ul>")
    w(IMAGES_SCRIPT)
    w("</body></html>")
    (outdir / "index.html").write_text("\n".join(out) + "\n", encoding="utf-8")


def figure_html(f: Figure) -> str:
    if f.error:
        return f'<div class="error">plot {esc(f.title)} could not be drawn: {esc(f.error)}</div>'
    cap = f"<figcaption>{esc(f.title)}{(': ' + esc(f.caption)) if f.caption else ''}</figcaption>"
    return f'<figure><img src="{esc(f.path)}" alt="{esc(f.alt)}">{cap}</figure>'


def write_markdown(results: dict, sections: list[Section], outdir: Path) -> None:
    out: list[str] = []
    w = out.append
    quick = " (quick)" if results.get("quick") else ""
    w(f"# hoard benchmark report{quick}\n")
    w(f"`{run_line(results)}`\n")
    w(table_md(SUMMARY_HEAD, summary_rows(sections, links=False)))
    w("## Machine\n")
    w(table_md(["", ""], kv_rows(machine_rows(results.get("machine", {})))))
    for sec in sections:
        e = sec.exp
        name, st = e["experiment"], e.get("status", "?")
        w(f"## {e.get('title', name)} ({st})\n")
        w(f"Reproduces: {reproduces_text(e)}. Experiment `{name}`, {fmt_seconds(e.get('duration_s', 0))}.\n")
        if st != "ok":
            err = e.get("error", "").replace(FENCE, "'''")
            w(f"**This experiment failed:**\n\n{FENCE}\n{err}\n{FENCE}\n")
        if e.get("method"):
            w(e["method"] + "\n")
        w("### Settings\n")
        w(table_md(["", ""], kv_rows(settings_rows(e.get("settings") or {}))))
        rows = e.get("rows") or []
        if rows:
            w("### Paper vs hoard\n")
            w("ratio = hoard / paper; **short** marks rows where hoard's figure is worse than the paper's.\n")
            w(table_md(PAPER_HEAD, paper_rows(rows, mark_short=True)))
        for t in e.get("tables") or []:
            w(f"### {t.get('title') or t['id']}\n")
            w(table_md(t["columns"], own_rows(t)))
            if t.get("caption"):
                w(t["caption"] + "\n")
        if sec.figures:
            w("### Plots\n")
        for f in sec.figures:
            w(figure_md(f))
        for cs in sec.costs:
            w("### Cost per hour\n")
            if cs.error or cs.workload is None:
                w(f"Cost model failed: {cs.error}\n")
                continue
            w(table_md(["", ""], kv_rows(workload_rows(cs.workload, cs.analysis))))
            if cs.analysis is not None:
                w("\n".join(f"- {s}" for s in cs.analysis.summary) + "\n")
                w(table_md(*cost_rows(cs.analysis)))
            if cs.figure:
                w(figure_md(cs.figure))
        if e.get("notes"):
            w("### Notes\n")
            w("\n".join(f"- {n}" for n in e["notes"]) + "\n")
    w("## Cost model\n")
    w(COST_METHOD + "\n")
    w(f"Prices: {cost.REGION}, as of {cost.PRICES_AS_OF}.\n")
    w(table_md(PRICE_HEAD, price_rows()))
    cites = citations(results)
    if cites:
        w("## Papers\n")
        w("\n".join(f"- {c}" for c in cites) + "\n")
    (outdir / "report.md").write_text("\n".join(out), encoding="utf-8")


def figure_md(f: Figure) -> str:
    if f.error:
        return f"Plot {f.title} could not be drawn: {f.error}\n"
    alt = f.alt.replace("[", "(").replace("]", ")")
    cap = f"*{f.title}{': ' + f.caption if f.caption else ''}*"
    return f"![{alt}]({f.path})\n\n{cap}\n"


def load(path: Path) -> dict:
    with open(path, encoding="utf-8") as fh:
        results = json.load(fh)
    if results.get("schema") != SCHEMA:
        raise ValueError(f"{path}: results schema {results.get('schema')!r}, want {SCHEMA}")
    for e in results.get("experiments", []):
        if "experiment" not in e:
            raise ValueError(f"{path}: an experiment without a name")
    return results


def render(results_path: Path, outdir: Path) -> int:
    """Render the report; returns the number of plots that could not be drawn."""
    results = load(results_path)
    outdir.mkdir(parents=True, exist_ok=True)
    sections, failures = render_plots(results, outdir)
    write_html(results, sections, outdir)
    write_markdown(results, sections, outdir)
    return failures


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m hoard_bench.report", description=__doc__.splitlines()[0])
    ap.add_argument("results", type=Path, help="results.json written by hoard bench all")
    ap.add_argument("outdir", type=Path, help="directory for index.html, report.md and plots/")
    args = ap.parse_args(argv)
    try:
        failures = render(args.results, args.outdir)
    except (OSError, ValueError) as exc:
        print(f"hoard_bench.report: {exc}", file=sys.stderr)
        return 2
    n = sum(1 for _ in (args.outdir / PLOT_DIR).glob("*.png"))
    print(f"hoard_bench.report: wrote {args.outdir / 'index.html'}, {args.outdir / 'report.md'} and {n} plots")
    if failures:
        print(f"hoard_bench.report: {failures} plot(s) could not be drawn", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
