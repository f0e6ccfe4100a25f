// Offline validation of deploy/kubernetes (the base and the operator overlay, file by file), no
// cluster and no kubectl needed (helm.test.mjs checks what kustomize and Helm render):
// - every document against the Kubernetes and Prometheus Operator schemas, and no field the
//   API does not know (schemas.mjs: ajv, and tsc's excess-property check);
// - the properties the deployment relies on (hostPID, capabilities instead of privileged, the
//   host mounts, /healthz probes, NODE_NAME, the ServiceMonitor's interval, honorLabels and
//   job label, RBAC limited to reading pods, the PrometheusRule's groups equal
//   alerts/stallwatch.rules.yml);
// - and that the checker itself rejects broken manifests.
// Run: cd tests/deploy && node --test kubernetes.test.mjs   (packages: scripts/install-deps.sh)
import { test } from "node:test";
import assert from "node:assert/strict";
import { readdirSync } from "node:fs";
import { spawnSync } from "node:child_process";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { parseFile, schemaErrors, typeErrors } from "./schemas.mjs";

const here = path.dirname(fileURLToPath(import.meta.url));
const repo = path.resolve(here, "../..");
const k8sDir = path.join(repo, "deploy/kubernetes");
const rulesFile = path.join(repo, "alerts/stallwatch.rules.yml");

// The files each kustomization lists (the overlay's `../base` is a directory, not a file).
const layers = ["base", "operator"].map((dir) => {
  const k = parseFile(path.join(k8sDir, dir, "kustomization.yaml"))[0];
  return { dir, files: k.resources.filter((r) => /\.ya?ml$/.test(r)), bases: k.resources
    .filter((r) => !/\.ya?ml$/.test(r)) };
});
const objects = layers.flatMap(({ dir, files }) => files.flatMap((f) =>
  parseFile(path.join(k8sDir, dir, f)).map((o) => ({ f: `${dir}/${f}`, o }))));
const find = (kind) => {
  const found = objects.filter(({ o }) => o.kind === kind).map(({ o }) => o);
  assert.equal(found.length, 1, `exactly one ${kind}`);
  return found[0];
};

test("each kustomization lists every manifest beside it, and the overlay builds on the base", () => {
  assert.deepEqual(readdirSync(k8sDir).sort(), ["base", "operator"]);
  for (const { dir, files } of layers) {
    const onDisk = readdirSync(path.join(k8sDir, dir))
      .filter((f) => /\.ya?ml$/.test(f) && f !== "kustomization.yaml");
    assert.deepEqual([...files].sort(), onDisk.sort(), dir);
  }
  assert.deepEqual(layers.map((l) => l.bases), [[], ["../base"]]);
});

test("every document passes the Kubernetes / Prometheus Operator schema", () => {
  assert.ok(objects.length >= 8, `${objects.length} documents`);
  const errors = objects.flatMap(({ f, o }) => schemaErrors(o).map((e) => `${f}: ${e}`));
  assert.deepEqual(errors, []);
});

test("no document has a field the API does not know (strict, like kubectl --validate=strict)", () => {
  assert.deepEqual(typeErrors(objects.map(({ o }) => o)), []);
});

test("the checker rejects broken manifests", () => {
  const ds = find("DaemonSet");
  const broken = (mutate) => { const c = structuredClone(ds); mutate(c); return c; };
  const podSpec = (c) => c.spec.template.spec;
  // Wrong types: ajv.
  assert.match(schemaErrors(broken((c) => { podSpec(c).containers = "stallwatch"; })).join(),
    /containers must be array/);
  assert.match(schemaErrors(broken((c) => { podSpec(c).hostPID = "true"; })).join(),
    /hostPID must be boolean/);
  assert.match(schemaErrors(broken((c) => { delete podSpec(c).containers[0].name; })).join(),
    /must have required property '?name'?/);
  const sm = structuredClone(find("ServiceMonitor"));
  sm.spec.endpoints[0].honorLabels = "true";
  assert.match(schemaErrors(sm).join(), /honorLabels must be boolean/);
  // Unknown fields (a typo ajv accepts): tsc.
  const typo = broken((c) => { podSpec(c).hostPid = true; delete podSpec(c).hostPID; });
  assert.deepEqual(schemaErrors(typo), [], "ajv alone lets a misspelt field through");
  assert.match(typeErrors([typo]).join(), /'"?hostPid"?' does not exist in type 'IPodSpec'/);
  const nested = broken((c) => { podSpec(c).containers[0].securityContext.capabilites = {}; });
  assert.match(typeErrors([nested]).join(), /'"?capabilites"?' does not exist in type 'ISecurityContext'/);
});

test("DaemonSet: host PID namespace, capabilities not privileged, host mounts", () => {
  const spec = find("DaemonSet").spec.template.spec;
  assert.equal(spec.hostPID, true);
  assert.equal(spec.containers.length, 1);
  const c = spec.containers[0];
  const sc = c.securityContext;
  assert.notEqual(sc.privileged, true);
  assert.equal(sc.allowPrivilegeEscalation, false);
  assert.equal(sc.readOnlyRootFilesystem, true);
  assert.deepEqual(sc.capabilities.drop, ["ALL"]);
  assert.deepEqual([...sc.capabilities.add].sort(),
    ["BPF", "DAC_READ_SEARCH", "PERFMON", "SYSLOG", "SYS_ADMIN", "SYS_PTRACE", "SYS_RESOURCE"]);
  const volumes = Object.fromEntries(spec.volumes.map((v) => [v.name, v]));
  const mounts = Object.fromEntries(c.volumeMounts.map((m) => [m.mountPath, m]));
  const hostPathOf = (m) => volumes[m.name]?.hostPath?.path;
  for (const [p, ro] of [["/sys/kernel/btf", true], ["/sys/fs/cgroup", true],
    ["/sys/kernel/tracing", false], ["/var/lib/stallwatch", false], ["/dev/kmsg", true]]) {
    assert.ok(mounts[p], `${p} is mounted`);
    assert.equal(hostPathOf(mounts[p]), p, `${p} comes from the host's ${p}`);
    assert.equal(mounts[p].readOnly === true, ro, `${p} readOnly=${ro}`);
  }
  // The daemon's own /proc is the host's (hostPID): no /proc hostPath needed or wanted.
  assert.ok(!spec.volumes.some((v) => v.hostPath?.path === "/proc"));
  assert.ok(spec.tolerations.some((t) => t.key === "nvidia.com/gpu" && t.effect === "NoSchedule"));
});

test("DaemonSet: args, NODE_NAME, /healthz probes on 9464, resources", () => {
  const c = find("DaemonSet").spec.template.spec.containers[0];
  assert.deepEqual(c.args,
    ["run", "--listen", "0.0.0.0:9464", "--db", "/var/lib/stallwatch/stallwatch.db"]);
  const nodeName = c.env.find((e) => e.name === "NODE_NAME");
  assert.equal(nodeName?.valueFrom?.fieldRef?.fieldPath, "spec.nodeName");
  const port = (p) => typeof p === "number" ? p
    : c.ports.find((q) => q.name === p)?.containerPort;
  for (const probe of [c.livenessProbe, c.readinessProbe]) {
    assert.equal(probe?.httpGet?.path, "/healthz");
    assert.equal(port(probe.httpGet.port), 9464);
  }
  for (const k of ["requests", "limits"]) {
    assert.ok(c.resources[k].cpu && c.resources[k].memory, `resources.${k}`);
  }
});

test("DaemonSet args are flags `stallwatch run` accepts", { skip: !process.env.STALLWATCH_BIN &&
    "STALLWATCH_BIN not set (ctest sets it)" }, () => {
  const c = find("DaemonSet").spec.template.spec.containers[0];
  const r = spawnSync(process.env.STALLWATCH_BIN, [...c.args, "--help"], { encoding: "utf8" });
  assert.equal(r.status, 0, r.stderr);
});

test("Service and ServiceMonitor: port metrics 9464, every 15 s, honorLabels", () => {
  const ds = find("DaemonSet");
  const podLabels = ds.spec.template.metadata.labels;
  const svc = find("Service");
  for (const [k, v] of Object.entries(svc.spec.selector)) assert.equal(podLabels[k], v);
  const sp = svc.spec.ports.find((p) => p.name === "metrics");
  assert.equal(sp?.port, 9464);
  const sm = find("ServiceMonitor");
  for (const [k, v] of Object.entries(sm.spec.selector.matchLabels)) {
    assert.equal(svc.metadata.labels[k], v);
  }
  assert.equal(sm.spec.endpoints.length, 1);
  assert.equal(sm.spec.endpoints[0].port, "metrics");
  assert.equal(sm.spec.endpoints[0].interval, "15s");
  assert.equal(sm.spec.endpoints[0].honorLabels, true);
  // The absence alerts look for up{job="stallwatch"}: the job label is the value of the
  // Service's label named by jobLabel, whatever the Service is called.
  assert.equal(sm.spec.jobLabel, "app.kubernetes.io/name");
  assert.equal(svc.metadata.labels[sm.spec.jobLabel], "stallwatch");
});

test("RBAC: the DaemonSet's service account may only read pods", () => {
  const ds = find("DaemonSet");
  const sa = find("ServiceAccount");
  assert.equal(ds.spec.template.spec.serviceAccountName, sa.metadata.name);
  assert.equal(ds.metadata.namespace, sa.metadata.namespace);
  const role = find("ClusterRole");
  assert.deepEqual(role.rules, [{ apiGroups: [""], resources: ["pods"],
    verbs: ["get", "list", "watch"] }]);
  const binding = find("ClusterRoleBinding");
  assert.deepEqual(binding.roleRef,
    { apiGroup: "rbac.authorization.k8s.io", kind: "ClusterRole", name: role.metadata.name });
  assert.deepEqual(binding.subjects,
    [{ kind: "ServiceAccount", name: sa.metadata.name, namespace: sa.metadata.namespace }]);
});

test("PrometheusRule: its spec is exactly alerts/stallwatch.rules.yml", () => {
  const rules = parseFile(rulesFile);
  assert.equal(rules.length, 1);
  assert.deepEqual(Object.keys(rules[0]), ["groups"]);
  assert.ok(rules[0].groups.length > 0);
  assert.deepEqual(find("PrometheusRule").spec, rules[0]);
});
