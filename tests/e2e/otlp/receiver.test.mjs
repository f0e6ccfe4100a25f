// The harness itself, without stallwatch: requests encoded with the same package decode back,
// plan steps answer as scripted, the receiver goes down and comes back on its port, and the
// Prometheus parser and naming rule read what the issue says.
import assert from 'node:assert/strict';
import http from 'node:http';
import { test } from 'node:test';
import { gzipSync } from 'node:zlib';
import { promHistograms, rebinExponential } from './compare.mjs';
import {
  CUMULATIVE,
  OtlpReceiver,
  encodeLogs,
  encodeMetrics,
  metricPoints,
  otlpName,
  parsePrometheus,
  promValue,
} from './receiver.mjs';

const REQUEST = {
  resourceMetrics: [
    {
      resource: { attributes: [{ key: 'stallwatch.cgroup', value: { stringValue: '/a.slice' } }] },
      scopeMetrics: [
        {
          scope: { name: 'stallwatch' },
          metrics: [
            {
              name: 'stallwatch.cuda.call.duration',
              unit: 's',
              histogram: {
                aggregationTemporality: 2,
                dataPoints: [
                  {
                    attributes: [{ key: 'call', value: { stringValue: 'cudaMalloc' } }],
                    startTimeUnixNano: '1700000000000000001',
                    timeUnixNano: '1700000001000000001',
                    count: '5',
                    sum: 1.5,
                    bucketCounts: ['1', '0', '4'],
                    explicitBounds: [0.5, 1],
                  },
                ],
              },
            },
          ],
        },
      ],
    },
  ],
};

// POSTs body to the receiver; resolves { status, headers, body } or { error }.
function post(url, path, body, headers = {}) {
  return new Promise((resolve) => {
    const req = http.request(
      `${url}${path}`,
      {
        method: 'POST',
        headers: { 'content-type': 'application/x-protobuf', ...headers },
        agent: false,
      },
      (res) => {
        const chunks = [];
        res.on('data', (c) => chunks.push(c));
        res.on('end', () =>
          resolve({ status: res.statusCode, headers: res.headers, body: Buffer.concat(chunks) }),
        );
      },
    );
    req.setTimeout(10000);
    req.on('error', (e) => resolve({ error: e.code || e.message }));
    req.end(body);
  });
}

test('receiver: decodes gzip and plain protobuf, answers from its plan', async (t) => {
  const receiver = await new OtlpReceiver().start();
  t.after(() => receiver.close());

  const ok = await post(receiver.url, '/v1/metrics', gzipSync(encodeMetrics(REQUEST)), {
    'content-encoding': 'gzip',
  });
  assert.equal(ok.status, 200);
  const [r] = receiver.metrics();
  assert.equal(r.error, null);
  const [p] = metricPoints(r.decoded);
  assert.equal(p.metric.name, 'stallwatch.cuda.call.duration');
  assert.equal(p.metric.temporality, CUMULATIVE);
  assert.deepEqual(p.point.bucketCounts, ['1', '0', '4']);
  assert.equal(p.point.startTimeUnixNano, '1700000000000000001', '64-bit times exact');
  assert.equal(p.resource['stallwatch.cgroup'], '/a.slice');

  const logs = encodeLogs({
    resourceLogs: [
      {
        scopeLogs: [{ logRecords: [{ severityNumber: 21, body: { stringValue: 'x' } }] }],
      },
    ],
  });
  assert.equal((await post(receiver.url, '/v1/logs', logs)).status, 200);
  assert.equal(
    receiver.logs()[0].decoded.resourceLogs[0].scopeLogs[0].logRecords[0].severityNumber,
    'SEVERITY_NUMBER_FATAL',
  );

  receiver.planStep({ path: '/v1/metrics', status: 429, retryAfter: '2' });
  receiver.planStep({ path: '/v1/metrics', status: 400, body: 'nope' });
  receiver.planStep({ path: '/v1/metrics', destroy: true });
  receiver.planStep({ path: '/v1/metrics', delayMs: 300 });
  const body = encodeMetrics(REQUEST);
  const throttled = await post(receiver.url, '/v1/metrics', body);
  assert.equal(throttled.status, 429);
  assert.equal(throttled.headers['retry-after'], '2');
  const rejected = await post(receiver.url, '/v1/metrics', body);
  assert.equal(rejected.status, 400);
  assert.equal(rejected.body.toString(), 'nope');
  const dropped = await post(receiver.url, '/v1/metrics', body);
  assert.ok(dropped.error, 'connection dropped without an answer');
  const started = Date.now();
  const slow = await post(receiver.url, '/v1/metrics', body);
  assert.equal(slow.status, 200);
  assert.ok(Date.now() - started >= 290, 'answered after its delay');
  assert.equal(receiver.metrics().length, 5, 'every attempt recorded');
  assert.equal(new Set(receiver.metrics().map((x) => x.sha256)).size, 1, 'same payload, same hash');
});

test('receiver: down refuses connections, up listens on the same port', async (t) => {
  const receiver = await new OtlpReceiver().start();
  t.after(() => receiver.close());
  const port = receiver.port;
  await receiver.down();
  const refused = await post(receiver.url, '/v1/metrics', encodeMetrics(REQUEST));
  assert.equal(refused.error, 'ECONNREFUSED');
  await receiver.up();
  assert.equal(receiver.port, port);
  assert.equal((await post(receiver.url, '/v1/metrics', encodeMetrics(REQUEST))).status, 200);
});

test('Prometheus parsing, naming rule and re-binning', () => {
  const families = parsePrometheus(
    [
      '# HELP x_seconds d',
      '# TYPE x_seconds histogram',
      'x_seconds_bucket{cgroup="/a",le="0.25"} 1',
      'x_seconds_bucket{cgroup="/a",le="0.5"} 1',
      'x_seconds_bucket{cgroup="/a",le="1"} 4',
      'x_seconds_bucket{cgroup="/a",le="+Inf"} 5',
      'x_seconds_sum{cgroup="/a"} 7.5',
      'x_seconds_count{cgroup="/a"} 5',
      '# TYPE y_total counter',
      'y_total{k="a \\"q\\""} 3',
      '',
    ].join('\n'),
  );
  assert.equal(promValue(families, 'y_total', { k: 'a "q"' }), 3);
  const [h] = promHistograms(families.get('x_seconds'), 'x').values();
  assert.deepEqual(h.bounds, [0.25, 0.5, 1]);
  assert.deepEqual(h.counts, [1, 0, 3, 1]);
  assert.equal(h.count, 5);
  // index -3 = (1/8, 1/4] -> le=0.25; index -1 = (1/2, 1] -> le=1; index 2 = (4, 8] -> +Inf
  assert.deepEqual(
    rebinExponential(
      { positive: { offset: -3, bucketCounts: ['1', '0', '3', '0', '0', '1'] } },
      h.bounds,
    ),
    [1, 0, 3, 1],
  );
  assert.deepEqual(otlpName('stallwatch_cuda_call_duration_seconds', 'histogram'), {
    name: 'stallwatch.cuda.call.duration',
    unit: 's',
  });
  assert.deepEqual(otlpName('stallwatch_cuda_call_offcpu_seconds_total', 'counter'), {
    name: 'stallwatch.cuda.call.offcpu',
    unit: 's',
  });
  assert.deepEqual(otlpName('stallwatch_block_io_bytes_total', 'counter'), {
    name: 'stallwatch.block.io',
    unit: 'By',
  });
  assert.deepEqual(otlpName('stallwatch_offcpu_ratio', 'gauge'), {
    name: 'stallwatch.offcpu.ratio',
    unit: '1',
  });
  assert.deepEqual(otlpName('stallwatch_chains_total', 'counter'), {
    name: 'stallwatch.chains',
    unit: null,
  });
});
