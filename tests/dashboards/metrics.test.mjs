// Every metric the dashboards read exists in the real daemon's exposition, with the labels the
// dashboards filter and group on. The real binary ($STALLWATCH_BIN) runs `demo SCENARIO --listen
// --hold` for scenarios that between them produce every family (OTLP self-metrics need
// --otlp-endpoint: a closed port here; the store's, a --db in a temporary directory), /metrics
// is scraped once each has its evidence, and every name used (histogram samples
// _bucket/_sum/_count included) must be a sample name of it. Series from other exporters, the
// few that only `run` exports and the recording rules of alerts/stallwatch.rules.yml the
// dashboards read are allowed by the explicit lists below, and nothing else.
import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import test from 'node:test';
import { freePort, startDemo, stopDemo, waitFor } from '../e2e/otlp/demo.mjs';
import { EXPECTED, expressions, here, loadDashboard, metricNames, selectors } from './lib.mjs';

// Not stallwatch's: dcgm-exporter's GPU utilisation (its labels, with Kubernetes pod mapping)
// and Prometheus' own per-target series.
const EXTERNAL = {
  DCGM_FI_DEV_GPU_UTIL: ['gpu', 'UUID', 'device', 'modelName', 'Hostname', 'DCGM_FI_DRIVER_VERSION', 'pod', 'namespace', 'container'],
  up: [],
  scrape_duration_seconds: [],
};
// The daemon's own families that only `run` exports (the README's metric reference says so),
// with their labels: no demo loads BPF programs or reports its process. Each name must at least
// be one metrics/model.cpp exports.
const RUN_ONLY = {
  stallwatch_bpf_programs_loaded: ['program'],
  process_cpu_seconds_total: [],
  process_resident_memory_bytes: [],
};
// Recording rules of alerts/stallwatch.rules.yml the dashboards read (the Prometheus behind the
// dashboards loads that file), with the labels each keeps besides job and instance: a value
// that must cover every node at once, such as a rank's straggler score against its
// communicator's median, cannot be computed from the workloads a dashboard has picked. Each
// must be recorded in that file.
const RECORDED = {
  'stallwatch:nccl_rank_straggler_score': ['workload', 'comm', 'rank', 'world_size'],
};
// Labels Prometheus adds to every scraped series, and the histogram bucket label.
const TARGET_LABELS = ['job', 'instance'];

// Scenario, extra flags, the sample that says it has reached its evidence, whether it pushes
// OTLP (to a closed port) and whether it keeps a store (the others run with --db none).
const SCENARIOS = [
  ['incident', ['--hold'], 'stallwatch_cuda_call_duration_seconds_bucket', true, true],
  // The OOM kill comes after the hold phase: let the story run (fast windows) past it.
  ['memory-pressure', ['--window', '200ms'], 'stallwatch_oom_kills_total', false],
  ['io-stall', ['--hold'], 'stallwatch_block_io_duration_seconds_bucket', false],
  ['network-retransmit', ['--hold'], 'stallwatch_tcp_retransmits_total', false],
  ['nccl-straggler', ['--hold'], 'stallwatch_nccl_op_duration_seconds_bucket', false],
  // Open calls exist only while the ranks hang: held there.
  ['nccl-hang', ['--hold'], 'stallwatch_cuda_call_inflight_seconds', false],
  // GPU memory and the out-of-memory failures: held at the failures.
  ['cuda-oom', ['--hold'], 'stallwatch_cuda_memory_alloc_failures_total', false],
  // Per-CPU steal exists only in the story's steal phase: fast windows, scraped as they pass.
  ['cpu-steal', ['--window', '200ms'], 'stallwatch_cpu_stolen_ratio', false],
  // The CPU-limit families exist while the pod has its limit (every phase of the story): held
  // at the throttling.
  ['cpu-throttle', ['--hold'], 'stallwatch_cgroup_cpu_throttled_seconds_total', false],
  // The GPUs' own state (issue #39): a power-capped GPU under a job (clocks, reasons,
  // temperature, power, the workload's GPUs), and an Xid 79 (the Xid counters).
  ['gpu-throttle', ['--hold'], 'stallwatch_gpu_clock_throttle_seconds_total', false],
  ['gpu-xid', ['--hold'], 'stallwatch_gpu_xid_errors_total', false],
];

// { sampleName: Set(label names) } of one exposition.
function parseExposition(text) {
  const out = new Map();
  for (const line of text.split('\n')) {
    if (!line || line.startsWith('#')) continue;
    const m = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{.*\})?\s/.exec(line);
    if (!m) continue;
    const labels = out.get(m[1]) ?? new Set();
    for (const l of (m[2] ?? '').matchAll(/([a-zA-Z_][a-zA-Z0-9_]*)="/g)) labels.add(l[1]);
    out.set(m[1], labels);
  }
  return out;
}

async function scrape(url) {
  const res = await fetch(`${url}/metrics`, { signal: AbortSignal.timeout(3000) });
  if (!res.ok) throw new Error(`/metrics answered ${res.status}`);
  return res.text();
}

async function exposition(settings = []) {
  const closed = await freePort(); // nothing listens there: OTLP attempts fail, metrics appear
  const dir = mkdtempSync(join(tmpdir(), 'stallwatch-dashboards-'));
  const all = new Map();
  const runs = SCENARIOS.map(async ([scenario, flags, ready, otlp, store]) => {
    const args = ['--window', '1s', '--db', store ? join(dir, `${scenario}.db`) : 'none', ...flags, ...settings];
    if (otlp) args.push('--otlp-endpoint', `http://127.0.0.1:${closed}`);
    const demo = await startDemo({ scenario, args, timeoutMs: 20000 });
    try {
      const text = await waitFor(
        async () => {
          const t = await scrape(demo.url);
          const has = (n) => new RegExp(`^${n}[{ ]`, 'm').test(t);
          return has('stallwatch_chain_active') && has(ready) && (!otlp || has('stallwatch_otlp_failures_total')) &&
            (!store || has('stallwatch_store_up')) && t;
        },
        { timeoutMs: 45000, intervalMs: 250, what: `${ready} in /metrics of demo ${scenario}` },
      );
      return parseExposition(text);
    } finally {
      await stopDemo(demo);
    }
  });
  try {
    for (const m of await Promise.all(runs)) {
      for (const [name, labels] of m) all.set(name, new Set([...(all.get(name) ?? []), ...labels]));
    }
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
  return all;
}

// The dashboards against one exposition; the problems found.
function problemsWith(exposed, used) {
  assert.ok(exposed.has('stallwatch_chain_active'), 'scrape failed');
  // A histogram's own name is its native series (a Prometheus with native histograms stores
  // that one): its labels are those of the classic buckets but `le`.
  const native = (name) => !exposed.has(name) && exposed.has(`${name}_bucket`);
  const labelsOf = (name) => {
    if (name in EXTERNAL) return new Set([...EXTERNAL[name], ...TARGET_LABELS]);
    if (name in RUN_ONLY) return new Set([...RUN_ONLY[name], ...TARGET_LABELS]);
    if (name in RECORDED) return new Set([...RECORDED[name], ...TARGET_LABELS]);
    if (native(name)) return new Set([...exposed.get(`${name}_bucket`)].filter((l) => l !== 'le').concat(TARGET_LABELS));
    return new Set([...(exposed.get(name) ?? []), ...TARGET_LABELS]);
  };
  const problems = [];
  for (const f of EXPECTED) {
    for (const { where, expr } of expressions(loadDashboard(f))) {
      const names = metricNames(expr);
      if (names.length === 0) problems.push(`${f} ${where}: reads no metric: ${expr}`);
      for (const n of names) {
        used.add(n);
        if (n in EXTERNAL || n in RUN_ONLY || n in RECORDED) continue;
        if (!n.startsWith('stallwatch_')) problems.push(`${f} ${where}: ${n} is neither stallwatch's nor in the allowed list`);
        else if (!exposed.has(n) && !native(n)) {
          const family = n.replace(/_(bucket|sum|count)$/, '');
          const hint = exposed.has(`${family}_bucket`) ? ` (${family} is a histogram: use ${family}_bucket/_sum/_count)` : '';
          problems.push(`${f} ${where}: ${n} is not in /metrics${hint}`);
        }
      }
      // Label names in matchers must exist on that metric.
      for (const { name, labels } of selectors(expr)) {
        const have = labelsOf(name);
        for (const l of labels) if (!have.has(l)) problems.push(`${f} ${where}: ${name} has no label ${l}`);
      }
      // Grouping labels must exist on some metric of the expression (or be le of a histogram).
      const have = new Set(names.flatMap((n) => [...labelsOf(n)]));
      for (const g of expr.matchAll(/\b(?:by|on|without|ignoring)\s*\(([^)]*)\)/g)) {
        for (const l of g[1].split(',').map((x) => x.trim()).filter(Boolean)) {
          if (!have.has(l)) problems.push(`${f} ${where}: groups by ${l}, which none of ${names.join(', ')} has`);
        }
      }
    }
    // The label a label_values(...) variable lists exists on its metric.
    for (const v of loadDashboard(f).templating.list) {
      if (v.type !== 'query') continue;
      const q = typeof v.query === 'string' ? v.query : v.query.query;
      const m = /^label_values\(\s*([a-zA-Z_:][a-zA-Z0-9_:]*).*,\s*([a-zA-Z_]\w*)\s*\)$/s.exec(q);
      if (m && !labelsOf(m[1]).has(m[2])) problems.push(`${f} $${v.name}: ${m[1]} has no label ${m[2]}`);
    }
  }
  return problems;
}

test('the run-only families the dashboards may read are exported by metrics/model.cpp', () => {
  const model = readFileSync(join(here, '..', '..', 'metrics', 'model.cpp'), 'utf8');
  for (const n of Object.keys(RUN_ONLY)) assert.ok(model.includes(`"${n}"`), `metrics/model.cpp exports no ${n}`);
});

test('the recording rules the dashboards may read are recorded in alerts/stallwatch.rules.yml', () => {
  const rules = readFileSync(join(here, '..', '..', 'alerts', 'stallwatch.rules.yml'), 'utf8');
  for (const n of Object.keys(RECORDED)) {
    assert.match(rules, new RegExp(`^\\s*- record: ${n.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}\\s*$`, 'm'),
      `alerts/stallwatch.rules.yml records no ${n}`);
  }
});

test('every metric and label the dashboards use is in the exposition of the real daemon', { timeout: 120000 }, async () => {
  const exposed = await exposition();
  const used = new Set();
  const problems = problemsWith(exposed, used);
  assert.deepEqual(problems, [], `\n${problems.join('\n')}`);
  // The families issue 6 names are all on some dashboard.
  for (const n of [
    'stallwatch_chain_active', 'stallwatch_chains_total', 'stallwatch_cuda_call_duration_seconds_bucket',
    'stallwatch_offcpu_ratio', 'stallwatch_events_lost_total', 'stallwatch_traced_processes',
    'stallwatch_otlp_failures_total', 'stallwatch_otlp_points_dropped_total', 'stallwatch_store_write_errors_total',
    'stallwatch_memory_reclaim_seconds_total', 'stallwatch_oom_kills_total', 'stallwatch_pressure_stall_seconds_total',
    'stallwatch_block_io_duration_seconds_bucket', 'stallwatch_block_io_bytes_total', 'stallwatch_gpu_starvation_ratio',
    'stallwatch_tcp_retransmits_total', 'stallwatch_nccl_op_duration_seconds_sum', 'stallwatch_nccl_op_bytes_total',
    'stallwatch_cuda_call_offcpu_seconds_total', 'DCGM_FI_DEV_GPU_UTIL', 'up', 'scrape_duration_seconds',
  ]) {
    assert.ok(used.has(n), `no dashboard reads ${n}`);
  }
  // And the self-monitoring of issue #51: what the daemon alerts read, and the daemon's CPU.
  for (const n of ['stallwatch_store_up', 'stallwatch_bpf_programs_loaded', 'process_cpu_seconds_total']) {
    assert.ok(used.has(n), `no dashboard reads ${n}`);
  }
  // And those of issue #39 (the GPUs' own state).
  for (const n of [
    'stallwatch_gpu_clock_held_seconds_total', 'stallwatch_gpu_clock_throttle_seconds_total',
    'stallwatch_gpu_sm_clock_hertz', 'stallwatch_gpu_sm_clock_max_hertz', 'stallwatch_gpu_temperature_celsius',
    'stallwatch_gpu_power_watts', 'stallwatch_gpu_power_limit_watts', 'stallwatch_gpu_xid_errors_total',
    'stallwatch_gpu_xid_lost_total', 'stallwatch_workload_gpu_info',
  ]) {
    assert.ok(used.has(n), `no dashboard reads ${n}`);
  }
});

// Issues #18 and #37: every documented cardinality setting leaves every dashboard query
// meaningful: the series carry the `workload` key of the identity at least (the rest comes from
// stallwatch_cgroup_info by a join), the calls go by `class` (with `call` beside it when asked),
// and the panels read `_bucket` series or native ones, never a bound of the ladder.
for (const settings of [
  ['--metrics.identity-labels', 'pod,namespace', '--metrics.histogram-ladder', 'x16'],
  ['--metrics.identity-labels', 'none'],
  ['--metrics.identity-labels', 'cgroup,container_id,pod,namespace,container', '--metrics.calls', 'call', '--metrics.histogram-ladder', 'x2'],
]) {
  test(`the dashboards hold under ${settings.join(' ')}`, { timeout: 120000 }, async () => {
    const exposed = await exposition(settings);
    const labels = exposed.get('stallwatch_cuda_call_duration_seconds_bucket') ?? new Set();
    assert.ok(labels.has('workload') && labels.has('class'), 'the key and the class are always there');
    assert.equal(labels.has('pod'), settings.includes('pod,namespace') || settings.includes('--metrics.calls'));
    assert.equal(labels.has('container_id'), settings.includes('--metrics.calls'), 'the setting took effect');
    assert.equal(labels.has('call'), settings.includes('--metrics.calls'));
    const problems = problemsWith(exposed, new Set());
    assert.deepEqual(problems, [], `\n${problems.join('\n')}`);
  });
}
