// Tables for the FinOps page: exact money formatting, accessible tables, CSV downloads.
// Money arrives as integer micro-units in strings ("12345"); it is formatted with BigInt, never a float,
// and every money cell keeps the exact value in data-micro.

export function microBig(value) {
  return value === null || value === undefined || value === "" ? null : BigInt(value);
}

// "12.345678" from 12345678n: at least two decimals, at most six, trailing zeros trimmed.
export function units(micro) {
  if (micro === null) return "";
  const neg = micro < 0n;
  const abs = neg ? -micro : micro;
  const whole = abs / 1000000n;
  let frac = (abs % 1000000n).toString().padStart(6, "0").replace(/0+$/, "");
  if (frac.length < 2) frac = frac.padEnd(2, "0");
  return `${neg ? "-" : ""}${whole.toLocaleString("en-US")}.${frac}`;
}

export function money(value, currency) {
  const micro = microBig(value);
  return micro === null ? "" : `${units(micro)} ${currency || ""}`.trim();
}

export function pct(num, den) {
  if (!den) return "";
  return `${(Number(num) * 100 / Number(den)).toFixed(1)}%`;
}

const KINDS = {
  money: (v, ctx) => money(v, ctx.currency),
  int: (v) => (v === null || v === undefined ? "" : Number(v).toLocaleString("en-US")),
  ms: (v) => (v === null || v === undefined ? "" : `${v} ms`),
  text: (v) => (v === null || v === undefined ? "—" : String(v)),
  raw: (v) => (v === null || v === undefined ? "" : String(v)),
};

// columns: [{key, label, kind, value?(row)}]; rows: plain objects; opts: {caption, currency, name, onRow, csv}
export function renderTable(host, columns, rows, opts) {
  host.replaceChildren();
  const wrap = document.createElement("div");
  wrap.className = "table-wrap";
  const table = document.createElement("table");
  table.dataset.table = opts.name;
  const caption = document.createElement("caption");
  caption.textContent = opts.caption;
  table.append(caption);
  const head = table.createTHead().insertRow();
  for (const col of columns) {
    const th = document.createElement("th");
    th.scope = "col";
    th.textContent = col.label;
    if (col.kind !== "text") th.className = "num";
    head.append(th);
  }
  const body = table.createTBody();
  for (const row of rows) {
    const tr = body.insertRow();
    const first = columns[0].value ? columns[0].value(row) : row[columns[0].key];
    tr.dataset.key = first === null || first === undefined ? "" : String(first);
    for (const [i, col] of columns.entries()) {
      const value = col.value ? col.value(row) : row[col.key];
      const cell = document.createElement(i === 0 ? "th" : "td");
      if (i === 0) cell.scope = "row";
      cell.dataset.col = col.key;
      if (col.kind === "money" && value !== null && value !== undefined) cell.dataset.micro = String(value);
      if (col.kind !== "text") cell.className = "num";
      if (col.cls) cell.classList.add(col.cls(row));
      if (i === 0 && opts.onRow) {
        const button = document.createElement("button");
        button.type = "button";
        button.className = "link";
        button.textContent = KINDS[col.kind](value, opts);
        button.setAttribute("aria-label", `${opts.drillLabel || "Open"} ${value ?? "none"}`);
        button.addEventListener("click", () => opts.onRow(row));
        cell.append(button);
      } else {
        cell.textContent = KINDS[col.kind](value, opts);
      }
      tr.append(cell);
    }
  }
  wrap.append(table);
  host.append(wrap);
  if (!rows.length) {
    const p = document.createElement("p");
    p.className = "empty";
    p.textContent = "No data for this period.";
    host.append(p);
  }
  const tools = document.createElement("div");
  tools.className = "table-tools";
  const count = document.createElement("span");
  count.className = "status";
  count.textContent = `${rows.length} row${rows.length === 1 ? "" : "s"}`;
  const button = document.createElement("button");
  button.type = "button";
  button.className = "secondary";
  button.textContent = "Download CSV";
  button.setAttribute("aria-label", `Download ${opts.caption} as CSV`);
  button.dataset.csv = opts.name;
  button.addEventListener("click", async () => {
    const text = opts.csv ? await opts.csv() : toCsv(opts.csvColumns || columns.map((c) => c.key), rows);
    download(`${opts.name}.csv`, text);
  });
  tools.append(count, button);
  host.append(tools);
}

function csvCell(value) {
  if (value === null || value === undefined) return "";
  const text = typeof value === "object" ? JSON.stringify(value) : String(value);
  return /[",\n\r]/.test(text) ? `"${text.replace(/"/g, '""')}"` : text;
}

// CSV of the rows as the API gave them (money in exact micro-units), header first even with no rows.
export function toCsv(keys, rows) {
  const lines = [keys.map(csvCell).join(",")];
  for (const row of rows) lines.push(keys.map((k) => csvCell(row[k])).join(","));
  return lines.join("\n") + "\n";
}

export function download(filename, text) {
  const url = URL.createObjectURL(new Blob([text], { type: "text/csv;charset=utf-8" }));
  const a = document.createElement("a");
  a.href = url;
  a.download = filename;
  document.body.append(a);
  a.click();
  a.remove();
  setTimeout(() => URL.revokeObjectURL(url), 1000);
}
