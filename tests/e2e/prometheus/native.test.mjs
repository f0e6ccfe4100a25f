// Native histograms end to end (issue #18): Debian's Prometheus 2.42 started twice against one
// `stallwatch demo incident --listen --hold`. The one with --enable-feature=native-histograms
// asks for the protobuf exposition and stores native histograms (schema 0, the kernel's own
// buckets); the other asks for text and stores the classic `_bucket` series. The p99 of
// cudaStreamSynchronize per cgroup from each agrees within one power-of-two bucket.
import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync, accessSync, constants } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, delimiter } from 'node:path';
import { freePort, startDemo, stopDemo, waitFor } from '../otlp/demo.mjs';

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

async function startPrometheus(dir, name, target, native) {
  const port = await freePort();
  const config = join(dir, `${name}.yml`);
  writeFileSync(config, [
    'global:',
    '  scrape_interval: 1s',
    '  scrape_timeout: 1s',
    'scrape_configs:',
    '  - job_name: stallwatch',
    '    static_configs:',
    `      - targets: ["${target}"]`,
    '',
  ].join('\n'));
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

test('native and classic p99 agree within one bucket', { timeout: 120000 }, async () => {
  const dir = mkdtempSync(join(tmpdir(), 'stallwatch-native-'));
  cleanup.push(async () => rmSync(dir, { recursive: true, force: true }));
  const demo = await startDemo({ scenario: 'incident', args: ['--hold'], timeoutMs: 20000 });
  cleanup.push(async () => stopDemo(demo));
  const target = demo.url.replace('http://', '');
  const native = await startPrometheus(dir, 'native', target, true);
  const classic = await startPrometheus(dir, 'classic', target, false);

  const sel = 'call="cudaStreamSynchronize"';
  const nativeQ = `histogram_quantile(0.99, sum by (cgroup) (rate(stallwatch_cuda_call_duration_seconds{${sel}}[1m])))`;
  const classicQ = `histogram_quantile(0.99, sum by (cgroup, le) (rate(stallwatch_cuda_call_duration_seconds_bucket{${sel}}[1m])))`;
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

  const byCgroup = (r) => Object.fromEntries(r.map((s) => [s.metric.cgroup, Number(s.value[1])]));
  const nv = byCgroup(n), cv = byCgroup(c);
  assert.deepEqual(Object.keys(nv).sort(), Object.keys(cv).sort());
  for (const cg of Object.keys(nv)) {
    const diff = Math.abs(Math.log2(nv[cg]) - Math.log2(cv[cg]));
    console.log(`p99 ${cg.slice(-40)}: native ${nv[cg]} s, classic ${cv[cg]} s (${diff.toFixed(2)} buckets apart)`);
    assert.ok(diff <= 1, `${cg}: native ${nv[cg]} vs classic ${cv[cg]}`);
  }
  // The counters and gauges came through the protobuf form too.
  assert.ok((await query(native, 'stallwatch_build_info')).length === 1);
  assert.ok((await query(native, 'stallwatch_outliers_total')).length === 1);
});
