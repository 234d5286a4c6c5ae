// hoard's dashboard: polls /dashboard/api/state and draws it. Every text
// from the server goes in through textContent, never as markup.
"use strict";

(function () {
  const POLL_MS = 2000;
  const HISTORY = 150; // points on the reads chart
  const OUTCOMES = [
    ["local_hit", "local hit", "--lh"],
    ["remote_hit", "remote hit", "--rh"],
    ["disk_hit", "disk hit", "--disk"],
    ["local_miss", "local miss", "--lm"],
    ["remote_miss", "remote miss", "--rm"],
    ["pass_through", "pass-through", "--pt"],
  ];
  const HITS = new Set(["local_hit", "remote_hit", "disk_hit"]);
  const SVG = "http://www.w3.org/2000/svg";
  const body = document.body;
  const history = []; // {t, counts: {outcome: cumulative count}}
  let updates = 0;

  // Errors anywhere on the page are counted where a test can read them.
  function countError() {
    body.dataset.errors = String(Number(body.dataset.errors || "0") + 1);
  }
  window.addEventListener("error", countError);
  window.addEventListener("unhandledrejection", countError);
  const consoleError = console.error.bind(console);
  console.error = function (...args) { countError(); consoleError(...args); };

  function el(tag, attrs, ...children) {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (k === "class") e.className = v;
      else e.setAttribute(k, v);
    }
    for (const c of children) {
      if (c === null || c === undefined) continue;
      e.append(typeof c === "string" || typeof c === "number" ? String(c) : c);
    }
    return e;
  }
  function svg(tag, attrs) {
    const e = document.createElementNS(SVG, tag);
    for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, String(v));
    return e;
  }
  function color(name) {
    return getComputedStyle(document.documentElement).getPropertyValue(name).trim() || "#888";
  }
  function bytes(n) {
    if (!n) return "0 B";
    const units = ["B", "KiB", "MiB", "GiB", "TiB"];
    let i = 0;
    while (n >= 1024 && i < units.length - 1) { n /= 1024; i++; }
    return (i ? n.toFixed(1) : String(n)) + " " + units[i];
  }
  function pct(x) { return isFinite(x) ? (100 * x).toFixed(1) + "%" : "–"; }
  function ago(iso) {
    const t = Date.parse(iso);
    if (!t || t < 0) return "never";
    const s = Math.max(0, (Date.now() - t) / 1000);
    if (s < 60) return Math.round(s) + " s ago";
    if (s < 3600) return Math.round(s / 60) + " min ago";
    return Math.round(s / 3600) + " h ago";
  }
  function totals(reads) {
    let all = 0, hits = 0, saved = 0;
    for (const [k, rc] of Object.entries(reads || {})) {
      all += rc.count;
      if (HITS.has(k)) { hits += rc.count; saved += rc.bytes; }
    }
    return { all, hits, saved };
  }
  function outcomeBar(reads) {
    const bar = el("div", { class: "bar", role: "img" });
    const { all } = totals(reads);
    const parts = [];
    for (const [k, label, c] of OUTCOMES) {
      const n = (reads && reads[k] && reads[k].count) || 0;
      if (!n) continue;
      const s = el("span", { title: label + ": " + n });
      s.style.width = (100 * n / all) + "%";
      s.style.background = color(c);
      bar.append(s);
      parts.push(label + " " + n);
    }
    bar.setAttribute("aria-label", parts.join(", ") || "no reads");
    return bar;
  }
  function gauge(used, limit, cls, label) {
    const g = el("div", { class: "gauge " + (cls || ""), title: label });
    const s = el("span");
    s.style.width = limit > 0 ? Math.min(100, 100 * used / limit) + "%" : "0";
    g.append(s);
    return g;
  }
  function ringSVG(shares) {
    const s = svg("svg", { class: "ring", viewBox: "-1.1 -1.1 2.2 2.2", role: "img", "aria-label": "ring" });
    const palette = ["#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1", "#ff9da7", "#9c755f", "#bab0ac"];
    if (!shares || !shares.length) {
      s.append(svg("circle", { r: 1, fill: "none", stroke: "#ccc", "stroke-width": 0.05 }));
      return s;
    }
    let a = -Math.PI / 2;
    shares.forEach((m, i) => {
      const b = a + 2 * Math.PI * m.share;
      const large = b - a > Math.PI ? 1 : 0;
      const d = shares.length === 1
        ? "M 0 -1 A 1 1 0 1 1 -0.0001 -1 Z"
        : `M 0 0 L ${Math.cos(a)} ${Math.sin(a)} A 1 1 0 ${large} 1 ${Math.cos(b)} ${Math.sin(b)} Z`;
      const p = svg("path", { d, fill: palette[i % palette.length], stroke: "#fff", "stroke-width": 0.02 });
      const t = svg("title");
      t.textContent = m.member + ": " + pct(m.share) + " of the keys";
      p.append(t);
      s.append(p);
      a = b;
    });
    return s;
  }

  function drawSummary(st) {
    let instances = 0, inv = 0, all = 0, hits = 0, saved = 0;
    for (const app of st.apps || []) {
      instances += (app.instances || []).length;
      inv += app.invocations || 0;
      const t = totals(app.reads);
      all += t.all; hits += t.hits; saved += t.saved;
    }
    const tiles = [
      ["applications", (st.apps || []).length],
      ["nodes", (st.agents || []).length],
      ["instances", instances],
      ["invocations", inv],
      ["reads", all],
      ["hit ratio", pct(hits / all)],
      ["bytes saved from the store", bytes(saved)],
    ];
    const box = document.getElementById("summary");
    box.replaceChildren(...tiles.map(([k, v]) => el("div", { class: "tile" }, el("div", { class: "v" }, v), el("div", { class: "k" }, k))));
    body.dataset.reads = String(all);
    body.dataset.hits = String(hits);
    body.dataset.invocations = String(inv);
  }

  function drawChart() {
    const chart = document.getElementById("chart");
    const W = 800, H = 180;
    const rates = [];
    for (let i = 1; i < history.length; i++) {
      const dt = (history[i].t - history[i - 1].t) / 1000;
      const r = {};
      for (const [k] of OUTCOMES) {
        r[k] = dt > 0 ? Math.max(0, ((history[i].counts[k] || 0) - (history[i - 1].counts[k] || 0)) / dt) : 0;
      }
      rates.push(r);
    }
    const max = Math.max(1, ...rates.map((r) => OUTCOMES.reduce((s, [k]) => s + r[k], 0)));
    const nodes = [];
    const x = (i) => W - ((rates.length - 1 - i) * W) / (HISTORY - 2); // the newest at the right
    const base = new Array(rates.length).fill(0);
    for (const [k, label, c] of OUTCOMES) {
      if (!rates.some((r) => r[k] > 0)) continue;
      const top = rates.map((r, i) => base[i] + r[k]);
      let d = "";
      top.forEach((v, i) => { d += (i ? " L " : "M ") + x(i) + " " + (H - (H * v) / max); });
      for (let i = rates.length - 1; i >= 0; i--) d += " L " + x(i) + " " + (H - (H * base[i]) / max);
      const p = svg("path", { d: d + " Z", fill: color(c), opacity: 0.85 });
      const t = svg("title");
      t.textContent = label;
      p.append(t);
      nodes.push(p);
      top.forEach((v, i) => { base[i] = v; });
    }
    chart.replaceChildren(...nodes);
    const legend = document.getElementById("legend");
    legend.replaceChildren(...OUTCOMES.map(([, l, c]) => {
      const i = el("i");
      i.style.background = color(c);
      return el("span", {}, i, l);
    }), el("span", { class: "scale" }, "top of the chart: " + max.toFixed(1) + " reads/s over the last " +
      Math.round(HISTORY * POLL_MS / 60000) + " min"));
  }

  function drawApps(st) {
    const box = document.getElementById("apps");
    const cards = (st.apps || []).map((app) => {
      const t = totals(app.reads);
      const fnRows = Object.entries(app.stats || {}).sort().map(([fn, fs]) => el("tr", {},
        el("td", {}, fn), el("td", { class: "num" }, fs.invocations), el("td", { class: "num" }, fs.cold_starts),
        el("td", { class: "num" }, fs.errors), el("td", { class: "num" }, (fs.p50_ms || 0).toFixed(1)),
        el("td", { class: "num" }, pct(totals(fs.reads).hits / totals(fs.reads).all))));
      const ka = app.keep_alive;
      const card = el("div", { class: "card", "data-app": app.name },
        el("div", { class: "row" },
          el("div", { class: "grow" },
            el("h3", {}, app.name, el("span", { class: "muted" }, "  v" + app.version)),
            el("div", { class: "muted" }, (app.instances || []).length + " instances · " + (app.invocations || 0) +
              " invocations · queue " + (app.queue || 0)),
            el("div", { class: "muted" }, "booked " + bytes(app.memory) + " · cache " + bytes(app.cache_budget) + " per instance"),
            el("div", {}, "hit ratio ", el("b", { class: "hit-ratio" }, pct(t.hits / t.all)), " of " + t.all + " reads · saved " + bytes(t.saved)),
            outcomeBar(app.reads),
            ka && ka.Mode !== undefined ? el("div", { class: "muted keep-alive" }, "keep-alive: " + (ka.Reason || String(ka.Mode))) : null),
          ringSVG(app.ring)),
        fnRows.length ? el("table", {},
          el("thead", {}, el("tr", {}, el("th", {}, "function"), el("th", { class: "num" }, "calls"), el("th", { class: "num" }, "cold"),
            el("th", { class: "num" }, "errors"), el("th", { class: "num" }, "p50 ms"), el("th", { class: "num" }, "hits"))),
          el("tbody", {}, ...fnRows)) : el("div", { class: "muted" }, "no invocations yet"));
      return card;
    });
    box.replaceChildren(...(cards.length ? cards : [el("div", { class: "muted" }, "no applications deployed")]));
    body.dataset.apps = (st.apps || []).map((a) => a.name).join(",");
  }

  function drawNodes(st) {
    const box = document.getElementById("nodes");
    const cards = (st.agents || []).map((ag) => {
      const rows = (ag.instances || []).map((inst) => {
        const cache = inst.cache || {};
        return el("tr", {},
          el("td", {}, inst.app, el("div", { class: "muted" }, inst.id)),
          el("td", { class: "state-" + inst.state }, inst.state),
          el("td", { class: "grow" },
            el("div", { class: "muted" }, "memory " + bytes(inst.memory_usage) + " of " + bytes(inst.memory_limit)),
            gauge(inst.memory_usage, inst.memory_limit, "", "memory"),
            el("div", { class: "muted" }, "cache " + bytes(cache.cache_bytes) + " of " + bytes(cache.budget_bytes)),
            gauge(cache.cache_bytes, cache.budget_bytes, "cache", "cache")),
          el("td", { class: "num" }, inst.invocations, el("div", { class: "muted" }, ago(inst.last_used))));
      });
      return el("div", { class: "card", "data-agent": ag.id },
        el("h3", {}, ag.id),
        ag.error ? el("div", { class: "state-dead" }, "not answering: " + ag.error) : null,
        rows.length ? el("table", {}, el("thead", {}, el("tr", {}, el("th", {}, "instance"), el("th", {}, "state"),
          el("th", {}, "memory and cache"), el("th", { class: "num" }, "calls"))), el("tbody", {}, ...rows))
          : el("div", { class: "muted" }, "no instances"));
    });
    box.replaceChildren(...(cards.length ? cards : [el("div", { class: "muted" }, "no node agent registered")]));
  }

  function drawEvents(st) {
    const all = [];
    for (const app of st.apps || []) for (const ev of app.events || []) all.push([app.name, ev]);
    all.sort((a, b) => Date.parse(b[1].time) - Date.parse(a[1].time));
    const list = document.getElementById("events");
    const items = all.slice(0, 40).map(([name, ev]) => el("li", {},
      el("time", { datetime: ev.time }, new Date(ev.time).toLocaleTimeString()),
      el("span", { class: "kind" }, ev.kind), el("span", { class: "muted" }, name), el("span", {}, ev.detail)));
    list.replaceChildren(...(items.length ? items : [el("li", { class: "muted" }, "no decisions yet")]));
  }

  async function poll() {
    const status = document.getElementById("status");
    try {
      const resp = await fetch("api/state", { credentials: "same-origin", cache: "no-store" });
      if (resp.status === 401) {
        status.textContent = "logged out: run `hoard dashboard` for a new link";
        status.classList.add("bad");
        return false;
      }
      if (!resp.ok) throw new Error("state: HTTP " + resp.status);
      const st = await resp.json();
      const counts = {};
      for (const app of st.apps || []) {
        for (const [k, rc] of Object.entries(app.reads || {})) counts[k] = (counts[k] || 0) + rc.count;
      }
      history.push({ t: Date.parse(st.time) || Date.now(), counts });
      while (history.length > HISTORY) history.shift();
      drawSummary(st);
      drawChart();
      drawApps(st);
      drawNodes(st);
      drawEvents(st);
      updates++;
      body.dataset.updates = String(updates);
      body.dataset.loaded = "1";
      status.textContent = "updated " + new Date().toLocaleTimeString();
      status.classList.remove("bad");
    } catch (e) {
      status.textContent = "cannot reach the controller (" + e.message + "); retrying";
      status.classList.add("bad");
    }
    return true;
  }

  async function loop() {
    if (await poll()) setTimeout(loop, POLL_MS);
  }

  document.getElementById("logout").addEventListener("click", async () => {
    await fetch("logout", { method: "POST", credentials: "same-origin" });
    location.reload();
  });
  loop();
})();
