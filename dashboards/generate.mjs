#!/usr/bin/env node
// Writes the three Grafana dashboards of stallwatch (dashboards/*.json) from one description, so
// variables, selectors and panel layout stay the same across them. Edit this file, then run
//   node dashboards/generate.mjs          (rewrites the JSON files)
//   node dashboards/generate.mjs --check  (exit 1 when a JSON file differs from what it would write)
// The JSON files are what Grafana imports; this script is only a convenience for editing them.
import { readFileSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const here = dirname(fileURLToPath(import.meta.url));

const DS = { type: 'prometheus', uid: '${datasource}' };
// Label matchers every per-workload series carries under every --metrics.identity-labels
// setting: the scrape's job and the short workload key. The rest of the identity (namespace,
// pod, container, and container_id and the cgroup path, which only it carries by default) is
// joined from stallwatch_cgroup_info, which keeps it all: wl(v) restricts v to the selected
// workloads and gives it their identity labels.
const sel = (extra = '') => `{job=~"$job", workload=~"$workload"${extra ? `, ${extra}` : ''}}`;
const INFO = 'stallwatch_cgroup_info{job=~"$job", namespace=~"$namespace", pod=~"$pod", workload=~"$workload"}';
const ID = 'namespace, pod, container, container_id, cgroup';
const wl = (v) => `(${v} * on (job, instance, workload) group_left (${ID}) ${INFO})`;
// Histograms as either Prometheus stores them: native (a Prometheus with native histograms
// asks for the protobuf exposition and keeps no _bucket/_count/_sum series) or classic. Each
// is computed per (job, instance, workload, by...) before any join, so no histogram sample meets
// an arithmetic operator.
const per = (by) => `job, instance, workload${by ? `, ${by}` : ''}`;
const quantile = (phi, metric, by, extra = '') =>
  `(histogram_quantile(${phi}, sum by (${per(by)}) (rate(${metric}${sel(extra)}[${RI}]))) or histogram_quantile(${phi}, sum by (${per(by)}, le) (rate(${metric}_bucket${sel(extra)}[${RI}]))))`;
const hcount = (metric, extra = '') =>
  `(histogram_count(rate(${metric}${sel(extra)}[${RI}])) or rate(${metric}_count${sel(extra)}[${RI}]))`;
const hsum = (metric, extra = '') =>
  `(histogram_sum(rate(${metric}${sel(extra)}[${RI}])) or rate(${metric}_sum${sel(extra)}[${RI}]))`;
// The daemon's own series (no workload labels).
const SELF = '{job=~"$job"}';
// CUDA calls go by `class` (launch, sync, copy, memory, graph_build, nccl, other): every series
// has it, one per call under --metrics.calls call (which adds `call`), one per class by default.
const RI = '$__rate_interval';
// The GPUs' own state (NVML, and the driver's Xid lines in the kernel log): series per GPU of a
// node (`gpu`: NVML's index), no workload labels. A workload's GPUs come from
// stallwatch_workload_gpu_info{workload, ..., gpu}, itself a per-workload series: joined to
// stallwatch_cgroup_info like every other, then reduced to (job, instance, gpu), so a GPU that
// several selected workloads share counts once.
const gpuSel = (extra = '') => `{job=~"$job"${extra ? `, ${extra}` : ''}}`;
const WORKLOAD_GPUS = `max by (job, instance, gpu) (${wl(`stallwatch_workload_gpu_info${sel()}`)})`;
const onWorkloadGpus = (v) => `(${v} * on (job, instance, gpu) group_left () ${WORKLOAD_GPUS})`;
// A job's NCCL ranks across nodes (docs/fleet.md): the per-rank series carry (workload, comm,
// rank, world_size); stallwatch_job_info, itself a per-workload series, adds the rank's node and
// job. onJob(v) restricts v to the ranks of the selected jobs ($job_id) and gives them both (one
// info series per rank, or per workload for WORKLOAD_JOB: topk, so a duplicate never fails a
// panel).
const JOB_INFO = `topk by (job, instance, workload, comm, rank) (1, stallwatch_job_info${sel('job_id=~"$job_id"')})`;
const onJob = (v) => `(${v} * on (job, instance, workload, comm, rank) group_left (node, job_id) ${JOB_INFO})`;
const RANK = 'job_id, comm, rank, world_size, node';
const perRank = (metric) => `sum by (job, instance, workload, comm, rank, world_size) (rate(${metric}${sel()}[${RI}]))`;
// The score is recorded by alerts/stallwatch.rules.yml over every rank of a communicator, so the
// median it compares with does not change with the workloads picked here.
const SCORE = `stallwatch:nccl_rank_straggler_score${sel()}`;
// The workloads (on their nodes) that hold a rank scored over the alert's 0.5.
const STRAGGLING = `on (job, instance, workload) (${SCORE} > 0.5)`;
const WORKLOAD_JOB = `topk by (job, instance, workload) (1, stallwatch_job_info${sel('job_id=~"$job_id"')})`;

// ---------------------------------------------------------------- panel builders
let nextId = 1;
let cursor = { x: 0, y: 0, rowH: 0 };
function resetLayout() {
  nextId = 1;
  cursor = { x: 0, y: 0, rowH: 0 };
}
// Places a w×h panel left to right, wrapping at 24 columns.
function place(w, h) {
  if (cursor.x + w > 24) {
    cursor.y += cursor.rowH;
    cursor.x = 0;
    cursor.rowH = 0;
  }
  const pos = { h, w, x: cursor.x, y: cursor.y };
  cursor.x += w;
  cursor.rowH = Math.max(cursor.rowH, h);
  return pos;
}

function row(title, extra = {}) {
  if (cursor.x > 0) {
    cursor.y += cursor.rowH;
    cursor.x = 0;
    cursor.rowH = 0;
  }
  const p = {
    collapsed: false,
    gridPos: { h: 1, w: 24, x: 0, y: cursor.y },
    id: nextId++,
    panels: [],
    title,
    type: 'row',
    ...extra,
  };
  cursor.y += 1;
  return p;
}

function target(expr, legendFormat, refId, extra = {}) {
  return { datasource: DS, editorMode: 'code', expr, legendFormat, range: true, refId, ...extra };
}
const refIds = 'ABCDEFGH';
function targets(queries) {
  return queries.map(([expr, legend, extra], i) => target(expr, legend ?? '__auto', refIds[i], extra));
}

function fieldConfig(unit, extraDefaults = {}, overrides = []) {
  return {
    defaults: {
      color: { mode: 'palette-classic' },
      unit,
      ...extraDefaults,
    },
    overrides,
  };
}

function timeseries(title, description, queries, { unit = 'short', w = 12, h = 8, min, max, stack = false, bars = false } = {}) {
  const custom = {
    drawStyle: bars ? 'bars' : 'line',
    fillOpacity: stack || bars ? 60 : 10,
    lineWidth: 1,
    showPoints: 'never',
    spanNulls: false,
    stacking: { group: 'A', mode: stack ? 'normal' : 'none' },
  };
  const defaults = { custom };
  if (min !== undefined) defaults.min = min;
  if (max !== undefined) defaults.max = max;
  return {
    ...panelHead(description, fieldConfig(unit, defaults), w, h),
    options: {
      legend: { calcs: ['max', 'lastNotNull'], displayMode: 'table', placement: 'bottom', showLegend: true },
      tooltip: { mode: 'multi', sort: 'desc' },
    },
    targets: targets(queries),
    title,
    type: 'timeseries',
  };
}

// The fields every data panel starts with, in the order Grafana saves them.
function panelHead(description, fieldConfig, w, h) {
  return { datasource: DS, description, fieldConfig, gridPos: place(w, h), id: nextId++ };
}

function thresholds(steps) {
  return {
    mode: 'absolute',
    steps: [{ color: 'green', value: null }, ...steps.map(([value, color]) => ({ color, value }))],
  };
}

function stat(title, description, queries, { unit = 'short', w = 6, h = 5, steps = [], decimals, instant = false } = {}) {
  const defaults = { color: { mode: 'thresholds' }, thresholds: thresholds(steps) };
  if (decimals !== undefined) defaults.decimals = decimals;
  return {
    ...panelHead(description, fieldConfig(unit, defaults), w, h),
    options: {
      colorMode: 'background',
      graphMode: 'area',
      justifyMode: 'auto',
      orientation: 'auto',
      reduceOptions: { calcs: ['lastNotNull'], fields: '', values: false },
      textMode: 'auto',
    },
    targets: targets(queries.map(([e, l, x]) => [e, l, instant ? { ...x, instant: true, range: false } : x])),
    title,
    type: 'stat',
  };
}

function table(title, description, queries, { w = 24, h = 8, organize = {}, merge = false, overrides = [] } = {}) {
  const transformations = [];
  if (merge) transformations.push({ id: 'merge', options: {} });
  transformations.push({ id: 'organize', options: { excludeByName: {}, indexByName: {}, renameByName: {}, ...organize } });
  return {
    ...panelHead(description, fieldConfig('short', { color: { mode: 'thresholds' }, thresholds: thresholds([]) }, overrides), w, h),
    options: { cellHeight: 'sm', footer: { show: false, reducer: ['sum'], fields: '' }, showHeader: true },
    targets: targets(queries.map(([e, l, x]) => [e, l, { format: 'table', instant: true, range: false, ...x }])),
    title,
    transformations,
    type: 'table',
  };
}

function heatmap(title, description, expr, { w = 8, h = 8, repeat } = {}) {
  const p = {
    ...panelHead(description, { defaults: { custom: { hideFrom: { legend: false, tooltip: false, viz: false }, scaleDistribution: { type: 'linear' } } }, overrides: [] }, w, h),
    options: {
      calculate: false,
      cellGap: 1,
      color: { exponent: 0.5, fill: 'dark-orange', mode: 'scheme', reverse: false, scale: 'exponential', scheme: 'Oranges', steps: 64 },
      exemplars: { color: 'rgba(255,0,255,0.7)' },
      filterValues: { le: 1e-9 },
      legend: { show: true },
      rowsFrame: { layout: 'auto' },
      tooltip: { mode: 'single', showColorScale: false, yHistogram: true },
      yAxis: { axisPlacement: 'left', reverse: false, unit: 's' },
    },
    targets: [target(expr, '{{le}}', 'A', { format: 'heatmap' })],
    title,
    type: 'heatmap',
  };
  if (repeat) Object.assign(p, { repeat, repeatDirection: 'h', maxPerRow: 3 });
  return p;
}

function text(title, content, { w = 24, h = 6 } = {}) {
  return {
    gridPos: place(w, h),
    id: nextId++,
    options: { code: { language: 'plaintext', showLineNumbers: false, showMiniMap: false }, content, mode: 'markdown' },
    title,
    type: 'text',
  };
}

// Panels added to an older row take ids after every other panel of their dashboard, wherever
// they sit, so the panels after them keep their ids (viewPanel links): late(panel) marks one,
// stableIds(panels) numbers the rest in order, then the late ones.
const LATE = new WeakSet();
function late(panel) {
  LATE.add(panel);
  return panel;
}
function stableIds(panels) {
  let id = 1;
  for (const q of [...panels.filter((x) => !LATE.has(x)), ...panels.filter((x) => LATE.has(x))]) q.id = id++;
  return panels;
}

// ---------------------------------------------------------------- variables
function queryVar(name, label, query, { description, multi = true, includeAll = true, allValue = '.*' } = {}) {
  return {
    allValue,
    current: { selected: true, text: ['All'], value: ['$__all'] },
    datasource: DS,
    description,
    hide: 0,
    includeAll,
    label,
    multi,
    name,
    options: [],
    query: { qryType: 1, query, refId: 'PrometheusVariableQueryEditor-VariableQuery' },
    refresh: 2,
    regex: '',
    skipUrlSync: false,
    sort: 1,
    type: 'query',
  };
}

function variables(extra = []) {
  return [
    {
      description: 'The Prometheus that scrapes stallwatch (and dcgm-exporter)',
      hide: 0,
      includeAll: false,
      label: 'Prometheus',
      multi: false,
      name: 'datasource',
      options: [],
      query: 'prometheus',
      refresh: 1,
      regex: '',
      skipUrlSync: false,
      type: 'datasource',
    },
    queryVar('job', 'job', 'label_values(stallwatch_build_info, job)', {
      description: 'Scrape job(s) of the stallwatch DaemonSet / hosts',
    }),
    queryVar('namespace', 'namespace', 'label_values(stallwatch_cgroup_info{job=~"$job"}, namespace)', {
      description: 'Kubernetes namespace (All also matches workloads without Kubernetes metadata)',
    }),
    queryVar('pod', 'pod', 'label_values(stallwatch_cgroup_info{job=~"$job", namespace=~"$namespace"}, pod)', {
      description: 'Kubernetes pod (All also matches workloads without Kubernetes metadata)',
    }),
    queryVar(
      'workload',
      'workload',
      'label_values(stallwatch_cgroup_info{job=~"$job", namespace=~"$namespace", pod=~"$pod"}, workload)',
      { description: 'The workload key: namespace/pod/container, a systemd unit, a Slurm job, or the cgroup path (one container, a unit, a Slurm step)' },
    ),
    ...extra,
  ];
}

function dashboard({ uid, title, description, tags, panels, extraVars = [], time = 'now-1h' }) {
  return {
    annotations: {
      list: [
        {
          builtIn: 1,
          datasource: { type: 'grafana', uid: '-- Grafana --' },
          enable: true,
          hide: true,
          iconColor: 'rgba(0, 211, 255, 1)',
          name: 'Annotations & Alerts',
          type: 'dashboard',
        },
      ],
    },
    description,
    editable: true,
    fiscalYearStartMonth: 0,
    graphTooltip: 1,
    id: null,
    links: [{ asDropdown: true, icon: 'external link', includeVars: true, keepTime: true, tags: ['stallwatch'], targetBlank: false, title: 'stallwatch', tooltip: '', type: 'dashboards', url: '' }],
    liveNow: false,
    panels,
    refresh: '30s',
    schemaVersion: 39,
    tags: ['stallwatch', 'gpu', ...tags],
    templating: { list: variables(extraVars) },
    time: { from: time, to: 'now' },
    timepicker: {},
    timezone: 'browser',
    title,
    uid,
    version: 1,
    weekStart: '',
  };
}

// ---------------------------------------------------------------- the GPUs' own state
// Six panels on the GPUs' clocks, heat, power and Xid errors (docs/chains.md#gpu-state). `on`
// restricts a per-GPU vector (the overview: every GPU of $job; the drill-down: the selected
// workload's GPUs), `whose` names those GPUs in the descriptions, `xidExtra` adds queries to the
// Xid panel and `xidNote` says what they are.
function gpuPanels(p, { on = (v) => v, whose, xidExtra = [], xidNote = '' }) {
  const by = (labels, v) => `sum by (instance, gpu${labels ? `, ${labels}` : ''}) (${on(v)})`;
  const last = (metric) => `max by (instance, gpu) (${on(`${metric}${gpuSel()}`)})`;
  p.push(timeseries('SM clock held down', `rate(stallwatch_gpu_clock_held_seconds_total) of ${whose}: the share of time its SM clock was held down by any clocks event reason but gpu_idle and display_clocks (NVML, sampled every --gpu-sample-interval, 250 ms by default). A gpu_throttle chain needs the GPU held at least 20 % of a window, a clock low enough to slow its work at least 1.1 times, and a synchronisation, copy or NCCL call whose mean is at least 1.2 times its baseline's (docs/chains.md#gpu_throttle).`,
    [[by('', `rate(stallwatch_gpu_clock_held_seconds_total${gpuSel()}[${RI}])`), '{{instance}} GPU {{gpu}}']], { unit: 'percentunit', w: 8, min: 0, max: 1 }));
  p.push(timeseries('SM clock held down, by reason', `rate(stallwatch_gpu_clock_throttle_seconds_total) by reason of ${whose}, gpu_idle and display_clocks left out: the share of time each clocks event reason was set. sw_power_cap: the power cap (nvidia-smi -pl); sw_thermal, hw_thermal: too hot; hw_power_brake: the board asserts a power brake; applications_clocks: applications clocks set below the maximum. Reasons can be set together, so the lines can add up to more than the held share. A hardware reason (hw_slowdown, hw_thermal, hw_power_brake) that held the clock at least 10 % of a window raises a gpu_throttle chain one step (docs/chains.md#gpu_throttle).`,
    [[by('reason', `rate(stallwatch_gpu_clock_throttle_seconds_total${gpuSel('reason!~"gpu_idle|display_clocks"')}[${RI}])`), '{{instance}} GPU {{gpu}} {{reason}}']], { unit: 'percentunit', w: 8, min: 0, max: 1 }));
  p.push(timeseries('SM clock and its maximum', `stallwatch_gpu_sm_clock_hertz (at the last sample) beside stallwatch_gpu_sm_clock_max_hertz of ${whose}. Kernels run longer at a lower clock: past ~83 °C an H100 drops from 1.98 to ~1.2 GHz, ~40 % of its throughput (docs/chains.md#gpu_throttle).`,
    [
      [last('stallwatch_gpu_sm_clock_hertz'), '{{instance}} GPU {{gpu}} SM clock'],
      [last('stallwatch_gpu_sm_clock_max_hertz'), '{{instance}} GPU {{gpu}} max'],
    ], { unit: 'hertz', w: 8, min: 0 }));
  p.push(timeseries('Temperature', `stallwatch_gpu_temperature_celsius of ${whose}. Heat holds the clock down as sw_thermal or hw_thermal (the reasons panel): nvidia-smi -q -d TEMPERATURE,PERFORMANCE -i N and the node's cooling (docs/chains.md#gpu_throttle).`,
    [[last('stallwatch_gpu_temperature_celsius'), '{{instance}} GPU {{gpu}}']], { unit: 'celsius', w: 8 }));
  p.push(timeseries('Power and its limit', `stallwatch_gpu_power_watts beside stallwatch_gpu_power_limit_watts (the enforced limit) of ${whose}. A GPU at its power cap holds its clock down (sw_power_cap): nvidia-smi -q -d POWER -i N, then nvidia-smi -i N -pl <watts> back toward the default (docs/chains.md#gpu_throttle).`,
    [
      [last('stallwatch_gpu_power_watts'), '{{instance}} GPU {{gpu}} power'],
      [last('stallwatch_gpu_power_limit_watts'), '{{instance}} GPU {{gpu}} limit'],
    ], { unit: 'watt', w: 8, min: 0 }));
  p.push(timeseries('Xid errors', `increase(stallwatch_gpu_xid_errors_total) by GPU, PCI address and Xid code, for ${whose}: the driver's "NVRM: Xid" lines in the kernel log (/dev/kmsg, followed from the daemon's start; older lines are not read). gpu is empty when the address matches no GPU NVML knows.${xidNote} Xid 38, 48, 62, 64, 74, 79, 95, 119, 120, 121, 140 and 154 need a GPU reset or node drain: a critical gpu_xid chain for the traced processes that use that GPU, and StallwatchGpuXid. 8, 13, 31, 43, 45, 94 and 109 are the application's own fault or stop (high); 32, 61, 63, 68 and 92 a contained problem to check (medium) (docs/chains.md#gpu_xid).`,
    [[by('pci_bus_id, xid', `increase(stallwatch_gpu_xid_errors_total${gpuSel()}[${RI}])`), '{{instance}} GPU {{gpu}} ({{pci_bus_id}}) Xid {{xid}}'], ...xidExtra], { w: 8, min: 0, bars: true }));
}

// ---------------------------------------------------------------- 1. overview
function overview() {
  resetLayout();
  const p = [];
  p.push(row('Causal chains'));
  p.push(stat('Open chains', 'Causal chains open now (stallwatch_chain_active) for the selected workloads.',
    [[`sum(${wl(`stallwatch_chain_active${sel()}`)}) or vector(0)`, 'open']], { w: 4, steps: [[1, 'orange']] }));
  p.push(stat('Critical chains', 'Chains open now with severity critical: these page.',
    [[`sum(${wl(`stallwatch_chain_active${sel('severity="critical"')}`)}) or vector(0)`, 'critical']], { w: 4, steps: [[1, 'red']] }));
  p.push(timeseries('Active chains by kind and severity', 'stallwatch_chain_active summed by kind and current severity: 1 per open chain.',
    [[`sum by (kind, severity) (${wl(`stallwatch_chain_active${sel()}`)})`, '{{kind}} ({{severity}})']], { w: 16, stack: true, min: 0 }));
  p.push(timeseries('Chains opened per hour', 'rate(stallwatch_chains_total) by kind and the severity each chain opened with, per hour.',
    [[`3600 * sum by (kind, severity) (${wl(`rate(stallwatch_chains_total${sel()}[${RI}])`)})`, '{{kind}} ({{severity}})']], { w: 8, min: 0, unit: 'suffix: chains/h' }));
  p.push(table('Open chains', 'One line per open chain (stallwatch_chain_active == 1): what, how bad, and which workload. `stallwatch explain --since 1h --cgroup CGROUP` (the cgroup column) on the node tells the whole story.',
    [[`${wl(`stallwatch_chain_active${sel()}`)} == 1`, '']], {
      w: 16,
      organize: {
        excludeByName: { Time: true, Value: true, __name__: true, job: true },
        indexByName: { kind: 0, severity: 1, namespace: 2, pod: 3, container: 4, workload: 5, cgroup: 6, container_id: 7, instance: 8 },
      },
    }));

  p.push(row('CUDA calls'));
  const q = (phi) => wl(quantile(phi, 'stallwatch_cuda_call_duration_seconds', 'api, class'));
  p.push(timeseries('CUDA call p50 per class and workload', 'Median wall time of the traced CUDA runtime/driver/NCCL calls of each class (launch, sync, copy, memory, graph_build, nccl, other; buckets every power of four by default: a value is the upper bound of its bucket).',
    [[q(0.5), '{{api}} {{class}} {{workload}}']], { unit: 's' }));
  p.push(timeseries('CUDA call p99 per class and workload', 'p99 wall time of each class of traced call. A sync whose p99 climbs while the GPU counter stays flat is the host, not the GPU.',
    [[q(0.99), '{{api}} {{class}} {{workload}}']], { unit: 's' }));

  p.push(row('Off-CPU time of the CUDA-issuing threads'));
  p.push(timeseries('Off-CPU runnable (waiting for a CPU) per workload', 'stallwatch_offcpu_ratio{state="runnable"}: share of the CUDA-issuing threads\' time spent runnable but not running (CPU contention).',
    [[`max by (workload) (${wl(`stallwatch_offcpu_ratio${sel('state="runnable"')}`)})`, '{{workload}}']], { unit: 'percentunit', w: 8, min: 0, max: 1 }));
  p.push(timeseries('Off-CPU blocked (sleeping) per workload', 'stallwatch_offcpu_ratio{state="blocked"}: share spent sleeping (I/O, locks, memory reclaim, waiting on the GPU).',
    [[`max by (workload) (${wl(`stallwatch_offcpu_ratio${sel('state="blocked"')}`)})`, '{{workload}}']], { unit: 'percentunit', w: 8, min: 0, max: 1 }));
  p.push(timeseries('GPU starvation per workload', 'stallwatch_gpu_starvation_ratio: share of wall time blocked outside any CUDA call, the host making the GPU wait between steps.',
    [[`max by (workload) (${wl(`stallwatch_gpu_starvation_ratio${sel()}`)})`, '{{workload}}']], { unit: 'percentunit', w: 8, min: 0, max: 1 }));

  p.push(row('stallwatch health (the daemons of $job)'));
  p.push(stat('Scrape targets up', 'up of the stallwatch scrape job: fewer than the node count means a node is blind.',
    [[`sum(up${SELF})`, 'up'], [`count(up${SELF})`, 'targets']], { w: 4 }));
  p.push(timeseries('Scrape duration and failures', 'scrape_duration_seconds per daemon, and targets whose last scrape failed (up == 0).',
    [[`max by (instance) (scrape_duration_seconds${SELF})`, '{{instance}} duration'], [`count by (instance) (up${SELF} == 0)`, '{{instance}} scrape failing']], { unit: 's', w: 6 }));
  p.push(timeseries('Traced processes', 'stallwatch_traced_processes: processes mapping a traced CUDA/NCCL library, per daemon.',
    [[`sum by (instance) (stallwatch_traced_processes${SELF})`, '{{instance}}']], { w: 6, min: 0 }));
  p.push(timeseries('Kernel events lost', 'rate(stallwatch_events_lost_total) by source: anything above 0 means counts are undercounted.',
    [[`sum by (instance, source) (rate(stallwatch_events_lost_total${SELF}[${RI}]))`, '{{instance}} {{source}}']], { unit: 'cps', w: 8, min: 0 }));
  p.push(timeseries('Export errors', 'OTLP failed attempts and dropped points (present with --otlp-endpoint), store write errors and dropped batches.',
    [
      [`sum by (instance, reason) (rate(stallwatch_otlp_failures_total${SELF}[${RI}]))`, '{{instance}} otlp failure {{reason}}'],
      [`sum by (instance, reason) (rate(stallwatch_otlp_points_dropped_total${SELF}[${RI}]))`, '{{instance}} otlp dropped {{reason}}'],
      [`sum by (instance) (rate(stallwatch_store_write_errors_total${SELF}[${RI}]))`, '{{instance}} store write errors'],
      [`sum by (instance) (rate(stallwatch_store_batches_dropped_total${SELF}[${RI}]))`, '{{instance}} store batches dropped'],
    ], { unit: 'cps', w: 16, min: 0 }));
  p.push(timeseries('CPU taken by the hypervisor and interrupts', 'stallwatch_cpu_stolen_ratio: share of the most affected CPU\'s time in the last window taken by the hypervisor (steal) or by interrupts (irq). Time the scheduler counts as the running thread\'s own: the cpu_steal chain.',
    [[`max by (instance, source) (stallwatch_cpu_stolen_ratio${SELF})`, '{{instance}} {{source}}']], { unit: 'percentunit', w: 8, min: 0, max: 1 }));
  // Self-monitoring (issue #51): what the daemon alerts of alerts/stallwatch.rules.yml read.
  p.push(late(stat('Chain stores down', 'Daemons whose chain store (SQLite, --db) cannot be opened or written now (stallwatch_store_up == 0): tracing and /metrics go on, `stallwatch explain` on those nodes lacks what happens meanwhile. StallwatchStoreDown after 10 minutes. No series under --db none.',
    [[`count(stallwatch_store_up${SELF} == 0) or vector(0)`, 'stores down']], { w: 4, h: 8, steps: [[1, 'red']] })));
  p.push(late(table('BPF programs not loaded', 'stallwatch_bpf_programs_loaded == 0 per daemon and program (set at start; the *_multi copies, loaded only where the kernel has multi-uprobe links, left out). cuda_*, nccl_*, sched_*, fold_offcpu: the node is not traced (StallwatchBpfCoreProgramNotLoaded pages); inflight_calls: hung calls are not seen; a host hook (reclaim, OOM, block I/O, TCP): its evidence is missing (StallwatchBpfProgramNotLoaded). block_io_start/done are missing on every kernel before 6.5. The daemon\'s log says why.',
    [['stallwatch_bpf_programs_loaded{job=~"$job", program!~".+_multi"} == 0', '']], {
      w: 8,
      h: 8,
      organize: {
        excludeByName: { Time: true, Value: true, __name__: true, job: true },
        indexByName: { instance: 0, program: 1 },
      },
    })));
  p.push(late(timeseries('stallwatch CPU', 'rate(process_cpu_seconds_total): CPU time of each daemon process (user and system, every thread), in cores: its own work in user space and the system calls it makes. The BPF programs run in the context of the threads that trigger them and are charged to those: the "What stallwatch costs the jobs" row.',
    [[`sum by (instance) (rate(process_cpu_seconds_total${SELF}[${RI}]))`, '{{instance}}']], { unit: 'suffix: cores', w: 6, min: 0 })));
  p.push(late(timeseries('stallwatch memory', 'process_resident_memory_bytes: resident memory of each daemon process.',
    [[`max by (instance) (process_resident_memory_bytes${SELF})`, '{{instance}}']], { unit: 'bytes', w: 6, min: 0 })));

  // Appended after the older rows so their panel ids (viewPanel links) stay the same.
  p.push(row('GPUs'));
  gpuPanels(p, {
    whose: 'each GPU of the nodes of $job',
    xidExtra: [[`sum by (instance, reason) (increase(stallwatch_gpu_xid_lost_total${SELF}[${RI}]))`, '{{instance}} Xid lines not counted: {{reason}}']],
    xidNote: ' Beside them, increase(stallwatch_gpu_xid_lost_total) by reason: Xid lines the daemon did not count (rate: over 64 a second, not kept; overrun: kernel log records overwritten before they were read, Xid or not).',
  });

  p.push(row('What stallwatch costs the jobs'));
  p.push(timeseries('Probe cost per workload', 'stallwatch_workload_probe_cost_ratio: estimated share of the workload\'s CUDA-issuing threads\' CPU time spent in stallwatch\'s probes (its calls times the trap cost the daemon measured at start for each site class). A launch-bound job shows the most.',
    [[`max by (workload) (${wl(`stallwatch_workload_probe_cost_ratio${sel()}`)})`, '{{workload}}']], { unit: 'percentunit', w: 8, min: 0 }));
  p.push(timeseries('Probes by site class', 'stallwatch_probe_sites by class: probes on an instruction the kernel emulates, and probes it single-steps out of line (several times the cost; docs/bpf.md "Probe sites").',
    [[`sum by (instance, class) (stallwatch_probe_sites${SELF})`, '{{instance}} {{class}}']], { w: 8, min: 0 }));
  p.push(timeseries('Trap cost per probe', 'stallwatch_probe_trap_seconds: what one probe adds to a call on each node, measured at the daemon\'s start, by site class and probe (entry, return).',
    [[`max by (instance, class, probe) (stallwatch_probe_trap_seconds${SELF})`, '{{instance}} {{class}} {{probe}}']], { unit: 's', w: 8, min: 0 }));
  p.push(timeseries('Launch probe duty per workload', 'stallwatch_probe_duty_ratio: share of each window the workload\'s kernel-launch probes were attached. Below 1 the cost budget (--cost-budget; the budget line is stallwatch_probe_cost_budget_ratio) duty-cycles them: its launch series hold what the probes saw, a launch rate is rate(count) / this ratio, and windows in the store are scaled already.',
    [[`min by (workload) (${wl(`stallwatch_probe_duty_ratio${sel()}`)})`, '{{workload}}'],
     [`max by (instance) (stallwatch_probe_cost_budget_ratio${SELF})`, '{{instance}} budget']], { unit: 'percentunit', w: 8, min: 0, max: 1 }));

  // Ids after the late panels above, so theirs stay the same (viewPanel links).
  p.push(late(row('Job across nodes')));
  p.push(late(timeseries('Collective wait per rank', 'rate(stallwatch_nccl_rank_wait_seconds_total): share of wall time each rank of the selected jobs ($job_id) waited for its collectives (inside NCCL ops and CUDA synchronizes), by node (stallwatch_job_info), communicator (NCCL commHash, the same on every node) and rank. In a synchronous collective the last rank to arrive waits least: a rank far under its peers holds the job back.',
    [[`max by (${RANK}) (${onJob(wl(perRank('stallwatch_nccl_rank_wait_seconds_total')))})`, '{{node}} rank {{rank}}/{{world_size}} comm {{comm}}']], { unit: 'percentunit', min: 0 })));
  p.push(late(timeseries('Straggler score per rank', 'stallwatch:nccl_rank_straggler_score (recorded by alerts/stallwatch.rules.yml over 5 minutes): 1 - the rank\'s wait share / the median over its communicator\'s ranks on every node; 0 at or above the median. Over 0.5 for 2 minutes, with a median over 5 %, StallwatchNcclStraggler fires. Needs the rules loaded in this Prometheus.',
    [[`max by (${RANK}) (${onJob(wl(SCORE))})`, '{{node}} rank {{rank}}/{{world_size}} comm {{comm}}']], { unit: 'percentunit', min: 0, max: 1 })));
  p.push(late(table('Ranks now', 'Each rank of the selected jobs now: its node, job and communicator, the share of time it waits for its collectives, its straggler score and its collectives per second (rate(stallwatch_nccl_rank_collectives_total)).',
    [
      [`max by (${RANK}) (${onJob(wl(perRank('stallwatch_nccl_rank_wait_seconds_total')))})`, ''],
      [`max by (${RANK}) (${onJob(wl(SCORE))})`, ''],
      [`max by (${RANK}) (${onJob(wl(perRank('stallwatch_nccl_rank_collectives_total')))})`, ''],
    ], {
      w: 12,
      merge: true,
      organize: {
        excludeByName: { Time: true },
        indexByName: { job_id: 0, node: 1, comm: 2, rank: 3, world_size: 4, 'Value #A': 5, 'Value #B': 6, 'Value #C': 7 },
        renameByName: { 'Value #A': 'wait', 'Value #B': 'straggler score', 'Value #C': 'collectives/s' },
      },
      overrides: [
        { matcher: { id: 'byName', options: 'wait' }, properties: [{ id: 'unit', value: 'percentunit' }] },
        { matcher: { id: 'byName', options: 'straggler score' }, properties: [{ id: 'unit', value: 'percentunit' }, { id: 'custom.cellOptions', value: { type: 'color-background' } }, { id: 'thresholds', value: thresholds([[0.25, 'orange'], [0.5, 'red']]) }] },
        { matcher: { id: 'byName', options: 'collectives/s' }, properties: [{ id: 'unit', value: 'cps' }] },
      ],
    })));
  p.push(late(table('Open chains of the straggling ranks', 'Chains open now (stallwatch_chain_active > 0) on the workloads, on their own nodes, that hold a rank scored over 0.5. StallwatchNcclStraggler names the most severe of them as its host_cause, nccl_straggler and call_hang left out (symptoms, not causes). `stallwatch explain --since 1h --cgroup CGROUP` on that node tells the story.',
    [[`(${wl(`stallwatch_chain_active${sel()}`)} > 0) * on (job, instance, workload) group_left (node, job_id) ${WORKLOAD_JOB} and ${STRAGGLING}`, '']], {
      w: 12,
      organize: {
        excludeByName: { Time: true, Value: true, __name__: true, job: true },
        indexByName: { job_id: 0, node: 1, kind: 2, severity: 3, namespace: 4, pod: 5, container: 6, workload: 7, cgroup: 8, container_id: 9, instance: 10 },
      },
    })));
  p.push(late(table('Culprits named by those chains', 'stallwatch_chain_culprit_info of the same workloads: the processes each open chain blames first (its top contributors apart from the workload\'s own), by chain kind.',
    [[`${wl(`stallwatch_chain_culprit_info${sel()}`)} * on (job, instance, workload) group_left (node, job_id) ${WORKLOAD_JOB} and ${STRAGGLING}`, '']], {
      w: 24,
      h: 6,
      organize: {
        excludeByName: { Time: true, Value: true, __name__: true, job: true },
        indexByName: { job_id: 0, node: 1, kind: 2, culprit: 3, namespace: 4, pod: 5, container: 6, workload: 7, cgroup: 8, container_id: 9, instance: 10 },
      },
    })));
  return dashboard({
    uid: 'stallwatch-overview',
    title: 'GPU stalls — overview',
    description: 'stallwatch: open causal chains, CUDA call latency, off-CPU time of the CUDA-issuing threads, the health of the daemons, the GPUs\' clocks, temperature, power and Xid errors, and a job\'s NCCL ranks across nodes (the straggler and its host cause).',
    tags: ['overview'],
    panels: stableIds(p),
    extraVars: [
      queryVar('job_id', 'job id', 'label_values(stallwatch_job_info{job=~"$job", workload=~"$workload"}, job_id)', {
        description: 'The training job of the "Job across nodes" row (stallwatch_job_info: torchrun\'s run id, else the Slurm job id, else a pod label such as the JobSet name; All also matches ranks whose job is not known)',
      }),
    ],
  });
}

// ---------------------------------------------------------------- 2. what the GPU counter hides
function counterHides() {
  resetLayout();
  const p = [];
  // DCGM series of the selected pods, restricted to the selected stallwatch workloads.
  const dcgm = `DCGM_FI_DEV_GPU_UTIL{namespace=~"$namespace", pod=~"$pod", pod!=""}`;
  const inWorkloads = `on (namespace, pod) group_left () max by (namespace, pod) (${INFO})`;
  const util = (by) => `avg by (${by}) (${dcgm} * ${inWorkloads})`;
  // The p99 of the synchronize calls of each container, the worst container of the pod.
  const syncP99 = (by) => `max by (${by}) (${wl(quantile(0.99, 'stallwatch_cuda_call_duration_seconds', by.includes('api') ? 'api' : '', 'class="sync"'))})`;
  p.push(text('How to read this dashboard', [
    '**The GPU counter says "a kernel was running", not "the job is fast".** `DCGM_FI_DEV_GPU_UTIL` counts the share of time *any* kernel was resident; a job whose CPU threads are starved still shows 90%+ while its steps take twice as long.',
    '',
    'For each pod: **GPU utilisation** (dcgm-exporter) beside what stallwatch sees on the host for the same pod: the share of time its CUDA-issuing threads were **runnable but not running** (waiting for a CPU), the share **blocked outside CUDA calls** (GPU starved by the DataLoader, disk, network) and the **p99 of the synchronize calls** (`cudaStreamSynchronize`, `cudaDeviceSynchronize`, `cuStreamSynchronize`, `cuCtxSynchronize`).',
    '',
    '*High GPU utilisation + high runnable ratio + rising sync p99* = CPU contention (DataLoader workers, agents): see the overview\'s open chains and `stallwatch explain` on the node. *Lower utilisation + high starvation* = the host cannot feed the GPU (I/O, network). *High utilisation, calm host, high sync p99* = the GPU itself is the bottleneck.',
    '',
    'Needs dcgm-exporter with Kubernetes pod mapping (`pod`, `namespace`, `container` labels on `DCGM_FI_*`), see dashboards/README.md.',
  ].join('\n'), { h: 7 }));
  p.push(table('All selected pods at a glance', 'Last values per pod: GPU utilisation (DCGM), off-CPU runnable ratio, GPU starvation and sync p99 (stallwatch).',
    [
      [util('namespace, pod'), ''],
      [`max by (namespace, pod) (${wl(`stallwatch_offcpu_ratio${sel('state="runnable"')}`)})`, ''],
      [`max by (namespace, pod) (${wl(`stallwatch_gpu_starvation_ratio${sel()}`)})`, ''],
      [syncP99('namespace, pod'), ''],
    ], {
      h: 7,
      merge: true,
      organize: {
        excludeByName: { Time: true },
        indexByName: { namespace: 0, pod: 1, 'Value #A': 2, 'Value #B': 3, 'Value #C': 4, 'Value #D': 5 },
        renameByName: { 'Value #A': 'GPU util (DCGM)', 'Value #B': 'off-CPU runnable', 'Value #C': 'GPU starvation', 'Value #D': 'sync p99' },
      },
      overrides: [
        { matcher: { id: 'byName', options: 'GPU util (DCGM)' }, properties: [{ id: 'unit', value: 'percent' }, { id: 'decimals', value: 0 }] },
        { matcher: { id: 'byName', options: 'off-CPU runnable' }, properties: [{ id: 'unit', value: 'percentunit' }, { id: 'custom.cellOptions', value: { type: 'color-background' } }, { id: 'thresholds', value: thresholds([[0.1, 'orange'], [0.3, 'red']]) }] },
        { matcher: { id: 'byName', options: 'GPU starvation' }, properties: [{ id: 'unit', value: 'percentunit' }, { id: 'custom.cellOptions', value: { type: 'color-background' } }, { id: 'thresholds', value: thresholds([[0.1, 'orange'], [0.3, 'red']]) }] },
        { matcher: { id: 'byName', options: 'sync p99' }, properties: [{ id: 'unit', value: 's' }] },
      ],
    }));
  // One row per selected pod (repeat), the same four numbers and their history side by side.
  p.push(row('pod $pod', { repeat: 'pod' }));
  p.push(stat('GPU utilisation (DCGM)', 'DCGM_FI_DEV_GPU_UTIL averaged over the GPUs of the pod: what nvidia-smi and most dashboards show.',
    [[util('namespace, pod'), '{{pod}}']], { unit: 'percent', steps: [], decimals: 0 }));
  p.push(stat('Off-CPU: waiting for a CPU', 'stallwatch_offcpu_ratio{state="runnable"}: share of the CUDA-issuing threads\' time runnable but not running.',
    [[`max by (namespace, pod) (${wl(`stallwatch_offcpu_ratio${sel('state="runnable"')}`)})`, '{{pod}}']], { unit: 'percentunit', steps: [[0.1, 'orange'], [0.3, 'red']] }));
  p.push(stat('GPU starved by the host', 'stallwatch_gpu_starvation_ratio: share of wall time blocked outside any CUDA call (waiting for data).',
    [[`max by (namespace, pod) (${wl(`stallwatch_gpu_starvation_ratio${sel()}`)})`, '{{pod}}']], { unit: 'percentunit', steps: [[0.1, 'orange'], [0.3, 'red']] }));
  p.push(stat('Synchronize p99', 'p99 of cudaStreamSynchronize, cudaDeviceSynchronize, cuStreamSynchronize and cuCtxSynchronize together.',
    [[syncP99('namespace, pod'), '{{pod}}']], { unit: 's', steps: [[0.05, 'orange'], [0.25, 'red']] }));
  p.push(timeseries('GPU utilisation per GPU (DCGM)', 'DCGM_FI_DEV_GPU_UTIL of each GPU assigned to the pod.',
    [[util('namespace, pod, Hostname, gpu, UUID'), '{{Hostname}} GPU {{gpu}}']], { unit: 'percent', w: 8, min: 0, max: 100 }));
  p.push(timeseries('Off-CPU ratio (runnable, blocked)', 'stallwatch_offcpu_ratio of the pod\'s CUDA-issuing threads by state.',
    [[`max by (namespace, pod, state) (${wl(`stallwatch_offcpu_ratio${sel('state=~"runnable|blocked"')}`)})`, '{{state}}']], { unit: 'percentunit', w: 8, min: 0, max: 1, stack: true }));
  p.push(timeseries('Synchronize latency p99 per api', 'p99 of the synchronize calls of the pod, runtime and driver (a runtime synchronize waits in the driver\'s under it).',
    [[syncP99('namespace, pod, api'), '{{api}}']], { unit: 's', w: 8 }));
  return dashboard({
    uid: 'stallwatch-gpu-counter-hides',
    title: 'What the GPU counter hides',
    description: 'DCGM GPU utilisation beside stallwatch\'s off-CPU ratio and synchronize latency for the same pod: "97% busy but slow" at a glance.',
    tags: ['dcgm'],
    panels: p,
  });
}

// ---------------------------------------------------------------- 3. workload drill-down
function workload() {
  resetLayout();
  const p = [];
  const hq = (metric, by, extra = '') => `max by (${by}) (${wl(quantile(0.99, metric, by, extra))})`;
  p.push(row('Chains of this workload'));
  p.push(table('Open chains', 'Chains open now on the selected workload (stallwatch_chain_active == 1).',
    [[`${wl(`stallwatch_chain_active${sel()}`)} == 1`, '']], {
      w: 12,
      organize: {
        excludeByName: { Time: true, Value: true, __name__: true, job: true },
        indexByName: { kind: 0, severity: 1, namespace: 2, pod: 3, container: 4, workload: 5, cgroup: 6, container_id: 7, instance: 8 },
      },
    }));
  p.push(timeseries('Chains by kind and severity', 'Open chains over time (stallwatch_chain_active), by kind and current severity.',
    [[`sum by (kind, severity) (${wl(`stallwatch_chain_active${sel()}`)})`, '{{kind}} ({{severity}})']], { w: 8, min: 0, stack: true }));
  p.push(stat('Chains opened in the time range', 'increase(stallwatch_chains_total) over the dashboard\'s time range, by kind.',
    [[`sum by (kind) (${wl(`increase(stallwatch_chains_total${sel()}[$__range])`)})`, '{{kind}}']], { w: 4, h: 8, instant: true, decimals: 0, steps: [[1, 'orange']] }));

  p.push(row('CUDA call latency'));
  p.push(heatmap('Latency heatmap: $class', 'stallwatch_cuda_call_duration_seconds buckets (powers of four of seconds by default) of the selected workload, one heatmap per class of call.',
    `sum by (le) (${wl(`increase(stallwatch_cuda_call_duration_seconds_bucket${sel('class=~"$class"')}[${RI}])`)})`, { repeat: 'class' }));
  p.push(timeseries('p99 per class', 'p99 wall time per class of traced call, runtime and driver apart (the calls of a class summed under --metrics.calls call too).',
    [[hq('stallwatch_cuda_call_duration_seconds', 'api, class', 'class=~"$class"'), '{{api}} {{class}}']], { unit: 's', w: 12 }));
  p.push(timeseries('Calls per second', 'Traced calls per second, per class.',
    [[`sum by (api, class) (${wl(hcount('stallwatch_cuda_call_duration_seconds', 'class=~"$class"'))})`, '{{api}} {{class}}']], { unit: 'cps', w: 12 }));

  p.push(row('CPU: off-CPU time'));
  p.push(timeseries('Off-CPU inside calls, per api and state', 'rate(stallwatch_cuda_call_offcpu_seconds_total): seconds per second the calling threads spent off-CPU inside the traced calls of each api (runnable: waiting for a CPU; blocked: sleeping); per call under --metrics.calls call.',
    [[`sum by (api, state) (${wl(`rate(stallwatch_cuda_call_offcpu_seconds_total${sel()}[${RI}])`)})`, '{{api}} {{state}}']], { unit: 's', w: 8, stack: true }));
  p.push(timeseries('Off-CPU of the CUDA-issuing threads', 'rate(stallwatch_offcpu_seconds_total) by state, in or out of calls, and the window ratio.',
    [
      [`sum by (state) (${wl(`rate(stallwatch_offcpu_seconds_total${sel()}[${RI}])`)})`, '{{state}} s/s'],
    ], { unit: 's', w: 8, stack: true }));
  p.push(timeseries('Off-CPU ratio and GPU starvation', 'stallwatch_offcpu_ratio by state and stallwatch_gpu_starvation_ratio (blocked outside CUDA calls).',
    [
      [`max by (state) (${wl(`stallwatch_offcpu_ratio${sel()}`)})`, 'off-CPU {{state}}'],
      [`max(${wl(`stallwatch_gpu_starvation_ratio${sel()}`)})`, 'GPU starvation'],
    ], { unit: 'percentunit', w: 8, min: 0, max: 1 }));

  p.push(row('Memory'));
  p.push(timeseries('Reclaim time', 'rate(stallwatch_memory_reclaim_seconds_total): direct (node short of memory) or memcg (the cgroup at its limit).',
    [[`sum by (kind) (${wl(`rate(stallwatch_memory_reclaim_seconds_total${sel()}[${RI}])`)})`, '{{kind}}']], { unit: 's', w: 8, min: 0 }));
  p.push(timeseries('OOM kills', 'increase(stallwatch_oom_kills_total) by victim (cuda: a CUDA-issuing process was killed).',
    [[`sum by (victim) (${wl(`increase(stallwatch_oom_kills_total${sel()}[${RI}])`)})`, '{{victim}}']], { w: 8, min: 0, bars: true }));
  p.push(timeseries('Pressure stall (PSI)', 'rate(stallwatch_pressure_stall_seconds_total): share of time some / all tasks of the cgroup stalled on cpu, memory or io.',
    [[`sum by (resource, scope) (${wl(`rate(stallwatch_pressure_stall_seconds_total${sel()}[${RI}])`)})`, '{{resource}} {{scope}}']], { unit: 'percentunit', w: 8, min: 0 }));

  p.push(row('Disk I/O'));
  p.push(timeseries('Block I/O p99 per device and op', 'p99 of stallwatch_block_io_duration_seconds (submission to completion) of the requests the workload\'s tasks submitted.',
    [[hq('stallwatch_block_io_duration_seconds', 'device, op'), '{{device}} {{op}}']], { unit: 's', w: 8 }));
  p.push(timeseries('Block I/O throughput', 'rate(stallwatch_block_io_bytes_total) per device and op.',
    [[`sum by (device, op) (${wl(`rate(stallwatch_block_io_bytes_total${sel()}[${RI}])`)})`, '{{device}} {{op}}']], { unit: 'Bps', w: 8, min: 0 }));
  p.push(heatmap('Block I/O latency heatmap', 'stallwatch_block_io_duration_seconds buckets, all devices and ops.',
    `sum by (le) (${wl(`increase(stallwatch_block_io_duration_seconds_bucket${sel()}[${RI}])`)})`));

  p.push(row('Network and NCCL'));
  p.push(timeseries('TCP retransmits', 'rate(stallwatch_tcp_retransmits_total): segments retransmitted on the workload\'s sockets.',
    [[`sum by (family) (${wl(`rate(stallwatch_tcp_retransmits_total${sel()}[${RI}])`)})`, '{{family}}']], { unit: 'cps', w: 12, min: 0 }));
  p.push(timeseries('NCCL bytes per op and rank', 'rate(stallwatch_nccl_op_bytes_total) per op, rank and world size.',
    [[`sum by (op, rank, world_size) (${wl(`rate(stallwatch_nccl_op_bytes_total${sel()}[${RI}])`)})`, '{{op}} rank {{rank}}/{{world_size}}']], { unit: 'Bps', w: 12, min: 0 }));
  p.push(timeseries('NCCL mean op time per rank', 'Mean stallwatch_nccl_op_duration_seconds per op and local rank: a straggler rank stands out.',
    [[`sum by (op, rank, world_size) (${wl(hsum('stallwatch_nccl_op_duration_seconds'))}) / sum by (op, rank, world_size) (${wl(hcount('stallwatch_nccl_op_duration_seconds'))})`, '{{op}} rank {{rank}}/{{world_size}}']], { unit: 's', w: 12 }));
  p.push(timeseries('NCCL op p99 per rank', 'p99 of stallwatch_nccl_op_duration_seconds per op, rank and world size.',
    [[hq('stallwatch_nccl_op_duration_seconds', 'op, rank, world_size'), '{{op}} rank {{rank}}/{{world_size}}']], { unit: 's', w: 12 }));
  p.push(timeseries('Calls in flight (oldest open call per call)', 'stallwatch_cuda_call_inflight_seconds: how long the oldest call of each kind has been open (not returned). A line that climbs steadily is a hang; past --hang-threshold (60s) a call_hang chain opens and StallwatchCallHang pages.',
    [[`max by (api, class) (${wl(`stallwatch_cuda_call_inflight_seconds${sel()}`)})`, '{{api}} {{class}}']], { unit: 's', w: 24, min: 0 }));

  // Appended after the older rows so their panel ids (viewPanel links) stay the same.
  p.push(row('GPU memory (traced CUDA allocations)'));
  p.push(timeseries('GPU memory held, by kind', 'stallwatch_cuda_memory_live_bytes: bytes the workload\'s live processes hold from traced allocation calls, by kind (device, managed, host: pinned host memory), runtime and driver together. A caching allocator (PyTorch) holds what it reserved, not what its tensors use; the CUDA context\'s own memory is not counted. A line that climbs step after step is a leak.',
    [[`sum by (kind) (${wl(`stallwatch_cuda_memory_live_bytes${sel()}`)})`, '{{kind}}']], { unit: 'bytes', w: 8, min: 0, stack: true }));
  p.push(timeseries('Allocated and freed per second', 'rate(stallwatch_cuda_memory_allocated_bytes_total) and rate(stallwatch_cuda_memory_freed_bytes_total) by api and kind of memory (a free is credited to the call that allocated the memory): the two lines of a kind meet in a steady state; allocation without frees is growth.',
    [
      [`sum by (api, kind) (${wl(`rate(stallwatch_cuda_memory_allocated_bytes_total${sel()}[${RI}])`)})`, '{{api}} {{kind}} allocated'],
      [`sum by (api, kind) (${wl(`rate(stallwatch_cuda_memory_freed_bytes_total${sel()}[${RI}])`)})`, '{{api}} {{kind}} freed'],
    ], { unit: 'Bps', w: 8, min: 0 }));
  p.push(timeseries('Allocation failures (out of memory)', 'increase(stallwatch_cuda_memory_alloc_failures_total): allocation calls that returned out of memory, by api and kind of memory (by call under --metrics.calls call, in `stallwatch explain`). Each opens a cuda_oom chain and fires StallwatchCudaAllocFailures. PyTorch frees its cached blocks and retries before it raises OutOfMemoryError: even a failure it survived cost a cache flush.',
    [[`sum by (api, kind) (${wl(`increase(stallwatch_cuda_memory_alloc_failures_total${sel()}[${RI}])`)})`, '{{api}} {{kind}}']], { w: 8, min: 0, bars: true }));

  p.push(row('CUDA Graphs: capture and instantiation'));
  p.push(timeseries('Graph builds and launches per second', 'Graph-building calls (class graph_build: capture begin and end, instantiations, updates) beside launches (class launch: kernels and graphs), per second. A graph pays off when it is built once and launched many times; builds that keep pace with launches are re-captures (changing shapes, a new graph per step).',
    [
      [`sum by (api) (${wl(hcount('stallwatch_cuda_call_duration_seconds', 'class="graph_build"'))})`, '{{api}} graph builds'],
      [`sum by (api) (${wl(hcount('stallwatch_cuda_call_duration_seconds', 'class="launch"'))})`, '{{api}} launches'],
    ], { unit: 'cps', w: 8, min: 0 }));
  p.push(timeseries('Time in graph builds and launches', 'rate(stallwatch_cuda_call_duration_seconds_sum): seconds per second the workload\'s threads spent inside the capture (begin and end), instantiate and update calls, beside the time inside graph launches.',
    [
      [`sum by (api) (${wl(hsum('stallwatch_cuda_call_duration_seconds', 'class="graph_build"'))})`, '{{api}} graph builds'],
      [`sum by (api) (${wl(hsum('stallwatch_cuda_call_duration_seconds', 'class="launch"'))})`, '{{api}} launches'],
    ], { unit: 's', w: 8, min: 0 }));
  p.push(timeseries('Share of CUDA call time in graph builds', 'Time in the capture, instantiate and update calls over the time in all traced calls of the workload. The graph_recapture chain rates each process by the same share once its graphs keep being rebuilt after warm-up: low from 5 %, medium from 10 %, high from 25 %.',
    [[`sum(${wl(hsum('stallwatch_cuda_call_duration_seconds', 'class="graph_build"'))}) / sum(${wl(hsum('stallwatch_cuda_call_duration_seconds'))})`, 'graph builds']], { unit: 'percentunit', w: 8, min: 0, max: 1 }));

  p.push(row('CPU: the workload\'s own CPU limit'));
  p.push(timeseries('CPU limit', 'stallwatch_cgroup_cpu_limit_cores: the tightest CFS bandwidth limit (Kubernetes limits.cpu, systemd CPUQuota=, docker --cpus) over the workload\'s cgroup and its ancestors, in CPUs (quota / period). Only workloads with a limit have the series.',
    [[`min(${wl(`stallwatch_cgroup_cpu_limit_cores${sel()}`)})`, 'limit (CPUs)']], { w: 8, min: 0 }));
  p.push(timeseries('Throttled periods', 'rate(stallwatch_cgroup_cpu_throttled_periods_total) / rate(stallwatch_cgroup_cpu_periods_total): share of the enforcement periods (100 ms by default) with runnable tasks in which the limit ran out and the kernel stopped the workload until the next period (cpu.stat nr_throttled / nr_periods, limited levels summed).',
    [[`sum(${wl(`rate(stallwatch_cgroup_cpu_throttled_periods_total${sel()}[${RI}])`)}) / sum(${wl(`rate(stallwatch_cgroup_cpu_periods_total${sel()}[${RI}])`)})`, 'throttled periods']], { unit: 'percentunit', w: 8, min: 0, max: 1 }));
  p.push(timeseries('Throttled time', 'rate(stallwatch_cgroup_cpu_throttled_seconds_total): seconds per second the workload was held throttled by its own CPU limit, summed over CPUs and limited levels (cpu.stat throttled_usec / throttled_time). The cpu_throttle chain opens when this wait shows inside the CUDA calls (docs/chains.md#cpu_throttle).',
    [[`sum(${wl(`rate(stallwatch_cgroup_cpu_throttled_seconds_total${sel()}[${RI}])`)})`, 'throttled']], { unit: 's', w: 8, min: 0 }));

  p.push(row('GPU: clocks and faults'));
  gpuPanels(p, { on: onWorkloadGpus, whose: 'each GPU the workload uses (stallwatch_workload_gpu_info)' });

  return dashboard({
    uid: 'stallwatch-workload',
    title: 'Workload drill-down',
    description: 'stallwatch: one workload (cgroup / pod) — latency heatmaps per call, off-CPU time, memory, disk, network and NCCL evidence, GPU memory held, CUDA Graph builds, CPU-limit throttling, the clocks and Xid errors of its GPUs, and its chains.',
    tags: ['workload'],
    panels: p,
    extraVars: [
      queryVar('class', 'class', 'label_values(stallwatch_cuda_call_duration_seconds_count{job=~"$job", workload=~"$workload"}, class)', {
        description: 'Classes of the traced CUDA / NCCL calls of the workload (one heatmap each)',
        allValue: '.+',
      }),
    ],
  });
}

export const dashboards = {
  'stallwatch-overview.json': overview,
  'stallwatch-gpu-counter-hides.json': counterHides,
  'stallwatch-workload.json': workload,
};

export function render(build) {
  return JSON.stringify(build(), null, 2) + '\n';
}

if (process.argv[1] && fileURLToPath(import.meta.url) === process.argv[1]) {
  const check = process.argv.includes('--check');
  let stale = 0;
  for (const [file, build] of Object.entries(dashboards)) {
    const path = join(here, file);
    const text = render(build);
    if (check) {
      let old = '';
      try {
        old = readFileSync(path, 'utf8');
      } catch {}
      if (old !== text) {
        console.error(`${file}: differs from generate.mjs (run: node dashboards/generate.mjs)`);
        stale++;
      }
    } else {
      writeFileSync(path, text);
      console.log(`wrote ${path}`);
    }
  }
  process.exit(stale ? 1 : 0);
}
