// Shared by the dashboard checks: loading the dashboards, walking their panels, and the PromQL
// they hold (panel targets, annotations and the label_values(...) of query variables).
import { existsSync, readFileSync, readdirSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

export const here = dirname(fileURLToPath(import.meta.url));
export const dashboardsDir = process.env.DASHBOARDS_DIR || join(here, '..', '..', 'dashboards');
export const EXPECTED = [
  'stallwatch-gpu-counter-hides.json',
  'stallwatch-overview.json',
  'stallwatch-workload.json',
];

// One line with the fix when the npm packages are missing: never a silent pass.
export function requireNodeModules() {
  const nm = join(here, 'node_modules');
  for (const pkg of ['typescript', '@grafana/schema']) {
    if (!existsSync(join(nm, pkg, 'package.json')))
      throw new Error(
        `tests/dashboards: npm package ${pkg} is missing: run \`bash scripts/install-deps.sh\` ` +
          `(or \`npm ci --prefix tests/dashboards\`)`,
      );
  }
  return nm;
}

export function dashboardFiles() {
  return readdirSync(dashboardsDir).filter((f) => f.endsWith('.json')).sort();
}

export function loadDashboard(file) {
  return JSON.parse(readFileSync(join(dashboardsDir, file), 'utf8'));
}

// Every panel, rows' nested panels included (collapsed rows keep theirs in row.panels).
export function* panels(dash) {
  for (const p of dash.panels ?? []) {
    yield p;
    for (const q of p.panels ?? []) yield q;
  }
}

// Every PromQL expression of a dashboard, as { where, expr, kind } where kind is 'target',
// 'annotation' or 'variable' (for a variable, expr is the selector inside label_values(...));
// a target also has its panel's type (panelType).
export function expressions(dash) {
  const out = [];
  for (const p of panels(dash)) {
    for (const t of p.targets ?? []) {
      if (typeof t.expr === 'string')
        out.push({ where: `panel ${p.id} "${p.title}" ${t.refId}`, expr: t.expr, kind: 'target', panelType: p.type });
      else throw new Error(`panel ${p.id} "${p.title}" target ${t.refId} has no expr`);
    }
  }
  for (const a of dash.annotations?.list ?? []) {
    if (typeof a.expr === 'string')
      out.push({ where: `annotation "${a.name}"`, expr: a.expr, kind: 'annotation' });
  }
  for (const v of dash.templating?.list ?? []) {
    if (v.type !== 'query') continue;
    const q = typeof v.query === 'string' ? v.query : v.query?.query;
    out.push({ where: `variable $${v.name}`, expr: variableExpr(q, v.name), kind: 'variable' });
  }
  return out;
}

// Grafana's Prometheus variable functions: label_values(selector, label), label_values(label),
// query_result(expr), metrics(regex). Returns the PromQL inside (or throws).
export function variableExpr(q, name) {
  if (typeof q !== 'string') throw new Error(`variable $${name}: no query`);
  const s = q.trim();
  let m = /^label_values\(\s*(.+)\s*,\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*\)$/s.exec(s);
  if (m) return m[1];
  m = /^label_values\(\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*\)$/.exec(s);
  if (m) return `count by (${m[1]}) ({${m[1]}!=""})`;
  m = /^query_result\((.+)\)$/s.exec(s);
  if (m) return m[1];
  throw new Error(`variable $${name}: not a label_values(...)/query_result(...) query: ${q}`);
}

// Grafana variables replaced by valid stand-ins: the time ones by a duration (or a number for
// the _ms/_s forms), any other by a plain word (they sit inside label matcher strings).
export function substitute(expr) {
  return expr.replace(/\$\{([a-zA-Z0-9_]+)(?::[a-zA-Z]+)?\}|\$([a-zA-Z0-9_]+)|\[\[([a-zA-Z0-9_]+)\]\]/g,
    (_, a, b, c) => {
      const name = a ?? b ?? c;
      if (/^__(rate_interval|interval|range)$/.test(name)) return '5m';
      if (/^__(rate_interval|interval|range)_(ms|s)$/.test(name)) return '300';
      return 'standin';
    });
}

// PromQL words that are not metric names.
const KEYWORDS = new Set(
  `sum min max avg group stddev stdvar count count_values bottomk topk quantile limitk limit_ratio
  by without on ignoring group_left group_right bool and or unless offset atan2
  abs absent absent_over_time ceil changes clamp clamp_max clamp_min day_of_month day_of_week
  day_of_year days_in_month delta deriv exp floor histogram_count histogram_sum histogram_fraction
  histogram_quantile histogram_avg histogram_stddev histogram_stdvar holt_winters hour idelta
  increase irate label_join label_replace ln log2 log10 minute month predict_linear rate resets
  round scalar sgn sort sort_desc sort_by_label sort_by_label_desc sqrt time timestamp vector year
  avg_over_time min_over_time max_over_time sum_over_time count_over_time quantile_over_time
  stddev_over_time stdvar_over_time last_over_time present_over_time mad_over_time
  acos acosh asin asinh atan atanh cos cosh sin sinh tan tanh deg rad pi inf nan`.split(/\s+/),
);

// Metric names an expression reads: identifiers left once strings, label matchers, grouping
// label lists, durations and numbers are removed, that are neither keywords nor functions.
export function metricNames(expr) {
  let s = expr.replace(/"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|`[^`]*`/g, '""');
  s = s.replace(/\{[^}]*\}/g, ' ');
  s = s.replace(/\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)/g, ' ');
  s = s.replace(/\[[^\]]*\]/g, ' ');
  const names = new Set();
  for (const m of s.matchAll(/(?<![0-9.])\b[a-zA-Z_:][a-zA-Z0-9_:]*\b/g)) {
    const w = m[0];
    if (KEYWORDS.has(w.toLowerCase())) continue;
    // 1e-9 style numbers: the e part
    if (/^e[0-9]*$/i.test(w) && /[0-9.]$/.test(s.slice(0, m.index))) continue;
    names.add(w);
  }
  return [...names];
}

// Selectors of an expression: [{ name, labels: [label names in its matchers] }].
export function selectors(expr) {
  const out = [];
  const re = /\b([a-zA-Z_:][a-zA-Z0-9_:]*)\s*\{([^}]*)\}/g;
  for (const m of expr.matchAll(re)) {
    const labels = [...m[2].matchAll(/([a-zA-Z_][a-zA-Z0-9_]*)\s*(?:=~|!~|!=|=)/g)].map((x) => x[1]);
    out.push({ name: m[1], labels });
  }
  return out;
}
