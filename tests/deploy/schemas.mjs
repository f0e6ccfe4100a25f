// Offline validation of Kubernetes objects, shared by kubernetes.test.mjs (the files of
// deploy/kubernetes) and helm.test.mjs (what kustomize and Helm render):
// - schemaErrors: the Kubernetes 1.3x OpenAPI schema (kubernetes-models) and the Prometheus
//   Operator CRD schemas (@kubernetes-models/prometheus-operator), compiled ajv validators:
//   types, enums, required fields;
// - typeErrors: unknown fields (what `kubectl apply --validate=strict` refuses and ajv lets
//   through): each object becomes a TypeScript object literal typed with the package's
//   interface, and tsc's excess-property check names any field the API does not have.
import { readFileSync } from "node:fs";
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

// The documents of a YAML stream (empty ones left out); `name` says where it came from.
export function parseYaml(text, name) {
  const docs = YAML.parseAllDocuments(text, { prettyErrors: true });
  return docs.map((d, i) => {
    if (d.errors.length) throw new Error(`${name} document ${i + 1}: ${d.errors[0].message}`);
    return d.toJS({ maxAliasCount: -1 });
  }).filter((o) => o !== null);
}

export function parseFile(file) {
  return parseYaml(readFileSync(file, "utf8"), file);
}

// Schema errors of one object (ajv, through the model class), as strings; [] when valid.
export function schemaErrors(obj) {
  const entry = kinds[`${obj?.apiVersion}/${obj?.kind}`];
  if (!entry) return [`unknown apiVersion/kind ${obj?.apiVersion}/${obj?.kind}`];
  try {
    new entry.model(obj).validate();
    return [];
  } catch (e) {
    return [e.message];
  }
}

// Unknown-field and type errors of a list of objects, from tsc's excess-property check. One
// program for the whole list: compiling is the slow part (seconds), checking one more object
// is not.
export function typeErrors(objs) {
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
