"""The report of `hoard bench all` and its cost model.

A results.json written here (every plot kind, a cost workload and a failed
experiment) is rendered with ``python -m hoard_bench.report``, as `hoard
bench all` runs it; index.html is then loaded in headless Chromium, which
must load every plot image. Chromium is installed by `make chromium`; the
test fails without it. It needs no store, so it runs once per suite (in the
MinIO pass). The cost model is checked against figures worked out by hand.
"""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO_ROOT, STORE_KIND

sys.path.insert(0, str(REPO_ROOT / "python"))

from hoard_bench import cost

pytestmark = pytest.mark.skipif(
    STORE_KIND != "minio", reason="renders a fixture and needs no store: once per suite (the MinIO pass)"
)

CHROMIUM = "/usr/bin/chromium"


def _cdf(label: str, samples: list[float], n: int | None = None) -> dict:
    return {"label": label, "samples": sorted(samples), "n": n or len(samples)}


def fixture_results() -> dict:
    machine = {
        "nproc": 2,
        "gomaxprocs": 2,
        "memory_bytes": 4 << 30,
        "go_version": "go1.26",
        "os": "linux",
        "arch": "amd64",
    }
    workload = {
        "name": "read one 16 MiB object",
        "description": "one GET of a 16 MiB object",
        "warm_s": 0.0045,
        "cold_s": 0.011,
        "memory_bytes": 128 << 20,
        "cache_bytes": 16 << 20,
        "store_gets_warm": 1,
        "store_gets_cold": 1,
        "store_puts": 0,
        "keep_alive_s": 600,
    }
    access = {
        "experiment": "access",
        "title": "Access types <LH & RH>",  # escaped in HTML
        "reproduces": [{"paper": "OFC", "figure": "Fig. 7", "section": "§7.2.1", "citation": "OFC, EuroSys 2021"}],
        "status": "ok",
        "quick": True,
        "started_at": "2026-01-02T03:04:05Z",
        "duration_s": 21.5,
        "machine": machine,
        "method": "GETs one at a time on loopback.",
        "settings": {
            "object_sizes": [1024, 16 << 20],
            "link": "loopback (unshaped)",
            "iterations": [{"what": "1 KiB (per target)", "n": 1000}],
            "other": [{"name": "boto3", "value": "true"}],
        },
        "rows": [
            {
                "metric": "RH/LH p50 at 1 KiB",
                "unit": "x",
                "paper": 1.1276,
                "source": "OFC §7.2.1, Fig. 7 (text)",
                "hoard": 1.31,
                "ratio": 1.31 / 1.1276,
                "better": "lower",
                "short": True,
                "note": "Short: the peer hop | a pipe in a note",
            },
            {
                "metric": "store/LH p50",
                "unit": "x",
                "paper": 5.625,
                "source": "OFC",
                "hoard": None,
                "ratio": None,
                "better": "higher",
                "short": False,
            },
        ],
        "plots": [
            {
                "kind": "cdf",
                "id": "cdf-1-kib",
                "title": "GET latency CDF, 1 KiB",
                "unit": "ms",
                "xlabel": "latency (ms)",
                "ylabel": "fraction",
                "xlog": True,
                "series": [
                    _cdf("LH", [0.05 + 0.001 * i for i in range(200)]),
                    _cdf("store", [0.4 + 0.002 * i for i in range(100)], n=5000),  # thinned
                ],
            },
            {
                "kind": "bar",
                "id": "p50-by-access-type",
                "title": "p50 by access type",
                "unit": "ms",
                "ylog": True,
                "categories": ["1 KiB", "16 MiB"],
                "series": [
                    {"label": "LH", "values": [0.05, 4.3], "errors": [0.01, 5.0]},
                    {"label": "RH", "values": [None, 11.2]},
                ],
                "caption": "LH: local hit",
            },
            {
                "kind": "curve",
                "id": "throughput",
                "title": "throughput",
                "unit": "MB/s",
                "xlog": True,
                "ylog": True,
                "series": [{"label": "LH", "x": [1024, 16 << 20], "y": [20, 3700]}],
            },
        ],
        "workloads": [workload],
        "notes": ["a note"],
        "tables": [
            {
                "id": "per-stage",
                "title": "Per stage <ms>",  # escaped in HTML
                "columns": ["stage", "vanilla ms", "hoard ms", "reduction"],
                "rows": [["split", "458.7", "247.2", "46.1%"], ["merge | all", "266.2", "68.3", "74.3%"]],
                "caption": "medians of 3 runs",
            }
        ],
    }
    consistency = {
        "experiment": "consistency",
        "title": "Consistency settings",
        "reproduces": [{"paper": "Faa$T", "figure": "Table 6", "section": "§6.7"}],
        "status": "ok",
        "duration_s": 6.0,
        "settings": {"link": "loopback (unshaped)", "iterations": [{"what": "increments per setting", "n": 200}]},
        "rows": [],
        "plots": [
            {
                "kind": "bar",
                "id": "lost-increments",
                "title": "lost",
                "categories": ["strong", "local"],
                "series": [
                    {"label": "Faa$T Table 6", "values": [0, 800], "errors": [0, 0]},
                    {"label": "hoard", "values": [0, 795]},
                ],
            }
        ],
    }
    failed = {
        "experiment": "pipeline",
        "title": "ML inference pipeline",
        "reproduces": [{"paper": "Faa$T", "figure": "Fig. 9a", "section": "§6.3"}],
        "status": "failed",
        "error": "bench: MinIO did not start: <exit status 1>",
        "duration_s": 0.2,
        "settings": {"link": "loopback (unshaped)"},
        "rows": None,
        "plots": None,
    }
    return {
        "schema": 1,
        "command": "hoard bench all",
        "quick": True,
        "started_at": "2026-01-02T03:04:05Z",
        "duration_s": 28.0,
        "machine": machine,
        "experiments": [access, consistency, failed],
    }


# Plots drawn for the fixture: 3 + 1 + the access workload's cost curve.
EXPECTED_PLOTS = 5


def _render(tmp_path: Path) -> Path:
    results = tmp_path / "results.json"
    results.write_text(json.dumps(fixture_results()))
    out = tmp_path / "report"
    env = dict(os.environ, PYTHONPATH=str(REPO_ROOT / "python"), MPLBACKEND="Agg")
    proc = subprocess.run(
        [sys.executable, "-m", "hoard_bench.report", str(results), str(out)],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, f"report exited {proc.returncode}\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
    return out


def _chromium() -> str:
    path = shutil.which("chromium") or (CHROMIUM if os.access(CHROMIUM, os.X_OK) else None)
    if path is None:
        pytest.fail(
            "chromium is not installed: run `make chromium` (apt-get install chromium chromium-driver, as root)",
            pytrace=False,
        )
    return path


def _images_loaded(index: Path, profile: Path) -> tuple[int, int]:
    """Load index in headless Chromium; return (loaded, total) images."""
    argv = [
        _chromium(),
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        f"--user-data-dir={profile}",
        "--virtual-time-budget=5000",
        "--dump-dom",
        index.resolve().as_uri(),
    ]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=180, check=False)
    m = re.search(r'<body[^>]*\bdata-images="(\d+)/(\d+)"', proc.stdout)
    assert m, f"no data-images on <body> (exit {proc.returncode}); stderr:\n{proc.stderr[-3000:]}"
    return int(m.group(1)), int(m.group(2))


def test_report_renders_and_every_plot_loads(tmp_path):
    out = _render(tmp_path)
    index, md = out / "index.html", out / "report.md"
    assert index.is_file()
    assert md.is_file()
    pngs = sorted((out / "plots").glob("*.png"))
    assert len(pngs) == EXPECTED_PLOTS, [p.name for p in pngs]
    for p in pngs:
        data = p.read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n", p.name
        assert len(data) > 5000, p.name

    page = index.read_text()
    srcs = re.findall(r'<img src="([^"]+)" alt="([^"]+)"', page)
    assert sorted(src for src, _ in srcs) == sorted(f"plots/{p.name}" for p in pngs)
    assert all(alt.strip() for _, alt in srcs)
    assert "Access types &lt;LH &amp; RH&gt;" in page  # escaped
    assert "This experiment failed" in page
    assert "MinIO did not start: &lt;exit status 1&gt;" in page
    assert 'class="short"' in page
    assert "<h3>Per stage &lt;ms&gt;</h3>" in page
    assert "<th>vanilla ms</th>" in page
    assert '<td>split</td><td class="num">458.7</td>' in page
    assert '<td class="num">46.1%</td>' in page
    assert "medians of 3 runs" in page
    for needle in (
        "Paper vs hoard",
        "Cost per hour",
        "aws.amazon.com/lambda/pricing",
        "elasticache/pricing",
        "us-east-1",
    ):
        assert needle in page, needle

    text = md.read_text()
    assert "## ML inference pipeline (failed)" in text
    assert "MinIO did not start" in text
    assert "**short** RH/LH p50 at 1 KiB" in text
    assert "\\| a pipe in a note" in text
    assert "### Per stage <ms>" in text
    assert "| merge \\| all | 266.2 | 68.3 | 74.3% |" in text
    for p in pngs:
        assert f"](plots/{p.name})" in text, p.name

    loaded, total = _images_loaded(index, tmp_path / "chromium")
    assert total == EXPECTED_PLOTS
    assert loaded == total > 0

    # The counter does notice a plot that does not load.
    pngs[0].unlink()
    loaded, total = _images_loaded(index, tmp_path / "chromium2")
    assert (loaded, total) == (EXPECTED_PLOTS - 1, EXPECTED_PLOTS)


def test_report_rejects_other_schemas(tmp_path):
    results = tmp_path / "results.json"
    results.write_text(json.dumps({"schema": 99, "experiments": []}))
    env = dict(os.environ, PYTHONPATH=str(REPO_ROOT / "python"), MPLBACKEND="Agg")
    proc = subprocess.run(
        [sys.executable, "-m", "hoard_bench.report", str(results), str(tmp_path / "out")],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 2
    assert "schema 99" in proc.stderr


# --- the cost model -------------------------------------------------------------

P = cost.DEFAULT_PRICES
W = cost.Workload(
    name="w",
    warm_s=0.1,
    cold_s=0.5,
    memory_bytes=128 << 20,
    cache_bytes=0,
    store_gets_warm=1,
    store_gets_cold=2,
    store_puts=1,
    keep_alive_s=600,
)


def test_hoard_cost_known_figures():
    # One invocation a second: 0.1 s x 0.125 GB x $0.0000166667 + $0.0000002
    # + 1 GET x $0.0000004 + 1 PUT x $0.000005.
    per = 0.1 * 0.125 * 0.0000166667 + 0.0000002 + 0.0000004 + 0.000005
    assert cost.hoard_cost(W, 1.0) == pytest.approx(3600 * per, rel=1e-9)
    # Beyond the keep-alive the instance was unloaded: cold duration, cold GETs.
    per_cold = 0.5 * 0.125 * 0.0000166667 + 0.0000002 + 2 * 0.0000004 + 0.000005
    assert cost.hoard_cost(W, 3600.0) == pytest.approx(per_cold, rel=1e-9)
    # Keep-alive billed adds the idle 0.9 s at the provisioned-concurrency price.
    idle = 0.9 * 0.125 * 0.0000041667
    assert cost.hoard_keepalive_billed_cost(W, 1.0) == pytest.approx(3600 * (per + idle), rel=1e-9)


def test_billing_and_memory():
    assert cost.billed_seconds(0.0004) == pytest.approx(0.001)
    assert cost.billed_seconds(0.001) == pytest.approx(0.001)
    assert cost.billed_seconds(0.00101) == pytest.approx(0.002)
    small = cost.Workload("s", 0.01, 0.01, 10 << 20)
    assert cost.lambda_memory_mb(small) == 128  # Lambda's minimum
    cached = cost.Workload("c", 0.01, 0.01, 128 << 20, cache_bytes=(16 << 20) + 1)
    assert cost.lambda_memory_mb(cached) == 145  # the cache counts, rounded up
    huge = cost.Workload("h", 0.01, 0.01, 128 << 20, cache_bytes=20 << 30)
    assert cost.lambda_memory_mb(huge) is None
    assert math.isinf(cost.hoard_cost(huge, 1.0))


def test_always_on_options():
    # An hour apart: the smallest VM that holds 128 MiB plus the OS.
    assert cost.cheapest_vms(128 << 20, 0.1, 3600) == cost.Fleet("t3.micro", 1, 0.0104)
    assert cost.vm_cost(W, 3600) == pytest.approx(0.0104)
    # 0.1 s every 10 ms keeps 10 vCPUs busy: five m5.large beat fifty t3.micro
    # (10% baseline each) and every other type.
    assert cost.cheapest_vms(128 << 20, 0.1, 0.01) == cost.Fleet("m5.large", 5, pytest.approx(0.48))
    # 2 GiB of data needs $0.068 of ElastiCache an hour, whichever t3 nodes.
    assert cost.cheapest_cache(2 << 30).usd_per_hour == pytest.approx(0.068)
    assert cost.vm_cache_cost(W, 3600) == pytest.approx(0.0104 + 0.017)
    with pytest.raises(ValueError, match="no VM type"):
        cost.cheapest_vms(1 << 40, 0.1, 1)


ONE_VM = cost.Prices(vms=(cost.VMType("vm", 64, 8, 0.0104),))


def test_crossover_known():
    # Per invocation (warm) as above; the VM costs a flat $0.0104 an hour, so
    # hoard is cheaper once 3600/x * per < 0.0104.
    per = 0.1 * 0.125 * 0.0000166667 + 0.0000002 + 0.0000004 + 0.000005
    cs = cost.crossovers(W, "hoard", "VM", ONE_VM)
    assert len(cs) == 1
    assert cs[0].interval_s == pytest.approx(3600 * per / 0.0104, rel=1e-6)
    assert (cs[0].cheaper_above, cs[0].cheaper_below) == ("hoard", "VM")


def _crossover(w: cost.Workload, p: cost.Prices) -> float:
    cs = [c for c in cost.crossovers(w, "hoard", "VM", p) if c.cheaper_above == "hoard"]
    assert cs, "hoard never becomes cheaper"
    return cs[-1].interval_s


def test_crossover_monotonic():
    # Longer invocations make hoard dearer: it wins only further apart.
    points = [
        _crossover(cost.Workload("w", d, d, 128 << 20, keep_alive_s=600), ONE_VM) for d in (0.001, 0.01, 0.1, 1.0)
    ]
    assert points == sorted(points)
    assert points[0] < points[-1]
    # A dearer VM makes hoard win sooner.
    w = cost.Workload("w", 0.05, 0.05, 128 << 20)
    by_price = [_crossover(w, cost.Prices(vms=(cost.VMType("vm", 64, 8, usd),))) for usd in (0.001, 0.01, 0.05)]
    assert by_price == sorted(by_price, reverse=True)
    assert by_price[0] > by_price[-1]
    # More memory (a bigger cache) makes hoard dearer too.
    by_cache = [
        _crossover(cost.Workload("w", 0.05, 0.05, 128 << 20, cache_bytes=c), ONE_VM) for c in (0, 1 << 30, 4 << 30)
    ]
    assert by_cache == sorted(by_cache)


def test_curves_and_analysis():
    a = cost.analyze(W)
    assert a.intervals[0] == pytest.approx(0.01)
    assert a.intervals[-1] == pytest.approx(3600)
    hoard = a.curves["hoard"]
    warm = [c for x, c in zip(a.intervals, hoard, strict=True) if x <= W.keep_alive_s]
    assert all(b < c for b, c in zip(warm[1:], warm[:-1], strict=True)), (
        "hoard's cost must fall as invocations thin out"
    )
    assert all(k >= h for k, h in zip(a.curves["hoard (keep-alive billed)"], hoard, strict=True))
    assert len(a.summary) == len(cost.PAIRS)
    assert "hoard vs VM" in a.crossovers
    assert a.memory_mb == 128
    assert a.vm.name == "t3.micro"
    assert cost.describe_interval(0.01) == "10 ms"
    assert cost.describe_interval(90) == "1.5 min"
    assert cost.describe_interval(3600) == "1 h"
    items = {row["item"] for row in cost.price_table()}
    assert {"Lambda duration (x86)", "Lambda requests", "S3 Standard GET", "EC2 m5.large (Linux, on demand)"} <= items
    assert all(row["source"].startswith("https://aws.amazon.com/") for row in cost.price_table())
