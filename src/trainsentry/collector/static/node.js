// Node view: per device, live plots of link bytes/s (TX and RX), PCIe, power and activity over a
// selectable range, with unmonitored intervals shaded, segment/job boundaries marked, the verdict
// timeline above them and the evidence behind the current verdict in words.
"use strict";
(function () {
  const node = document.body.dataset.node;
  const base = "/v1/nodes/" + encodeURIComponent(node);
  const COLORS = { tx: "#d9480f", rx: "#1971c2", pw: "#2b8a3e", act: "#7048e8" };
  const panels = {};   // device -> {root, canvases}

  const col = (c, k) => (c && c[k]) || null;
  const scale = (ys, f) => ys && ys.map((v) => (v === null ? null : v * f));

  // What to plot for one device: [{title, series, fmtLeft, fmtRight?, rightMax?}]
  function plotsFor(kind, c, t) {
    const out = [];
    if (kind === "gpu") {
      if (col(c, "nvlink_tx_Bps") || col(c, "nvlink_rx_Bps"))
        out.push({ key: "nvlink", title: "NVLink bytes/s", fmtLeft: TS.rate, series: [
          { t, y: col(c, "nvlink_tx_Bps") || [], color: COLORS.tx, label: "nvlink_tx" },
          { t, y: col(c, "nvlink_rx_Bps") || [], color: COLORS.rx, label: "nvlink_rx" }] });
      const ptx = col(c, "pcie_tx_kbps") ? scale(c.pcie_tx_kbps, 1e3) : scale(col(c, "gpm_pcie_tx_mibps"), 1048576);
      const prx = col(c, "pcie_rx_kbps") ? scale(c.pcie_rx_kbps, 1e3) : scale(col(c, "gpm_pcie_rx_mibps"), 1048576);
      if (ptx || prx)
        out.push({ key: "pcie", title: "PCIe bytes/s", fmtLeft: TS.rate, series: [
          { t, y: ptx || [], color: COLORS.tx, label: "pcie_tx" }, { t, y: prx || [], color: COLORS.rx, label: "pcie_rx" }] });
      const watts = col(c, "energy_W") || scale(col(c, "power_mw"), 1e-3);
      const act = col(c, "gpm_sm_util_pct") || col(c, "gpu_util_pct");
      if (watts || act)
        out.push({ key: "power", title: "power W (left) · activity % (right)", fmtLeft: (v) => v.toFixed(0) + " W",
          fmtRight: (v) => v.toFixed(0) + " %", rightMax: 100, series: [
            { t, y: watts || [], color: COLORS.pw, label: "power" },
            { t, y: act || [], color: COLORS.act, label: "activity", axis: "right" }] });
    } else if (kind === "host") {
      const user = col(c, "cpu_user_cores"), sys = col(c, "cpu_system_cores");
      if (user || sys)
        out.push({ key: "cpu", title: "host CPU cores busy", fmtLeft: (v) => v.toFixed(1), series: [
          { t, y: user || [], color: COLORS.tx, label: "user" }, { t, y: sys || [], color: COLORS.rx, label: "system" }] });
      const watts = col(c, "cpu_energy_W");
      if (watts)
        out.push({ key: "cpuw", title: "CPU package power W", fmtLeft: (v) => v.toFixed(0) + " W", series: [
          { t, y: watts, color: COLORS.pw, label: "power" }] });
    } else {
      out.push({ key: "net", title: "network bytes/s", fmtLeft: TS.rate, series: [
        { t, y: col(c, "net_tx_Bps") || [], color: COLORS.tx, label: "net_tx" },
        { t, y: col(c, "net_rx_Bps") || [], color: COLORS.rx, label: "net_rx" }] });
    }
    return out;
  }

  function panel(dev, kind) {
    if (panels[dev]) return panels[dev];
    const root = TS.el("section", { class: "device", "data-device": dev },
      TS.el("h3", {}, dev + " · " + (kind === "gpu" ? "GPU" : kind === "net" ? "interface" : kind)),
      TS.el("div", { class: "plots" }));
    const list = document.getElementById("devices");
    // GPUs first, then interfaces, each by name
    const after = [...list.children].find((c) => (c.dataset.kind !== "gpu") > (kind !== "gpu") ||
      ((c.dataset.kind === "gpu") === (kind === "gpu") && c.dataset.device > dev));
    root.dataset.kind = kind;
    list.insertBefore(root, after || null);
    return (panels[dev] = { root, canvases: {} });
  }

  function canvasFor(p, key, title) {
    if (!p.canvases[key]) {
      const cv = TS.el("canvas", { "data-plot": key });
      p.root.querySelector(".plots").append(TS.el("div", { class: "plot" }, TS.el("div", { class: "title" }, title), cv));
      p.canvases[key] = cv;
    }
    return p.canvases[key];
  }

  function evidenceText(v) {
    if (!v) return "No verdict yet: the live engine has not judged this node.";
    const e = v.evidence;
    if (!e) return "";
    const when = v.window ? "Window " + TS.clock(v.window.start) + " – " + TS.clock(v.window.end) + ":\n" : "";
    return when + (Array.isArray(e) ? e.join("\n") : String(e));
  }

  function showVerdict(v, alerts, gaps) {
    const open = (gaps || []).find((g) => g.open && !g.device);   // the node's own; a silent GPU is in the evidence
    const state = open ? "unmonitored" : v && v.state;
    const h = document.getElementById("state");
    const parts = [TS.badge(state), " ", node];
    if (v && v.p_training !== undefined && v.p_training !== null) parts.push(" · P(training) " + TS.pct(v.p_training));
    if (v && v.job) parts.push(" · job ", TS.el("a", { href: "/dashboard/jobs/" + encodeURIComponent(v.job) }, v.job));
    h.replaceChildren(...parts);
    h.dataset.state = state || "pending";
    let text = evidenceText(v);
    if (open) text = "No data since " + TS.clock(open.start) + " (" + open.reason + "): unmonitored now." +
      (v && v.state ? " Last verdict: " + v.state + "." : "") + (text ? "\n" + text : "");
    document.getElementById("evidence").textContent = text;
    const items = (alerts || []).slice(-10).reverse().map((a) => TS.el("li", { class: a.open ? "alerts" : "" },
      "alert " + (a.open ? "open" : "cleared") + ": raised " + TS.clock(a.raised_t) +
      (a.cleared_t ? ", cleared " + TS.clock(a.cleared_t) : "") + " — P(training) up to " + TS.pct(a.p_max) +
      " (" + a.rule.k + " of " + a.rule.n + " windows at >= " + a.rule.threshold + ", " + a.detector + ")"));
    // The single-device check over the last hour: the verdict's path for training on a GPU that exchanges nothing.
    const lead = v && v.single_device_lead;
    if (lead && lead.windows_spoken > 0) items.unshift(TS.el("li", { class: lead.like_training ? "lead" : "" },
      "single-device check, in the hour up to the latest window: " + lead.like_training + " of the " +
      lead.windows_spoken + " windows it judged read like training (P up to " + TS.pct(lead.p_max) + ", >= " +
      lead.threshold + " counts; 8 s windows every 2 s, so they overlap); where its P is the larger, it is the " +
      "verdict's (detector named \"+single-device\")"));
    // Below the check's busy floor: no P, but a bound on the work its windows can hold, each second once.
    const floor = v && v.below_floor;
    if (floor && floor.windows > 0) items.unshift(TS.el("li", { class: "floor", id: "below-floor",
      "data-floor-flop": floor.tensor_flop_max },
      "below the busy floor, in the hour up to the latest window: " + floor.windows + " windows covering " +
      Math.round(floor.seconds) + " s, whose busiest GPU ran kernels at most 5 % of the time, can hold at most " +
      TS.flops(floor.tensor_flop_max) + " of tensor-core work (their activity at the FP8 peak; half if BF16): a bound, " +
      "not a measurement, and no verdict"));
    document.getElementById("alerts").replaceChildren(...items);
  }

  // Verdict windows overlap (each covers window_s, one ends every stride_s): colour each from the
  // previous window's end to its own, so the band shows the verdict in force at each moment.
  function spansFrom(verdicts) {
    let prev = null;
    return verdicts.map((v) => {
      const start = prev === null || prev < v.t_start ? v.t_start : prev;
      prev = v.t_end;
      return { start, end: v.t_end, state: v.state };
    });
  }

  // Segment boundaries: idle <-> active transitions of the verdicts; job boundaries: the start of
  // every job the node belonged to in range (from /v1/jobs), and where its membership changed.
  function marksFrom(verdicts, jobs, t0, t1) {
    const marks = [];
    const inRange = (t) => t >= t0 && t <= t1;
    let prev = null;
    for (const v of verdicts) {
      if (prev && (prev.state === "idle") !== (v.state === "idle") && inRange(v.t_end))
        marks.push({ t: v.t_end, color: "#868e96", label: v.state === "idle" ? "segment end" : "segment" });
      prev = v;
    }
    const mine = new Set(verdicts.map((v) => v.job).filter((j) => j));
    for (const j of jobs || []) if (mine.has(j.job) && inRange(j.start_t))
      marks.push({ t: j.start_t, color: "#212529", label: "job start" });
    return marks;
  }

  async function refresh() {
    const span = Number(document.getElementById("range").value);
    const verdict = await TS.api(base + "/verdict").catch(() => null);
    // The range ends now, or at the latest judged window when the node's clock runs ahead of ours
    // (a replay faster than real time stamps its samples ahead of the wall clock).
    const latest = verdict && verdict.window ? verdict.window.end + 1 : 0;
    const t1 = Math.max(Date.now() / 1000, latest), t0 = t1 - span;
    const step = Math.max(1, Math.round(span / 400));
    const q = "?start=" + t0.toFixed(3) + "&end=" + t1.toFixed(3);
    const [series, gaps, verdicts, alerts, jobs] = await Promise.all([
      TS.api(base + "/series" + q + "&step=" + step), TS.api(base + "/unmonitored" + q),
      TS.api(base + "/verdicts" + q).catch(() => null), TS.api(base + "/alerts").catch(() => null),
      TS.api("/v1/jobs").catch(() => null)]);
    if (!series) { document.getElementById("state").textContent = "unknown node " + node; return; }
    const intervals = (gaps && gaps.intervals) || [];
    // the node's own unmonitored intervals shade every plot; a GPU's own silences only its panel
    const shade = intervals.filter((g) => !g.device);
    const byDevice = {};
    for (const g of intervals) if (g.device) (byDevice[g.device] = byDevice[g.device] || []).push(g);
    const timeline = (verdicts && verdicts.verdicts) || [];
    showVerdict(verdict, alerts && alerts.alerts, shade);
    document.getElementById("timeline").dataset.verdicts = timeline.length;
    Plot.band(document.getElementById("timeline"), spansFrom(timeline), t0, t1, shade);
    const marks = marksFrom(timeline, jobs && jobs.jobs, t0, t1);
    // Create every canvas first, then draw: a canvas's width is only final once the grid holds all.
    const jobs2 = [];
    for (const [dev, s] of Object.entries(series.devices)) {
      const p = panel(dev, s.kind);
      for (const spec of plotsFor(s.kind, s.columns, s.t)) jobs2.push([canvasFor(p, spec.key, spec.title), spec, dev]);
    }
    let total = 0;
    for (const [cv, spec, dev] of jobs2) total += Plot.draw(cv, { t0, t1, shade: shade.concat(byDevice[dev] || []), marks, ...spec });
    document.body.dataset.points = total;
    document.body.dataset.loaded = "1";
  }

  document.addEventListener("DOMContentLoaded", () => {
    let stop = TS.poll(refresh, 5000);
    document.getElementById("range").addEventListener("change", () => { stop(); stop = TS.poll(refresh, 5000); });
    document.getElementById("live").addEventListener("change", (e) => {
      stop(); stop = e.target.checked ? TS.poll(refresh, 5000) : (refresh(), () => {});
    });
    window.addEventListener("resize", () => refresh().catch(() => {}));
  });
})();
