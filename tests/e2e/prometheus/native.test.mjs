// Native histograms end to end (issue #18): Debian's Prometheus 2.42 started twice against one
// `stallwatch demo incident --listen --hold`. The one with --enable-feature=native-histograms
// asks for the protobuf exposition and stores native histograms (schema 0, the kernel's own
// buckets); the other asks for text and stores the classic `_bucket` series. The p99 of
// synchronize calls per workload from each agrees within one bucket of the classic ladder (powers
// of four by default: two powers of two); every
// dashboard query and recording rule (both servers load alerts/stallwatch.rules.yml) finds data
// on the native server wherever it does on the classic one. The classic server also scrapes a
// second demo run with `--metrics.identity-labels none` (job `lean`): every dashboard query,
// narrowed to the demo's pod, shows the same series for it as for the default demo.
import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync, accessSync, constants } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, delimiter, dirname } from 'node:path';
import { fileURLToPath } from 'node:url';
import { freePort, startDemo, stopDemo, waitFor } from '../otlp/demo.mjs';
import { EXPECTED, expressions, loadDashboard } from '../../dashboards/lib.mjs';

const RULES = join(dirname(fileURLToPath(import.meta.url)), '..', '..', '..', 'alerts', 'stallwatch.rules.yml');

const FIX = 'install Debian\'s prometheus: `bash scripts/install-deps.sh`';

function findPrometheus() {
  for (const dir of [...(process.env.PATH || '').split(delimiter), '/usr/bin']) {
    if (!dir) continue;
    try {
      accessSync(join(dir, 'prometheus'), constants.X_OK);
      return join(dir, 'prometheus');
    } catch {}
  }
  throw new Error(`prometheus not found: ${FIX}`);
}

const cleanup = [];
after(async () => {
  for (const f of cleanup.reverse()) await f();
});

// targets: { job: 'host:port' }. Scrapes every second and evaluates the project's rules every
// second.
async function startPrometheus(dir, name, targets, native) {
  const port = await freePort();
  const config = join(dir, `${name}.yml`);
  const lines = [
    'global:',
    '  scrape_interval: 1s',
    '  scrape_timeout: 1s',
    '  evaluation_interval: 1s',
    'rule_files:',
    `  - ${JSON.stringify(RULES)}`,
    'scrape_configs:',
  ];
  for (const [job, target] of Object.entries(targets)) {
    lines.push(`  - job_name: ${job}`, '    static_configs:', `      - targets: ["${target}"]`);
  }
  writeFileSync(config, [...lines, ''].join('\n'));
  const args = [`--config.file=${config}`, `--storage.tsdb.path=${join(dir, `${name}-data`)}`,
    `--web.listen-address=127.0.0.1:${port}`, '--log.level=warn'];
  if (native) args.push('--enable-feature=native-histograms');
  const child = spawn(findPrometheus(), args, { stdio: ['ignore', 'ignore', 'pipe'] });
  let err = '';
  let exited = null;
  child.stderr.setEncoding('utf8');
  child.stderr.on('data', (d) => { err = (err + d).slice(-5000); });
  child.on('exit', (code) => { exited = code; });
  cleanup.push(async () => {
    if (exited === null) {
      child.kill('SIGTERM');
      await new Promise((r) => { child.on('exit', r); setTimeout(r, 10000); });
    }
  });
  const url = `http://127.0.0.1:${port}`;
  await waitFor(async () => {
    if (exited !== null) throw Object.assign(new Error(`${name} exited ${exited}: ${err}`), { fatal: true });
    const res = await fetch(`${url}/-/ready`, { signal: AbortSignal.timeout(2000) });
    await res.arrayBuffer();
    return res.ok;
  }, { timeoutMs: 30000, intervalMs: 200, what: `${name} ready` });
  return { url, log: () => err };
}

async function query(prom, expr) {
  const res = await fetch(`${prom.url}/api/v1/query?query=${encodeURIComponent(expr)}`,
    { signal: AbortSignal.timeout(5000) });
  const body = await res.json();
  assert.equal(body.status, 'success', `${expr}: ${JSON.stringify(body)}`);
  return body.data.result;
}

// One demo of each setting and the two servers, shared by the tests below (run in order).
let shared;
function servers() {
  shared ??= (async () => {
    const dir = mkdtempSync(join(tmpdir(), 'stallwatch-native-'));
    cleanup.push(async () => rmSync(dir, { recursive: true, force: true }));
    const demo = await startDemo({ scenario: 'incident', args: ['--hold'], timeoutMs: 20000 });
    cleanup.push(async () => stopDemo(demo));
    const lean = await startDemo({ scenario: 'incident', args: ['--hold', '--metrics.identity-labels', 'none'], timeoutMs: 20000 });
    cleanup.push(async () => stopDemo(lean));
    const target = (d) => d.url.replace('http://', '');
    const native = await startPrometheus(dir, 'native', { stallwatch: target(demo) }, true);
    const classic = await startPrometheus(dir, 'classic', { stallwatch: target(demo), lean: target(lean) }, false);
    return { native, classic };
  })();
  return shared;
}

// A dashboard expression with its Grafana variables set: `vars` by name, the time ones 30s,
// any other variable All (.*).
function instantiate(expr, vars) {
  return expr.replace(/\$\{([a-zA-Z_]+)(?::[a-z]+)?\}|\$([a-zA-Z_]+)/g, (_, a, b) => {
    const name = a ?? b;
    if (/^__(rate_interval|interval|range)$/.test(name)) return '30s';
    return vars[name] ?? '.*';
  });
}

function dashboardTargets() {
  const out = [];
  for (const f of EXPECTED) {
    for (const e of expressions(loadDashboard(f))) {
      if (e.kind === 'target') out.push({ ...e, where: `${f} ${e.where}` });
    }
  }
  return out;
}

// Runs compare(target) for every dashboard target until none reports a problem (rates need two
// samples in their range on both servers), then fails with the problems of the last round.
// compare returns { problem, found }: a line saying what differs (or null), whether the
// reference side had data. Returns how many targets had data.
async function compareEveryTarget(targets, compare, what) {
  let report = [];
  let found = 0;
  await waitFor(async () => {
    report = [];
    found = 0;
    for (const t of targets) {
      const r = await compare(t);
      if (r.found) found++;
      if (r.problem) report.push(`${t.where}: ${r.problem}`);
    }
    return report.length === 0;
  }, { timeoutMs: 40000, intervalMs: 2000, what }).catch((e) => {
    assert.fail(`${e.message}\n${report.join('\n')}`);
  });
  return found;
}

test('native and classic p99 agree within one classic bucket', { timeout: 120000 }, async () => {
  const { native, classic } = await servers();

  const sel = 'class="sync", api="runtime"';
  const nativeQ = `histogram_quantile(0.99, sum by (workload) (rate(stallwatch_cuda_call_duration_seconds{job="stallwatch", ${sel}}[1m])))`;
  const classicQ = `histogram_quantile(0.99, sum by (workload, le) (rate(stallwatch_cuda_call_duration_seconds_bucket{job="stallwatch", ${sel}}[1m])))`;
  let n = [], c = [];
  await waitFor(async () => {
    n = await query(native, nativeQ);
    c = await query(classic, classicQ);
    return n.length > 0 && c.length > 0 && Number(n[0].value[1]) > 0 && Number(c[0].value[1]) > 0;
  }, { timeoutMs: 60000, intervalMs: 1000, what: 'a p99 from both Prometheus servers' });

  // The native server holds native histograms and no classic bucket series; the other the reverse.
  const raw = await query(native, `stallwatch_cuda_call_duration_seconds{${sel}}`);
  assert.ok(raw.length > 0 && raw[0].histogram, `native samples: ${JSON.stringify(raw).slice(0, 300)}`);
  assert.equal((await query(native, `stallwatch_cuda_call_duration_seconds_bucket{${sel}}`)).length, 0);
  assert.equal((await query(classic, `stallwatch_cuda_call_duration_seconds{${sel}}`)).length, 0);
  assert.ok((await query(classic, `stallwatch_cuda_call_duration_seconds_bucket{${sel}}`)).length > 0);

  const byCgroup = (r) => Object.fromEntries(r.map((s) => [s.metric.workload, Number(s.value[1])]));
  const nv = byCgroup(n), cv = byCgroup(c);
  assert.deepEqual(Object.keys(nv).sort(), Object.keys(cv).sort());
  for (const cg of Object.keys(nv)) {
    const diff = Math.abs(Math.log2(nv[cg]) - Math.log2(cv[cg]));
    console.log(`p99 ${cg.slice(-40)}: native ${nv[cg]} s, classic ${cv[cg]} s (${diff.toFixed(2)} buckets apart)`);
    assert.ok(diff <= 2, `${cg}: native ${nv[cg]} vs classic ${cv[cg]}`);
  }
  // The counters and gauges came through the protobuf form too.
  assert.ok((await query(native, 'stallwatch_build_info')).length === 1);
  assert.ok((await query(classic, 'stallwatch_build_info')).length === 2, 'the classic server scrapes both demos');
  assert.ok((await query(native, 'stallwatch_outliers_total')).length === 1);
});

test('every dashboard query and recording rule finds native histograms as it finds classic ones', { timeout: 120000 }, async () => {
  const { native, classic } = await servers();
  const targets = dashboardTargets();
  const vars = { job: 'stallwatch', call: '.+' };
  const found = await compareEveryTarget(targets, async (t) => {
    const expr = instantiate(t.expr, vars);
    const c = (await query(classic, expr)).length > 0;
    const n = (await query(native, expr)).length > 0;
    // The heatmaps read the classic buckets as they are (Grafana 10's heatmap has no native
    // histogram support): empty on a server that keeps native histograms only.
    const want = t.panelType === 'heatmap' ? false : c;
    const problem = n === want ? null : `classic ${c ? 'has data' : 'empty'}, native ${n ? 'has data' : 'empty'}: ${expr}`;
    return { problem, found: c };
  }, 'the same dashboard queries answered by both servers');
  console.log(`${found} of ${targets.length} dashboard queries have data on the classic server, and the same on the native one`);
  assert.ok(found >= 25, `only ${found} dashboard queries have data: the demo or the substitution is broken`);

  // The recording rules of alerts/stallwatch.rules.yml, from both: the same series.
  const recorded = async (prom) => {
    const r = await query(prom, '{__name__=~"stallwatch:.+", job="stallwatch"}');
    return [...new Set(r.map((s) => s.metric.__name__))].sort();
  };
  let rc = [], rn = [];
  await waitFor(async () => {
    rc = await recorded(classic);
    rn = await recorded(native);
    return rc.includes('stallwatch:cuda_sync_call_duration_seconds:p99_rate5m') && rc.join() === rn.join();
  }, { timeoutMs: 30000, intervalMs: 1000, what: 'the same recording rules on both servers' }).catch((e) => {
    assert.fail(`${e.message}: classic ${rc.join(', ')}; native ${rn.join(', ')}`);
  });
  for (const name of ['stallwatch:cuda_sync_call_duration_seconds:p99_rate5m', 'stallwatch:cuda_sync_calls:rate5m', 'stallwatch:cuda_calls:rate5m']) {
    assert.ok(rn.includes(name), `${name} is not recorded from native histograms: ${rn.join(', ')}`);
  }
});

test('under --metrics.identity-labels none every dashboard query shows the same series of a pod', { timeout: 120000 }, async () => {
  const { classic } = await servers();
  const info = await query(classic, 'stallwatch_cgroup_info{job="lean", pod!=""}');
  assert.ok(info.length > 0, 'the lean demo exports stallwatch_cgroup_info with its pods');
  const { pod, namespace } = info[0].metric;
  const lean = await query(classic, `stallwatch_cuda_call_duration_seconds_count{job="lean"}`);
  assert.ok(lean.length > 0 && lean.every((s) => !('pod' in s.metric) && !('namespace' in s.metric)), 'the setting took effect');
  const targets = dashboardTargets().filter((t) => !t.expr.includes('DCGM_'));
  const series = (r) => r.map((s) => {
    const { job, instance, __name__, ...rest } = s.metric;
    return JSON.stringify(Object.entries(rest).sort());
  }).sort().join('\n');
  const found = await compareEveryTarget(targets, async (t) => {
    const a = series(await query(classic, instantiate(t.expr, { job: 'stallwatch', namespace, pod, call: '.+' })));
    const b = series(await query(classic, instantiate(t.expr, { job: 'lean', namespace, pod, call: '.+' })));
    return { problem: a === b ? null : `\n  default: ${a || '(none)'}\n  none:    ${b || '(none)'}`, found: !!a };
  }, 'the same series under both settings');
  console.log(`pod ${namespace}/${pod}: ${found} of ${targets.length} dashboard queries show the same series under both settings`);
  assert.ok(found >= 25, `only ${found} dashboard queries have data for the pod`);
});
