// hoard's dashboards, the parts both pages share: DOM and SVG helpers, the
// reads-by-outcome chart, and the polling loop. Every text from a server
// goes in through textContent, never as markup.
"use strict";

window.hoardDash = (function () {
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


  // run polls url every POLL_MS and hands each state to render; counts
  // gives a state's cumulative reads by outcome, for the chart.
  function run(url, render, counts) {
    const status = document.getElementById("status");
    async function poll() {
      try {
        const resp = await fetch(url, { credentials: "same-origin", cache: "no-store" });
        if (resp.status === 401) {
          status.textContent = "logged out: run `hoard dashboard` for a new link";
          status.classList.add("bad");
          return false;
        }
        if (!resp.ok) throw new Error("state: HTTP " + resp.status);
        const st = await resp.json();
        history.push({ t: Date.parse(st.time) || Date.now(), counts: counts(st) });
        while (history.length > HISTORY) history.shift();
        render(st);
        drawChart();
        updates++;
        body.dataset.updates = String(updates);
        body.dataset.loaded = "1";
        status.textContent = "updated " + new Date().toLocaleTimeString();
        status.classList.remove("bad");
      } catch (e) {
        status.textContent = "cannot reach the server (" + e.message + "); retrying";
        status.classList.add("bad");
      }
      return true;
    }
    async function loop() {
      if (await poll()) setTimeout(loop, POLL_MS);
    }
    loop();
  }

  return { el, svg, bytes, pct, ago, totals, outcomeBar, gauge, ringSVG, run, body, OUTCOMES };
})();
