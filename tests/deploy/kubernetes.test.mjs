// Offline validation of deploy/kubernetes, no cluster needed:
// - every document against the Kubernetes 1.3x OpenAPI schema (kubernetes-models) and the
//   Prometheus Operator CRD schemas (@kubernetes-models/prometheus-operator), compiled ajv
//   validators: types, enums, required fields;
// - unknown fields (what `kubectl apply --validate=strict` refuses and ajv lets through): each
//   document becomes a TypeScript object literal typed with the package's interface, and tsc's
//   excess-property check names any field the API does not have;
// - the properties the deployment relies on (hostPID, capabilities instead of privileged, the
//   host mounts, /healthz probes, NODE_NAME, the ServiceMonitor's interval and honorLabels, RBAC
//   limited to reading pods, the PrometheusRule's groups equal alerts/stallwatch.rules.yml);
// - and that the checker itself rejects broken manifests.
// Run: cd tests/deploy && node --test   (packages: npm ci, or scripts/install-deps.sh)
import { test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync, readdirSync } from "node:fs";
import { spawnSync } from "node:child_process";
import path from "node:path";
import { fileURLToPath } from "node:url";
import YAML from "yaml";
import ts from "typescript";
import { Namespace, Service, ServiceAccount } from "kubernetes-models/v1";
import { DaemonSet } from "kubernetes-models/apps/v1";
import { ClusterRole, ClusterRoleBinding } from "kubernetes-models/rbac.authorization.k8s.io/v1";
import { ServiceMonitor, PrometheusRule } from
  "@kubernetes-models/prometheus-operator/monitoring.coreos.com/v1";

const here = path.dirname(fileURLToPath(import.meta.url));
const repo = path.resolve(here, "../..");
const k8sDir = path.join(repo, "deploy/kubernetes");
const rulesFile = path.join(repo, "alerts/stallwatch.rules.yml");

// apiVersion/kind → the model class (ajv) and the TypeScript interface (strict fields).
const kinds = {
  "v1/Namespace": { model: Namespace, type: ["kubernetes-models/v1/Namespace", "INamespace"] },
  "v1/Service": { model: Service, type: ["kubernetes-models/v1/Service", "IService"] },
  "v1/ServiceAccount": {
    model: ServiceAccount, type: ["kubernetes-models/v1/ServiceAccount", "IServiceAccount"] },
  "apps/v1/DaemonSet": {
    model: DaemonSet, type: ["kubernetes-models/apps/v1/DaemonSet", "IDaemonSet"] },
  "rbac.authorization.k8s.io/v1/ClusterRole": {
    model: ClusterRole,
    type: ["kubernetes-models/rbac.authorization.k8s.io/v1/ClusterRole", "IClusterRole"] },
  "rbac.authorization.k8s.io/v1/ClusterRoleBinding": {
    model: ClusterRoleBinding,
    type: ["kubernetes-models/rbac.authorization.k8s.io/v1/ClusterRoleBinding",
      "IClusterRoleBinding"] },
  "monitoring.coreos.com/v1/ServiceMonitor": {
    model: ServiceMonitor,
    type: ["@kubernetes-models/prometheus-operator/monitoring.coreos.com/v1/ServiceMonitor",
      "IServiceMonitor"] },
  "monitoring.coreos.com/v1/PrometheusRule": {
    model: PrometheusRule,
    type: ["@kubernetes-models/prometheus-operator/monitoring.coreos.com/v1/PrometheusRule",
      "IPrometheusRule"] },
};

function parseFile(file) {
  const docs = YAML.parseAllDocuments(readFileSync(file, "utf8"), { prettyErrors: true });
  return docs.map((d, i) => {
    if (d.errors.length) throw new Error(`${file} document ${i + 1}: ${d.errors[0].message}`);
    return d.toJS({ maxAliasCount: -1 });
  }).filter((o) => o !== null);
}

// Schema errors of one object (ajv, through the model class), as strings; [] when valid.
function schemaErrors(obj) {
  const entry = kinds[`${obj?.apiVersion}/${obj?.kind}`];
  if (!entry) return [`unknown apiVersion/kind ${obj?.apiVersion}/${obj?.kind}`];
  try {
    new entry.model(obj).validate();
    return [];
  } catch (e) {
    return [e.message];
  }
}

// Unknown-field and type errors of a list of objects, from tsc's excess-property check.
function typeErrors(objs) {
  const virtual = path.join(here, "__manifests__.ts");  // never written to disk
  const lines = [];
  objs.forEach((obj, i) => {
    const entry = kinds[`${obj.apiVersion}/${obj.kind}`];
    if (!entry) return;
    lines.push(`import type { ${entry.type[1]} as T${i} } from "${entry.type[0]}";`);
    lines.push(`export const m${i}: T${i} = ${JSON.stringify(obj, null, 2)};`);
  });
  const source = lines.join("\n") + "\n";
  const options = {
    strict: true, noEmit: true, target: ts.ScriptTarget.ES2022, module: ts.ModuleKind.NodeNext,
    moduleResolution: ts.ModuleResolutionKind.NodeNext, skipLibCheck: true, types: [],
  };
  const host = ts.createCompilerHost(options);
  const getSourceFile = host.getSourceFile.bind(host);
  host.getSourceFile = (name, lang, ...rest) => name === virtual
    ? ts.createSourceFile(name, source, lang) : getSourceFile(name, lang, ...rest);
  const fileExists = host.fileExists.bind(host);
  host.fileExists = (name) => name === virtual || fileExists(name);
  const readFile = host.readFile.bind(host);
  host.readFile = (name) => name === virtual ? source : readFile(name);
  const program = ts.createProgram([virtual], options, host);
  return ts.getPreEmitDiagnostics(program).map((d) => {
    const msg = ts.flattenDiagnosticMessageText(d.messageText, "\n");
    if (!d.file) return msg;
    const { line } = d.file.getLineAndCharacterOfPosition(d.start);
    const text = d.file.text.split("\n")[line].trim();
    return `${msg} (at: ${text})`;
  });
}

const kustomization = parseFile(path.join(k8sDir, "kustomization.yaml"))[0];
const files = kustomization.resources;
const objects = files.flatMap((f) => parseFile(path.join(k8sDir, f)).map((o) => ({ f, o })));
const find = (kind) => {
  const found = objects.filter(({ o }) => o.kind === kind).map(({ o }) => o);
  assert.equal(found.length, 1, `exactly one ${kind}`);
  return found[0];
};

test("kustomization lists every manifest in deploy/kubernetes, and nothing missing", () => {
  const onDisk = readdirSync(k8sDir).filter((f) => /\.ya?ml$/.test(f) && f !== "kustomization.yaml");
  assert.deepEqual([...files].sort(), onDisk.sort());
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
  // The absence alerts look for up{job="stallwatch"}: the job label is the Service's name.
  assert.equal(svc.metadata.name, "stallwatch");
  assert.equal(sm.spec.jobLabel, undefined);
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
