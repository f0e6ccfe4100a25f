// Delivery under a misbehaving receiver: 429 (honouring Retry-After), 503, no answer in time and
// a dropped connection are retried and counted by reason; a 400 is not retried, is logged with
// its status and its points are counted as dropped; the daemon keeps publishing throughout.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { assertKeptPublishing, checkInvariants, watchDaemon, windowOf } from './compare.mjs';
import { metricPoints, promSum, promValue, scrape, startSession, waitFor } from './receiver.mjs';

const REJECT_BODY = 'e2e: metric stallwatch.cuda.call.duration rejected by policy';

test(
  'delivery: retries by reason, a 400 never retried, the daemon unaffected',
  { timeout: 150_000 },
  async (t) => {
    const { receiver, demo } = await startSession(t, {
      args: '--window 1s --hold --otlp-interval 500ms --otlp-endpoint {receiver}',
      env: { OTEL_EXPORTER_OTLP_TIMEOUT: '1000' },
    });
    await receiver.waitForRequest((r) => r.path === '/v1/metrics', {
      timeoutMs: 10000,
      what: 'a first push',
    });
    const watch = watchDaemon(demo.url);
    t.after(() => watch.stop());

    // Answers the next metrics request with `step`; returns it and the next attempt at its window.
    const failOnce = async (step, { retryWithinMs = 15000 } = {}) => {
      const from = receiver.requests.length;
      const planned = { path: '/v1/metrics', ...step };
      receiver.planStep(planned);
      const failed = await receiver.waitForRequest((r) => r.answer === planned, {
        from,
        timeoutMs: 10000,
        what: `a metrics request answered ${JSON.stringify(step)}`,
      });
      const window = windowOf(failed);
      assert.ok(window, 'the failed request carries stallwatch.snapshot.sequence');
      const retry = await receiver.waitForRequest(
        (r) => r !== failed && r.path === '/v1/metrics' && windowOf(r) === window,
        {
          from,
          timeoutMs: retryWithinMs,
          what: `a retry of window ${window} after ${JSON.stringify(step)}`,
        },
      );
      return { failed, retry };
    };

    await t.test('429 with Retry-After: 2 is retried no sooner than 2 s later', async () => {
      const { failed, retry } = await failOnce({ status: 429, retryAfter: '2' });
      const waited = retry.time - failed.time;
      assert.ok(waited >= 1950, `retry after ${waited} ms, Retry-After said 2 s`);
      assert.equal(retry.sha256, failed.sha256, 'the same payload');
    });

    await t.test('503 is retried', async () => {
      const { failed, retry } = await failOnce({ status: 503 });
      assert.equal(retry.sha256, failed.sha256, 'the same payload');
    });

    await t.test(
      'no answer within OTEL_EXPORTER_OTLP_TIMEOUT=1000 is a timeout, retried',
      async () => {
        const { failed, retry } = await failOnce({ delayMs: 3000, status: 200 });
        assert.equal(retry.sha256, failed.sha256, 'the same payload');
        assert.ok(
          retry.time - failed.time >= 1000,
          `retry ${retry.time - failed.time} ms after: the first attempt waited its timeout`,
        );
      },
    );

    await t.test('a dropped connection is retried', async () => {
      const { failed, retry } = await failOnce({ destroy: true });
      assert.equal(retry.sha256, failed.sha256, 'the same payload');
    });

    await t.test('/metrics counts each failure by reason', async () => {
      const want = {
        throttled: 1,
        unavailable: 1,
        timeout: 1,
        connection: 1,
        rejected: 0,
        server_error: 0,
      };
      let last = null;
      await waitFor(
        async () => {
          last = (await scrape(demo.url)).families;
          return (
            Object.entries(want).every(
              ([reason, n]) => promValue(last, 'stallwatch_otlp_failures_total', { reason }) === n,
            ) && last
          );
        },
        { timeoutMs: 10000, what: `stallwatch_otlp_failures_total = ${JSON.stringify(want)}` },
      ).catch((e) => {
        const seen = Object.fromEntries(
          Object.keys(want).map((reason) => [
            reason,
            promValue(last, 'stallwatch_otlp_failures_total', { reason }),
          ]),
        );
        e.message += `; saw ${JSON.stringify(seen)}`;
        throw e;
      });
      assert.equal(
        promValue(last, 'stallwatch_otlp_requests_total', { signal: 'metrics', result: 'failure' }),
        4,
        'stallwatch_otlp_requests_total{signal="metrics",result="failure"}',
      );
      assert.equal(
        promSum(last, 'stallwatch_otlp_points_dropped_total'),
        0,
        'nothing dropped: every failure was retried',
      );
    });

    await t.test(
      'a 400 with a body: one attempt, logged with the status, its points counted dropped',
      async () => {
        const from = receiver.requests.length;
        const planned = { path: '/v1/metrics', status: 400, body: REJECT_BODY };
        receiver.planStep(planned);
        const rejected = await receiver.waitForRequest((r) => r.answer === planned, {
          from,
          timeoutMs: 10000,
          what: 'the request answered 400',
        });
        const window = windowOf(rejected);
        const points = metricPoints(rejected.decoded).length;
        // Three more pushes (later windows; 1 s windows, so well past the first retry delay).
        await waitFor(
          () =>
            receiver.metrics().filter((r) => r.time > rejected.time && windowOf(r) !== window)
              .length >= 3,
          { timeoutMs: 15000, what: '3 pushes after the 400' },
        );
        const attempts = receiver.metrics().filter((r) => windowOf(r) === window);
        assert.equal(
          attempts.length,
          1,
          `window ${window} was sent ${attempts.length} times after a 400`,
        );
        const line = await waitFor(
          () =>
            demo
              .output()
              .split('\n')
              .find((l) => /\b400\b/.test(l)),
          { timeoutMs: 5000, what: 'a log line with the status 400' },
        );
        t.diagnostic(`logged: ${line}`);
        assert.ok(
          line.includes(REJECT_BODY) || demo.output().includes(REJECT_BODY),
          `the receiver's answer is logged (docs/integrations.md: "logged once with the receiver's answer"): ${line}`,
        );
        assert.equal(
          demo
            .output()
            .split('\n')
            .filter((l) => l.includes(REJECT_BODY)).length <= 1,
          true,
          'logged once',
        );
        let families;
        await waitFor(
          async () => {
            families = (await scrape(demo.url)).families;
            return (
              promValue(families, 'stallwatch_otlp_failures_total', { reason: 'rejected' }) === 1
            );
          },
          { timeoutMs: 10000, what: 'stallwatch_otlp_failures_total{reason="rejected"} = 1' },
        );
        assert.equal(
          promValue(families, 'stallwatch_otlp_points_dropped_total', { reason: 'rejected' }),
          points,
          `stallwatch_otlp_points_dropped_total{reason="rejected"} = the ${points} points of the rejected request`,
        );
      },
    );

    await t.test('the daemon kept publishing windows and answering /healthz', async () => {
      assertKeptPublishing(await watch.stop(), { minWindows: 5 });
      assert.equal(demo.exited(), null, 'the daemon is still running');
      checkInvariants(receiver);
    });
  },
);
