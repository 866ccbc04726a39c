#!/usr/bin/env bash
# Renders the chart with every example values file beside it
# (values-*.yaml): helm lint --strict and helm template with each, at the
# oldest Kubernetes the chart takes (its kubeVersion) and a current one.
# scripts/release.sh runs it before helm package: a chart that does not
# render with one of its own examples is not packaged. The first failure
# is one line naming the values file, and the exit status 1.
#
#   scripts/chart-check.sh [CHART_DIR]   (default deploy/helm/signagent)
#
# HELM names the helm binary (default: tools/helm's, go tool helm).
set -euo pipefail
cd "$(dirname "$0")/.."
chart=${1:-deploy/helm/signagent}
fail() { echo "chart-check: $*" >&2; exit 1; }
helm=${HELM:-$(${GO:-go} -C tools/helm tool -n helm)} || fail "building helm (tools/helm) failed"
[ -f "$chart/Chart.yaml" ] || fail "$chart/Chart.yaml: no chart there"
shopt -s nullglob
examples=("$chart"/values-*.yaml)
[ ${#examples[@]} -gt 0 ] || fail "$chart holds no example values file (values-*.yaml)"
oldest=$(sed -n 's/^kubeVersion: *"*>=\([0-9.]*\).*/\1/p' "$chart/Chart.yaml")
# one: the output of a failed helm run as one line.
one() { grep -v '^\s*$' | tr -s '\n\t' '  ' | sed -e 's/ Use --debug flag to render out invalid YAML//' -e 's/ *$//'; }
for f in "${examples[@]}"; do
	out=$("$helm" lint --strict "$chart" -f "$f" --kube-version 1.33.0 2>&1) ||
		fail "helm lint --strict with $f failed: $(grep -E '^\[(ERROR|WARNING)\]|^Error' <<<"$out" | one)"
	for kube in ${oldest:+"$oldest"} 1.33.0; do
		out=$("$helm" template signagent "$chart" -f "$f" --kube-version "$kube" 2>&1 >/dev/null) ||
			fail "helm template with $f (Kubernetes $kube) failed: $(one <<<"$out")"
	done
done
echo "chart-check: $chart renders with ${#examples[@]} example values files"
