// Changing safely (docs/changing-safely.md): the deployments' status (the synthetic canary, provisioned capacity),
// shadow traffic beside what it shadows, and config canaries with each arm's figures. Every number is an API's.
import { renderTable } from "./tables.js";

// GET /admin/v1/deployments: each deployment's last canary word as the answering process saw it.
export async function deploymentStatus(api, host) {
  const rows = (await api("/admin/v1/deployments")).data.map((d) => ({
    id: d.id, provider: d.provider,
    status: d.canary ? d.canary.status : "not probed",
    checked_at: d.canary ? d.canary.checked_at : null,
    latency_ms: d.canary ? d.canary.latency_ms : null,
    last_error: d.canary ? d.canary.last_error : null,
    provisioned: d.provisioned ? d.provisioned.team : null,
    sequences_free: d.sequences_free ?? null,
  }));
  renderTable(host, [
    { key: "id", label: "Deployment", kind: "text" },
    { key: "provider", label: "Provider", kind: "text" },
    { key: "status", label: "Status", kind: "text", cls: (r) => `status-${r.status.replace(" ", "-")}` },
    { key: "checked_at", label: "Checked", kind: "text" },
    { key: "latency_ms", label: "Probe latency", kind: "ms" },
    { key: "last_error", label: "Last error", kind: "text", cls: () => "wrap" },
    { key: "provisioned", label: "Reserved for", kind: "text" },
    { key: "sequences_free", label: "Free sequences", kind: "int" },
  ], rows, { caption: "Deployments: synthetic canary status and reserved capacity", name: "deployments" });
}

// The usage API by alias and shadow: each shadowed alias's own requests beside its shadow legs.
export function shadowRows(data) {
  const shadowed = new Set(data.filter((r) => r.shadow !== null).map((r) => r.shadow));
  return data.filter((r) => r.shadow !== null || shadowed.has(r.alias))
    .map((r) => ({ ...r, shadow: r.shadow === null ? `${r.alias} (served)` : `${r.alias} (shadow of ${r.shadow})` }))
    .sort((a, b) => a.shadow.localeCompare(b.shadow));
}

// GET /admin/v1/rollouts: the newest config canaries, the candidate's and the baseline's figures this stage.
const figures = (f) => `${f.requests} req · ${f.error_pct}% 5xx · ${f.rate_limited_pct}% 429 · p95 ${f.p95_ms ?? "—"} ms`;

export async function rollouts(api, host) {
  const rows = (await api("/admin/v1/rollouts")).data.map((r) => ({
    id: r.id, state: r.state, pct: `${r.pct}%`, versions: `${r.baseline} → ${r.candidate ?? "next"}`,
    candidate: figures(r.figures.candidate), baseline: figures(r.figures.baseline), reason: r.reason,
  }));
  renderTable(host, [
    { key: "id", label: "Rollout", kind: "raw" },
    { key: "state", label: "State", kind: "text" },
    { key: "pct", label: "Stage", kind: "raw" },
    { key: "versions", label: "Baseline → candidate", kind: "text" },
    { key: "candidate", label: "Candidate this stage", kind: "text" },
    { key: "baseline", label: "Baseline this stage", kind: "text" },
    { key: "reason", label: "Why", kind: "text", cls: () => "wrap" },
  ], rows, { caption: "Config rollouts (the newest first)", name: "rollouts" });
}
