// A receiver down for 30 s, then back on the same port: the daemon keeps publishing, its queue
// stays under --otlp-max-queue, what it had to drop is counted, and delivery resumes. (Its
// 64 KiB queue is full after ~4 s of pushes; the retries have backed off to 16 s by the end.)
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { assertKeptPublishing, checkInvariants, watchDaemon, windowOf } from './compare.mjs';
import {
  metricPoints,
  promSum,
  promValue,
  scrape,
  startSession,
  stopDemo,
  waitFor,
} from './receiver.mjs';

const OUTAGE_MS = 30_000;
const MAX_QUEUE = 64 * 1024; // --otlp-max-queue 64KiB: a few pushes of the demo (~9 KB each)

const sequenceOf = (r) => Number(windowOf(r)?.split('@')[0]);

test(
  'outage: 30 s down, back on the same port, delivery resumes',
  { timeout: 240_000 },
  async (t) => {
    const { receiver, demo } = await startSession(t, {
      args:
        '--window 1s --hold --otlp-endpoint {receiver} --otlp-interval 500ms ' +
        '--otlp-max-queue 64KiB',
    });
    await waitFor(() => receiver.metrics().length >= 2, {
      timeoutMs: 15000,
      what: '2 pushes before the outage',
    });
    const port = receiver.port;

    await receiver.down();
    const downAt = Date.now();
    const lastBefore = Math.max(...receiver.metrics().map(sequenceOf));
    t.diagnostic(`receiver down at window ${lastBefore}`);
    const watch = watchDaemon(demo.url, {
      intervalMs: 500,
      extra: (f) => ({
        queueBytes: promValue(f, 'stallwatch_otlp_queue_bytes'),
        queueRequests: promValue(f, 'stallwatch_otlp_queue_requests'),
      }),
    });
    t.after(() => watch.stop());
    await new Promise((r) => setTimeout(r, OUTAGE_MS)); // the outage itself: nothing to wait for
    const during = [...watch.samples];
    await receiver.up();
    assert.equal(receiver.port, port, 'back on the same port');
    const upAt = Date.now();

    await t.test(
      'during the outage: windows kept coming, /healthz answered, queue under the cap',
      () => {
        assertKeptPublishing(during, { minWindows: 20 });
        const bytes = during.map((s) => s.queueBytes);
        assert.ok(
          bytes.every((b) => typeof b === 'number'),
          'stallwatch_otlp_queue_bytes in every scrape',
        );
        const max = Math.max(...bytes);
        t.diagnostic(
          `stallwatch_otlp_queue_bytes: max ${max} over ${bytes.length} samples (cap ${MAX_QUEUE})`,
        );
        assert.ok(max > 0, 'the queue held requests during the outage');
        assert.ok(
          max <= MAX_QUEUE,
          `stallwatch_otlp_queue_bytes reached ${max} > --otlp-max-queue ${MAX_QUEUE}`,
        );
        assert.equal(receiver.requests.filter((r) => r.time >= downAt && r.time < upAt).length, 0);
      },
    );

    await t.test('delivery resumes with new windows', async () => {
      const resumed = await receiver.waitForRequest(
        (r) => r.path === '/v1/metrics' && r.time >= upAt,
        { timeoutMs: 60000, what: 'a metrics push after the receiver came back' },
      );
      t.diagnostic(`first push ${resumed.time - upAt} ms after the receiver came back`);
      const lastDuring = Math.max(...during.map((s) => s.sequence));
      await receiver.waitForRequest((r) => r.path === '/v1/metrics' && sequenceOf(r) > lastDuring, {
        timeoutMs: 30000,
        what: `a push of a window after ${lastDuring}`,
      });
    });

    await t.test('drops counted, connection failures counted, queue drained', async () => {
      let families;
      await waitFor(
        async () => {
          families = (await scrape(demo.url)).families;
          return promValue(families, 'stallwatch_otlp_queue_requests') === 0;
        },
        { timeoutMs: 30000, what: 'stallwatch_otlp_queue_requests back to 0' },
      );
      assert.ok(
        promValue(families, 'stallwatch_otlp_failures_total', { reason: 'connection' }) > 0,
        'stallwatch_otlp_failures_total{reason="connection"}',
      );
      const dropped = promSum(families, 'stallwatch_otlp_points_dropped_total');
      const droppedQueue = promValue(families, 'stallwatch_otlp_points_dropped_total', {
        reason: 'queue_full',
      });
      // Windows never received between the first and the last one received.
      const got = new Set(receiver.metrics().map(sequenceOf));
      const lo = Math.min(...got);
      const hi = Math.max(...got);
      const missing = [];
      for (let s = lo; s <= hi; s++) if (!got.has(s)) missing.push(s);
      const sizes = receiver.metrics().map((r) => metricPoints(r.decoded).length);
      t.diagnostic(
        `windows ${lo}..${hi}: ${missing.length} missing; dropped ${dropped} points (queue_full ${droppedQueue})`,
      );
      assert.ok(
        missing.length > 0,
        '30 s of ~9 KB pushes cannot fit a 64 KiB queue: windows were dropped',
      );
      assert.ok(dropped > 0, 'stallwatch_otlp_points_dropped_total counts the drops');
      assert.ok(
        dropped >= missing.length * Math.min(...sizes) &&
          dropped <= missing.length * Math.max(...sizes),
        `dropped ${dropped} points for ${missing.length} missing windows of ${Math.min(...sizes)}..${Math.max(...sizes)} points`,
      );
    });

    await t.test('the daemon is alive and every request well formed', () => {
      assert.equal(demo.exited(), null, 'the daemon is still running');
      checkInvariants(receiver);
    });

    // Delivery flushes for at most 5 s on shutdown (delivery.h), then drops what is left: a dead
    // receiver must not hold the daemon up.
    await t.test('SIGTERM with the receiver down again: a bounded, clean exit', async () => {
      await receiver.down();
      const from = (await scrape(demo.url)).families;
      await waitFor(
        async () =>
          promValue((await scrape(demo.url)).families, 'stallwatch_snapshot_sequence') >=
          promValue(from, 'stallwatch_snapshot_sequence') + 2,
        { timeoutMs: 10000, what: '2 windows queued for the dead receiver' },
      );
      const started = Date.now();
      const stopped = await stopDemo(demo, { timeoutMs: 20000 });
      t.diagnostic(`exited ${Date.now() - started} ms after SIGTERM: ${JSON.stringify(stopped)}`);
      assert.equal(stopped.killed, false, 'exited on SIGTERM within 20 s');
      assert.equal(stopped.code, 0, 'exit code');
    });
  },
);
