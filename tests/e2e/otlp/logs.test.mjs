// Chains as OTLP log records on /v1/logs: severity_number from the chain's severity, body = the
// chain's summary line (the one the demo prints), attributes with kind, severity, id and state,
// under the workload's resource; opened, updated (severity change) and closed.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { checkInvariants } from './compare.mjs';
import { SEVERITY, attrs, scrape, startSession, waitFor } from './receiver.mjs';

const SEVERITY_NUMBER = { low: 9, medium: 13, high: 17, critical: 21 };

// Every log record received so far: { record, attrs, resource, request }.
function records(receiver) {
  return receiver.logs().flatMap((request) =>
    (request.decoded.resourceLogs ?? []).flatMap((rl) =>
      (rl.scopeLogs ?? []).flatMap((sl) =>
        (sl.logRecords ?? []).map((record) => ({
          record,
          attrs: attrs(record.attributes),
          resource: attrs(rl.resource?.attributes),
          request,
        })),
      ),
    ),
  );
}

// Runs `scenario` with 250 ms windows until the records of `states` (in that order, one chain)
// arrived; returns them with the demo's output and a /metrics scrape.
async function chainRecords(t, scenario, states) {
  const { receiver, demo } = await startSession(t, {
    scenario,
    args: '--window 250ms --otlp-endpoint {receiver} --otlp-interval 500ms',
  });
  const got = await waitFor(
    () => {
      const rs = records(receiver);
      const seen = rs.map((x) => x.attrs['stallwatch.chain.state']);
      return states.every((s) => seen.includes(s)) && rs;
    },
    {
      timeoutMs: 30000,
      intervalMs: 100,
      what: `log records of states ${states.join(', ')} (${scenario})`,
    },
  ).catch((e) => {
    const seen = records(receiver).map((x) => x.attrs['stallwatch.chain.state']);
    e.message += `; received states: [${seen.join(', ')}]`;
    throw e;
  });
  const metrics = await scrape(demo.url);
  return { receiver, demo, records: got, metrics };
}

function checkRecords({ receiver, demo, records: rs, metrics }, { kind, severities }) {
  assert.ok(rs.length > 0);
  const ids = new Set(rs.map((x) => x.attrs['stallwatch.chain.id']));
  assert.equal(ids.size, 1, `one chain, saw ids ${[...ids]}`);
  // The chain's workload in /metrics, by its key (issue #37: the cgroup path is on the info
  // series only).
  const cgroups = new Set(
    (metrics.families.get('stallwatch_chains_total')?.samples ?? [])
      .filter((s) => s.labels.kind === kind)
      .map((s) => s.labels.workload),
  );
  for (const { record, attrs: a, resource, request } of rs) {
    const what = `${a['stallwatch.chain.state']} record of ${kind}`;
    assert.equal(a['stallwatch.chain.kind'], kind, `${what}: stallwatch.chain.kind`);
    const severity = a['stallwatch.chain.severity'];
    assert.ok(severity in SEVERITY_NUMBER, `${what}: stallwatch.chain.severity ${severity}`);
    assert.equal(
      SEVERITY[record.severityNumber],
      SEVERITY_NUMBER[severity],
      `${what}: severity_number ${record.severityNumber} for severity ${severity}`,
    );
    assert.ok(
      ['opened', 'updated', 'closed'].includes(a['stallwatch.chain.state']),
      `${what}: state`,
    );
    const body = record.body?.stringValue;
    assert.ok(body, `${what}: a string body`);
    assert.ok(
      demo.stdout().includes(body),
      `${what}: body "${body}" is the summary the demo printed`,
    );
    assert.ok(
      Object.keys(a).some((k) => k.startsWith('stallwatch.evidence.')),
      `${what}: evidence attributes`,
    );
    assert.ok(BigInt(record.timeUnixNano ?? 0) > 0n, `${what}: time_unix_nano set`);
    assert.ok(
      cgroups.has(resource['stallwatch.workload']),
      `${what}: resource stallwatch.workload ${resource['stallwatch.workload']} is the chain's workload in /metrics (${[...cgroups]})`,
    );
    assert.equal(request.headers['content-encoding'], 'gzip');
  }
  const order = rs.map((x) => x.attrs['stallwatch.chain.state']);
  const closed = order.indexOf('closed');
  if (closed >= 0) assert.equal(closed, order.length - 1, `closed is the last record: ${order}`);
  assert.deepEqual(
    rs.map((x) => x.attrs['stallwatch.chain.severity']),
    severities,
    `severities in order (states ${order})`,
  );
  checkInvariants(receiver);
}

test(
  'logs: the incident opens a critical cpu_contention chain (FATAL 21)',
  { timeout: 120_000 },
  async (t) => {
    const run = await chainRecords(t, 'incident', ['opened', 'closed']);
    checkRecords(run, { kind: 'cpu_contention', severities: ['critical', 'critical'] });
    const opened = run.records[0];
    assert.equal(opened.attrs['stallwatch.chain.state'], 'opened');
    assert.equal(opened.record.severityNumber, 'SEVERITY_NUMBER_FATAL');
    assert.equal(opened.attrs['stallwatch.cuda.call'], 'cudaStreamSynchronize');
  },
);

test(
  'logs: memory-pressure opens high (ERROR 17), turns critical (FATAL 21), closes',
  { timeout: 120_000 },
  async (t) => {
    const run = await chainRecords(t, 'memory-pressure', ['opened', 'updated', 'closed']);
    checkRecords(run, { kind: 'memory_pressure', severities: ['high', 'critical', 'critical'] });
    assert.deepEqual(
      run.records.map((x) => x.attrs['stallwatch.chain.state']),
      ['opened', 'updated', 'closed'],
    );
  },
);

test('logs: memcpy-bottleneck is medium (WARN 13)', { timeout: 120_000 }, async (t) => {
  const run = await chainRecords(t, 'memcpy-bottleneck', ['opened', 'closed']);
  checkRecords(run, { kind: 'memcpy_bound', severities: ['medium', 'medium'] });
});

// A cold start is reported once and closed in the same window: the chain still opened (the demo
// prints "chain opened"), so its opened record goes out as well as the closed one (docs/integrations.md: one
// record per chain opened, severity change and close).
test('logs: cold-start is low (INFO 9), opened and closed', { timeout: 120_000 }, async (t) => {
  const run = await chainRecords(t, 'cold-start', ['closed']);
  checkRecords(run, { kind: 'cold_start', severities: run.records.map(() => 'low') });
  assert.deepEqual(
    run.records.map((x) => x.attrs['stallwatch.chain.state']),
    ['opened', 'closed'],
    'an opened record, then a closed one',
  );
});
