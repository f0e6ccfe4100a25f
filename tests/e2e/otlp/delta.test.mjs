// Delta temporality (by flag and by OTEL_EXPORTER_OTLP_METRICS_TEMPORALITY_PREFERENCE): every Sum
// and Histogram is DELTA, each point starts where the previous one of its series ended, and the
// deltas pushed up to a window add up to the cumulative values /metrics showed for that window.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import {
  accepted,
  assertClose,
  checkInvariants,
  otlpKey,
  pointsOf,
  promHistograms,
  promKey,
  sequenceByTime,
} from './compare.mjs';
import { DELTA, otlpName, promValue, scrape, startSession, waitFor } from './receiver.mjs';

// Runs the incident with 250 ms windows and 500 ms pushes (a push may cover several windows),
// scraping /metrics every ~50 ms so most windows' cumulative values are on record.
async function collect(t, { args = '', env = {} }) {
  const { receiver, demo } = await startSession(t, {
    args: `--window 250ms --hold --otlp-interval 500ms --otlp-endpoint {receiver} ${args}`,
    env,
  });
  const scrapes = new Map();
  const matched = () => {
    const seqs = [...sequenceByTime(pointsOf(accepted(receiver.metrics()))).values()];
    return seqs.filter((s) => scrapes.has(s)).length;
  };
  // Until 4 pushed windows have a scrape and the chain (a series born mid-run) has been pushed.
  await waitFor(
    async () => {
      const s = await scrape(demo.url);
      scrapes.set(promValue(s.families, 'stallwatch_snapshot_sequence'), s);
      return (
        matched() >= 4 &&
        s.families.get('stallwatch_chains_total')?.samples.length > 0 &&
        pointsOf(receiver.metrics()).some((p) => p.metric.name === 'stallwatch.chains')
      );
    },
    {
      timeoutMs: 30000,
      intervalMs: 50,
      what: '4 pushed windows with a /metrics scrape each, the chain among them',
    },
  );
  return { receiver, demo, scrapes };
}

function checkDelta(t, { receiver, demo, scrapes }) {
  const points = pointsOf(accepted(receiver.metrics()));
  const seqByTime = sequenceByTime(points);
  const pushTimes = [...seqByTime.keys()].sort((a, b) => (BigInt(a) < BigInt(b) ? -1 : 1));

  // Series -> its points in push order.
  const series = new Map();
  for (const p of points) {
    if (p.metric.kind === 'gauge') continue;
    const key = otlpKey(p);
    if (!series.has(key)) series.set(key, []);
    series.get(key).push(p);
  }
  for (const ps of series.values())
    ps.sort((a, b) => (BigInt(a.point.timeUnixNano) < BigInt(b.point.timeUnixNano) ? -1 : 1));

  // Sums and histograms only as DELTA; counters stay monotonic.
  const kinds = new Set();
  for (const p of points) {
    if (p.metric.kind === 'gauge') continue;
    kinds.add(p.metric.kind);
    assert.equal(p.metric.temporality, DELTA, `${p.metric.name} (${p.metric.kind}): temporality`);
    if (p.metric.kind === 'sum')
      assert.equal(p.metric.monotonic, true, `${p.metric.name}: monotonic`);
  }
  assert.ok(
    kinds.has('sum') && kinds.has('histogram'),
    `sums and histograms pushed, saw ${[...kinds]}`,
  );

  // Starts chain: each point starts at the previous point's time; the first at the daemon start,
  // or (a series born later) at the previous push.
  const spawnedNs = BigInt(demo.spawnedAt) * 1_000_000n;
  const daemonStarts = new Set();
  for (const [key, ps] of series) {
    const first = ps[0].point;
    const i = pushTimes.indexOf(first.timeUnixNano);
    const start = BigInt(first.startTimeUnixNano ?? 0);
    if (i > 0 && first.startTimeUnixNano === pushTimes[i - 1]) {
      // born after the first push: counts from the previous push
    } else {
      assert.ok(
        start >= spawnedNs - 1_000_000_000n && start < BigInt(first.timeUnixNano),
        `${key}: first point starts at ${start}: neither the daemon start (after ${spawnedNs}) ` +
          `nor the previous push ${pushTimes[i - 1]}`,
      );
      daemonStarts.add(first.startTimeUnixNano);
    }
    for (let j = 1; j < ps.length; j++) {
      assert.equal(
        ps[j].point.startTimeUnixNano,
        ps[j - 1].point.timeUnixNano,
        `${key}: point ${j} starts where point ${j - 1} ended`,
      );
      assert.ok(
        BigInt(ps[j].point.timeUnixNano) > BigInt(ps[j - 1].point.timeUnixNano),
        `${key}: times strictly increase (no two points at one time)`,
      );
    }
  }
  assert.equal(
    daemonStarts.size,
    1,
    `one daemon start for the series present from the start, saw ${[...daemonStarts]}`,
  );

  // Sum of the deltas pushed up to window S = the cumulative value of /metrics at window S.
  let compared = 0;
  for (const time of pushTimes) {
    const seq = seqByTime.get(time);
    const s = scrapes.get(seq);
    if (!s) continue;
    compared++;
    const upTo = (key) =>
      (series.get(key) ?? []).filter((p) => BigInt(p.point.timeUnixNano) <= BigInt(time));
    for (const fam of s.families.values()) {
      if (fam.type !== 'counter' && fam.type !== 'histogram') continue;
      const { name } = otlpName(fam.name, fam.type);
      if (fam.type === 'counter') {
        for (const sample of fam.samples.filter((x) => x.name === fam.name)) {
          const key = promKey(name, sample.labels);
          const ps = upTo(key);
          assert.ok(
            ps.length > 0 || sample.value === 0,
            `window ${seq}: ${key} = ${sample.value} in /metrics, never pushed`,
          );
          const total = ps.reduce(
            (a, p) => a + (p.point.asDouble ?? Number(p.point.asInt ?? 0)),
            0,
          );
          assertClose(
            total,
            sample.value,
            `window ${seq}: sum of ${ps.length} deltas of ${key} vs /metrics`,
            1e-7,
          );
        }
      } else {
        for (const [key, h] of promHistograms(fam, name)) {
          const ps = upTo(key);
          assert.ok(
            ps.length > 0 || h.count === 0,
            `window ${seq}: ${key} count ${h.count} in /metrics, never pushed`,
          );
          const count = ps.reduce((a, p) => a + Number(p.point.count ?? 0), 0);
          const sum = ps.reduce((a, p) => a + (p.point.sum ?? 0), 0);
          const buckets = h.counts.map((_, b) =>
            ps.reduce((a, p) => a + Number(p.point.bucketCounts?.[b] ?? 0), 0),
          );
          assert.equal(
            count,
            h.count,
            `window ${seq}: sum of ${ps.length} delta counts of ${key} vs /metrics`,
          );
          assertClose(
            sum,
            h.sum,
            `window ${seq}: sum of ${ps.length} delta sums of ${key} vs /metrics`,
            1e-7,
          );
          assert.deepEqual(
            buckets,
            h.counts,
            `window ${seq}: summed delta buckets of ${key} vs /metrics`,
          );
        }
      }
    }
  }
  assert.ok(compared >= 4, `compared ${compared} windows`);
  t.diagnostic(
    `${pushTimes.length} pushes, ${series.size} series, ${compared} windows compared with /metrics`,
  );
  checkInvariants(receiver);
}

test(
  'delta by --otlp-temporality delta: deltas chain and add up to /metrics',
  { timeout: 120_000 },
  async (t) => {
    const run = await collect(t, { args: '--otlp-temporality delta' });
    checkDelta(t, run);
  },
);

test(
  'delta by OTEL_EXPORTER_OTLP_METRICS_TEMPORALITY_PREFERENCE=delta',
  { timeout: 120_000 },
  async (t) => {
    const run = await collect(t, {
      env: { OTEL_EXPORTER_OTLP_METRICS_TEMPORALITY_PREFERENCE: 'delta' },
    });
    checkDelta(t, run);
  },
);

test('lowmemory is delta for counters and histograms', { timeout: 120_000 }, async (t) => {
  const run = await collect(t, { args: '--otlp-temporality lowmemory' });
  checkDelta(t, run);
});
