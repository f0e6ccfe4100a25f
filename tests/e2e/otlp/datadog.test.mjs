// Datadog set-up, configured by the standard variables only: the API key header on every
// request, delta only (Datadog rejects cumulative monotonic sums and histograms), and the key
// never shown by the daemon.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { checkInvariants, pointsOf } from './compare.mjs';
import { DELTA, httpGet, startSession, stopDemo, waitFor } from './receiver.mjs';

const SECRET = 'secret123';

test(
  'Datadog: dd-api-key on every request, delta only, the key never printed',
  { timeout: 120_000 },
  async (t) => {
    const { receiver, demo } = await startSession(t, {
      args: '--window 250ms --hold --otlp-temporality delta',
      env: (r) => ({
        OTEL_EXPORTER_OTLP_ENDPOINT: r.url,
        OTEL_EXPORTER_OTLP_HEADERS: `dd-api-key=${SECRET}`,
        OTEL_METRIC_EXPORT_INTERVAL: '500',
        OTEL_SERVICE_NAME: 'trainer-watch',
        OTEL_RESOURCE_ATTRIBUTES: 'deployment.environment=e2e,team=ml-infra',
      }),
    });
    // Metrics pushes and the chain's log record (the incident opens it after 8 windows).
    await receiver.waitForRequest((r) => r.path === '/v1/logs', {
      timeoutMs: 20000,
      what: 'a /v1/logs request',
    });
    await waitFor(() => receiver.metrics().length >= 4, {
      timeoutMs: 10000,
      what: '4 metrics pushes',
    });
    const shown = [];
    for (const path of ['/metrics', '/debug/snapshot', '/healthz']) {
      shown.push((await httpGet(`${demo.url}${path}`)).text);
    }

    await t.test('the header arrives on every request, metrics and logs', () => {
      for (const r of receiver.requests) {
        assert.equal(r.headers['dd-api-key'], SECRET, `${r.path} at ${r.time}: dd-api-key`);
      }
      assert.ok(receiver.logs().length > 0 && receiver.metrics().length > 0);
    });

    await t.test('no cumulative sum or histogram, ever', () => {
      for (const p of pointsOf(receiver.metrics())) {
        if (p.metric.kind === 'gauge') continue;
        assert.equal(p.metric.temporality, DELTA, `${p.metric.name} (${p.metric.kind})`);
      }
    });

    await t.test('OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES on every resource', () => {
      const resources = [
        ...receiver.metrics().flatMap((r) => r.decoded.resourceMetrics ?? []),
        ...receiver.logs().flatMap((r) => r.decoded.resourceLogs ?? []),
      ].map((rm) =>
        Object.fromEntries(
          (rm.resource?.attributes ?? []).map((a) => [a.key, a.value?.stringValue]),
        ),
      );
      assert.ok(resources.length > 0);
      for (const r of resources) {
        assert.equal(r['service.name'], 'trainer-watch', 'service.name from OTEL_SERVICE_NAME');
        assert.equal(r['deployment.environment'], 'e2e', 'OTEL_RESOURCE_ATTRIBUTES');
        assert.equal(r.team, 'ml-infra', 'OTEL_RESOURCE_ATTRIBUTES');
      }
    });

    await t.test('the key is in no output of the daemon', async () => {
      await stopDemo(demo); // everything it printed, shutdown included
      assert.ok(!demo.stdout().includes(SECRET), 'stdout does not contain the API key');
      assert.ok(!demo.stderr().includes(SECRET), 'stderr does not contain the API key');
      for (const text of shown)
        assert.ok(!text.includes(SECRET), 'HTTP endpoints do not contain the API key');
      checkInvariants(receiver);
    });
  },
);
