// Job view: the job's verdict, its nodes, and the estimated training FLOPs so far with its interval.
"use strict";
(function () {
  const job = document.body.dataset.job;

  function fact(dl, k, v) { dl.append(TS.el("dt", {}, k), TS.el("dd", {}, v)); }

  async function refresh() {
    const [j, ov] = await Promise.all([TS.api("/v1/jobs/" + encodeURIComponent(job)).catch(() => null),
                                       TS.api("/v1/overview")]);
    const h = document.getElementById("job-state");
    if (!j) { h.textContent = "job " + job + " is not known to the live engine"; document.body.dataset.loaded = "1"; return; }
    h.replaceChildren(TS.badge(j.state), " job " + job);
    const dl = document.getElementById("job-facts");
    dl.replaceChildren();
    fact(dl, "nodes", (j.nodes || []).join(", ") || "—");
    fact(dl, "started", TS.clock(j.start_t) + " (" + TS.ago(j.start_t, ov.now) + ")");
    if (j.end) fact(dl, "ended", TS.clock(j.end));
    if (j.p_training !== undefined && j.p_training !== null) fact(dl, "P(training)", TS.pct(j.p_training));
    const f = j.flops_so_far;
    if (f && f.flops !== undefined) {
      const iv = (f.lo !== undefined && f.hi !== undefined) ? " (interval " + TS.flops(f.lo) + " – " + TS.flops(f.hi) + ")" : "";
      fact(dl, "training FLOPs so far", TS.flops(f.flops) + iv);
    } else {
      fact(dl, "training FLOPs so far", f && f.reason ? "not estimated: " + f.reason : "not estimated for this job");
    }
    const members = new Set(j.nodes || []);
    const rows = ov.nodes.filter((n) => members.has(n.node)).map((n) => TS.el("tr", { "data-node": n.node },
      TS.el("td", {}, TS.el("a", { href: "/dashboard/nodes/" + encodeURIComponent(n.node) }, n.node)),
      TS.el("td", {}, TS.badge(n.state)), TS.el("td", { class: "num" }, TS.pct(n.p_training)),
      TS.el("td", {}, TS.ago(n.last_seen, ov.now))));
    document.querySelector("#job-nodes tbody").replaceChildren(...rows);
    document.body.dataset.loaded = "1";
  }

  document.addEventListener("DOMContentLoaded", () => TS.poll(refresh, 5000));
})();
