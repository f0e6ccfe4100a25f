// What the OTLP tests compare: Prometheus series <-> OTLP points under the data model,
// histograms re-binned both ways, and the invariants every push must keep.
//
// Model (issue): resource = the workload (`workload` label -> stallwatch.workload, `cgroup` ->
// stallwatch.cgroup, `container_id` -> container.id, `pod` / `namespace` / `container` ->
// k8s.pod.name / k8s.namespace.name / k8s.container.name), the other non-empty labels -> data
// point attributes with the same keys. Series are matched by the workload key (issue #37: every
// series has it; the cgroup path only on stallwatch_cgroup_info by default).
import assert from 'node:assert/strict';
import {
  metricPoints,
  numberValue,
  otlpName,
  promValue,
  scrape,
  seriesKey,
  waitFor,
} from './receiver.mjs';

export const MAX_BODY_BYTES = 500_000; // "Payloads <= 500 KB uncompressed"

// Identity labels and the resource attributes they become.
const RESOURCE_ATTRIBUTES = {
  container_id: 'container.id',
  pod: 'k8s.pod.name',
  namespace: 'k8s.namespace.name',
  container: 'k8s.container.name',
};
const RESOURCE_LABELS = new Set(['workload', 'cgroup', ...Object.keys(RESOURCE_ATTRIBUTES)]);

// A Prometheus sample's labels -> { resource (identity part), attrs } in the OTLP model.
export function promLabelsToOtlp(labels) {
  const attrs = {};
  for (const [k, v] of Object.entries(labels)) {
    if (RESOURCE_LABELS.has(k) || k === 'le' || v === '') continue;
    attrs[k] = v;
  }
  const resource = {};
  if (labels.workload !== undefined && labels.workload !== '')
    resource['stallwatch.workload'] = labels.workload;
  return { resource, attrs };
}

// Series key that ignores resource attributes other than stallwatch.workload (host.name,
// service.*, stallwatch.cgroup, container.id, k8s.* are checked separately).
export function promKey(otlpMetricName, labels) {
  const { resource, attrs } = promLabelsToOtlp(labels);
  return seriesKey(otlpMetricName, resource, attrs);
}
export function otlpKey(p) {
  const r = {};
  if (p.resource['stallwatch.workload'] !== undefined)
    r['stallwatch.workload'] = p.resource['stallwatch.workload'];
  return seriesKey(p.metric.name, r, p.attrs);
}

// Prometheus histogram family -> Map key -> { labels, bounds (without +Inf), counts
// (per bucket, non-cumulative, bounds+1 long), count, sum }.
export function promHistograms(family, otlpMetricName) {
  const byLabels = new Map();
  const entry = (labels) => {
    const { le, ...rest } = labels;
    const id = JSON.stringify(
      Object.keys(rest)
        .sort()
        .map((k) => [k, rest[k]]),
    );
    if (!byLabels.has(id)) byLabels.set(id, { labels: rest, buckets: [], count: NaN, sum: NaN });
    return byLabels.get(id);
  };
  for (const s of family.samples) {
    const e = entry(s.labels);
    if (s.name.endsWith('_bucket'))
      e.buckets.push([s.labels.le === '+Inf' ? Infinity : Number(s.labels.le), s.value]);
    else if (s.name.endsWith('_count')) e.count = s.value;
    else if (s.name.endsWith('_sum')) e.sum = s.value;
  }
  const out = new Map();
  for (const e of byLabels.values()) {
    e.buckets.sort((a, b) => a[0] - b[0]);
    assert.equal(e.buckets.at(-1)?.[0], Infinity, `${family.name}: last bucket is le="+Inf"`);
    const bounds = e.buckets.slice(0, -1).map(([le]) => le);
    const counts = e.buckets.map(([, c], i) => c - (i ? e.buckets[i - 1][1] : 0));
    out.set(promKey(otlpMetricName, e.labels), {
      labels: e.labels,
      bounds,
      counts,
      count: e.count,
      sum: e.sum,
    });
  }
  return out;
}

// |a - b| small relative to the values (Prometheus prints doubles in shortest form).
export function assertClose(actual, expected, message, rel = 1e-9) {
  const tol = Math.max(1e-12, rel * Math.max(Math.abs(actual), Math.abs(expected)));
  assert.ok(Math.abs(actual - expected) <= tol, `${message}: ${actual} != ${expected}`);
}

// Every point of a metrics request, with the request's receipt attached.
export function pointsOf(requests) {
  return requests.flatMap((r) => metricPoints(r.decoded).map((p) => ({ ...p, request: r })));
}

// The window number each push came from: timeUnixNano -> stallwatch.snapshot.sequence.
export function sequenceByTime(points) {
  const m = new Map();
  for (const p of points) {
    if (p.metric.name === 'stallwatch.snapshot.sequence')
      m.set(p.point.timeUnixNano, numberValue(p.point));
  }
  return m;
}

// Requests whose payload the receiver accepted (answered 200 without a delay).
export function accepted(requests) {
  return requests.filter(
    (r) => r.answer && !r.answer.destroy && !r.answer.delayMs && (r.answer.status ?? 200) === 200,
  );
}

// Invariants of every request: to the expected paths, decodable, protobuf, gzip (compression:
// null for none), <= 500 KB uncompressed; and of what was accepted:
// never two points of one series with the same timestamp.
export function checkInvariants(
  receiver,
  { compression = 'gzip', paths = ['/v1/metrics', '/v1/logs'] } = {},
) {
  for (const r of receiver.requests) {
    assert.ok(paths.includes(r.path), `request to ${r.path}, expected one of ${paths}`);
    assert.equal(r.error, null, `request to ${r.path} decodes`);
    assert.equal(r.method, 'POST', `${r.path}: method`);
    assert.match(
      r.headers['content-type'] || '',
      /^application\/x-protobuf/,
      `${r.path}: content-type`,
    );
    assert.equal(
      r.headers['content-encoding'],
      compression ?? undefined,
      `${r.path}: content-encoding`,
    );
    assert.ok(
      r.bodyLength <= MAX_BODY_BYTES,
      `${r.path}: ${r.bodyLength} bytes uncompressed > 500 KB`,
    );
  }
  const seen = new Map();
  for (const p of pointsOf(accepted(receiver.metrics()))) {
    const k = `${p.key}@${p.point.timeUnixNano}`;
    assert.ok(!seen.has(k), `two points of one series with the same timestamp: ${k}`);
    seen.set(k, true);
  }
}

// Exponential (scale 0) point -> per-bucket counts over Prometheus-style power-of-two bounds:
// index i covers (2^i, 2^(i+1)], so it lies in the first bucket whose bound >= 2^(i+1).
export function rebinExponential(point, bounds) {
  const counts = new Array(bounds.length + 1).fill(0);
  counts[0] += Number(point.zeroCount ?? 0);
  const bucketOf = (upper) => {
    const j = bounds.findIndex((b) => b >= upper);
    return j < 0 ? bounds.length : j;
  };
  const pos = point.positive || {};
  (pos.bucketCounts || []).forEach((c, j) => {
    const i = (pos.offset ?? 0) + j;
    counts[bucketOf(2 ** (i + 1))] += Number(c);
  });
  return counts;
}

export { otlpName };

// Waits for a push whose stallwatch.snapshot.sequence equals the one of a /metrics scrape taken
// right after it arrived (and that `accept` likes); returns { scrape, sequence, time, points }.
export async function pairPushWithScrape(
  receiver,
  demoUrl,
  { timeoutMs = 30000, accept = () => true } = {},
) {
  const scrapes = new Map();
  let handled = 0;
  return waitFor(
    async () => {
      const reqs = accepted(receiver.metrics());
      if (reqs.length > handled) {
        handled = reqs.length;
        const s = await scrape(demoUrl);
        scrapes.set(promValue(s.families, 'stallwatch_snapshot_sequence'), s);
      }
      const points = pointsOf(accepted(receiver.metrics()));
      for (const [time, sequence] of sequenceByTime(points)) {
        const s = scrapes.get(sequence);
        if (s && accept(s)) {
          return {
            scrape: s,
            sequence,
            time,
            points: points.filter((p) => p.point.timeUnixNano === time),
          };
        }
      }
      return null;
    },
    { timeoutMs, intervalMs: 20, what: 'a push and a /metrics scrape of the same window' },
  );
}

// Checks that `points` (one push) carry every family of `families` (a /metrics scrape of the
// same window) under the naming rule, with its kind, unit and temporality, every series once and
// every value equal; histograms bucket by bucket (explicit as they are, exponential re-binned onto
// the Prometheus bounds); and that the push carries nothing /metrics does not.
export function assertSameWindow(families, points, { histogram = 'explicit', temporality } = {}) {
  const byName = new Map();
  for (const p of points) {
    if (!byName.has(p.metric.name)) byName.set(p.metric.name, []);
    byName.get(p.metric.name).push(p);
  }
  const expected = new Set();
  for (const fam of families.values()) {
    if (fam.samples.length === 0) continue;
    const { name, unit } = otlpName(fam.name, fam.type);
    expected.add(name);
    const ps = byName.get(name);
    assert.ok(
      ps,
      `Prometheus family ${fam.name} (${fam.type}) has no OTLP metric "${name}" ` +
        `in the push of the same window; the push has: ${[...byName.keys()].join(', ')}`,
    );
    const m = ps[0].metric;
    if (unit !== null) assert.equal(m.unit, unit, `${name} (from ${fam.name}): unit`);
    const pointsByKey = new Map(ps.map((p) => [otlpKey(p), p]));
    assert.equal(pointsByKey.size, ps.length, `${name}: one point per series`);
    const checkResource = (p, labels) => {
      for (const [label, attribute] of Object.entries(RESOURCE_ATTRIBUTES)) {
        if (!labels[label]) continue;
        assert.equal(p.resource[attribute], labels[label], `${name}: ${attribute} of ${p.key}`);
      }
    };
    if (fam.type === 'histogram') {
      const kind = histogram === 'exponential' ? 'exponentialHistogram' : 'histogram';
      assert.equal(m.kind, kind, `${name}: kind`);
      if (temporality) assert.equal(m.temporality, temporality, `${name}: temporality`);
      const hs = promHistograms(fam, name);
      assert.equal(ps.length, hs.size, `${name}: as many OTLP points as Prometheus series`);
      for (const [key, h] of hs) {
        const p = pointsByKey.get(key);
        assert.ok(
          p,
          `${name}: no OTLP point for the Prometheus series ${JSON.stringify(h.labels)}`,
        );
        checkResource(p, h.labels);
        assert.equal(Number(p.point.count ?? 0), h.count, `${name} ${key}: count`);
        assertClose(p.point.sum ?? 0, h.sum, `${name} ${key}: sum`);
        if (kind === 'histogram') {
          assert.deepEqual(
            p.point.explicitBounds ?? [],
            h.bounds,
            `${name} ${key}: explicit bounds = le bounds`,
          );
          assert.deepEqual(
            (p.point.bucketCounts ?? []).map(Number),
            h.counts,
            `${name} ${key}: bucket counts = per-bucket counts of /metrics`,
          );
        } else {
          assert.deepEqual(
            rebinExponential(p.point, h.bounds),
            h.counts,
            `${name} ${key}: exponential buckets re-binned onto the le bounds = /metrics`,
          );
        }
      }
      continue;
    }
    const samples = fam.samples.filter((s) => s.name === fam.name);
    if (fam.type === 'counter') {
      assert.equal(m.kind, 'sum', `${name} (counter ${fam.name}): kind`);
      assert.equal(m.monotonic, true, `${name}: monotonic`);
      if (temporality) assert.equal(m.temporality, temporality, `${name}: temporality`);
    } else {
      assert.equal(m.kind, 'gauge', `${name} (${fam.type} ${fam.name}): kind`);
    }
    assert.equal(ps.length, samples.length, `${name}: as many OTLP points as Prometheus series`);
    for (const s of samples) {
      const key = promKey(name, s.labels);
      const p = pointsByKey.get(key);
      assert.ok(p, `${name}: no OTLP point for the Prometheus series ${JSON.stringify(s.labels)}`);
      checkResource(p, s.labels);
      assertClose(numberValue(p.point), s.value, `${name} ${key}: value`);
    }
  }
  for (const name of byName.keys()) {
    assert.ok(
      expected.has(name),
      `OTLP metric ${name} has no Prometheus family in /metrics of the same window`,
    );
  }
}

// The window a metrics request carries (the time of its stallwatch.snapshot.sequence point):
// a retry carries the same window, a new push a later one.
export function windowOf(request) {
  const p = metricPoints(request.decoded).find(
    (x) => x.metric.name === 'stallwatch.snapshot.sequence',
  );
  return p ? `${numberValue(p.point)}@${p.point.timeUnixNano}` : null;
}

// Samples /metrics and /healthz every intervalMs until stop(): every answer, in order.
export function watchDaemon(demoUrl, { intervalMs = 250, extra = () => ({}) } = {}) {
  const samples = [];
  let running = true;
  const loop = (async () => {
    while (running) {
      const at = Date.now();
      const sample = { at };
      try {
        const s = await scrape(demoUrl, { timeoutMs: 2000 });
        sample.sequence = promValue(s.families, 'stallwatch_snapshot_sequence');
        Object.assign(sample, extra(s.families));
      } catch (e) {
        sample.metricsError = e.message;
      }
      try {
        const h = await fetch(`${demoUrl}/healthz`, { signal: AbortSignal.timeout(2000) });
        sample.healthz = h.status;
        await h.text();
      } catch (e) {
        sample.healthz = e.message;
      }
      samples.push(sample);
      await new Promise((r) => setTimeout(r, Math.max(0, intervalMs - (Date.now() - at))));
    }
  })();
  return {
    samples,
    async stop() {
      running = false;
      await loop;
      return samples;
    },
  };
}

// The daemon answered /metrics and /healthz throughout and its windows kept coming.
export function assertKeptPublishing(samples, { minWindows = 2 } = {}) {
  assert.ok(samples.length > 0, 'samples taken');
  for (const s of samples) {
    assert.equal(s.metricsError, undefined, `/metrics at ${s.at}`);
    assert.equal(s.healthz, 200, `/healthz at ${s.at}`);
  }
  for (let i = 1; i < samples.length; i++) {
    assert.ok(
      samples[i].sequence >= samples[i - 1].sequence,
      'stallwatch_snapshot_sequence never goes back',
    );
  }
  const span = samples.at(-1).sequence - samples[0].sequence;
  assert.ok(
    span >= minWindows,
    `stallwatch_snapshot_sequence went from ${samples[0].sequence} to ` +
      `${samples.at(-1).sequence} over ${samples.at(-1).at - samples[0].at} ms: windows kept coming`,
  );
}
