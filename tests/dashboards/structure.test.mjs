// The dashboards parse as JSON and keep the contract every dashboard of stallwatch shares: a
// Prometheus datasource variable that every panel and query uses, the workload variables
// (namespace, pod, workload; multi-select with All) in every per-workload query, unique panel ids
// and a layout inside Grafana's 24 columns; and the JSON is what dashboards/generate.mjs writes.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import test from 'node:test';
import { EXPECTED, dashboardFiles, dashboardsDir, expressions, loadDashboard, metricNames, panels } from './lib.mjs';

// The daemon's own series (its process_* ones included), the host's stolen CPU, the GPUs' own
// state (clocks, heat, power, Xid errors) and other exporters' carry no workload labels; every
// other expression must filter on all three workload variables (stallwatch_gpu_starvation_ratio
// and stallwatch_workload_gpu_info are per workload).
const NOT_PER_WORKLOAD = /^(up|scrape_duration_seconds|process_\w+|stallwatch_(build_info|bpf_programs_loaded|events_lost_total|traced_processes|attached_\w+|outliers_total|snapshot_sequence|cpu_stolen_ratio|probe_sites|probe_trap_seconds|probe_cost_budget_ratio|store_\w+|otlp_\w+|gpu_(info|sm_clock_\w+|clock_\w+|temperature_celsius|power_\w+|xid_\w+|sample_failures_total)))$/;

test('the three dashboards are there and parse as JSON', () => {
  assert.deepEqual(dashboardFiles(), EXPECTED);
  for (const f of EXPECTED) {
    const text = readFileSync(join(dashboardsDir, f), 'utf8');
    let d;
    assert.doesNotThrow(() => (d = JSON.parse(text)), `${f} is not valid JSON`);
    assert.equal(typeof d, 'object', `${f}: not an object`);
    assert.ok(Array.isArray(d.panels) && d.panels.length > 0, `${f}: no panels`);
    assert.ok(d.schemaVersion >= 36, `${f}: schemaVersion ${d.schemaVersion} is older than Grafana 9`);
    assert.match(d.uid ?? '', /^[a-zA-Z0-9_-]{8,40}$/, `${f}: uid`);
  }
  const uids = EXPECTED.map((f) => loadDashboard(f).uid);
  assert.equal(new Set(uids).size, uids.length, 'dashboard uids must differ');
});

for (const f of EXPECTED) {
  test(`${f}: variables, datasources and workload filters`, () => {
    const d = loadDashboard(f);
    const vars = new Map((d.templating?.list ?? []).map((v) => [v.name, v]));
    const ds = vars.get('datasource');
    assert.ok(ds, 'no $datasource variable');
    assert.equal(ds.type, 'datasource');
    assert.equal(ds.query, 'prometheus', '$datasource must list Prometheus datasources');
    for (const name of ['namespace', 'pod', 'workload']) {
      const v = vars.get(name);
      assert.ok(v, `no $${name} variable`);
      assert.equal(v.type, 'query', `$${name}: type`);
      assert.equal(v.multi, true, `$${name}: multi-select`);
      assert.equal(v.includeAll, true, `$${name}: All`);
      const q = typeof v.query === 'string' ? v.query : v.query?.query;
      assert.match(q, new RegExp(`^label_values\\(.+,\\s*${name}\\)$`), `$${name}: label_values(..., ${name})`);
      assert.equal(v.datasource?.uid, '${datasource}', `$${name}: datasource`);
    }
    for (const v of vars.values()) {
      if (v.type === 'query') assert.equal(v.datasource?.uid, '${datasource}', `$${v.name}: datasource`);
    }

    const ids = new Set();
    for (const p of panels(d)) {
      assert.ok(Number.isInteger(p.id), `panel "${p.title}": id`);
      assert.ok(!ids.has(p.id), `panel id ${p.id} used twice`);
      ids.add(p.id);
      const g = p.gridPos;
      assert.ok(g && [g.x, g.y, g.w, g.h].every(Number.isInteger), `panel ${p.id}: gridPos`);
      assert.ok(g.x >= 0 && g.w > 0 && g.x + g.w <= 24, `panel ${p.id} "${p.title}": outside 24 columns`);
      if (p.type === 'row' || p.type === 'text') continue;
      assert.equal(p.datasource?.uid, '${datasource}', `panel ${p.id} "${p.title}": datasource is not \${datasource}`);
      assert.equal(p.datasource?.type, 'prometheus', `panel ${p.id}: datasource type`);
      assert.ok((p.targets ?? []).length > 0, `panel ${p.id} "${p.title}": no query`);
      for (const t of p.targets) {
        assert.equal(t.datasource?.uid, '${datasource}', `panel ${p.id} ${t.refId}: target datasource`);
        assert.ok(t.expr?.trim(), `panel ${p.id} ${t.refId}: empty expr`);
      }
    }
    // Every per-workload query follows the selected workloads under every
    // --metrics.identity-labels setting: its series are filtered on what they always carry
    // (workload=~"$workload", never namespace or pod, which a setting may leave off) and joined
    // to stallwatch_cgroup_info filtered on all three, which keeps every identity label. DCGM's
    // series have no workload: namespace and pod, then joined to stallwatch's workloads.
    const JOIN = 'on (job, instance, workload) group_left (namespace, pod, container, container_id, cgroup) stallwatch_cgroup_info{';
    for (const { where, expr, kind } of expressions(d)) {
      if (kind === 'variable') continue;
      for (const name of metricNames(expr)) {
        if (NOT_PER_WORKLOAD.test(name)) continue;
        const info = name === 'stallwatch_cgroup_info';
        const need = name.startsWith('DCGM_') ? ['namespace', 'pod'] : info ? ['namespace', 'pod', 'workload'] : ['workload'];
        const re = new RegExp(`\\b${name}\\b(\\s*\\{[^}]*\\})?`, 'g');
        for (const m of expr.matchAll(re)) {
          for (const v of need) {
            assert.ok((m[1] ?? '').includes(`${v}=~"$${v}"`),
              `${where}: ${name} without ${v}=~"$${v}": ${expr}`);
          }
          if (info || name.startsWith('DCGM_')) continue;
          assert.doesNotMatch(m[1] ?? '', /\b(namespace|pod|container|container_id|cgroup)=/,
            `${where}: ${name} filtered on an identity label a setting may leave off: ${expr}`);
          assert.ok(expr.includes(JOIN), `${where}: ${name} is not joined to stallwatch_cgroup_info: ${expr}`);
        }
      }
    }
  });
}

test('the JSON files are what dashboards/generate.mjs writes', () => {
  const r = spawnSync(process.execPath, [join(dashboardsDir, 'generate.mjs'), '--check'], { encoding: 'utf8' });
  assert.equal(r.status, 0, `${r.stdout}${r.stderr}`);
});
