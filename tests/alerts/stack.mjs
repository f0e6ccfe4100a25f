// The paging stack of the alert e2e test, all on 127.0.0.1: a stand-in for the PagerDuty
// Events API v2, Debian's Prometheus loading the real alerts/stallwatch.rules.yml, and Debian's
// Alertmanager running a config generated from the real alerts/alertmanager.yml (only the
// PagerDuty URL, the secret files and the group wait changed). Every process is a child of the
// test, waited for with a bound, and killed by its PID (also when the test fails or exits).
import { spawn } from 'node:child_process';
import { accessSync, constants, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import http from 'node:http';
import { tmpdir } from 'node:os';
import { delimiter, dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { freePort, waitFor } from '../e2e/otlp/demo.mjs';

const here = dirname(fileURLToPath(import.meta.url));
export const repoRoot = resolve(here, '..', '..');
export const rulesFile = join(repoRoot, 'alerts', 'stallwatch.rules.yml');
export const alertmanagerExample = join(repoRoot, 'alerts', 'alertmanager.yml');

const FIX = 'run `bash scripts/install-deps.sh` (Debian packages prometheus, prometheus-alertmanager)';

// Children still running when the test process exits are killed, not left listening.
const live = new Set();
process.on('exit', () => {
  for (const child of live) child.kill('SIGKILL');
});

// The first executable of `names` on PATH (and /usr/bin, /usr/sbin); throws the one-line fix.
export function findTool(...names) {
  const dirs = [...(process.env.PATH || '').split(delimiter), '/usr/bin', '/usr/sbin'];
  for (const name of names) {
    for (const dir of dirs) {
      if (!dir) continue;
      const p = join(dir, name);
      try {
        accessSync(p, constants.X_OK);
        return p;
      } catch {}
    }
  }
  throw new Error(`tests/alerts: ${names.join(' or ')} not found: ${FIX}`);
}

// A child process with its output kept, its exit recorded and a bounded stop.
function startProcess(name, bin, args) {
  const child = spawn(bin, args, { stdio: ['ignore', 'pipe', 'pipe'] });
  live.add(child);
  let output = '';
  let exited = null;
  const exitedP = new Promise((res) => {
    child.on('exit', (code, signal) => {
      live.delete(child);
      exited = { code, signal };
      res(exited);
    });
    child.on('error', (e) => {
      live.delete(child);
      exited ??= { code: null, signal: null, error: e.message };
      res(exited);
    });
  });
  for (const s of [child.stdout, child.stderr]) {
    s.setEncoding('utf8');
    s.on('data', (d) => {
      output += d;
      if (output.length > 200000) output = output.slice(-100000);
    });
  }
  const proc = {
    name,
    child,
    pid: child.pid,
    argv: [bin, ...args],
    output: () => output,
    exited: () => exited,
    // SIGTERM to this PID, up to timeoutMs, then SIGKILL.
    async stop({ timeoutMs = 10000 } = {}) {
      if (exited) return exited;
      child.kill('SIGTERM');
      const timer = new Promise((r) => setTimeout(() => r(null), timeoutMs));
      if (await Promise.race([exitedP, timer])) return exited;
      child.kill('SIGKILL');
      return exitedP;
    },
  };
  return proc;
}

// Polls GET url until it answers 200; fails at once if the process exits first.
async function waitReady(proc, url, timeoutMs) {
  await waitFor(
    async () => {
      if (proc.exited()) {
        const e = new Error(
          `${proc.name} exited ${JSON.stringify(proc.exited())} before ${url} was ready:\n` +
            proc.output().slice(-3000),
        );
        e.fatal = true;
        throw e;
      }
      const res = await fetch(url, { signal: AbortSignal.timeout(2000) });
      await res.arrayBuffer();
      return res.status === 200;
    },
    { timeoutMs, intervalMs: 100, what: `${proc.name} ready at ${url}` },
  );
}

// Loopback stand-in for https://events.pagerduty.com/v2/enqueue (and the chat webhook): records
// each POST and answers as PagerDuty does, 202 with a dedup_key.
export class PagerDutyStandIn {
  constructor() {
    this.events = []; // { path, body, time } of POST /v2/enqueue
    this.chat = []; // POST /chat (the warning receiver)
    this.server = null;
    this.port = 0;
  }
  get url() {
    return `http://127.0.0.1:${this.port}`;
  }
  async start() {
    this.server = http.createServer((req, res) => {
      const chunks = [];
      req.on('data', (c) => chunks.push(c));
      req.on('end', () => {
        const raw = Buffer.concat(chunks).toString('utf8');
        if (req.method === 'POST' && req.url === '/v2/enqueue') {
          let body = null;
          try {
            body = JSON.parse(raw);
          } catch {}
          this.events.push({ path: req.url, headers: req.headers, raw, body, time: Date.now() });
          if (!body || !body.routing_key || !body.event_action) {
            res.writeHead(400, { 'content-type': 'application/json' });
            res.end(JSON.stringify({ status: 'invalid event', message: 'Event object is invalid' }));
            return;
          }
          res.writeHead(202, { 'content-type': 'application/json' });
          res.end(
            JSON.stringify({
              status: 'success',
              message: 'Event processed',
              dedup_key: body.dedup_key || `standin-${this.events.length}`,
            }),
          );
          return;
        }
        if (req.method === 'POST' && req.url === '/chat') {
          this.chat.push({ raw, time: Date.now() });
          res.writeHead(200, { 'content-type': 'text/plain' });
          res.end('ok');
          return;
        }
        res.writeHead(req.url === '/healthz' ? 200 : 404);
        res.end();
      });
    });
    await new Promise((res, rej) => {
      this.server.once('error', rej);
      this.server.listen({ host: '127.0.0.1', port: 0, exclusive: true }, res);
    });
    this.port = this.server.address().port;
    return this;
  }
  async close() {
    if (!this.server) return;
    const s = this.server;
    this.server = null;
    s.closeAllConnections();
    await new Promise((r) => s.close(r));
  }
}

// Replaces `from` (a string, exactly once) in text; a miss means the example changed shape.
function replaceOnce(text, from, to) {
  const n = text.split(from).length - 1;
  if (n !== 1)
    throw new Error(`alerts/alertmanager.yml: expected "${from}" once, found it ${n} times`);
  return text.replace(from, to);
}

// The Alertmanager config of the test: the real example, pointed at the stand-in.
export function alertmanagerConfigFor({ standInUrl, routingKeyFile, chatUrlFile }) {
  let cfg = readFileSync(alertmanagerExample, 'utf8');
  cfg = replaceOnce(
    cfg,
    'pagerduty_url: https://events.pagerduty.com/v2/enqueue',
    `pagerduty_url: ${standInUrl}/v2/enqueue`,
  );
  cfg = replaceOnce(
    cfg,
    'routing_key_file: /etc/alertmanager/pagerduty-routing-key',
    `routing_key_file: ${routingKeyFile}`,
  );
  cfg = replaceOnce(
    cfg,
    'api_url_file: /etc/alertmanager/chat-webhook-url',
    `api_url_file: ${chatUrlFile}`,
  );
  cfg = replaceOnce(cfg, 'group_wait: 30s', 'group_wait: 1s');
  cfg = replaceOnce(cfg, 'group_interval: 5m', 'group_interval: 2s');
  return cfg;
}

// The rules Prometheus loads: the real file, or a copy in `dir` whose StallwatchCriticalChain
// `for:` is `criticalFor` (its shipped 1m is kept by one paging pass and by promtool's tests;
// the other passes need not wait it out again).
function rulesFor(dir, criticalFor) {
  if (!criticalFor) return rulesFile;
  const text = readFileSync(rulesFile, 'utf8');
  const at = text.indexOf('- alert: StallwatchCriticalChain');
  const forAt = text.indexOf('for: 1m', at);
  if (at < 0 || forAt < 0 || forAt - at > 400)
    throw new Error(`tests/alerts: StallwatchCriticalChain's "for: 1m" not found in ${rulesFile}`);
  const copy = join(dir, 'stallwatch.rules.yml');
  writeFileSync(copy, `${text.slice(0, forAt)}for: ${criticalFor}${text.slice(forAt + 'for: 1m'.length)}`);
  return copy;
}

// Starts stand-in, Alertmanager and Prometheus (scraping `targets` as job "stallwatch").
// `criticalFor`: the critical chain page's `for:` in a copy of the rules (default: the file's).
// Returns { standIn, am, prom, promUrl, amUrl, routingKey, query(), stop() }.
export async function startStack({ targets, routingKey, timeoutMs = 30000, criticalFor = null }) {
  const prometheusBin = findTool('prometheus');
  const alertmanagerBin = findTool('prometheus-alertmanager', 'alertmanager');
  const dir = mkdtempSync(join(tmpdir(), 'stallwatch-alerts-e2e-'));
  const stack = { dir, standIn: null, am: null, prom: null };
  stack.stop = async () => {
    for (const p of [stack.prom, stack.am]) if (p) await p.stop();
    if (stack.standIn) await stack.standIn.close();
    rmSync(dir, { recursive: true, force: true });
  };
  try {
    stack.standIn = await new PagerDutyStandIn().start();

    const routingKeyFile = join(dir, 'pagerduty-routing-key');
    writeFileSync(routingKeyFile, `${routingKey}\n`, { mode: 0o600 });
    const chatUrlFile = join(dir, 'chat-webhook-url');
    writeFileSync(chatUrlFile, `${stack.standIn.url}/chat\n`, { mode: 0o600 });
    const amConfig = join(dir, 'alertmanager.yml');
    writeFileSync(
      amConfig,
      alertmanagerConfigFor({ standInUrl: stack.standIn.url, routingKeyFile, chatUrlFile }),
    );
    const amPort = await freePort();
    stack.amUrl = `http://127.0.0.1:${amPort}`;
    stack.am = startProcess('alertmanager', alertmanagerBin, [
      `--config.file=${amConfig}`,
      `--storage.path=${join(dir, 'am-data')}`,
      `--web.listen-address=127.0.0.1:${amPort}`,
      '--cluster.listen-address=',
      '--log.level=debug',
    ]);
    await waitReady(stack.am, `${stack.amUrl}/-/ready`, timeoutMs);

    const promConfig = join(dir, 'prometheus.yml');
    writeFileSync(
      promConfig,
      [
        'global:',
        '  scrape_interval: 1s',
        '  scrape_timeout: 1s',
        '  evaluation_interval: 1s',
        'rule_files:',
        `  - ${JSON.stringify(rulesFor(dir, criticalFor))}`,
        'alerting:',
        '  alertmanagers:',
        '    - static_configs:',
        `        - targets: ["127.0.0.1:${amPort}"]`,
        'scrape_configs:',
        '  - job_name: stallwatch',
        '    honor_labels: true',
        '    static_configs:',
        `      - targets: ${JSON.stringify(targets)}`,
        '',
      ].join('\n'),
    );
    const promPort = await freePort();
    stack.promUrl = `http://127.0.0.1:${promPort}`;
    stack.prom = startProcess('prometheus', prometheusBin, [
      `--config.file=${promConfig}`,
      `--storage.tsdb.path=${join(dir, 'prom-data')}`,
      `--web.listen-address=127.0.0.1:${promPort}`,
    ]);
    await waitReady(stack.prom, `${stack.promUrl}/-/ready`, timeoutMs);
  } catch (e) {
    await stack.stop();
    throw e;
  }
  // Instant query through the HTTP API; returns the result vector.
  stack.query = async (q) => {
    const res = await fetch(`${stack.promUrl}/api/v1/query?query=${encodeURIComponent(q)}`, {
      signal: AbortSignal.timeout(5000),
    });
    const body = await res.json();
    if (body.status !== 'success') throw new Error(`query ${q}: ${JSON.stringify(body)}`);
    return body.data.result;
  };
  stack.get = async (path) => {
    const res = await fetch(`${stack.promUrl}${path}`, { signal: AbortSignal.timeout(5000) });
    return res.json();
  };
  stack.logs = () =>
    `--- prometheus:\n${stack.prom.output().slice(-4000)}\n--- alertmanager:\n${stack.am
      .output()
      .slice(-4000)}`;
  return stack;
}
