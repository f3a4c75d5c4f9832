// The "Delta tables" page: a React component the Airflow UI (>= 3.1) loads as a plugin.
// Written against the React the UI shares on globalThis (React, ReactJSXRuntime), so it
// needs no bundler: this file is the source and the bundle.
const React = globalThis.React;
const h = React.createElement;

const SORTS = {
  lag_versions: (r) => r.lag_versions,
  lag_seconds: (r) => r.lag_seconds,
  latest_version: (r) => r.latest_version,
  table_uri: (r) => r.table_uri,
  dag_id: (r) => `${r.dag_id}.${r.task_id}`,
};

const cell = { padding: "6px 10px", borderBottom: "1px solid rgba(128,128,128,0.25)",
  textAlign: "left", verticalAlign: "top", whiteSpace: "nowrap" };
const num = { ...cell, textAlign: "right", fontVariantNumeric: "tabular-nums" };
const muted = { opacity: 0.65, fontSize: "0.85em" };
const link = { color: "inherit", textDecoration: "underline dotted" };

const wrapped = { whiteSpace: "normal", wordBreak: "break-all", maxWidth: "26em" };

// The last segment of a path or URI: what people call the table.
function baseName(uri) {
  const parts = String(uri).replace(/\/+$/, "").split("/");
  return parts[parts.length - 1] || uri;
}

function uiUrl(path) {
  return new URL(path, document.baseURI).href;
}

function age(seconds) {
  if (seconds === null || seconds === undefined) return "–";
  if (seconds < 1) return "0 s";
  const parts = [[86400, "d"], [3600, "h"], [60, "min"], [1, "s"]];
  const out = [];
  let rest = Math.round(seconds);
  for (const [size, unit] of parts) {
    if (rest >= size && out.length < 2) {
      out.push(`${Math.floor(rest / size)} ${unit}`);
      rest %= size;
    }
  }
  return out.join(" ");
}

function since(iso) {
  if (!iso) return "–";
  return `${age((Date.now() - Date.parse(iso)) / 1000)} ago`;
}

// Versions behind at the start of each recent run, and now: a small bar chart.
function LagChart({ row }) {
  const points = row.lag_history.map((p) => p.lag_versions);
  if (row.lag_versions !== null) points.push(row.lag_versions);
  if (points.length === 0) return h("span", { style: muted }, "–");
  const width = 120, height = 28, gap = 2;
  const bar = Math.max(Math.min((width - gap * points.length) / points.length, 14), 2);
  const top = Math.max(...points, 1);
  return h("svg", { width, height, role: "img", "aria-label": `lag over ${points.length} runs` },
    points.map((v, i) => {
      const barHeight = Math.max((v / top) * (height - 2), v > 0 ? 2 : 1);
      const now = i === points.length - 1 && row.lag_versions !== null;
      return h("rect", {
        key: i, x: i * (bar + gap), y: height - barHeight, width: bar, height: barHeight,
        fill: v === 0 ? "#3ba55c" : now ? "#e8743b" : "#d9a03f",
      }, h("title", null, `${now ? "now" : row.lag_history[i].run_id}: ${v} version(s) behind`));
    }));
}

function Consumer({ row }) {
  const dag = encodeURIComponent(row.dag_id);
  const task = encodeURIComponent(row.task_id);
  return h("div", null,
    h("a", { href: uiUrl(`dags/${dag}`), style: link }, row.dag_id), " / ",
    h("a", { href: uiUrl(`dags/${dag}/tasks/${task}`), style: link }, row.task_id),
    row.map_index >= 0 ? h("span", { style: muted }, ` [${row.map_index}]`) : null);
}

function LastLoad({ load }) {
  if (!load) return h("span", { style: muted }, "no load yet");
  return h("div", null,
    h("div", null, `${since(load.end_date)} · ${load.rows ?? 0} rows · ${load.batches} batch${load.batches === 1 ? "" : "es"}`),
    load.target ? h("div", { style: muted, title: load.target },
      `→ ${baseName(load.target)} @ v${load.target_version ?? "–"}`) : null);
}

function Row({ row }) {
  const behind = row.lag_versions > 0;
  const lagStyle = { ...num, fontWeight: 600, color: row.error ? undefined : behind ? "#e8743b" : "#3ba55c" };
  return h("tr", {
    "data-testid": "delta-table-row", "data-table": row.table_uri,
    "data-lag-versions": row.lag_versions ?? "", "data-error": row.error ? "true" : "false",
  },
    h("td", { style: cell },
      h("div", { style: { fontWeight: 600 } }, baseName(row.table_uri)),
      h("div", { style: { ...muted, ...wrapped, fontFamily: "monospace" } }, row.table_uri),
      row.error ? h("div", { style: { ...wrapped, color: "#d64545" }, "data-testid": "row-error" }, row.error) : null),
    h("td", { style: cell }, h(Consumer, { row })),
    h("td", { style: cell }, row.watermark_store, h("div", { style: muted }, row.watermark_key)),
    h("td", { style: num }, row.latest_version ?? "–"),
    h("td", { style: num }, row.watermark ?? "–"),
    h("td", { style: lagStyle, "data-testid": "lag-versions" }, row.lag_versions ?? "–"),
    h("td", { style: num, "data-testid": "lag-time" }, age(row.lag_seconds)),
    h("td", { style: cell }, h(LastLoad, { load: row.last_load })),
    h("td", { style: cell }, h(LagChart, { row })));
}

function Header({ label, sortKey, sort, setSort, align }) {
  if (!sortKey) return h("th", { style: { ...cell, textAlign: align || "left" } }, label);
  const active = sort.key === sortKey;
  const arrow = active ? (sort.desc ? " ▼" : " ▲") : "";
  return h("th", { style: { ...cell, textAlign: align || "left", cursor: "pointer" },
    "data-testid": `sort-${sortKey}`, "aria-sort": active ? (sort.desc ? "descending" : "ascending") : "none",
    onClick: () => setSort({ key: sortKey, desc: active ? !sort.desc : true }) }, label + arrow);
}

function sorted(rows, sort) {
  const value = SORTS[sort.key];
  return [...rows].sort((a, b) => {
    const x = value(a), y = value(b);
    if (x === y) return 0;
    if (x === null || x === undefined) return 1;  // unknown lag (errors) last either way
    if (y === null || y === undefined) return -1;
    return (x < y ? -1 : 1) * (sort.desc ? -1 : 1);
  });
}

function DeltaTables() {
  const [state, setState] = React.useState({ rows: null, error: null, loading: true, at: null });
  const [sort, setSort] = React.useState({ key: "lag_versions", desc: true });
  const [filter, setFilter] = React.useState("");

  const load = React.useCallback(() => {
    setState((s) => ({ ...s, loading: true }));
    fetch(uiUrl("delta-provider/api/tables"), { credentials: "same-origin", headers: { Accept: "application/json" } })
      .then((r) => (r.ok ? r.json() : Promise.reject(new Error(`${r.status} ${r.statusText}`))))
      .then((rows) => setState({ rows, error: null, loading: false, at: new Date() }))
      .catch((e) => setState((s) => ({ ...s, error: String(e.message || e), loading: false })));
  }, []);
  React.useEffect(load, [load]);

  const rows = state.rows || [];
  const needle = filter.trim().toLowerCase();
  const shown = sorted(rows.filter((r) => !needle ||
    `${r.table_uri} ${r.dag_id} ${r.task_id}`.toLowerCase().includes(needle)), sort);
  const behind = rows.filter((r) => r.lag_versions > 0).length;
  const failing = rows.filter((r) => r.error).length;
  const head = (label, key, align) => h(Header, { label, sortKey: key, sort, setSort, align });

  return h("div", { style: { padding: "16px", fontSize: "14px" }, "data-testid": "delta-tables-page" },
    h("div", { style: { display: "flex", gap: "12px", alignItems: "center", marginBottom: "12px", flexWrap: "wrap" } },
      h("h2", { style: { fontSize: "1.4em", fontWeight: 600, margin: 0 } }, "Delta tables"),
      h("span", { "data-testid": "summary", style: muted },
        state.rows ? `${rows.length} consumer${rows.length === 1 ? "" : "s"} · ${behind} behind · ${failing} unreachable` : ""),
      h("input", { placeholder: "filter by table, DAG or task", value: filter,
        onChange: (e) => setFilter(e.target.value),
        style: { padding: "4px 8px", border: "1px solid rgba(128,128,128,0.5)", borderRadius: "4px", background: "transparent", color: "inherit", minWidth: "16em" } }),
      h("button", { onClick: load, disabled: state.loading, "data-testid": "refresh",
        style: { padding: "4px 12px", border: "1px solid rgba(128,128,128,0.5)", borderRadius: "4px", background: "transparent", color: "inherit", cursor: "pointer" } },
        state.loading ? "Refreshing…" : "Refresh"),
      state.at ? h("span", { style: muted }, `as of ${state.at.toLocaleTimeString()}`) : null),
    state.error ? h("div", { role: "alert", style: { color: "#d64545", marginBottom: "8px" } }, `Could not load: ${state.error}`) : null,
    h("div", { style: { overflowX: "auto" } },
      h("table", { style: { borderCollapse: "collapse", width: "100%" } },
        h("thead", null, h("tr", null,
          head("Source table", "table_uri"), head("Consumer (DAG / task)", "dag_id"), head("Watermark store"),
          head("Latest", "latest_version", "right"), head("Watermark", null, "right"),
          head("Lag (versions)", "lag_versions", "right"), head("Lag (time)", "lag_seconds", "right"),
          head("Last load"), head("Lag over recent runs"))),
        h("tbody", null, shown.map((row) => h(Row, {
          key: `${row.table_uri}|${row.dag_id}|${row.task_id}|${row.map_index}|${row.watermark_store}`, row }))))),
    state.rows && rows.length === 0 ? h("p", { style: muted },
      "No loads recorded yet: rows appear after a DeltaIncrementalOperator has run in a DAG you may read.") : null);
}

globalThis.AirflowPlugin = DeltaTables;
globalThis["Delta tables"] = DeltaTables;
export default DeltaTables;
