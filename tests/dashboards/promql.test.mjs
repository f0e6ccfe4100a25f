// Every PromQL expression of the dashboards (panel targets, annotations, and the selectors inside
// the query variables' label_values(...)) parses with Prometheus' own parser: each becomes a
// recording rule, Grafana variables replaced by stand-ins, and `promtool check rules` reads the
// file. A control file with one broken expression must fail, so a promtool that stopped
// reporting (or a rules file it did not read) cannot pass.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import test from 'node:test';
import { EXPECTED, expressions, loadDashboard, substitute } from './lib.mjs';

const PROMTOOL = process.env.PROMTOOL || 'promtool';

function rulesFile(rules) {
  // JSON is YAML: no quoting questions.
  return JSON.stringify({ groups: [{ name: 'dashboards', rules }] }, null, 2);
}

function promtool(file) {
  const r = spawnSync(PROMTOOL, ['check', 'rules', file], { encoding: 'utf8' });
  if (r.error)
    throw new Error(`tests/dashboards: ${PROMTOOL} cannot run (${r.error.message}): run \`bash scripts/install-deps.sh\` (Debian package prometheus)`);
  return { status: r.status, out: `${r.stdout}${r.stderr}` };
}

test('promtool parses every dashboard expression', () => {
  const dir = mkdtempSync(join(tmpdir(), 'stallwatch-dash-promql-'));
  try {
    const rules = [];
    const where = [];
    for (const f of EXPECTED) {
      for (const e of expressions(loadDashboard(f))) {
        const expr = substitute(e.expr);
        assert.doesNotMatch(expr, /\$/, `${f} ${e.where}: a Grafana variable left after substitution: ${expr}`);
        rules.push({ record: `dashboard:expr_${rules.length}`, expr });
        where.push(`${f} ${e.where}: ${e.expr}`);
      }
    }
    assert.ok(rules.length >= 30, `only ${rules.length} expressions found: the extraction is broken`);
    const good = join(dir, 'dashboards.rules.yml');
    writeFileSync(good, rulesFile(rules));
    const r = promtool(good);
    if (r.status !== 0) {
      // Name the dashboard and panel of each rule promtool rejects.
      const bad = [...r.out.matchAll(/"dashboard:expr_(\d+)": (.*)/g)].map((m) => `${where[+m[1]]}\n    ${m[2]}`);
      assert.fail(`promtool rejects ${bad.length || 'some'} expression(s):\n${bad.join('\n') || r.out}`);
    }
    assert.match(r.out, new RegExp(`SUCCESS: ${rules.length} rules found`), r.out);

    // Control: the same run with one expression broken must fail and name it.
    const broken = [...rules, { record: 'dashboard:control', expr: substitute('sum by (le (rate(stallwatch_chains_total{pod=~"$pod"}[$__rate_interval]))') }];
    const bad = join(dir, 'control.rules.yml');
    writeFileSync(bad, rulesFile(broken));
    const c = promtool(bad);
    assert.notEqual(c.status, 0, `promtool accepted a broken expression:\n${c.out}`);
    assert.match(c.out, /dashboard:control.*parse error/, c.out);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test('Grafana variables are substituted into valid stand-ins', () => {
  assert.equal(substitute('rate(x{pod=~"$pod"}[$__rate_interval])'), 'rate(x{pod=~"standin"}[5m])');
  assert.equal(substitute('rate(x{a=~"${cgroup:regex}"}[${__range}])'), 'rate(x{a=~"standin"}[5m])');
  assert.equal(substitute('x offset $__interval_ms'), 'x offset 300');
});
