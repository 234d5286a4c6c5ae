// A standalone cachelet's dashboard (served by `hoard serve` next to its
// /metrics): its reads, its cache and its application's ring, from
// /dashboard/api/state.
"use strict";

(function () {
  const { el, bytes, pct, totals, outcomeBar, gauge, ringSVG, run, body } = window.hoardDash;

  function render(st) {
    const c = st.counters || {};
    const t = totals(c.reads);
    document.getElementById("who").textContent = (st.app ? st.app + " · " : "") + (st.id || "") + " · " + (st.endpoint || "");
    const tiles = [
      ["reads", t.all],
      ["hit ratio", pct(t.hits / t.all)],
      ["bytes saved from the store", bytes(t.saved)],
      ["writes", c.writes || 0],
      ["objects cached", c.cache_objects || 0],
      ["ring members", (st.ring || []).length || 1],
    ];
    document.getElementById("summary").replaceChildren(...tiles.map(([k, v]) =>
      el("div", { class: "tile" }, el("div", { class: "v" }, v), el("div", { class: "k" }, k))));
    const members = (st.ring || []).map((m) => el("tr", {},
      el("td", {}, m.member + (m.member === st.id ? " (this one)" : "")), el("td", { class: "num" }, pct(m.share))));
    document.getElementById("cache").replaceChildren(
      el("div", { class: "card" },
        el("h3", {}, "memory"),
        el("div", { class: "muted" }, "cached " + bytes(c.cache_bytes) + " of a " + bytes(c.budget_bytes) + " budget"),
        gauge(c.cache_bytes, c.budget_bytes, "cache", "cache"),
        el("div", {}, "reads by outcome"),
        outcomeBar(c.reads),
        el("div", { class: "muted" }, "owned objects evicted again: " + (c.evicted_again || 0))),
      el("div", { class: "card" },
        el("div", { class: "row" },
          el("div", { class: "grow" }, el("h3", {}, "ring"),
            members.length ? el("table", {}, el("thead", {}, el("tr", {}, el("th", {}, "member"), el("th", { class: "num" }, "share of keys"))),
              el("tbody", {}, ...members)) : el("div", { class: "muted" }, "alone: no application ring")),
          ringSVG(st.ring))));
    body.dataset.reads = String(t.all);
    body.dataset.hits = String(t.hits);
  }

  run("api/state", render, (st) => {
    const counts = {};
    for (const [k, rc] of Object.entries((st.counters || {}).reads || {})) counts[k] = rc.count;
    return counts;
  });
})();
