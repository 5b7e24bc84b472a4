// Small SVG line charts (no library). Each chart is an <svg role="img"> with a title and a description that
// says what it shows; the numbers themselves are in the table beside it, which is the accessible source.

const NS = "http://www.w3.org/2000/svg";
const W = 560, H = 220, L = 64, R = 12, T = 12, B = 28;

function el(name, attrs, parent) {
  const node = document.createElementNS(NS, name);
  for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, String(v));
  if (parent) parent.append(node);
  return node;
}

// series: [{label, points: [[x, y], ...] (x: 1-based index of xLabels, y: number)}], styles s0/s1/s2 in order.
export function lineChart(host, { title, description, xLabels, series, yFormat }) {
  const figure = document.createElement("figure");
  figure.className = "chart";
  const caption = document.createElement("figcaption");
  caption.textContent = title;
  figure.append(caption);
  const id = `c${Math.random().toString(36).slice(2, 9)}`;
  const svg = el("svg", { viewBox: `0 0 ${W} ${H}`, role: "img", "aria-labelledby": `${id}t ${id}d`, width: "100%" });
  el("title", { id: `${id}t` }, svg).textContent = title;
  el("desc", { id: `${id}d` }, svg).textContent = description;
  const ys = series.flatMap((s) => s.points.map((p) => p[1]));
  const yMax = Math.max(1e-9, ...ys);
  const yMin = Math.min(0, ...ys);
  const n = Math.max(1, xLabels.length);
  const x = (i) => L + ((i - 1) / Math.max(1, n - 1)) * (W - L - R);
  const y = (v) => T + (1 - (v - yMin) / (yMax - yMin || 1)) * (H - T - B);
  for (let k = 0; k <= 4; k++) {
    const v = yMin + ((yMax - yMin) * k) / 4;
    el("line", { x1: L, x2: W - R, y1: y(v), y2: y(v), class: "grid" }, svg);
    el("text", { x: L - 6, y: y(v) + 4, "text-anchor": "end" }, svg).textContent = yFormat(v);
  }
  el("line", { x1: L, x2: L, y1: T, y2: H - B, class: "axis" }, svg);
  el("line", { x1: L, x2: W - R, y1: y(0), y2: y(0), class: "axis" }, svg);
  const step = Math.max(1, Math.ceil(n / 8));
  for (let i = 1; i <= n; i += step) {
    el("text", { x: x(i), y: H - 8, "text-anchor": "middle" }, svg).textContent = xLabels[i - 1];
  }
  const legend = document.createElement("div");
  legend.className = "legend";
  series.forEach((s, k) => {
    if (s.points.length) {
      const d = s.points.map((p, j) => `${j ? "L" : "M"}${x(p[0]).toFixed(1)},${y(p[1]).toFixed(1)}`).join(" ");
      el("path", { d, class: `s${k}` }, svg);
      if (s.dots) for (const p of s.dots) el("circle", { cx: x(p[0]), cy: y(p[1]), r: 3.5, class: `d${k}` }, svg);
    }
    const key = document.createElement("span");
    key.className = `k${k}`;
    key.textContent = s.label;
    legend.append(key);
  });
  figure.append(svg, legend);
  host.append(figure);
  return figure;
}
