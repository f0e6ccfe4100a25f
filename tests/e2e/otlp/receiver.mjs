// Loopback OTLP/HTTP receiver and the helpers the e2e OTLP tests share.
//
// The decoder is independent of stallwatch: the protobufjs classes the OpenTelemetry JS SDK
// ships (@opentelemetry/otlp-transformer, pinned in package.json), generated from the official
// opentelemetry-proto schema. Everything listens on 127.0.0.1 and every wait has a bound.
//
// Owns OtlpReceiver (records every request, answers from a plan, goes down and comes back on the
// same port) and startSession; re-exports the helpers of proto.mjs (decoding, naming rule),
// prometheus.mjs (exposition parsing, scrapes) and demo.mjs (bounded waits, the demo process),
// so a test imports one module. One event loop: nothing here is shared across threads.
import { decodeLogs, decodeMetrics, proto } from './proto.mjs'; // first: it checks node_modules
import { createHash } from 'node:crypto';
import http from 'node:http';
import https from 'node:https';
import { gunzipSync } from 'node:zlib';
import { startDemo, stopDemo, waitFor } from './demo.mjs';

export * from './proto.mjs';
export * from './prometheus.mjs';
export * from './demo.mjs';

const MetricsResponse = proto.collector.metrics.v1.ExportMetricsServiceResponse;
const LogsResponse = proto.collector.logs.v1.ExportLogsServiceResponse;

// A plan step says how to answer one request:
//   { status: 200 }                              (the default: an empty Export*ServiceResponse)
//   { status: 429, retryAfter: '2', body: 'x' }  any status, optional Retry-After and body
//   { delayMs: 3000, status: 200 }               wait, then answer (unless the client left)
//   { destroy: true }                            drop the connection without answering
// `path` (e.g. '/v1/metrics') restricts a step to that exact path; steps are used in order,
// each once; when none matches, `defaultStep` answers. Add steps with planStep().
export class OtlpReceiver {
  // tls: { key, cert, ca, requestCert } (PEM buffers) serves https; with requestCert the
  // handshake fails unless the client presents a certificate signed by `ca`.
  constructor({ port = 0, tls = null } = {}) {
    this.port = port;
    this.tls = tls;
    this.requests = [];
    this.plan = [];
    this.defaultStep = { status: 200 };
    this.sockets = new Set();
    this.server = null;
    this.waiters = new Set();
  }

  get url() {
    return `${this.tls ? 'https' : 'http'}://127.0.0.1:${this.port}`;
  }
  get isUp() {
    return this.server !== null;
  }

  async start() {
    return this.up();
  }

  // Listens (again) on this.port; after down() the same port is reused.
  async up() {
    if (this.server) return this;
    const onRequest = (req, res) => this.#onRequest(req, res);
    const server = this.tls
      ? https.createServer(
          { ...this.tls, rejectUnauthorized: Boolean(this.tls.requestCert) },
          onRequest,
        )
      : http.createServer(onRequest);
    this.tlsErrors = 0;
    server.on('tlsClientError', () => this.tlsErrors++);
    server.keepAliveTimeout = 65000; // longer than any push interval: no close races with reuse
    server.on('connection', (s) => {
      this.sockets.add(s);
      s.on('close', () => this.sockets.delete(s));
    });
    await new Promise((resolve, reject) => {
      server.once('error', reject);
      server.listen({ host: '127.0.0.1', port: this.port, exclusive: true }, () => {
        server.off('error', reject);
        resolve();
      });
    });
    this.port = server.address().port;
    this.server = server;
    return this;
  }

  // Closes the listening socket and every connection: the daemon sees refused connections.
  async down() {
    const server = this.server;
    if (!server) return;
    this.server = null;
    const closed = new Promise((resolve) => server.close(() => resolve()));
    for (const s of this.sockets) s.destroy();
    this.sockets.clear();
    await closed;
  }

  async close() {
    await this.down();
    for (const w of this.waiters) w.reject(new Error('receiver closed'));
    this.waiters.clear();
  }

  metrics() {
    return this.requests.filter((r) => r.signal === 'metrics');
  }
  logs() {
    return this.requests.filter((r) => r.signal === 'logs');
  }

  // Resolves with the first request (recorded from index `from` on) that satisfies pred.
  waitForRequest(pred, { timeoutMs = 10000, from = 0, what = 'a matching request' } = {}) {
    const hit = () => this.requests.slice(from).find(pred);
    return waitFor(hit, { timeoutMs, intervalMs: 50, what: `receiver: ${what}` });
  }

  // Adds a step to the plan. Before a `destroy` step, idle keep-alive connections are closed and
  // answers say `Connection: close`, so the step lands on a fresh connection: on a reused one
  // libcurl silently re-sends the request and the client would never see the failure.
  planStep(step) {
    this.plan.push(step);
    if (step.destroy && this.server) this.server.closeIdleConnections();
    return step;
  }

  #step(path) {
    const i = this.plan.findIndex((s) => !s.path || s.path === path);
    if (i < 0) return this.defaultStep;
    return this.plan.splice(i, 1)[0];
  }

  #onRequest(req, res) {
    const chunks = [];
    req.on('data', (c) => chunks.push(c));
    req.on('error', () => {});
    req.on('end', () => {
      const raw = Buffer.concat(chunks);
      const record = {
        path: req.url,
        // By the path's end, so endpoints used as they are (.../custom/v1/metrics) decode too.
        signal: /\/metrics$/.test(req.url) ? 'metrics' : /\/logs$/.test(req.url) ? 'logs' : null,
        method: req.method,
        // The client certificate's subject CN over mutual TLS, else null.
        clientCn: req.socket.getPeerCertificate ? req.socket.getPeerCertificate()?.subject?.CN ?? null : null,
        headers: { ...req.headers },
        rawLength: raw.length,
        bodyLength: 0,
        sha256: '',
        decoded: null,
        error: null,
        time: Date.now(),
        answer: null,
      };
      try {
        const body = /gzip/i.test(req.headers['content-encoding'] || '') ? gunzipSync(raw) : raw;
        record.bodyLength = body.length;
        record.sha256 = createHash('sha256').update(body).digest('hex');
        if (record.signal === 'metrics') record.decoded = decodeMetrics(body);
        else if (record.signal === 'logs') record.decoded = decodeLogs(body);
        else record.error = `unexpected path ${req.url}`;
      } catch (e) {
        record.error = `decode: ${e.message}`;
      }
      const step = this.#step(req.url);
      record.answer = step;
      this.requests.push(record);
      const answer = () => {
        if (step.destroy) {
          req.socket.destroy();
          return;
        }
        if (res.destroyed || req.socket.destroyed) return;
        const status = step.status ?? 200;
        const headers = {};
        let payload;
        if (step.body !== undefined) {
          payload = Buffer.from(step.body);
          headers['content-type'] = 'text/plain';
        } else if (status === 200) {
          const R = record.signal === 'logs' ? LogsResponse : MetricsResponse;
          payload = Buffer.from(R.encode(R.create({})).finish());
          headers['content-type'] = 'application/x-protobuf';
        } else {
          payload = Buffer.alloc(0);
        }
        if (step.retryAfter !== undefined) headers['retry-after'] = String(step.retryAfter);
        if (this.plan.some((x) => x.destroy)) headers.connection = 'close';
        headers['content-length'] = payload.length;
        res.writeHead(status, headers);
        res.end(payload);
      };
      if (step.delayMs) {
        const t = setTimeout(answer, step.delayMs);
        req.socket.once('close', () => clearTimeout(t));
      } else {
        answer();
      }
    });
  }
}

// A receiver and a demo pushing to it, both torn down after test t (demo first, so its last
// push on shutdown still finds the receiver). args: an array or one string split on spaces, where
// the word {receiver} stands for the receiver's URL; env: an object or a function of the receiver.
export async function startSession(
  t,
  { receiver: receiverOpts = {}, args = [], env = {}, ...demoOpts } = {},
) {
  const receiver = await new OtlpReceiver(receiverOpts).start();
  let demo;
  try {
    // OTLP's explicit histograms carry every power of two; /metrics' classic ladder is every
    // second one by default (issue #37): the tests compare them bucket by bucket, so /metrics
    // here has the OTLP ladder.
    const list = typeof args === 'string' ? args.trim().split(/\s+/) : args;
    demo = await startDemo({
      ...demoOpts,
      args: [...list, '--metrics.histogram-ladder', 'x2'].map((a) =>
        a === '{receiver}' ? receiver.url : a,
      ),
      env: typeof env === 'function' ? env(receiver) : env,
    });
  } catch (e) {
    await receiver.close();
    throw e;
  }
  t.after(async () => {
    const stopped = await stopDemo(demo);
    await receiver.close();
    const err = demo.stderr().trim().split('\n').filter(Boolean).slice(-15);
    if (err.length) t.diagnostic('stallwatch stderr (last lines):');
    for (const line of err) t.diagnostic(`  ${line}`);
    if (stopped.killed) t.diagnostic('stallwatch did not stop on SIGTERM within 10 s: killed');
  });
  return { receiver, demo };
}
