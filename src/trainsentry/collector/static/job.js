// Job view: the job's verdict, its nodes, and the estimated training FLOPs so far with its interval.
"use strict";
(function () {
  const job = document.body.dataset.job;

  function fact(dl, k, v) { dl.append(TS.el("dt", {}, k), TS.el("dd", {}, v)); }

  async function refresh() {
    const [j, ov, f] = await Promise.all([TS.api("/v1/jobs/" + encodeURIComponent(job)).catch(() => null),
                                          TS.api("/v1/overview"),
                                          TS.api("/v1/jobs/" + encodeURIComponent(job) + "/flops").catch(() => null)]);
    const h = document.getElementById("job-state");
    if (!j) { h.textContent = "job " + job + " is not known to the live engine"; document.body.dataset.loaded = "1"; return; }
    h.replaceChildren(TS.badge(j.state), " job " + job);
    const dl = document.getElementById("job-facts");
    dl.replaceChildren();
    fact(dl, "nodes", (j.nodes || []).join(", ") || "—");
    fact(dl, "started", TS.clock(j.start_t) + " (" + TS.ago(j.start_t, ov.now) + ")");
    if (j.end) fact(dl, "ended", TS.clock(j.end));
    if (j.p_training !== undefined && j.p_training !== null) fact(dl, "P(training)", TS.pct(j.p_training));
    const flops = TS.el("dd", { id: "flops" });
    if (f && f.available) {
      flops.append(TS.flops(f.flops) + " (" + Math.round(100 * f.level) + " % interval " + TS.flops(f.lo) +
        " – " + TS.flops(f.hi) + ", " + f.estimator + ")");
      flops.dataset.flops = f.flops;
    } else {
      flops.append(f ? "not estimated: " + f.reason : "not estimated");
    }
    dl.append(TS.el("dt", {}, "training FLOPs so far"), flops);
    // The estimator learnt BF16 training; the ceiling holds whatever precision the job's products ran in.
    if (f && f.available && f.tensor_flop_max !== null && f.tensor_flop_max !== undefined) {
      dl.append(TS.el("dt", {}, "tensor-core ceiling"), TS.el("dd", { id: "flops-ceiling", "data-flops": f.tensor_flop_max },
        "at most " + TS.flops(f.tensor_flop_max) + " in any precision (tensor activity at the FP8 peak; the estimate " +
        "above learnt BF16 training and sees about half of an FP8 trainer's work)"));
    }
    // Windows of the job below the single-device check's busy floor: a bound on their work, not a verdict.
    const floor = j.below_floor;
    if (floor && floor.windows > 0) {
      dl.append(TS.el("dt", {}, "below the busy floor"), TS.el("dd", { id: "below-floor", "data-floor-flop": floor.tensor_flop_max },
        "at most " + TS.flops(floor.tensor_flop_max) + " of tensor-core work in " + floor.windows + " windows covering " +
        Math.round(floor.seconds) + " s (activity at the FP8 peak; half if BF16): a bound, not a measurement"));
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
