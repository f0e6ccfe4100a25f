// Configuration: --otlp-* flags win over the OTEL_* variables, --otlp-header adds to
// OTEL_EXPORTER_OTLP_HEADERS, signal-specific endpoints are used as they are and signal-specific
// headers go to their signal only, and --otlp-compression none sends plain protobuf.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { checkInvariants, pointsOf } from './compare.mjs';
import { CUMULATIVE, freePort, startSession, waitFor } from './receiver.mjs';

test(
  'flags win over OTEL_* variables; --otlp-header adds to the variable',
  { timeout: 60_000 },
  async (t) => {
    const dead = await freePort(); // nothing listens there
    const { receiver } = await startSession(t, {
      args:
        '--window 250ms --hold --otlp-endpoint {receiver} --otlp-temporality cumulative ' +
        '--otlp-interval 500ms --otlp-header x-flag-one=1 --otlp-header x-flag-two=2',
      env: {
        OTEL_EXPORTER_OTLP_ENDPOINT: `http://127.0.0.1:${dead}`,
        OTEL_EXPORTER_OTLP_METRICS_TEMPORALITY_PREFERENCE: 'delta',
        OTEL_METRIC_EXPORT_INTERVAL: '60000',
        OTEL_EXPORTER_OTLP_HEADERS: 'x-from-env=e%20v',
      },
    });
    await waitFor(() => receiver.metrics().length >= 2, {
      timeoutMs: 15000,
      what: '2 pushes at the --otlp-endpoint, every 500 ms (the variables say another URL, 60 s)',
    });
    for (const r of receiver.metrics()) {
      assert.equal(r.headers['x-flag-one'], '1', '--otlp-header x-flag-one');
      assert.equal(r.headers['x-flag-two'], '2', '--otlp-header x-flag-two (repeated flag)');
      assert.equal(r.headers['x-from-env'], 'e v', 'OTEL_EXPORTER_OTLP_HEADERS, percent-decoded');
    }
    for (const p of pointsOf(receiver.metrics())) {
      if (p.metric.kind !== 'gauge') assert.equal(p.metric.temporality, CUMULATIVE, p.metric.name);
    }
    checkInvariants(receiver);
  },
);

test(
  'signal endpoints as they are; signal headers to their signal only; no compression',
  { timeout: 60_000 },
  async (t) => {
    const { receiver } = await startSession(t, {
      args: '--window 250ms --hold --otlp-interval 500ms --otlp-compression none',
      env: (r) => ({
        OTEL_EXPORTER_OTLP_METRICS_ENDPOINT: `${r.url}/custom/metrics`,
        OTEL_EXPORTER_OTLP_LOGS_ENDPOINT: `${r.url}/custom/logs`,
        OTEL_EXPORTER_OTLP_METRICS_HEADERS: 'x-metrics-only=m',
        OTEL_EXPORTER_OTLP_LOGS_HEADERS: 'x-logs-only=l',
      }),
    });
    // The incident opens its chain after 8 windows (2 s): a log record follows.
    await receiver.waitForRequest((r) => r.signal === 'logs', {
      timeoutMs: 20000,
      what: 'a log request at OTEL_EXPORTER_OTLP_LOGS_ENDPOINT',
    });
    assert.ok(receiver.metrics().length > 0);
    for (const r of receiver.metrics()) {
      assert.equal(r.path, '/custom/metrics', 'OTEL_EXPORTER_OTLP_METRICS_ENDPOINT used as it is');
      assert.equal(r.headers['x-metrics-only'], 'm');
      assert.equal(r.headers['x-logs-only'], undefined, 'logs header not on metrics');
    }
    for (const r of receiver.logs()) {
      assert.equal(r.path, '/custom/logs', 'OTEL_EXPORTER_OTLP_LOGS_ENDPOINT used as it is');
      assert.equal(r.headers['x-logs-only'], 'l');
      assert.equal(r.headers['x-metrics-only'], undefined, 'metrics header not on logs');
    }
    checkInvariants(receiver, { compression: null, paths: ['/custom/metrics', '/custom/logs'] });
  },
);
