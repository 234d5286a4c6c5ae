"""The cost of running an experiment's application for an hour, after Faa$T §6.1.

Faa$T (SoCC 2021, §6.1 "Cost model", Fig. 12) prices an application run
end to end as FaaS invocations (time x memory at a $/GB-s price, plus
requests) against VMs kept running the whole time at their on-demand
price, across invocation intervals from 10 ms to 1 hour. This module does
the same with published AWS list prices for three ways to run one
workload (a `CostWorkload` of results.json: one invocation's duration warm
and cold, its memory, its cache, its store requests, the keep-alive):

* ``hoard``: serverless. Each invocation is billed its duration (rounded up
  to 1 ms) times the function's memory, which includes the cache, since
  hoard's cache lives inside the instance; plus the request price and the
  store requests it makes (a version-checked local hit still sends one
  conditional GET). When invocations come within the keep-alive the
  instance and its cache stay loaded (warm duration); further apart the
  instance has been unloaded and the invocation reads the store (cold
  duration). Idle keep-alive time is not billed, as on Lambda.
* ``hoard (keep-alive billed)``: the same, plus the idle time the instance
  is kept loaded, billed at Lambda's provisioned-concurrency price: what
  holding the cache would cost were the platform to charge for it.
* ``VM``: an always-on EC2 instance holding the function and its data in
  memory; the cheapest that fits, as many as the invocation rate needs.
  Burstable (t3) instances count only up to their baseline CPU share.
* ``VM + ElastiCache``: an always-on VM for the function, and the cheapest
  ElastiCache node(s) holding the data.

The VM options pay no store requests (their data lives in memory) and
their invocations are assumed to take the warm duration. Instance start-up
(cold starts) is not priced. Prices are list prices, on demand, us-east-1,
without free tiers or discounts; they change: check the sources.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence

MIB = 1 << 20
GIB = 1 << 30

#: When the prices below were taken from the pages they cite.
PRICES_AS_OF = "2025 (list prices; AWS changes them: check the sources before relying on a figure)"
REGION = "us-east-1 (US East, N. Virginia)"

LAMBDA_PRICING_URL = "https://aws.amazon.com/lambda/pricing/"
S3_PRICING_URL = "https://aws.amazon.com/s3/pricing/"
EC2_PRICING_URL = "https://aws.amazon.com/ec2/pricing/on-demand/"
ELASTICACHE_PRICING_URL = "https://aws.amazon.com/elasticache/pricing/"


@dataclasses.dataclass(frozen=True)
class VMType:
    name: str
    vcpus: int
    memory_gib: float
    usd_per_hour: float
    #: Burstable instances: the CPU share per vCPU they sustain; None: all of it.
    baseline: float | None = None


@dataclasses.dataclass(frozen=True)
class CacheNode:
    name: str
    memory_gib: float
    usd_per_hour: float


@dataclasses.dataclass(frozen=True)
class Prices:
    lambda_gb_s: float = 0.0000166667  # x86, first 6 billion GB-s a month
    lambda_request: float = 0.20 / 1e6
    lambda_provisioned_gb_s: float = 0.0000041667  # x86 provisioned concurrency
    lambda_min_mb: int = 128
    lambda_max_mb: int = 10240
    lambda_billing_ms: float = 1.0
    s3_get: float = 0.0004 / 1000  # S3 Standard GET, HEAD
    s3_put: float = 0.005 / 1000  # S3 Standard PUT, COPY, POST, LIST
    #: Memory a VM keeps for its operating system, on top of the workload's.
    vm_os_bytes: int = 512 * MIB
    vms: tuple[VMType, ...] = (
        VMType("t3.micro", 2, 1, 0.0104, baseline=0.10),
        VMType("t3.small", 2, 2, 0.0208, baseline=0.20),
        VMType("t3.medium", 2, 4, 0.0416, baseline=0.20),
        VMType("m5.large", 2, 8, 0.096),
        VMType("m5.xlarge", 4, 16, 0.192),
        VMType("m5.2xlarge", 8, 32, 0.384),
        VMType("m5.4xlarge", 16, 64, 0.768),
    )
    cache_nodes: tuple[CacheNode, ...] = (
        CacheNode("cache.t3.micro", 0.5, 0.017),
        CacheNode("cache.t3.small", 1.37, 0.034),
        CacheNode("cache.t3.medium", 3.09, 0.068),
        CacheNode("cache.m5.large", 6.38, 0.156),
        CacheNode("cache.r5.large", 13.07, 0.216),
        CacheNode("cache.r5.xlarge", 26.32, 0.431),
    )


DEFAULT_PRICES = Prices()


def price_table(p: Prices = DEFAULT_PRICES) -> list[dict]:
    """The price parameters, each with its unit and source, for the report."""
    rows = [
        {
            "item": "Lambda duration (x86)",
            "price": p.lambda_gb_s,
            "unit": "USD per GB-s",
            "source": LAMBDA_PRICING_URL,
            "note": "first 6 billion GB-s a month; billed in 1 ms steps; memory 128 MB to 10,240 MB in 1 MB steps",
        },
        {
            "item": "Lambda requests",
            "price": p.lambda_request,
            "unit": "USD per request",
            "source": LAMBDA_PRICING_URL,
            "note": "$0.20 per 1M requests",
        },
        {
            "item": "Lambda provisioned concurrency (x86)",
            "price": p.lambda_provisioned_gb_s,
            "unit": "USD per GB-s",
            "source": LAMBDA_PRICING_URL,
            "note": "used only for the keep-alive-billed bound",
        },
        {
            "item": "S3 Standard GET",
            "price": p.s3_get,
            "unit": "USD per request",
            "source": S3_PRICING_URL,
            "note": "$0.0004 per 1,000 GET/HEAD",
        },
        {
            "item": "S3 Standard PUT",
            "price": p.s3_put,
            "unit": "USD per request",
            "source": S3_PRICING_URL,
            "note": "$0.005 per 1,000 PUT/COPY/POST/LIST",
        },
    ]
    for vm in p.vms:
        burst = f", burstable: {vm.baseline:.0%} baseline per vCPU" if vm.baseline is not None else ""
        rows.append(
            {
                "item": f"EC2 {vm.name} (Linux, on demand)",
                "price": vm.usd_per_hour,
                "unit": "USD per hour",
                "source": EC2_PRICING_URL,
                "note": f"{vm.vcpus} vCPU, {vm.memory_gib:g} GiB{burst}",
            }
        )
    for node in p.cache_nodes:
        rows.append(
            {
                "item": f"ElastiCache {node.name} (on demand)",
                "price": node.usd_per_hour,
                "unit": "USD per hour",
                "source": ELASTICACHE_PRICING_URL,
                "note": f"{node.memory_gib:g} GiB",
            }
        )
    return rows


@dataclasses.dataclass(frozen=True)
class Workload:
    """One invocation of an application (results.json's ``workloads[i]``)."""

    name: str
    warm_s: float
    cold_s: float
    memory_bytes: int
    cache_bytes: int = 0
    store_gets_warm: float = 0.0
    store_gets_cold: float = 0.0
    store_puts: float = 0.0
    keep_alive_s: float = 600.0
    description: str = ""
    source: str = ""

    @classmethod
    def from_json(cls, d: dict) -> Workload:
        return cls(
            name=d["name"],
            warm_s=float(d["warm_s"]),
            cold_s=float(d.get("cold_s") or d["warm_s"]),
            memory_bytes=int(d["memory_bytes"]),
            cache_bytes=int(d.get("cache_bytes", 0)),
            store_gets_warm=float(d.get("store_gets_warm", 0)),
            store_gets_cold=float(d.get("store_gets_cold", 0)),
            store_puts=float(d.get("store_puts", 0)),
            keep_alive_s=float(d.get("keep_alive_s", 600)),
            description=d.get("description", ""),
            source=d.get("source", ""),
        )


def lambda_memory_mb(w: Workload, p: Prices = DEFAULT_PRICES) -> int | None:
    """The function's memory setting: its own memory plus its cache, rounded
    up to a whole MB, at least Lambda's minimum; None above its maximum."""
    mb = max(math.ceil((w.memory_bytes + w.cache_bytes) / MIB), p.lambda_min_mb)
    return mb if mb <= p.lambda_max_mb else None


def billed_seconds(duration_s: float, p: Prices = DEFAULT_PRICES) -> float:
    """Lambda's billed duration: rounded up to the billing step, at least one step."""
    step = p.lambda_billing_ms / 1000
    return max(math.ceil(duration_s / step - 1e-9), 1) * step


def invocations_per_hour(interval_s: float) -> float:
    return 3600.0 / interval_s


def hoard_invocation_cost(w: Workload, interval_s: float, p: Prices = DEFAULT_PRICES) -> float:
    """USD of one invocation on hoard when invocations come interval_s apart."""
    mb = lambda_memory_mb(w, p)
    if mb is None:
        return math.inf
    warm = interval_s <= w.keep_alive_s
    duration = w.warm_s if warm else w.cold_s
    gets = w.store_gets_warm if warm else w.store_gets_cold
    gb = mb / 1024
    return (
        billed_seconds(duration, p) * gb * p.lambda_gb_s + p.lambda_request + gets * p.s3_get + w.store_puts * p.s3_put
    )


def hoard_cost(w: Workload, interval_s: float, p: Prices = DEFAULT_PRICES) -> float:
    """USD per hour on hoard: pay per use, idle keep-alive not billed."""
    return invocations_per_hour(interval_s) * hoard_invocation_cost(w, interval_s, p)


def hoard_keepalive_billed_cost(w: Workload, interval_s: float, p: Prices = DEFAULT_PRICES) -> float:
    """USD per hour on hoard with the idle keep-alive billed at the
    provisioned-concurrency price (an upper bound on holding the cache)."""
    mb = lambda_memory_mb(w, p)
    if mb is None:
        return math.inf
    warm = interval_s <= w.keep_alive_s
    busy = billed_seconds(w.warm_s if warm else w.cold_s, p)
    idle = max(min(interval_s, w.keep_alive_s) - busy, 0.0)
    return (
        hoard_cost(w, interval_s, p) + invocations_per_hour(interval_s) * idle * (mb / 1024) * p.lambda_provisioned_gb_s
    )


@dataclasses.dataclass(frozen=True)
class Fleet:
    """Always-on machines: what they are, how many, at what price."""

    name: str
    count: int
    usd_per_hour: float

    def describe(self) -> str:
        return f"{self.count} x {self.name}" if self.count > 1 else self.name


def cheapest_vms(need_bytes: int, busy_s: float, interval_s: float, p: Prices = DEFAULT_PRICES) -> Fleet:
    """The cheapest fleet of one VM type that holds need_bytes (plus the
    OS) and keeps up with one busy_s invocation every interval_s."""
    need_gib = (need_bytes + p.vm_os_bytes) / GIB
    concurrency = busy_s / interval_s
    best: Fleet | None = None
    for vm in p.vms:
        if vm.memory_gib < need_gib:
            continue
        capacity = vm.vcpus * (vm.baseline if vm.baseline is not None else 1.0)
        count = max(1, math.ceil(concurrency / capacity - 1e-12))
        fleet = Fleet(vm.name, count, count * vm.usd_per_hour)
        if best is None or fleet.usd_per_hour < best.usd_per_hour:
            best = fleet
    if best is None:
        raise ValueError(f"no VM type holds {need_gib:.1f} GiB")
    return best


def cheapest_cache(need_bytes: int, p: Prices = DEFAULT_PRICES) -> Fleet:
    """The cheapest set of ElastiCache nodes of one type holding need_bytes."""
    need_gib = need_bytes / GIB
    best: Fleet | None = None
    for node in p.cache_nodes:
        count = max(1, math.ceil(need_gib / node.memory_gib - 1e-12))
        fleet = Fleet(node.name, count, count * node.usd_per_hour)
        if best is None or fleet.usd_per_hour < best.usd_per_hour:
            best = fleet
    assert best is not None
    return best


def vm_cost(w: Workload, interval_s: float, p: Prices = DEFAULT_PRICES) -> float:
    """USD per hour for always-on VMs holding the function and its data."""
    return cheapest_vms(w.memory_bytes + w.cache_bytes, w.warm_s, interval_s, p).usd_per_hour


def vm_cache_cost(w: Workload, interval_s: float, p: Prices = DEFAULT_PRICES) -> float:
    """USD per hour for always-on VMs for the function plus ElastiCache for its data."""
    return (
        cheapest_vms(w.memory_bytes, w.warm_s, interval_s, p).usd_per_hour
        + cheapest_cache(w.cache_bytes, p).usd_per_hour
    )


#: The options, in the order they are plotted; hoard's first.
OPTIONS: dict[str, Callable[[Workload, float, Prices], float]] = {
    "hoard": hoard_cost,
    "hoard (keep-alive billed)": hoard_keepalive_billed_cost,
    "VM": vm_cost,
    "VM + ElastiCache": vm_cache_cost,
}

MIN_INTERVAL_S = 0.01
MAX_INTERVAL_S = 3600.0

#: Intervals the report tabulates (20 min: Faa$T's median application, §6.3).
TABLE_INTERVALS: tuple[tuple[float, str], ...] = (
    (0.01, "10 ms"),
    (1.0, "1 s"),
    (60.0, "1 min"),
    (1200.0, "20 min"),
    (3600.0, "1 h"),
)


def interval_grid(lo: float = MIN_INTERVAL_S, hi: float = MAX_INTERVAL_S, points: int = 241) -> list[float]:
    """Invocation intervals evenly spaced on a log scale, lo and hi included."""
    a, b = math.log10(lo), math.log10(hi)
    return [10 ** (a + (b - a) * i / (points - 1)) for i in range(points)]


@dataclasses.dataclass(frozen=True)
class Crossover:
    interval_s: float
    #: The option that is cheaper just above interval_s.
    cheaper_above: str
    #: The option that is cheaper just below interval_s.
    cheaper_below: str


def crossovers(
    w: Workload,
    a: str,
    b: str,
    p: Prices = DEFAULT_PRICES,
    lo: float = MIN_INTERVAL_S,
    hi: float = MAX_INTERVAL_S,
) -> list[Crossover]:
    """Where options a and b swap places as the interval grows from lo to hi
    (bisection on a log scale; a jump, such as the keep-alive step, counts
    where it swaps them)."""
    fa, fb = OPTIONS[a], OPTIONS[b]

    def sign(x: float) -> int:
        d = fa(w, x, p) - fb(w, x, p)
        return 0 if d == 0 else (1 if d > 0 else -1)

    grid = interval_grid(lo, hi, 2001)
    out: list[Crossover] = []
    prev_x, prev_s = grid[0], sign(grid[0])
    for x in grid[1:]:
        s = sign(x)
        if s == 0:
            continue
        if prev_s != 0 and s != prev_s:
            left, right = math.log(prev_x), math.log(x)
            for _ in range(80):
                mid = (left + right) / 2
                if sign(math.exp(mid)) == prev_s:
                    left = mid
                else:
                    right = mid
            cheaper_above = a if s < 0 else b
            cheaper_below = b if cheaper_above == a else a
            out.append(Crossover(math.exp(right), cheaper_above, cheaper_below))
        prev_x, prev_s = x, s
    return out


def describe_interval(s: float) -> str:
    """A human interval: 10 ms, 1.5 s, 12 min, 1 h."""
    if s < 1:
        return f"{s * 1000:.3g} ms"
    if s < 60:
        return f"{s:.3g} s"
    if s < 3600:
        return f"{s / 60:.3g} min"
    return f"{s / 3600:.3g} h"


@dataclasses.dataclass
class Analysis:
    workload: Workload
    memory_mb: int | None
    intervals: list[float]
    curves: dict[str, list[float]]
    crossovers: dict[str, list[Crossover]]
    #: Which machines the always-on options use at the longest interval.
    vm: Fleet
    vm_for_cache_option: Fleet
    cache_nodes: Fleet
    summary: list[str]


def describe_pair(a: str, b: str, a_first: bool, cs: Sequence[Crossover], lo: float, hi: float) -> str:
    """A sentence on where a and b cross: the last crossover decides; the
    steps before it (an always-on fleet gaining a machine at a time while
    the serverless cost falls smoothly) are counted, not listed."""
    first = a if a_first else b
    if not cs:
        other = b if first == a else a
        span = f"from {describe_interval(lo)} to {describe_interval(hi)}"
        return f"{first} is cheaper than {other} at every interval {span}."
    last = cs[-1]
    text = (
        f"{last.cheaper_above} is cheaper than {last.cheaper_below} for invocations more than "
        f"{describe_interval(last.interval_s)} apart"
    )
    if len(cs) == 1:
        return text + f"; {last.cheaper_below} below."
    return (
        text + f"; below that the two alternate ({len(cs) - 1} more crossings down to "
        f"{describe_interval(cs[0].interval_s)}, as the always-on option adds machines to keep up), "
        f"{first} cheapest at {describe_interval(lo)}."
    )


#: The pairs whose crossovers the report states: each hoard option
#: against each always-on one.
PAIRS: tuple[tuple[str, str], ...] = (
    ("hoard", "VM"),
    ("hoard", "VM + ElastiCache"),
    ("hoard (keep-alive billed)", "VM"),
    ("hoard (keep-alive billed)", "VM + ElastiCache"),
)


def analyze(w: Workload, p: Prices = DEFAULT_PRICES, intervals: Sequence[float] | None = None) -> Analysis:
    """Every option's cost across intervals, and where the hoard options
    cross the always-on ones."""
    xs = list(intervals) if intervals is not None else interval_grid()
    curves = {name: [f(w, x, p) for x in xs] for name, f in OPTIONS.items()}
    cross: dict[str, list[Crossover]] = {}
    summary = []
    for a, b in PAIRS:
        cs = crossovers(w, a, b, p, xs[0], xs[-1])
        cross[f"{a} vs {b}"] = cs
        summary.append(describe_pair(a, b, curves[a][0] < curves[b][0], cs, xs[0], xs[-1]))
    long = xs[-1]
    return Analysis(
        workload=w,
        memory_mb=lambda_memory_mb(w, p),
        intervals=xs,
        curves=curves,
        crossovers=cross,
        vm=cheapest_vms(w.memory_bytes + w.cache_bytes, w.warm_s, long, p),
        vm_for_cache_option=cheapest_vms(w.memory_bytes, w.warm_s, long, p),
        cache_nodes=cheapest_cache(w.cache_bytes, p),
        summary=summary,
    )
