// Overview: the fleet from GET /v1/overview (aggregated on the server), refreshed every 3 s.
"use strict";
(function () {
  const STATES = ["training", "inference", "other", "idle", "unmonitored", "pending"];
  let last = null;

  function summary(doc) {
    const box = document.getElementById("summary");
    box.replaceChildren(TS.el("div", { class: "card" }, TS.el("b", {}, doc.n_nodes), "nodes"),
      ...STATES.map((s) => TS.el("div", { class: "card", "data-count": s },
        TS.el("b", {}, doc.counts[s] || 0), TS.badge(s === "pending" ? null : s))));
  }

  // P(training), and where the single-device check read the latest window like training (at its
  // threshold, decided by the server), its P beside it: the verdict's second path, read from the busiest
  // GPU's activity, whose P the verdict takes where it is the larger.
  function pCell(n) {
    const td = TS.el("td", { class: "num" }, TS.pct(n.p_training));
    if (n.lead_like_training) {
      td.append(" ", TS.el("span", { class: "lead", title: "single-device check: the busy GPU's activity reads like " +
        "training in the latest window (the verdict's single-device path)" },
        "GPU " + TS.pct(n.lead_p)));
    }
    // Below the single-device check's busy floor it gives no P, only a bound on the window's work.
    if (n.floor_flop !== null && n.floor_flop !== undefined) {
      td.append(" ", TS.el("span", { class: "floor", "data-floor-flop": n.floor_flop, title: "the latest window ran " +
        "kernels under the single-device check's 5 % busy floor, where it judges nothing: at most this much " +
        "tensor-core work (FP8 peak; half if BF16) — a bound, not a measurement" }, "under floor ≤ " + TS.flops(n.floor_flop)));
    }
    return td;
  }

  function nodeRow(n, now) {
    const link = TS.el("a", { href: "/dashboard/nodes/" + encodeURIComponent(n.node) }, n.node);
    const devs = Object.entries(n.devices || {}).map(([k, v]) => v + " " + k).join(", ");
    const state = TS.badge(n.state);
    if (n.state === "unmonitored" && n.last_verdict) state.title = "last verdict: " + n.last_verdict + " (" + n.unmonitored + ")";
    const job = n.job ? TS.el("a", { href: "/dashboard/jobs/" + encodeURIComponent(n.job) }, n.job) : "—";
    // GPUs the node stopped reporting while it goes on: what they do is unmonitored
    const silent = (n.silent_devices || []).length ? TS.el("span", { class: "alerts", title: "no samples from these " +
      "devices while the node reports: unmonitored" }, " silent: " + n.silent_devices.join(", ")) : "";
    return TS.el("tr", { "data-node": n.node, "data-state": n.state || "pending" },
      TS.el("td", {}, link), TS.el("td", {}, state), pCell(n),
      TS.el("td", { title: TS.clock(n.last_seen) }, TS.ago(n.last_seen, now)),
      TS.el("td", { class: "num" + (n.alerts ? " alerts" : "") }, n.alerts || 0), TS.el("td", {}, job),
      TS.el("td", {}, devs || "—", silent));
  }

  function jobRow(j, now) {
    return TS.el("tr", { "data-job": j.job },
      TS.el("td", {}, TS.el("a", { href: "/dashboard/jobs/" + encodeURIComponent(j.job) }, j.job)),
      TS.el("td", {}, TS.badge(j.state)), TS.el("td", { class: "num" }, TS.pct(j.p_training)),
      TS.el("td", {}, (j.nodes || []).length + " · " + (j.nodes || []).slice(0, 8).join(", ") +
        ((j.nodes || []).length > 8 ? ", …" : "")),
      TS.el("td", { title: TS.clock(j.start_t) }, TS.ago(j.start_t, now)));
  }

  function render() {
    if (!last) return;
    const q = document.getElementById("filter").value.trim().toLowerCase();
    const rows = last.nodes.filter((n) => !q || n.node.toLowerCase().includes(q) || (n.state || "").includes(q));
    // The table shows at most 500 rows; the counts above cover the whole fleet.
    const shown = rows.slice(0, 500).map((n) => nodeRow(n, last.now));
    document.querySelector("#nodes tbody").replaceChildren(...shown);
    document.querySelector("#jobs tbody").replaceChildren(...last.jobs.map((j) => jobRow(j, last.now)));
    document.getElementById("updated").textContent = "updated " + TS.clock(last.now) + " · " + rows.length +
      " of " + last.n_nodes + " nodes match" + (rows.length > 500 ? " (first 500 shown)" : "");
  }

  async function refresh() {
    last = await TS.api("/v1/overview");
    summary(last);
    render();
    document.body.dataset.loaded = "1";
  }

  document.addEventListener("DOMContentLoaded", () => {
    document.getElementById("filter").addEventListener("input", render);
    TS.poll(refresh, 3000);
  });
})();
