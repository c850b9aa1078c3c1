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
    if (typeof e === "string") return e;
    if (Array.isArray(e)) return e.map((x) => (typeof x === "string" ? x : x.text || JSON.stringify(x))).join("\n");
    return Object.entries(e).map(([k, x]) => k + ": " + (typeof x === "string" ? x : JSON.stringify(x))).join("\n");
  }

  function showVerdict(v, alerts, gaps) {
    const open = (gaps || []).find((g) => g.open);
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
    const items = (alerts || []).map((a) => TS.el("li", { class: "alerts" },
      TS.clock(a.t || a.at || a.start) + " — " + (a.message || a.text || a.kind || JSON.stringify(a))));
    document.getElementById("alerts").replaceChildren(...items);
  }

  function marksFrom(verdicts, t0, t1) {
    const marks = [];
    for (const j of (verdicts && verdicts.jobs) || []) {
      if (j.start >= t0 && j.start <= t1) marks.push({ t: j.start, label: "job " + (j.job || ""), color: "#212529" });
      if (j.end && j.end >= t0 && j.end <= t1) marks.push({ t: j.end, label: "end", color: "#212529" });
    }
    for (const s of (verdicts && verdicts.segments) || [])
      if (s.start >= t0 && s.start <= t1) marks.push({ t: s.start, color: "#adb5bd" });
    return marks;
  }

  async function refresh() {
    const span = Number(document.getElementById("range").value);
    const t1 = Date.now() / 1000, t0 = t1 - span;
    const step = Math.max(1, Math.round(span / 400));
    const q = "?start=" + t0.toFixed(3) + "&end=" + t1.toFixed(3);
    const [series, gaps, verdict, verdicts, alerts] = await Promise.all([
      TS.api(base + "/series" + q + "&step=" + step), TS.api(base + "/unmonitored" + q),
      TS.api(base + "/verdict").catch(() => null), TS.api(base + "/verdicts" + q).catch(() => null),
      TS.api(base + "/alerts").catch(() => null)]);
    if (!series) { document.getElementById("state").textContent = "unknown node " + node; return; }
    const shade = (gaps && gaps.intervals) || [];
    showVerdict(verdict, alerts && (alerts.alerts || alerts), shade);
    const spans = (verdicts && (verdicts.verdicts || verdicts.timeline)) || [];
    Plot.band(document.getElementById("timeline"), spans, t0, t1, shade);
    const marks = marksFrom(verdicts, t0, t1);
    let total = 0;
    for (const [dev, s] of Object.entries(series.devices)) {
      const p = panel(dev, s.kind);
      for (const spec of plotsFor(s.kind, s.columns, s.t)) {
        total += Plot.draw(canvasFor(p, spec.key, spec.title), { t0, t1, shade, marks, ...spec });
      }
    }
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
