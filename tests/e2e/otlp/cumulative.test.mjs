// Cumulative push with explicit histograms: a push equals /metrics of the same window, family by
// family and bucket by bucket; resources carry the workload and the host; starts stay put.
import assert from 'node:assert/strict';
import os from 'node:os';
import { test } from 'node:test';
import {
  assertSameWindow,
  checkInvariants,
  otlpKey,
  pairPushWithScrape,
  pointsOf,
  accepted,
} from './compare.mjs';
import { CUMULATIVE, promValue, startSession } from './receiver.mjs';

test(
  'cumulative, explicit histograms: the push of a window equals /metrics of that window',
  { timeout: 120_000 },
  async (t) => {
    const { receiver, demo } = await startSession(t, {
      args:
        '--window 1s --hold --otlp-endpoint {receiver} --otlp-interval 500ms ' +
        '--otlp-temporality cumulative --otlp-histogram explicit',
    });
    // The incident opens its chain after ~8 windows: wait for a window that has it.
    const pair = await pairPushWithScrape(receiver, demo.url, {
      timeoutMs: 30000,
      accept: (s) => s.families.get('stallwatch_chains_total')?.samples.length > 0,
    });
    t.diagnostic(`matched window ${pair.sequence}: ${pair.points.length} points`);

    await t.test('every family of /metrics has its OTLP counterpart with equal values', () => {
      assertSameWindow(pair.scrape.families, pair.points, {
        histogram: 'explicit',
        temporality: CUMULATIVE,
      });
    });

    await t.test('names, units and kinds of the issue', () => {
      const metric = (name) => {
        const p = pair.points.find((x) => x.metric.name === name);
        assert.ok(p, `metric ${name} in the push`);
        return p.metric;
      };
      assert.deepEqual(
        (({ unit, kind, temporality }) => ({ unit, kind, temporality }))(
          metric('stallwatch.cuda.call.duration'),
        ),
        { unit: 's', kind: 'histogram', temporality: CUMULATIVE },
      );
      assert.deepEqual(
        (({ unit, kind, temporality, monotonic }) => ({ unit, kind, temporality, monotonic }))(
          metric('stallwatch.cuda.call.offcpu'),
        ),
        { unit: 's', kind: 'sum', temporality: CUMULATIVE, monotonic: true },
      );
      assert.deepEqual((({ unit, kind }) => ({ unit, kind }))(metric('stallwatch.offcpu.ratio')), {
        unit: '1',
        kind: 'gauge',
      });
      const chains = metric('stallwatch.chains');
      assert.equal(chains.kind, 'sum');
      assert.equal(chains.monotonic, true);
      assert.equal(chains.temporality, CUMULATIVE);
      for (const p of pair.points) {
        assert.doesNotMatch(p.metric.name, /_/, `${p.metric.name}: dotted name`);
      }
    });

    await t.test('resources: the workload per cgroup, the host without one', () => {
      const families = pair.scrape.families;
      // The cgroup paths of the workloads in /metrics: on their info series (issue #37).
      const cgroups = new Set(
        families
          .get('stallwatch_cgroup_info')
          .samples.map((s) => s.labels.cgroup)
          .filter(Boolean),
      );
      assert.ok(cgroups.size > 0, 'a cgroup label in /metrics');
      const version = families.get('stallwatch_build_info').samples[0].labels.version;
      const resources = new Map(pair.points.map((p) => [JSON.stringify(p.resource), p.resource]));
      for (const r of resources.values()) {
        assert.equal(r['host.name'], os.hostname(), 'host.name');
        assert.equal(r['service.name'], 'stallwatch', 'service.name');
        assert.equal(
          r['service.version'],
          version,
          'service.version = stallwatch_build_info{version}',
        );
      }
      const workloads = [...resources.values()].filter((r) => r['stallwatch.cgroup'] !== undefined);
      assert.ok(
        workloads.some((r) => cgroups.has(r['stallwatch.cgroup'])),
        `a resource with stallwatch.cgroup among ${[...cgroups].join(', ')}`,
      );
      const byCgroup = new Set(workloads.map((r) => r['stallwatch.cgroup']));
      assert.equal(byCgroup.size, workloads.length, 'one resource per workload');
      for (const name of [
        'stallwatch.build.info',
        'stallwatch.events.lost',
        'stallwatch.snapshot.sequence',
      ]) {
        const ps = pair.points.filter((p) => p.metric.name === name);
        assert.ok(ps.length > 0, `${name} pushed`);
        for (const p of ps) {
          assert.equal(p.resource['stallwatch.cgroup'], undefined, `${name}: host-level resource`);
        }
      }
      const hostResources = [...resources.values()].filter(
        (r) => r['stallwatch.cgroup'] === undefined,
      );
      assert.equal(hostResources.length, 1, 'one host-level ResourceMetrics');
      const info = families.get('stallwatch_cgroup_info')?.samples.find((s) => s.labels.pod_uid);
      if (info) {
        const r = workloads.find((x) => x['stallwatch.cgroup'] === info.labels.cgroup);
        assert.equal(
          r?.['k8s.pod.uid'],
          info.labels.pod_uid,
          'k8s.pod.uid from stallwatch_cgroup_info',
        );
      }
    });

    await t.test(
      'cumulative starts: at the daemon start (or the series birth), the same every push',
      () => {
        const points = pointsOf(accepted(receiver.metrics()));
        const bySeries = new Map();
        for (const p of points) {
          if (p.metric.kind === 'gauge') continue;
          if (!bySeries.has(p.key)) bySeries.set(p.key, []);
          bySeries.get(p.key).push(p.point);
        }
        assert.ok(bySeries.size > 0);
        const spawnedNs = BigInt(demo.spawnedAt) * 1_000_000n;
        const firstTime = points
          .map((p) => BigInt(p.point.timeUnixNano))
          .reduce((a, b) => (a < b ? a : b));
        let fromStart = 0;
        for (const [key, ps] of bySeries) {
          const starts = new Set(ps.map((p) => p.startTimeUnixNano));
          assert.equal(
            starts.size,
            1,
            `${key}: one start time over ${ps.length} pushes, saw ${[...starts]}`,
          );
          const start = BigInt(ps[0].startTimeUnixNano ?? 0);
          assert.ok(
            start >= spawnedNs - 1_000_000_000n,
            `${key}: start ${start} before the daemon was started (${spawnedNs})`,
          );
          for (const p of ps) assert.ok(start < BigInt(p.timeUnixNano), `${key}: start < time`);
          if (start < firstTime) fromStart++;
        }
        assert.ok(fromStart > 0, 'series present from the start start before the first push');
        const seq = points
          .filter((p) => p.metric.name === 'stallwatch.snapshot.sequence')
          .map((p) => [BigInt(p.point.timeUnixNano), p.point.asDouble]);
        for (let i = 1; i < seq.length; i++) {
          assert.ok(seq[i][0] > seq[i - 1][0], 'push times increase');
          assert.ok(seq[i][1] > seq[i - 1][1], 'snapshot sequences increase');
        }
      },
    );

    await t.test('every request: protobuf, gzip, <= 500 KB, no series twice at one time', () => {
      checkInvariants(receiver);
      assert.ok(receiver.logs().length > 0, 'the chain went out on /v1/logs');
    });
    assert.ok(promValue(pair.scrape.families, 'stallwatch_snapshot_sequence') === pair.sequence);
  },
);
