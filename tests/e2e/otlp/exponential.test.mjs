// Exponential histograms: base-2 at scale 0, the kernel's log2 buckets as they are; re-binned
// onto the Prometheus `le` bounds they give back /metrics of the same window.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import {
  assertSameWindow,
  checkInvariants,
  pairPushWithScrape,
  promHistograms,
  otlpKey,
  rebinExponential,
} from './compare.mjs';
import { CUMULATIVE, startSession } from './receiver.mjs';

test(
  'exponential histograms: scale 0, counts and offsets consistent with /metrics',
  { timeout: 120_000 },
  async (t) => {
    const { receiver, demo } = await startSession(t, {
      args:
        '--window 1s --hold --otlp-endpoint {receiver} --otlp-interval 500ms ' +
        '--otlp-histogram exponential',
    });
    // A window of the incident (slow cudaStreamSynchronize): several buckets in use.
    const pair = await pairPushWithScrape(receiver, demo.url, {
      timeoutMs: 30000,
      accept: (s) => s.families.get('stallwatch_chains_total')?.samples.length > 0,
    });
    t.diagnostic(`matched window ${pair.sequence}`);
    const fam = pair.scrape.families.get('stallwatch_cuda_call_duration_seconds');
    assert.ok(fam, 'stallwatch_cuda_call_duration_seconds in /metrics');
    const hs = promHistograms(fam, 'stallwatch.cuda.call.duration');
    const points = pair.points.filter((p) => p.metric.name === 'stallwatch.cuda.call.duration');
    assert.ok(points.length > 0, 'stallwatch.cuda.call.duration pushed');

    await t.test('kind, unit, temporality; no explicit histogram sent', () => {
      for (const p of points) {
        assert.equal(p.metric.kind, 'exponentialHistogram');
        assert.equal(p.metric.unit, 's');
        assert.equal(p.metric.temporality, CUMULATIVE);
      }
      assert.ok(!pair.points.some((p) => p.metric.kind === 'histogram'), 'no explicit histogram');
    });

    await t.test('each point: scale 0, count = /metrics count, buckets add up', () => {
      for (const p of points) {
        const h = hs.get(otlpKey(p));
        assert.ok(h, `a Prometheus series for ${p.key}`);
        const pt = p.point;
        assert.equal(pt.scale ?? 0, 0, `${p.key}: scale`);
        const count = Number(pt.count ?? 0);
        assert.equal(count, h.count, `${p.key}: count = /metrics _count`);
        const positive = (pt.positive?.bucketCounts ?? []).map(Number).reduce((a, b) => a + b, 0);
        const negative = (pt.negative?.bucketCounts ?? []).map(Number).reduce((a, b) => a + b, 0);
        assert.equal(negative, 0, `${p.key}: no negative durations`);
        assert.equal(
          positive,
          count - Number(pt.zeroCount ?? 0),
          `${p.key}: positive buckets = count - zero_count`,
        );
      }
    });

    await t.test('offsets: a value in le=2^k is in exponential index k-1', () => {
      let checked = 0;
      for (const p of points) {
        const h = hs.get(otlpKey(p));
        for (const b of h.bounds) {
          assert.equal(2 ** Math.round(Math.log2(b)), b, `le bound ${b} is a power of two`);
        }
        // Each Prometheus bucket (2^(k-1), 2^k] inside the bounds is exactly exponential
        // bucket k-1 (index = offset + position).
        const pos = p.point.positive ?? {};
        const byIndex = new Map(
          (pos.bucketCounts ?? []).map((c, j) => [(pos.offset ?? 0) + j, Number(c)]),
        );
        for (let j = 1; j < h.bounds.length; j++) {
          const k = Math.log2(h.bounds[j]);
          assert.equal(
            byIndex.get(k - 1) ?? 0,
            h.counts[j],
            `${p.key}: Prometheus bucket le=${h.bounds[j]} (${h.counts[j]}) vs exponential index ${k - 1}`,
          );
          if (h.counts[j] > 0) checked++;
        }
        assert.deepEqual(
          rebinExponential(p.point, h.bounds),
          h.counts,
          `${p.key}: re-binned = /metrics`,
        );
        if (p.point.max !== undefined && Number(p.point.count ?? 0) > 0) {
          const top = Math.max(...[...byIndex].filter(([, c]) => c > 0).map(([i]) => i));
          assert.ok(
            p.point.max > 2 ** top && p.point.max <= 2 ** (top + 1),
            `${p.key}: max ${p.point.max} in the highest non-empty bucket (2^${top}, 2^${top + 1}]`,
          );
        }
      }
      assert.ok(checked > 0, 'some non-empty buckets compared');
    });

    await t.test('the rest of the push equals /metrics of the same window', () => {
      assertSameWindow(pair.scrape.families, pair.points, {
        histogram: 'exponential',
        temporality: CUMULATIVE,
      });
      checkInvariants(receiver);
    });
  },
);
