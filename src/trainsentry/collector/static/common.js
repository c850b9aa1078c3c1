// Shared helpers: API calls with the session cookie, DOM building without innerHTML, formatting.
"use strict";
const TS = {};

TS.api = async function (path) {
  const r = await fetch(path, { credentials: "same-origin", headers: { Accept: "application/json" } });
  if (r.status === 401) { location.href = "/login?next=" + encodeURIComponent(location.pathname); throw new Error("login"); }
  if (r.status === 404) return null;
  if (!r.ok) throw new Error(path + ": HTTP " + r.status);
  return r.json();
};

// el("td", {class: "num"}, "text", childNode, ...): children are text or nodes, never HTML.
TS.el = function (tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined) continue;
    if (k === "class") e.className = v; else if (k === "dataset") Object.assign(e.dataset, v); else e.setAttribute(k, v);
  }
  for (const c of children) if (c !== null && c !== undefined) e.append(c instanceof Node ? c : String(c));
  return e;
};

TS.badge = (state) => TS.el("span", { class: "state " + (state || "pending"), "data-state": state || "pending" }, state || "no verdict yet");

TS.rate = function (bps) {
  if (bps === null || bps === undefined || !isFinite(bps)) return "—";
  const units = [["TB/s", 1e12], ["GB/s", 1e9], ["MB/s", 1e6], ["kB/s", 1e3]];
  // three significant digits, trailing zeros dropped: "100 MB/s", "2.5 GB/s", "0.25 B/s"
  for (const [u, f] of units) if (Math.abs(bps) >= f) return Number((bps / f).toPrecision(3)) + " " + u;
  return (bps === 0 ? "0" : String(Number(bps.toPrecision(3)))) + " B/s";
};

TS.si = function (x, unit) {
  if (x === null || x === undefined || !isFinite(x)) return "—";
  const units = [["P", 1e15], ["T", 1e12], ["G", 1e9], ["M", 1e6], ["k", 1e3]];
  for (const [u, f] of units) if (Math.abs(x) >= f) return (x / f).toPrecision(3) + " " + u + unit;
  return x.toPrecision(3) + " " + unit;
};

TS.flops = (x) => (x === null || x === undefined || !isFinite(x)) ? "—" : x.toExponential(2) + " FLOP";

TS.ago = function (t, now) {
  if (!t) return "never";
  const s = Math.max(0, (now || Date.now() / 1000) - t);
  if (s < 90) return s.toFixed(0) + " s ago";
  if (s < 5400) return (s / 60).toFixed(0) + " min ago";
  if (s < 129600) return (s / 3600).toFixed(1) + " h ago";
  return (s / 86400).toFixed(1) + " d ago";
};

TS.clock = (t) => t ? new Date(t * 1000).toLocaleTimeString() : "—";
TS.pct = (p) => (p === null || p === undefined) ? "—" : (100 * p).toFixed(0) + " %";

// Poll fn every ms milliseconds, never overlapping, pausing while the tab is hidden.
TS.poll = function (fn, ms) {
  let timer = null;
  const tick = async () => {
    try { await fn(); } catch (e) { if (e.message !== "login") console.error(e); }
    timer = setTimeout(tick, document.hidden ? ms * 5 : ms);
  };
  tick();
  return () => clearTimeout(timer);
};
