// `stallwatch demo` as a child process of a test, and the bounded wait every test uses.
import { spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import net from 'node:net';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const here = dirname(fileURLToPath(import.meta.url));

// Demos still running when the test process exits (a failed assertion before the teardown, an
// uncaught error) are killed rather than left listening.
const live = new Set();
process.on('exit', () => {
  for (const child of live) child.kill('SIGKILL');
});

// Polls fn until it returns a truthy value (or a promise of one); fails after timeoutMs with a
// message naming what was awaited. An error fn throws with .fatal set ends the wait at once.
export async function waitFor(
  fn,
  { timeoutMs = 10000, intervalMs = 100, what = 'condition' } = {},
) {
  const deadline = Date.now() + timeoutMs;
  let lastError = null;
  for (;;) {
    try {
      const v = await fn();
      if (v) return v;
    } catch (e) {
      if (e.fatal) throw e;
      lastError = e;
    }
    if (Date.now() >= deadline) {
      const why = lastError ? ` (last error: ${lastError.message})` : '';
      throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}${why}`);
    }
    await new Promise((r) => setTimeout(r, intervalMs));
  }
}

export function stallwatchBin() {
  const bin = process.env.STALLWATCH_BIN || join(here, '..', '..', '..', 'build', 'stallwatch');
  if (!existsSync(bin))
    throw new Error(`stallwatch binary not found at ${bin} (set STALLWATCH_BIN)`);
  return bin;
}

// A free port on 127.0.0.1 (bound, read, closed: the daemon takes it right after).
export async function freePort() {
  const srv = net.createServer();
  await new Promise((resolve, reject) => {
    srv.once('error', reject);
    srv.listen({ host: '127.0.0.1', port: 0 }, resolve);
  });
  const { port } = srv.address();
  await new Promise((r) => srv.close(r));
  return port;
}

// Environment without any OTEL_* variable of the caller, plus `env`.
function cleanEnv(env) {
  const out = {};
  for (const [k, v] of Object.entries(process.env)) if (!k.startsWith('OTEL_')) out[k] = v;
  return { ...out, ...env };
}

// Starts `stallwatch demo SCENARIO --listen 127.0.0.1:PORT ...args` and resolves once it prints
// "serving http://ADDR/metrics". Returns { child, url, port, output(), stdout(), stderr() }.
export async function startDemo({
  scenario = 'incident',
  args = [],
  env = {},
  timeoutMs = 15000,
} = {}) {
  const port = await freePort();
  const spawnedAt = Date.now();
  const argv = ['demo', scenario, '--listen', `127.0.0.1:${port}`, ...args];
  const child = spawn(stallwatchBin(), argv, {
    env: cleanEnv(env),
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  live.add(child);
  child.on('exit', () => live.delete(child));
  let stdout = '';
  let stderr = '';
  let exited = null;
  child.stdout.setEncoding('utf8');
  child.stderr.setEncoding('utf8');
  child.stdout.on('data', (d) => (stdout += d));
  child.stderr.on('data', (d) => (stderr += d));
  // 'exit', or 'error' alone when the binary could not be started (EACCES, ENOENT).
  const exitedP = new Promise((resolve) => {
    child.on('exit', (code, signal) => {
      exited = { code, signal };
      resolve(exited);
    });
    child.on('error', (e) => {
      exited ??= { code: null, signal: null, error: e.message };
      resolve(exited);
    });
  });
  const demo = {
    child,
    port,
    argv,
    spawnedAt,
    url: `http://127.0.0.1:${port}`,
    stdout: () => stdout,
    stderr: () => stderr,
    output: () => stdout + stderr,
    exited: () => exited,
    exitedP,
  };
  try {
    await waitFor(
      () => {
        if (exited) {
          const e = new Error(
            `stallwatch ${argv.join(' ')} exited ${JSON.stringify(exited)} ` +
              `before serving:\n${(stdout + stderr).slice(-2000)}`,
          );
          e.fatal = true;
          throw e;
        }
        return /serving http:\/\/\S+\/metrics/.test(stdout + stderr);
      },
      { timeoutMs, intervalMs: 50, what: `"serving" from stallwatch ${argv.join(' ')}` },
    );
  } catch (e) {
    await stopDemo(demo);
    throw e;
  }
  return demo;
}

// SIGTERM, wait up to timeoutMs, then SIGKILL. Resolves with { code, signal, killed }.
export async function stopDemo(demo, { timeoutMs = 10000 } = {}) {
  if (!demo) return null;
  if (demo.exited()) return { ...demo.exited(), killed: false };
  demo.child.kill('SIGTERM');
  const timer = new Promise((r) => setTimeout(() => r(null), timeoutMs));
  const res = await Promise.race([demo.exitedP, timer]);
  if (res) return { ...res, killed: false };
  demo.child.kill('SIGKILL');
  const after = await demo.exitedP;
  return { ...after, killed: true };
}
