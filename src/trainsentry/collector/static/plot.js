// Small canvas time-series plots (no library): lines with gaps, shaded intervals, boundary marks,
// and a state band. Each drawn canvas records what it drew in data-points / data-series, so tests
// (and curious inspectors) can tell an empty plot from one with data.
"use strict";
const Plot = {};
Plot.STATE_COLORS = { idle: "#adb5bd", inference: "#1c7ed6", training: "#e8590c", other: "#9c36b5" };

function setupCanvas(canvas, cssHeight) {
  const dpr = window.devicePixelRatio || 1;
  const w = canvas.clientWidth || 600;
  canvas.width = Math.round(w * dpr);
  canvas.height = Math.round(cssHeight * dpr);
  canvas.style.height = cssHeight + "px";
  const ctx = canvas.getContext("2d");
  ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
  return { ctx, w, h: cssHeight };
}

function hatch(ctx) {
  const p = document.createElement("canvas");
  p.width = p.height = 8;
  const c = p.getContext("2d");
  c.fillStyle = "rgba(134,142,150,0.18)"; c.fillRect(0, 0, 8, 8);
  c.strokeStyle = "rgba(73,80,87,0.35)"; c.beginPath(); c.moveTo(0, 8); c.lineTo(8, 0); c.stroke();
  return ctx.createPattern(p, "repeat");
}

function niceMax(v) {
  if (!(v > 0)) return 1;
  const e = Math.pow(10, Math.floor(Math.log10(v)));
  for (const m of [1, 2, 2.5, 5, 10]) if (m * e >= v) return m * e;
  return 10 * e;
}

// opts: {t0, t1, height, series: [{t, y, color, label, axis: "left"|"right"}], fmtLeft, fmtRight,
//        rightMax, shade: [{start, end}], marks: [{t, label}]}
Plot.draw = function (canvas, opts) {
  const { ctx, w, h } = setupCanvas(canvas, opts.height || 150);
  let leftMax = 0, rightMax = opts.rightMax || 0;
  for (const s of opts.series) for (const v of s.y) if (v !== null && isFinite(v)) {
    if (s.axis === "right") { if (!opts.rightMax) rightMax = Math.max(rightMax, v); } else leftMax = Math.max(leftMax, v);
  }
  leftMax = niceMax(leftMax); rightMax = niceMax(rightMax);
  ctx.clearRect(0, 0, w, h);
  ctx.font = "11px system-ui, sans-serif";
  // room for the widest axis label on each side, so none is clipped
  const widest = (fmt, max) => Math.max(...[0, 1, 2, 3, 4].map((i) => ctx.measureText(fmt(max * i / 4)).width));
  const pad = { l: Math.max(40, Math.ceil(widest(opts.fmtLeft, leftMax)) + 10),
                r: opts.fmtRight ? Math.max(30, Math.ceil(widest(opts.fmtRight, rightMax)) + 10) : 10, t: 8, b: 18 };
  const pw = w - pad.l - pad.r, ph = h - pad.t - pad.b;
  const X = (t) => pad.l + ((t - opts.t0) / (opts.t1 - opts.t0)) * pw;
  // unmonitored intervals: hatched, full height, under everything else
  ctx.fillStyle = hatch(ctx);
  for (const s of opts.shade || []) {
    const a = Math.max(X(s.start), pad.l), b = Math.min(X(s.end === null ? opts.t1 : s.end), pad.l + pw);
    if (b > a) ctx.fillRect(a, pad.t, Math.max(b - a, 1), ph);
  }
  // grid and axes
  ctx.strokeStyle = "#e9ecef"; ctx.fillStyle = "#6b7178"; ctx.lineWidth = 1;
  for (let i = 0; i <= 4; i++) {
    const y = pad.t + ph - (i / 4) * ph;
    ctx.beginPath(); ctx.moveTo(pad.l, y); ctx.lineTo(pad.l + pw, y); ctx.stroke();
    ctx.textAlign = "right"; ctx.fillText(opts.fmtLeft(leftMax * i / 4), pad.l - 4, y + 4);
    if (opts.fmtRight) { ctx.textAlign = "left"; ctx.fillText(opts.fmtRight(rightMax * i / 4), pad.l + pw + 4, y + 4); }
  }
  // time labels: as many as fit without touching (one per ~110 px), at most 5
  ctx.textAlign = "center";
  const nt = Math.max(1, Math.min(4, Math.floor(pw / 110)));
  for (let i = 0; i <= nt; i++) {
    const t = opts.t0 + (i / nt) * (opts.t1 - opts.t0);
    const label = new Date(t * 1000).toLocaleTimeString(), half = ctx.measureText(label).width / 2;
    ctx.fillText(label, Math.min(Math.max(X(t), pad.l + half), pad.l + pw - half), h - 4);
  }
  // segment / job boundaries
  for (const m of opts.marks || []) {
    const x = X(m.t);
    if (x < pad.l || x > pad.l + pw) continue;
    ctx.strokeStyle = m.color || "#495057"; ctx.setLineDash([3, 3]);
    ctx.beginPath(); ctx.moveTo(x, pad.t); ctx.lineTo(x, pad.t + ph); ctx.stroke(); ctx.setLineDash([]);
    if (m.label) {
      // right of the line, or left of it where the label would run past the plot's right edge
      ctx.fillStyle = m.color || "#495057";
      const right = x + 3 + ctx.measureText(m.label).width <= pad.l + pw;
      ctx.textAlign = right ? "left" : "right";
      ctx.fillText(m.label, right ? x + 3 : x - 3, pad.t + 10);
    }
  }
  // lines; a missing bucket (null) breaks the line instead of bridging a gap
  let points = 0;
  const drawn = [];
  for (const s of opts.series) {
    const max = s.axis === "right" ? rightMax : leftMax;
    ctx.strokeStyle = s.color; ctx.lineWidth = 1.5; ctx.beginPath();
    let pen = false, n = 0;
    for (let i = 0; i < s.t.length; i++) {
      const v = s.y[i];
      if (v === null || !isFinite(v) || s.t[i] < opts.t0 || s.t[i] > opts.t1) { pen = false; continue; }
      const x = X(s.t[i]), y = pad.t + ph - Math.min(v / max, 1) * ph;
      if (pen) ctx.lineTo(x, y); else ctx.moveTo(x, y);
      pen = true; n++;
    }
    ctx.stroke();
    points += n;
    if (n) drawn.push(s.label);
  }
  ctx.strokeStyle = "#adb5bd"; ctx.strokeRect(pad.l, pad.t, pw, ph);
  canvas.dataset.points = points;
  canvas.dataset.series = drawn.join(",");
  return points;
};

// A band of coloured spans: [{start, end, state}] over [t0, t1]; shade = unmonitored intervals.
Plot.band = function (canvas, spans, t0, t1, shade) {
  const { ctx, w, h } = setupCanvas(canvas, 34);
  const pad = { l: 64, r: 10 };
  const pw = w - pad.l - pad.r;
  const X = (t) => pad.l + Math.min(Math.max((t - t0) / (t1 - t0), 0), 1) * pw;
  ctx.clearRect(0, 0, w, h);
  ctx.fillStyle = "#f1f3f5"; ctx.fillRect(pad.l, 4, pw, 20);
  let n = 0;
  for (const s of spans) {
    const a = X(s.start), b = X(s.end === null || s.end === undefined ? t1 : s.end);
    if (b <= a) continue;
    ctx.fillStyle = Plot.STATE_COLORS[s.state] || "#ced4da";
    ctx.fillRect(a, 4, Math.max(b - a, 1), 20); n++;
  }
  ctx.fillStyle = hatch(ctx);
  for (const s of shade || []) {
    const a = X(s.start), b = X(s.end === null ? t1 : s.end);
    if (b > a) ctx.fillRect(a, 4, Math.max(b - a, 1), 20);
  }
  ctx.font = "11px system-ui, sans-serif"; ctx.fillStyle = "#6b7178"; ctx.textAlign = "right";
  ctx.fillText("verdict", pad.l - 4, 18);
  canvas.dataset.spans = n;
  return n;
};
