// The Helm chart (deploy/helm/stallwatch) and the kustomizations (deploy/kubernetes/base and
// its operator overlay) as they render, offline, with pinned helm and kubectl (k8s_tools.mjs):
// - `helm lint --strict` with the default values and with the Prometheus Operator objects on;
// - every object `helm template` and `kubectl kustomize` render passes the Kubernetes and
//   Prometheus Operator schemas with no unknown field (schemas.mjs);
// - the base and the chart's defaults hold no monitoring.coreos.com object, and the overlay and
//   serviceMonitor/prometheusRule.enabled add exactly a ServiceMonitor and a PrometheusRule;
// - Helm and kustomize render the same DaemonSet (pod spec, update strategy), Service, RBAC,
//   ServiceMonitor and PrometheusRule, up to the labels Helm adds; both PrometheusRules hold
//   exactly the groups of alerts/stallwatch.rules.yml; one image tag everywhere;
// - the values do what values.yaml and the chart's README say, and the README lists them all.
// Run: bash tests/deploy/check.sh helm   (or cd tests/deploy && node --test helm.test.mjs)
import { test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { k8sTools, runTool } from "./k8s_tools.mjs";
import { parseFile, parseYaml, schemaErrors, typeErrors } from "./schemas.mjs";

const here = path.dirname(fileURLToPath(import.meta.url));
const repo = path.resolve(here, "../..");
const chart = path.join(repo, "deploy/helm/stallwatch");
const { helm, kubectl } = k8sTools();
const monitoringOn = ["--set", "serviceMonitor.enabled=true,prometheusRule.enabled=true"];

function run(bin, args) {
  const r = runTool(bin, args);
  assert.equal(r.status, 0, `${path.basename(bin)} ${args.join(" ")}:\n${r.stderr}`);
  return r.stdout;
}
// Release "stallwatch" in namespace "stallwatch" names everything as deploy/kubernetes does.
const helmTemplate = (args = [], release = "stallwatch", ns = "stallwatch") =>
  parseYaml(run(helm, ["template", release, chart, "--namespace", ns, ...args]), "helm template");
const kustomize = (dir) => parseYaml(run(kubectl, ["kustomize", path.join(repo, dir)]), dir);

const renders = {
  "helm template (defaults)": helmTemplate(),
  "helm template (monitoring on)": helmTemplate(monitoringOn),
  "kubectl kustomize deploy/kubernetes/base": kustomize("deploy/kubernetes/base"),
  "kubectl kustomize deploy/kubernetes/operator": kustomize("deploy/kubernetes/operator"),
};
const [helmDefault, helmMonitoring, base, operator] = Object.values(renders);
const one = (objs, kind) => {
  const found = objs.filter((o) => o.kind === kind);
  assert.equal(found.length, 1, `exactly one ${kind}`);
  return found[0];
};
const kindsOf = (objs) => objs.map((o) => o.kind).sort();
// Every label of `sub` is in `sup` with the same value (Helm adds its own to kustomize's).
const assertLabelsWithin = (sub, sup, what) => {
  for (const [k, v] of Object.entries(sub ?? {})) assert.equal(sup?.[k], v, `${what}: ${k}`);
};

test("helm lint --strict passes with the default values and with the operator objects on", () => {
  for (const args of [[], monitoringOn]) {
    const out = run(helm, ["lint", "--strict", chart, ...args]);
    assert.match(out, /1 chart\(s\) linted, 0 chart\(s\) failed/);
  }
});

test("every rendered object passes the Kubernetes / Prometheus Operator schema, strictly", () => {
  const all = Object.entries(renders).flatMap(([from, objs]) => objs.map((o) => ({ from, o })));
  const errors = all.flatMap(({ from, o }) =>
    schemaErrors(o).map((e) => `${from}: ${o.kind}/${o.metadata?.name}: ${e}`));
  assert.deepEqual(errors, []);
  assert.deepEqual(typeErrors(all.map(({ o }) => o)), []);
});

test("the base and the chart's defaults need no Prometheus Operator; the overlay adds it", () => {
  const monitoring = (objs) => objs.filter((o) => o.apiVersion.startsWith("monitoring.coreos.com/"));
  assert.deepEqual(monitoring(base), [], "deploy/kubernetes/base has monitoring.coreos.com objects");
  assert.deepEqual(monitoring(helmDefault), [], "the chart's defaults render monitoring objects");
  const core = ["ClusterRole", "ClusterRoleBinding", "DaemonSet", "Service", "ServiceAccount"];
  // The chart leaves the namespace to `helm install --create-namespace` (README).
  assert.deepEqual(kindsOf(base), [...core, "Namespace"].sort());
  assert.deepEqual(kindsOf(helmDefault), core);
  const withOperator = [...core, "PrometheusRule", "ServiceMonitor"].sort();
  assert.deepEqual(kindsOf(operator), [...withOperator, "Namespace"].sort());
  assert.deepEqual(kindsOf(helmMonitoring), withOperator);
});

test("Helm and kustomize render the same DaemonSet", () => {
  const k = one(base, "DaemonSet");
  const h = one(helmDefault, "DaemonSet");
  assert.equal(h.metadata.name, k.metadata.name);
  assert.equal(h.metadata.namespace, k.metadata.namespace);
  // Container, image, args, env, probes, resources, securityContext, mounts, volumes, host
  // PID, node selection, tolerations, priority: all of it, field for field.
  assert.deepEqual(h.spec.template.spec, k.spec.template.spec);
  assert.deepEqual(h.spec.updateStrategy, k.spec.updateStrategy);
  assert.deepEqual(h.spec.template.metadata.annotations, k.spec.template.metadata.annotations);
  assertLabelsWithin(k.spec.selector.matchLabels, h.spec.selector.matchLabels, "selector");
  assertLabelsWithin(k.spec.template.metadata.labels, h.spec.template.metadata.labels, "pod");
  assertLabelsWithin(h.spec.selector.matchLabels, h.spec.template.metadata.labels, "helm pod");
  assert.equal(one(operator, "DaemonSet").spec.template.spec.containers[0].image,
    k.spec.template.spec.containers[0].image);
});

test("Helm and kustomize render the same Service, RBAC, ServiceMonitor and PrometheusRule", () => {
  const pair = (kind) => [one(helmMonitoring, kind), one(operator, kind)];
  const [hs, ks] = pair("Service");
  assert.equal(hs.metadata.name, ks.metadata.name);
  assert.deepEqual({ ...hs.spec, selector: undefined }, { ...ks.spec, selector: undefined });
  assertLabelsWithin(ks.spec.selector, hs.spec.selector, "Service selector");
  assert.deepEqual(one(helmDefault, "Service"), hs);

  const [hsa, ksa] = pair("ServiceAccount");
  assert.deepEqual([hsa.metadata.name, hsa.metadata.namespace],
    [ksa.metadata.name, ksa.metadata.namespace]);
  const [hr, kr] = pair("ClusterRole");
  assert.deepEqual(hr.rules, kr.rules);
  const [hb, kb] = pair("ClusterRoleBinding");
  assert.deepEqual([hb.roleRef, hb.subjects], [kb.roleRef, kb.subjects]);

  const [hm, km] = pair("ServiceMonitor");
  assert.deepEqual({ ...hm.spec, selector: undefined }, { ...km.spec, selector: undefined });
  assertLabelsWithin(km.spec.selector.matchLabels, hm.spec.selector.matchLabels, "SM selector");
  assertLabelsWithin(hm.spec.selector.matchLabels, hs.metadata.labels, "SM selects the Service");
  assert.equal(hm.spec.endpoints[0].honorLabels, true);
  assert.equal(hs.metadata.labels[hm.spec.jobLabel], "stallwatch", 'job="stallwatch"');

  const [hp, kp] = pair("PrometheusRule");
  assertLabelsWithin(kp.metadata.labels, hp.metadata.labels, "PrometheusRule labels");
  const rules = parseFile(path.join(repo, "alerts/stallwatch.rules.yml"));
  assert.equal(rules.length, 1);
  assert.ok(rules[0].groups.length > 0);
  const regen = "differ from alerts/stallwatch.rules.yml: run scripts/gen-prometheusrule.sh --write";
  assert.deepEqual(hp.spec, rules[0], `the chart's rules ${regen}`);
  assert.deepEqual(kp.spec, rules[0], `the overlay's rules ${regen}`);
});

test("one image tag: the chart's appVersion, the kustomization's newTag, the rendered image", () => {
  const chartYaml = parseFile(path.join(chart, "Chart.yaml"))[0];
  const k = parseFile(path.join(repo, "deploy/kubernetes/base/kustomization.yaml"))[0];
  const image = k.images.find((i) => i.name === "ghcr.io/stallwatch/stallwatch");
  assert.equal(typeof chartYaml.appVersion, "string");
  assert.equal(image?.newTag, chartYaml.appVersion);
  const tag = `ghcr.io/stallwatch/stallwatch:${chartYaml.appVersion}`;
  assert.equal(one(helmDefault, "DaemonSet").spec.template.spec.containers[0].image, tag);
  assert.equal(one(base, "DaemonSet").spec.template.spec.containers[0].image, tag);
  assert.equal(one(helmDefault, "DaemonSet").metadata.labels["app.kubernetes.io/version"],
    chartYaml.appVersion);
});

test("values: names follow the release, the job label stays stallwatch, overrides apply", () => {
  const objs = helmTemplate([...monitoringOn,
    "--set", "image.tag=dev,extraArgs[0]=--cgroup-roots,extraArgs[1]=/sys/fs/cgroup/kubepods.slice",
    "--set", "nvml.enabled=false,nodeSelector=null,runtimeClassName=nvidia,port=9500",
    "--set", "resources.limits.memory=512Mi,serviceMonitor.additionalLabels.release=kps",
    "--set", "prometheusRule.additionalLabels.release=kps,serviceMonitor.interval=30s",
    "--set-json", 'extraEnv=[{"name":"X","value":"1"}]',
  ], "gpu-mon", "monitoring");
  assert.deepEqual(Object.values(objs).flatMap((o) => schemaErrors(o)), []);
  const ds = one(objs, "DaemonSet");
  const pod = ds.spec.template.spec;
  const c = pod.containers[0];
  assert.equal(ds.metadata.name, "gpu-mon-stallwatch");
  assert.equal(ds.metadata.namespace, "monitoring");
  assert.equal(c.image, "ghcr.io/stallwatch/stallwatch:dev");
  assert.deepEqual(c.args, ["run", "--listen", "0.0.0.0:9500", "--db",
    "/var/lib/stallwatch/stallwatch.db", "--cgroup-roots", "/sys/fs/cgroup/kubepods.slice"]);
  assert.deepEqual(c.env.map((e) => e.name), ["NODE_NAME", "X"]);
  assert.equal(c.ports[0].containerPort, 9500);
  assert.equal(c.resources.limits.memory, "512Mi");
  assert.equal(c.resources.requests.memory, "64Mi", "the rest of resources is kept");
  assert.equal(pod.nodeSelector, undefined);
  assert.equal(pod.runtimeClassName, "nvidia");
  assert.equal(pod.serviceAccountName, "gpu-mon-stallwatch");
  const binding = one(objs, "ClusterRoleBinding");
  assert.deepEqual(binding.subjects,
    [{ kind: "ServiceAccount", name: "gpu-mon-stallwatch", namespace: "monitoring" }]);
  const svc = one(objs, "Service");
  assert.equal(svc.spec.ports[0].port, 9500);
  const sm = one(objs, "ServiceMonitor");
  assert.deepEqual(sm.spec.namespaceSelector.matchNames, ["monitoring"]);
  assert.equal(svc.metadata.labels[sm.spec.jobLabel], "stallwatch", 'job="stallwatch"');
  assert.equal(sm.spec.endpoints[0].interval, "30s");
  assert.equal(sm.metadata.labels.release, "kps");
  assert.equal(one(objs, "PrometheusRule").metadata.labels.release, "kps");
});

test("values: service account and RBAC toggles; the schema refuses a misspelt value", () => {
  const objs = helmTemplate(["--set", "serviceAccount.create=false,serviceAccount.name=mine",
    "--set", "rbac.create=false"]);
  assert.deepEqual(kindsOf(objs), ["DaemonSet", "Service"]);
  assert.equal(one(objs, "DaemonSet").spec.template.spec.serviceAccountName, "mine");
  const refused = (args, pattern) => {
    const r = runTool(helm, ["template", "stallwatch", chart, ...args]);
    assert.notEqual(r.status, 0, args.join(" "));
    assert.match(r.stderr, pattern);
  };
  refused(["--set", "serviceAccount.create=false"], /serviceAccount\.name/);
  refused(["--set", "serviceMonitor.enable=true"], /enable/);  // enabled, not enable
  refused(["--set", "port=http"], /port/);
});

test("the chart's README lists every value and only values that exist", () => {
  const values = parseFile(path.join(chart, "values.yaml"))[0];
  const readme = readFileSync(path.join(chart, "README.md"), "utf8");
  const documented = [...readme.matchAll(/^\| `([A-Za-z0-9_.]+)` \|/gm)].map((m) => m[1]);
  assert.ok(documented.length > 10, `${documented.length} values in README.md's table`);
  const lookup = (key) => key.split(".").reduce((o, k) => (o == null ? undefined : o[k]), values);
  for (const key of documented) assert.notEqual(lookup(key), undefined, `README: ${key}`);
  // Each value is documented itself or through the object it belongs to.
  const leaves = (o, prefix = "") => Object.entries(o).flatMap(([k, v]) =>
    v && typeof v === "object" && !Array.isArray(v) && Object.keys(v).length &&
      !documented.includes(prefix + k)
      ? leaves(v, `${prefix}${k}.`) : [prefix + k]);
  for (const key of leaves(values)) {
    assert.ok(documented.includes(key), `values.yaml's ${key} is not in README.md's table`);
  }
});
