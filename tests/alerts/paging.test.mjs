// End to end, the paging path of issue 6 with the real programs on 127.0.0.1:
//   stallwatch demo --hold  ->  Prometheus (alerts/stallwatch.rules.yml, 1 s scrape and eval)
//   ->  Alertmanager (alerts/alertmanager.yml, pointed at a loopback PagerDuty stand-in).
// A critical chain must page with the routing key, severity, chain kind and workload; a healthy
// job must page nobody. Run: STALLWATCH_BIN=build/stallwatch node --test tests/alerts/
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { startDemo, stopDemo, waitFor } from '../e2e/otlp/demo.mjs';
import { scrape } from '../e2e/otlp/prometheus.mjs';
import { startStack } from './stack.mjs';

const ROUTING_KEY = 'e2e0stallwatch0routing0key000001'; // 32 characters, like a real one
const DEMO_ARGS = ['--window', '1s', '--db', 'none', '--hold'];

function elapsed(t0) {
  return `${((Date.now() - t0) / 1000).toFixed(1)} s`;
}

// At the defaults, and under the lean setting a fleet may choose (issue #37): the series carry
// only the workload key and the pages still name the pod and the cgroup, from the info series.
for (const settings of [[], ['--metrics.identity-labels', 'none', '--metrics.histogram-ladder', 'x16']]) {
test(`a critical cpu_contention chain pages PagerDuty with its kind and workload${settings.length ? ` (${settings.join(' ')})` : ''}`, async (t) => {
  const t0 = Date.now();
  let demo = null;
  let stack = null;
  try {
    demo = await startDemo({ scenario: 'incident', args: [...DEMO_ARGS, ...settings] });
    // The default pass waits out the shipped 1m `for`; the lean pass tests the labels with a
    // 5s one (the rule's `for` is the same file's, checked by promtool test rules).
    stack = await startStack({
      targets: [`127.0.0.1:${demo.port}`],
      routingKey: ROUTING_KEY,
      criticalFor: settings.length ? '5s' : null,
    });
    t.diagnostic(`stack ready after ${elapsed(t0)}`);

    // The chain as the daemon serves it: the workload labels the page must carry.
    // Its identity is the workload's info series (the chain's own series carries the key, and
    // the Kubernetes names unless a setting leaves them off).
    let info = null;
    const chain = await waitFor(
      async () => {
        const { families } = await scrape(demo.url);
        const fam = families.get('stallwatch_chain_active');
        const c = fam?.samples.find((s) => s.labels.severity === 'critical' && s.value > 0);
        info = families.get('stallwatch_cgroup_info')?.samples.find((s) => s.labels.workload === c?.labels.workload);
        return info && c;
      },
      { timeoutMs: 40000, intervalMs: 250, what: 'a critical chain in the demo /metrics' },
    );
    assert.equal(chain.labels.kind, 'cpu_contention');
    assert.equal(chain.labels.cgroup, undefined, 'the cgroup path is on the info series only');
    assert.equal(chain.labels.container_id, undefined, 'the container id is on the info series only');
    assert.equal(chain.labels.pod, settings.length ? undefined : info.labels.pod);
    t.diagnostic(`chain open in /metrics after ${elapsed(t0)}: workload ${chain.labels.workload}, cgroup ${info.labels.cgroup}`);

    // Prometheus: pending, then firing after the rule's `for`.
    const firing = await waitFor(
      async () => {
        const r = await stack.query(
          'ALERTS{alertname="StallwatchCriticalChain",alertstate="firing"}',
        );
        return r.length ? r : null;
      },
      { timeoutMs: 120000, intervalMs: 500, what: 'StallwatchCriticalChain firing in Prometheus' },
    ).catch((e) => {
      throw new Error(`${e.message}\n${stack.logs()}`);
    });
    t.diagnostic(`alert firing in Prometheus after ${elapsed(t0)}`);
    assert.equal(firing.length, 1, JSON.stringify(firing));
    const labels = firing[0].metric;
    assert.equal(labels.severity, 'critical');
    assert.equal(labels.chain_severity, 'critical');
    assert.equal(labels.kind, 'cpu_contention');
    assert.equal(labels.workload, chain.labels.workload);
    assert.equal(labels.cgroup, info.labels.cgroup);
    assert.equal(labels.job, 'stallwatch');
    for (const k of ['container_id', 'pod', 'namespace', 'container'])
      assert.equal(labels[k], info.labels[k], `label ${k} flows from the info series into the alert`);

    // Alertmanager -> the PagerDuty stand-in: an Events v2 trigger.
    const event = await waitFor(
      () => stack.standIn.events.find((e) => e.body?.event_action === 'trigger'),
      { timeoutMs: 30000, intervalMs: 100, what: 'an Events v2 trigger at the PagerDuty stand-in' },
    ).catch((e) => {
      throw new Error(`${e.message}\n${stack.logs()}`);
    });
    t.diagnostic(`PagerDuty trigger received after ${elapsed(t0)}`);
    const body = event.body;
    t.diagnostic(`PagerDuty event: ${JSON.stringify(body)}`);
    assert.equal(body.routing_key, ROUTING_KEY);
    assert.match(body.dedup_key, /^[0-9a-f]{64}$/, 'Alertmanager dedup key');
    assert.equal(body.payload.severity, 'critical');
    assert.match(body.payload.summary, /^Critical cpu_contention chain open on /);
    assert.equal(body.payload.source, `127.0.0.1:${demo.port}`);
    assert.equal(body.payload.class, 'StallwatchCriticalChain');
    assert.equal(body.payload.component, 'cpu_contention');
    const details = body.payload.custom_details;
    assert.equal(details.kind, 'cpu_contention');
    assert.equal(details.severity, 'critical');
    assert.equal(details.num_firing, '1');
    assert.equal(details.cgroup, info.labels.cgroup);
    assert.equal(details.container_id, info.labels.container_id ?? '');
    assert.equal(details.pod, info.labels.pod ?? '');
    assert.equal(details.namespace, info.labels.namespace ?? '');
    assert.equal(details.explain, `stallwatch explain --since 1h --cgroup ${info.labels.cgroup}`);
    assert.match(details.description, /cpu_contention chain\(s\) open at severity critical/);
    assert.match(details.description, /runnable but off-CPU \d+% of the last window/);
    assert.equal(
      details.runbook,
      'https://github.com/stallwatch/stallwatch/blob/main/docs/runbooks/StallwatchCriticalChain.md',
    );
    assert.deepEqual(body.links, [{ href: details.runbook, text: 'runbook' }]);
    // Warnings of the same workload (its runnable off-CPU ratio) are inhibited or not yet due;
    // nothing else was paged.
    assert.ok(
      stack.standIn.events.every((e) => e.body?.payload?.class === 'StallwatchCriticalChain'),
      JSON.stringify(stack.standIn.events.map((e) => e.body?.payload?.class)),
    );
  } finally {
    if (stack) await stack.stop();
    if (demo) await stopDemo(demo);
    t.diagnostic(`total ${elapsed(t0)}`);
  }
});
}

test('a healthy GPU-bound job pages nobody', async (t) => {
  const t0 = Date.now();
  let demo = null;
  let stack = null;
  try {
    demo = await startDemo({ scenario: 'healthy', args: DEMO_ARGS });
    stack = await startStack({ targets: [`127.0.0.1:${demo.port}`], routingKey: ROUTING_KEY });
    const observedFrom = Date.now() / 1000;

    // Observe until Prometheus has 20 successful scrapes of the demo and has seen it past its
    // whole story (12 windows; the incident opens its chain at window 8) — checking ALERTS
    // (pending included, so a `for` cannot hide a chain) at every step.
    const assertNoCritical = async () => {
      const alerts = await stack.query('ALERTS{severity="critical"}');
      assert.deepEqual(alerts, [], `critical alert on a healthy job: ${JSON.stringify(alerts)}`);
      const chains = await stack.query('stallwatch_chain_active > 0');
      assert.deepEqual(chains, [], `chain open on a healthy job: ${JSON.stringify(chains)}`);
      assert.deepEqual(stack.standIn.events, [], 'nobody is paged');
    };
    await waitFor(
      async () => {
        try {
          await assertNoCritical();
        } catch (err) {
          err.fatal = true;
          throw err;
        }
        const scrapes = await stack.query('sum_over_time(up{job="stallwatch"}[5m])');
        const seq = await stack.query('max_over_time(stallwatch_snapshot_sequence[5m])');
        return scrapes.length && Number(scrapes[0].value[1]) >= 20 && seq.length &&
          Number(seq[0].value[1]) >= 16;
      },
      { timeoutMs: 60000, intervalMs: 500, what: '20 scrapes and 16 windows of the healthy demo' },
    );
    // The rules were evaluated during the observation, without errors.
    const rules = await stack.get('/api/v1/rules');
    const chainRule = rules.data.groups
      .flatMap((g) => g.rules)
      .find((r) => r.name === 'StallwatchCriticalChain');
    assert.ok(chainRule, 'StallwatchCriticalChain loaded');
    assert.equal(chainRule.health, 'ok', chainRule.lastError);
    assert.equal(chainRule.state, 'inactive');
    assert.ok(Date.parse(chainRule.lastEvaluation) / 1000 > observedFrom + 10, chainRule.lastEvaluation);
    const up = await stack.query('up{job="stallwatch"}');
    assert.equal(up.length, 1);
    assert.equal(up[0].value[1], '1');
    // Alertmanager got nothing either (no alert at all: the healthy job has no warning).
    const res = await fetch(`${stack.amUrl}/api/v2/alerts`, { signal: AbortSignal.timeout(5000) });
    const amAlerts = await res.json();
    assert.deepEqual(amAlerts.filter((a) => a.labels.severity === 'critical'), []);
    await assertNoCritical();
    t.diagnostic(`observed ${elapsed(t0)} without a page`);
  } finally {
    if (stack) await stack.stop();
    if (demo) await stopDemo(demo);
    t.diagnostic(`total ${elapsed(t0)}`);
  }
});

// Inhibition (alerts/alertmanager.yml), posted straight to the real Alertmanager: a workload's
// page silences that workload's warnings on the node and nothing else; a critical alert that
// names no workload (StallwatchGpuXid is about a GPU) silences no node warning, since lost
// events and a daemon going down must still reach someone during a GPU fault.
test('a workload page inhibits only its own warnings; a GPU Xid page inhibits none', async (t) => {
  let stack = null;
  try {
    stack = await startStack({ targets: [], routingKey: ROUTING_KEY });
    const startsAt = new Date().toISOString();
    const endsAt = new Date(Date.now() + 10 * 60 * 1000).toISOString();
    const alert = (labels) => ({
      labels: { instance: 'gpu-node-1:9464', job: 'stallwatch', ...labels },
      startsAt,
      endsAt,
    });
    const sent = [
      alert({ alertname: 'StallwatchCriticalChain', severity: 'critical', cgroup: '/kubepods/pod-a' }),
      alert({ alertname: 'StallwatchOffCpuRunnableHigh', severity: 'warning', cgroup: '/kubepods/pod-a' }),
      alert({ alertname: 'StallwatchOffCpuRunnableHigh', severity: 'warning', cgroup: '/kubepods/pod-b' }),
      alert({ alertname: 'StallwatchGpuXid', severity: 'critical', gpu: '0', xid: '79' }),
      alert({ alertname: 'StallwatchEventsLost', severity: 'warning' }),
    ];
    const res = await fetch(`${stack.amUrl}/api/v2/alerts`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify(sent),
      signal: AbortSignal.timeout(5000),
    });
    assert.equal(res.status, 200, await res.text());
    const key = (a) => `${a.labels.alertname}${a.labels.cgroup ? ` ${a.labels.cgroup}` : ''}`;
    // The inhibitor catches up asynchronously: wait until the pod-a warning shows inhibited.
    const got = await waitFor(
      async () => {
        const r = await fetch(`${stack.amUrl}/api/v2/alerts`, { signal: AbortSignal.timeout(5000) });
        const alerts = await r.json();
        const podA = alerts.find((a) => key(a) === 'StallwatchOffCpuRunnableHigh /kubepods/pod-a');
        return alerts.length === sent.length && podA?.status?.inhibitedBy?.length ? alerts : null;
      },
      { timeoutMs: 30000, intervalMs: 250, what: 'the workload warning inhibited by its page' },
    ).catch((e) => {
      throw new Error(`${e.message}\n${stack.logs()}`);
    });
    const inhibited = Object.fromEntries(got.map((a) => [key(a), a.status.inhibitedBy.length > 0]));
    t.diagnostic(JSON.stringify(inhibited));
    assert.deepEqual(inhibited, {
      'StallwatchCriticalChain /kubepods/pod-a': false,
      'StallwatchOffCpuRunnableHigh /kubepods/pod-a': true,
      'StallwatchOffCpuRunnableHigh /kubepods/pod-b': false,
      StallwatchGpuXid: false,
      StallwatchEventsLost: false,
    });
  } finally {
    if (stack) await stack.stop();
  }
});
