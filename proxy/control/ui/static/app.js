// The FinOps page: sign in with an admin token, then read everything from the admin and usage APIs.
// No number is computed here that the APIs do not give, except ratios and the month-end forecast
// (spend so far / days so far x days in the month), which are labelled as such.
import { deploymentStatus, rollouts, shadowRows } from "./change.js";
import { lineChart } from "./charts.js";
import { microBig, money, pct, renderTable, units } from "./tables.js";

const TOKEN = "farebox-admin-token";
const NEAR_EXPIRY_DAYS = 14;
const $ = (id) => document.getElementById(id);
let currency = "";
let budgetZone = "";
let drill = { team: null, app: null };
let cache = {};

class ApiError extends Error {
  constructor(status, message) { super(message); this.status = status; }
}

async function api(path, { csv = false } = {}) {
  const token = sessionStorage.getItem(TOKEN);
  const headers = { Authorization: `Bearer ${token}` };
  if (csv) headers.Accept = "text/csv";
  const resp = await fetch(path, { headers });
  if (!resp.ok) {
    let message = `${resp.status} ${resp.statusText}`;
    try { message = (await resp.json()).error.message; } catch { /* not JSON */ }
    if (resp.status === 401) signOut(`Sign-in failed (401): ${message}`);
    throw new ApiError(resp.status, message);
  }
  return csv ? resp.text() : resp.json();
}

function range(month) {
  const [y, m] = month.split("-").map(Number);
  const days = new Date(Date.UTC(y, m, 0)).getUTCDate();
  return { from: `${month}-01`, to: `${month}-${String(days).padStart(2, "0")}`, days };
}

function usagePath(by, r, extra = "") {
  return `/admin/v1/usage?from=${r.from}&to=${r.to}&by=${by}${extra}`;
}

function bySpend(rows) {
  return [...rows].sort((a, b) => {
    const d = BigInt(b.spend_micro) - BigInt(a.spend_micro);
    return d > 0n ? 1 : d < 0n ? -1 : 0;
  });
}

function perRequest(row) {
  return row.requests ? String(BigInt(row.spend_micro) / BigInt(row.requests)) : null;
}

const USAGE_COLUMNS = [
  { key: "requests", label: "Requests", kind: "int" },
  { key: "spend_micro", label: "Spend", kind: "money" },
  { key: "cost_per_request_micro", label: "Cost / request", kind: "money", value: perRequest },
  { key: "fallback_rate", label: "Fallback rate", kind: "raw", value: (r) => pct(r.fallbacks, r.served) },
  { key: "ttft_p50_ms", label: "TTFT p50", kind: "ms" },
  { key: "hedge_micro", label: "Hedging spend", kind: "money" },
];

function usageTable(hostId, name, caption, by, r, rows, opts = {}) {
  const first = by.split(",").at(-1);
  const columns = opts.compact ? USAGE_COLUMNS.slice(0, 2) : USAGE_COLUMNS;
  renderTable($(hostId), [{ key: first, label: first.replace("_", " "), kind: "text" }, ...columns], rows, {
    caption, currency, name, csv: opts.csv === false ? null : () => api(usagePath(by, r, "&format=csv"), { csv: true }),
    csvColumns: opts.csvColumns, onRow: opts.onRow, drillLabel: opts.drillLabel,
  });
}

function kpis(totals) {
  const host = $("kpis");
  host.replaceChildren();
  const t = totals || {};
  const items = [
    ["Spend", money(t.spend_micro ?? "0", currency), "kpi-spend"],
    ["Requests", Number(t.requests ?? 0).toLocaleString("en-US"), "kpi-requests"],
    ["Cost per request", t.requests ? money(perRequest(t), currency) : "—", "kpi-cpr"],
    ["Fallback rate", pct(t.fallbacks ?? 0, t.served ?? 0) || "—", "kpi-fallback"],
    ["TTFT p50", t.ttft_p50_ms != null ? `${t.ttft_p50_ms} ms` : "—", "kpi-ttft-p50"],
    ["TTFT p95", t.ttft_p95_ms != null ? `${t.ttft_p95_ms} ms` : "—", "kpi-ttft-p95"],
    ["Cache savings", money(t.cache_saved_micro ?? "0", currency), "kpi-cache"],
  ];
  definitions(host, items);
  $("kpi-spend").dataset.micro = t.spend_micro ?? "0";
}

function definitions(host, items) {
  for (const [label, value, id] of items) {
    const div = document.createElement("div");
    const dt = document.createElement("dt");
    const dd = document.createElement("dd");
    dt.textContent = label;
    dd.textContent = value;
    dd.id = id;
    div.append(dt, dd);
    host.append(div);
  }
}

// The door of the gateway process that answered (GET /admin/v1/load): its CPU and event loop, and whether it is
// admitting at a measured rate and refusing the rest with a fast 503.
async function door() {
  const d = await api("/admin/v1/load");
  const host = $("door");
  host.replaceChildren();
  definitions(host, [
    ["Admission", d.limited ? `limited to ${d.admission_limit_rps}/s` : "open", "door-state"],
    ["Admitted", `${d.admitted_rps}/s`, "door-admitted"],
    ["Refused so far", Number(d.refused_total).toLocaleString("en-US"), "door-refused"],
    ["CPU busy", `${Math.round(d.cpu_utilisation * 100)}% of a core (target ${Math.round(d.settings.target_utilisation * 100)}%)`, "door-cpu"],
    ["Loop lag", `${d.loop_lag_ms} ms`, "door-lag"],
    ["In flight", `${d.in_flight} of ${d.max_in_flight || "no cap"}`, "door-in-flight"],
  ]);
  $("door-title").textContent = `Gateway door (pod ${d.pod}, process ${d.pid})`;
}

// Batches per team (GET /admin/v1/batches): running and finished, lines done and failed, what they cost so far
// and what the batch price saved against the deployments' standard (interactive) prices.
async function batches() {
  const rows = {};
  for (const b of (await api("/admin/v1/batches?limit=1000")).data) {
    const t = rows[b.team] ||= { team: b.team, running: 0, finished: 0, lines_done: 0, lines_failed: 0,
      cost_micro: 0n, saved_micro: 0n };
    if (b.status === "in_progress" || b.status === "cancelling") t.running += 1; else t.finished += 1;
    t.lines_done += b.request_counts.completed;
    t.lines_failed += b.request_counts.failed;
    t.cost_micro += BigInt(b.x_farebox.cost_micro);
    t.saved_micro += BigInt(b.x_farebox.saved_micro);
  }
  const data = Object.values(rows).map((t) => ({ ...t, cost_micro: t.cost_micro.toString(),
    saved_micro: t.saved_micro.toString() }));
  renderTable($("batches-table"), [
    { key: "team", label: "Team", kind: "text" },
    { key: "running", label: "Running", kind: "int" },
    { key: "finished", label: "Finished", kind: "int" },
    { key: "lines_done", label: "Lines done", kind: "int" },
    { key: "lines_failed", label: "Lines failed", kind: "int" },
    { key: "cost_micro", label: "Cost so far", kind: "money" },
    { key: "saved_micro", label: "Saved against interactive prices", kind: "money" },
  ], data, { caption: "Batches by team (the latest 1,000)", currency, name: "batches" });
}

// Split variants side by side (the usage API by alias and variant): one row per alias and variant that served.
async function variants(r) {
  const rows = (await api(usagePath("alias,variant", r))).data.filter((row) => row.variant !== null)
    .map((row) => ({ ...row, variant: `${row.alias} / ${row.variant}` }));
  usageTable("variants-table", "variants", "Split variants side by side", "alias,variant", r, rows);
}

// Shadow traffic beside what it shadows (the usage API by alias and shadow).
async function shadows(r) {
  const rows = shadowRows((await api(usagePath("alias,shadow", r))).data);
  usageTable("shadows-table", "shadows", "Shadow legs beside the requests they copy", "alias,shadow", r, rows);
}

// Today (YYYY-MM-DD) in the budgets' time zone (the usage API's `timezone`), not the browser's: budget
// months and days are calendar days there.
function budgetToday() {
  return new Intl.DateTimeFormat("en-CA", { timeZone: budgetZone || undefined, year: "numeric", month: "2-digit",
    day: "2-digit" }).format(new Date());
}

function elapsedDays(month, days) {
  const today = budgetToday();
  const current = today.slice(0, 7);
  if (month < current) return days;
  if (month > current) return 0;
  return Number(today.slice(8, 10));
}

async function teams(month, r, teamRows) {
  const listed = (await api("/admin/v1/teams")).data.map((t) => t.name);
  const names = [...new Set([...listed, ...teamRows.map((row) => row.team).filter(Boolean)])];
  const budgets = await Promise.all(names.map((n) => api(`/admin/v1/budgets/team:${encodeURIComponent(n)}?period=${month}`)
    .catch(() => null)));
  const spendOf = Object.fromEntries(teamRows.map((row) => [row.team, row]));
  const elapsed = elapsedDays(month, r.days);
  const rows = names.map((name, i) => {
    const b = budgets[i] || {};
    const spend = spendOf[name]?.spend_micro ?? "0";
    const forecast = elapsed ? String((BigInt(spend) * BigInt(r.days)) / BigInt(elapsed)) : spend;
    return { team: name, spend_micro: spend, requests: spendOf[name]?.requests ?? 0, limit_micro: b.limit_micro != null ? String(b.limit_micro) : null,
      settled_micro: b.settled_micro != null ? String(b.settled_micro) : null,
      remaining_micro: b.remaining_micro != null ? String(b.remaining_micro) : null,
      used: b.limit_micro ? pct(BigInt(b.settled_micro ?? 0) + BigInt(b.held_micro ?? 0), b.limit_micro) : "",
      forecast_micro: forecast, state: b.state ?? "" };
  });
  renderTable($("teams-table"), [
    { key: "team", label: "Team", kind: "text" },
    { key: "spend_micro", label: "Spend (usage)", kind: "money" },
    { key: "settled_micro", label: "Settled (budget)", kind: "money" },
    { key: "limit_micro", label: "Budget", kind: "money" },
    { key: "remaining_micro", label: "Remaining", kind: "money" },
    { key: "used", label: "Used", kind: "raw" },
    { key: "forecast_micro", label: "Forecast month end", kind: "money" },
    { key: "state", label: "State", kind: "text", cls: (row) => `state-${row.state || "none"}` },
  ], rows, { caption: `Budget month ${month}: spend from the usage API, budgets from the budget API`, currency,
    name: "teams-budget" });
  return rows;
}

async function burndown(month, r, teamRows, dayRows) {
  const host = $("burndown");
  host.replaceChildren();
  const labels = Array.from({ length: r.days }, (_, i) => String(i + 1));
  const elapsed = elapsedDays(month, r.days);
  for (const team of teamRows.filter((t) => t.limit_micro !== null)) {
    const limit = Number(units(BigInt(team.limit_micro)).replace(/,/g, ""));
    const perDay = new Map();
    for (const row of dayRows.filter((d) => d.team === team.team)) {
      perDay.set(Number(row.day.slice(8, 10)), Number(units(BigInt(row.spend_micro)).replace(/,/g, "")));
    }
    let left = limit;
    const actual = [[1, limit]];
    for (let d = 1; d <= elapsed; d++) { left -= perDay.get(d) || 0; actual.push([d, left]); }
    const spent = limit - left;
    const forecast = elapsed ? [[elapsed, left], [r.days, limit - (spent * r.days) / elapsed]] : [];
    lineChart(host, {
      title: `${team.team}: budget remaining, ${month}`,
      description: `Budget ${units(BigInt(team.limit_micro))} ${currency}; remaining after day ${elapsed}: `
        + `${left.toFixed(2)} ${currency}; forecast at month end: ${(limit - (elapsed ? spent * r.days / elapsed : 0)).toFixed(2)} ${currency}.`,
      xLabels: labels, yFormat: (v) => v.toLocaleString("en-US", { maximumFractionDigits: 2 }),
      series: [{ label: "remaining", points: actual, dots: actual.slice(1) }, { label: "zero", points: [[1, 0], [r.days, 0]] },
        { label: "forecast", points: forecast }],
    });
  }
}

function costPerRequest(r, dayRows) {
  const host = $("cpr-chart");
  host.replaceChildren();
  const rows = [...dayRows].sort((a, b) => (a.day < b.day ? -1 : 1));
  const labels = rows.map((d) => d.day.slice(5));
  lineChart(host, {
    title: `Cost per request by day (${currency})`, description: `Cost per request on ${rows.length} day(s) with traffic.`,
    xLabels: labels, yFormat: (v) => v.toLocaleString("en-US", { maximumSignificantDigits: 3 }),
    series: [{ label: "cost per request", points: rows.map((d, i) => [i + 1, Number(perRequest(d)) / 1e6]),
      dots: rows.map((d, i) => [i + 1, Number(perRequest(d)) / 1e6]) }],
  });
  usageTable("days-table", "usage-by-day", "Usage by day", "day", r, rows);
}

function renderDrill(r) {
  const crumbs = $("crumbs");
  crumbs.replaceChildren();
  const crumb = (label, next) => {
    const b = document.createElement("button");
    b.type = "button";
    b.className = "link";
    b.textContent = label;
    b.addEventListener("click", () => { drill = next; renderDrill(r); });
    crumbs.append(b, document.createTextNode(" › "));
  };
  crumb("All teams", { team: null, app: null });
  if (drill.team) crumb(`team ${drill.team}`, { team: drill.team, app: null });
  if (drill.app) crumb(`app ${drill.app}`, { ...drill });
  crumbs.lastChild?.remove();
  if (!drill.team) {
    usageTable("drill-table", "drill-teams", "Spend by team (choose a team to see its apps)", "team", r,
      bySpend(cache.team.data), { onRow: (row) => { drill = { team: row.team, app: null }; renderDrill(r); },
        drillLabel: "Show apps of team" });
  } else if (!drill.app) {
    const rows = bySpend(cache.teamApp.data.filter((row) => row.team === drill.team));
    usageTable("drill-table", "drill-apps", `Apps of team ${drill.team} (choose an app to see its aliases)`, "team,app",
      r, rows, { csv: false, csvColumns: cache.teamApp.columns,
        onRow: (row) => { drill = { team: drill.team, app: row.app }; renderDrill(r); }, drillLabel: "Show aliases of app" });
  } else {
    const rows = bySpend(cache.teamAppAlias.data.filter((row) => row.team === drill.team && row.app === drill.app));
    usageTable("drill-table", "drill-aliases", `Aliases of app ${drill.app} in team ${drill.team}`, "team,app,alias", r,
      rows, { csv: false, csvColumns: cache.teamAppAlias.columns });
  }
}

async function events(r) {
  const ev = await api(`/admin/v1/usage/budget-events?from=${r.from}&to=${r.to}&limit=50`);
  renderTable($("events-table"), [
    { key: "at", label: "When (UTC)", kind: "text", value: (e) => e.at.replace("T", " ").slice(0, 19) },
    { key: "type", label: "Event", kind: "text" },
    { key: "scope", label: "Scope", kind: "text" },
    { key: "error_code", label: "Code", kind: "text" },
    { key: "spent_micro", label: "Spent", kind: "money" },
    { key: "limit_micro", label: "Limit", kind: "money" },
  ], ev.data, { caption: "Threshold crossings and budget refusals, newest first", currency, name: "budget-events",
    csvColumns: ev.columns });
}

async function keys() {
  const host = $("keys-table");
  try {
    const all = (await api("/admin/v1/keys")).data;
    const now = Date.now();
    const soon = now + NEAR_EXPIRY_DAYS * 86400000;
    const rows = all.filter((k) => !k.revoked && k.expires_at && Date.parse(k.expires_at) <= soon
      && Date.parse(k.expires_at) > now).sort((a, b) => (a.expires_at < b.expires_at ? -1 : 1));
    renderTable(host, [
      { key: "id", label: "Key", kind: "text" }, { key: "team", label: "Team", kind: "text" },
      { key: "app", label: "App", kind: "text" },
      { key: "expires_at", label: "Expires (UTC)", kind: "text", value: (k) => k.expires_at.replace("T", " ").slice(0, 16) },
    ], rows, { caption: `Active keys expiring within ${NEAR_EXPIRY_DAYS} days`, currency, name: "keys-near-expiry" });
  } catch (err) {
    if (err.status !== 403) throw err;
    host.replaceChildren();
    const p = document.createElement("p");
    p.className = "empty";
    p.textContent = "Listing keys needs an auditor or admin token.";
    host.append(p);
  }
}

function archiveWarnings(lines) {
  const host = $("archive-warnings");
  host.replaceChildren();
  host.hidden = lines.length === 0;
  if (!lines.length) return;
  const head = document.createElement("p");
  head.textContent = `${lines.length} archive file problem(s): these files are left out of every figure on this page.`;
  const list = document.createElement("ul");
  for (const line of lines) {
    const li = document.createElement("li");
    li.textContent = line;
    list.append(li);
  }
  host.append(head, list);
}

async function load() {
  const month = $("month").value;
  const r = range(month);
  $("status").textContent = "Loading…";
  try {
    const [team, teamDay, day, app, alias, model, teamApp, teamAppAlias] = await Promise.all(
      ["team", "team,day", "day", "app", "alias", "model", "team,app", "team,app,alias"].map((by) => api(usagePath(by, r))));
    currency = team.currency;
    budgetZone = team.timezone;
    cache = { team, teamApp, teamAppAlias };
    kpis(team.totals);
    archiveWarnings(team.archive_warnings || []);
    const teamRows = await teams(month, r, team.data);
    await burndown(month, r, teamRows, teamDay.data);
    usageTable("apps-table", "top-apps", "Top apps by spend", "app", r, bySpend(app.data).slice(0, 10), { compact: true });
    usageTable("aliases-table", "top-aliases", "Top aliases by spend", "alias", r, bySpend(alias.data).slice(0, 10), { compact: true });
    usageTable("models-table", "top-models", "Top models by spend", "model", r, bySpend(model.data).slice(0, 10), { compact: true });
    costPerRequest(r, day.data);
    renderDrill(r);
    await Promise.all([events(r), keys(), door(), batches(), variants(r), shadows(r),
      deploymentStatus(api, $("deployments-table")), rollouts(api, $("rollouts-table"))]);
    $("status").textContent = `Showing ${r.from} to ${r.to} (${team.timezone})`;
    document.body.dataset.loaded = month;
  } catch (err) {
    $("status").textContent = `Could not load: ${err.message}`;
  }
}

function signOut(message = "") {
  sessionStorage.removeItem(TOKEN);
  delete document.body.dataset.loaded;
  $("dashboard").hidden = true;
  $("who").hidden = true;
  $("login").hidden = false;
  $("login-error").textContent = message;
  $("token").value = "";
  $("token").focus();
}

async function signIn(token) {
  sessionStorage.setItem(TOKEN, token);
  try {
    const snap = await api("/admin/v1/snapshot");
    $("login").hidden = true;
    $("login-error").textContent = "";
    $("dashboard").hidden = false;
    $("who").hidden = false;
    $("who-text").textContent = `Signed in (config v${snap.version})`;
    const current = await api("/admin/v1/usage");  // this budget month so far: its first day, in the budgets' zone
    budgetZone = current.timezone;
    $("month").value = current.from.slice(0, 7);
    await load();
  } catch (err) {
    if (err.status !== 401) signOut(`Sign-in failed (${err.status ?? "network"}): ${err.message}`);
  }
}

document.addEventListener("DOMContentLoaded", () => {
  const now = new Date();
  $("month").value = `${now.getFullYear()}-${String(now.getMonth() + 1).padStart(2, "0")}`;
  $("login-form").addEventListener("submit", (e) => { e.preventDefault(); signIn($("token").value.trim()); });
  $("controls").addEventListener("submit", (e) => { e.preventDefault(); drill = { team: null, app: null }; load(); });
  $("sign-out").addEventListener("click", () => signOut());
  const saved = sessionStorage.getItem(TOKEN);
  if (saved) signIn(saved);
});
