// OTLP over TLS with the exporter spec's variables (issue #15): the receiver's CA from
// OTEL_EXPORTER_OTLP_CERTIFICATE, mutual TLS from OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE and
// OTEL_EXPORTER_OTLP_CLIENT_KEY; without the CA the receiver is not trusted and nothing is sent.
// Certificates are made with the openssl command line in a temporary directory.
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { promSum, scrape, startSession, waitFor } from './receiver.mjs';

function makeCerts(dir) {
  const ssl = (...args) => execFileSync('openssl', args, { cwd: dir, stdio: 'ignore' });
  ssl('req', '-x509', '-newkey', 'rsa:2048', '-nodes', '-days', '2', '-subj', '/CN=test-ca',
    '-keyout', 'ca.key', '-out', 'ca.crt');
  writeFileSync(join(dir, 'san.ext'), 'subjectAltName=IP:127.0.0.1\n');
  for (const [name, ext] of [['server', ['-extfile', 'san.ext']], ['client', []]]) {
    const cn = name === 'server' ? '127.0.0.1' : 'stallwatch-client';
    ssl('req', '-newkey', 'rsa:2048', '-nodes', '-subj', `/CN=${cn}`, '-keyout', `${name}.key`,
      '-out', `${name}.csr`);
    ssl('x509', '-req', '-in', `${name}.csr`, '-CA', 'ca.crt', '-CAkey', 'ca.key',
      '-CAcreateserial', '-days', '2', ...ext, '-out', `${name}.crt`);
  }
  const read = (f) => readFileSync(join(dir, f));
  return { key: read('server.key'), cert: read('server.crt'), ca: read('ca.crt') };
}

const dir = mkdtempSync(join(tmpdir(), 'stallwatch-otlp-tls-'));
const pems = makeCerts(dir);
test.after(() => rmSync(dir, { recursive: true, force: true }));

test('mutual TLS from the OTEL_* certificate variables', { timeout: 60_000 }, async (t) => {
  const { receiver } = await startSession(t, {
    receiver: { tls: { ...pems, requestCert: true } },
    args: '--window 250ms --hold',
    env: (r) => ({
      OTEL_EXPORTER_OTLP_ENDPOINT: r.url,
      OTEL_METRIC_EXPORT_INTERVAL: '300',
      OTEL_EXPORTER_OTLP_CERTIFICATE: join(dir, 'ca.crt'),
      OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE: join(dir, 'client.crt'),
      OTEL_EXPORTER_OTLP_CLIENT_KEY: join(dir, 'client.key'),
    }),
  });
  const first = await receiver.waitForRequest((r) => r.signal === 'metrics', {
    timeoutMs: 15000,
    what: 'a metrics request over mutual TLS',
  });
  assert.equal(first.clientCn, 'stallwatch-client');
  assert.ok(first.decoded, 'the body decodes as an OTLP export request');
});

test('an untrusted receiver gets nothing and the failures are counted', { timeout: 60_000 }, async (t) => {
  const { receiver, demo } = await startSession(t, {
    receiver: { tls: { ...pems, requestCert: false } },
    args: '--window 250ms --hold',
    env: (r) => ({ OTEL_EXPORTER_OTLP_ENDPOINT: r.url, OTEL_METRIC_EXPORT_INTERVAL: '300' }),
  });
  const failures = await waitFor(
    async () => {
      const s = await scrape(demo.url);
      const v = promSum(s.families, 'stallwatch_otlp_failures_total', { reason: 'connection' });
      return v >= 2 ? v : null;
    },
    { timeoutMs: 15000, intervalMs: 250, what: 'two connection failures counted' },
  );
  assert.ok(failures >= 2);
  assert.equal(receiver.requests.length, 0, 'no request passed the handshake');
  assert.ok(receiver.tlsErrors >= 1, 'the receiver saw the rejected handshakes');
});
