// The platform's dashboard (served by the controller): applications,
// nodes and decisions, from /dashboard/api/state.
"use strict";

(function () {
  const { el, bytes, pct, ago, totals, outcomeBar, gauge, ringSVG, run, body } = window.hoardDash;

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

  // modelText sums up a function's memory model (OFC): learning, or
  // mature with its accuracy and what it sized.
  function modelText(m) {
    if (!m) return "–";
    if (!m.mature) return "learning (" + m.observed + ")";
    let t = "mature, " + pct(m.exact_or_over) + " exact-or-over";
    if (m.predicted) t += ", sized " + m.predicted + ", cache +" + bytes(m.cache_given_bytes);
    return t;
  }

  // admissionText is a function's admission by predicted benefit (OFC):
  // cached or not, and the data's share of its run time.
  function admissionText(a) {
    if (!a) return "all";
    const share = a.share >= 0 ? " (data " + pct(a.share) + ")" : "";
    if ((a.reason || "").startsWith("learning")) return "learning" + share;
    return (a.admit ? "cached" : "not cached") + share;
  }

  // treeView draws an application's function tree (FaaSNet): the agents
  // hosting it, each under the one it fetches its code from.
  function treeView(t) {
    if (!t || !t.root) return null;
    const children = {};
    for (const n of t.nodes || []) children[n.id] = n.children || [];
    const item = (id, depth) => {
      if (depth > 64) return null; // a tree is balanced; this bounds a bad one
      const kids = (children[id] || []).map((c) => item(c, depth + 1)).filter(Boolean);
      return el("li", {}, id, kids.length ? el("ul", {}, ...kids) : null);
    };
    return el("div", { class: "tree" }, el("div", { class: "muted" }, "function tree: " + (t.nodes || []).length +
      ((t.nodes || []).length === 1 ? " agent" : " agents") + ", height " + t.height), el("ul", {}, item(t.root, 0)));
  }

  function drawApps(st) {
    const box = document.getElementById("apps");
    const cards = (st.apps || []).map((app) => {
      const t = totals(app.reads);
      const fnRows = Object.entries(app.stats || {}).sort().map(([fn, fs]) => el("tr", {},
        el("td", {}, fn), el("td", { class: "num" }, fs.invocations), el("td", { class: "num" }, fs.cold_starts),
        el("td", { class: "num" }, fs.errors), el("td", { class: "num" }, (fs.p50_ms || 0).toFixed(1)),
        el("td", { class: "num" }, pct(totals(fs.reads).hits / totals(fs.reads).all)),
        el("td", { class: "num model" }, modelText(fs.model)),
        el("td", { class: "admission", "data-admit": fs.admission ? String(fs.admission.admit) : "all" }, admissionText(fs.admission))));
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
        treeView(app.tree),
        fnRows.length ? el("table", {},
          el("thead", {}, el("tr", {}, el("th", {}, "function"), el("th", { class: "num" }, "calls"), el("th", { class: "num" }, "cold"),
            el("th", { class: "num" }, "errors"), el("th", { class: "num" }, "p50 ms"), el("th", { class: "num" }, "hits"),
            el("th", { class: "num" }, "memory model"), el("th", {}, "admission"))),
          el("tbody", {}, ...fnRows)) : el("div", { class: "muted" }, "no invocations yet"));
      return card;
    });
    box.replaceChildren(...(cards.length ? cards : [el("div", { class: "muted" }, "no applications deployed")]));
    body.dataset.apps = (st.apps || []).map((a) => a.name).join(",");
  }

  // shardHealth shows the erasure-coded shards an instance holds for its
  // application and the loss risk it computes (InfiniCache).
  function shardHealth(h) {
    if (!h) return null;
    const risk = h.loss_probability > 0 ? (100 * h.loss_probability).toPrecision(2) + "% an hour" : "none seen";
    return el("div", { class: "muted shards" }, h.shards + " shards, " + bytes(h.held_bytes) + " of " + bytes(h.budget_bytes) +
      "; loss risk " + risk + (h.members_lost ? " (" + h.members_lost + " members lost)" : ""));
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
            gauge(cache.cache_bytes, cache.budget_bytes, "cache", "cache"),
            shardHealth(cache.erasure)),
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

  document.getElementById("logout").addEventListener("click", async () => {
    await fetch("logout", { method: "POST", credentials: "same-origin" });
    location.reload();
  });
  run("api/state", (st) => {
    drawSummary(st);
    drawApps(st);
    drawNodes(st);
    drawEvents(st);
  }, (st) => {
    const counts = {};
    for (const app of st.apps || []) {
      for (const [k, rc] of Object.entries(app.reads || {})) counts[k] = (counts[k] || 0) + rc.count;
    }
    return counts;
  });
})();
