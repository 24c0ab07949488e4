#!/usr/bin/env bash
# make demo: ProxOps end to end on this machine, against a simulated three-node PVE cluster.
#
# It starts `proxops sim` with examples/demo/sim.yaml on a free loopback port, copies examples/demo into a
# temporary git repository (its base-url rewritten to the simulator's port, then committed: proxops plans
# committed trees), runs `proxops apply` on a temporary data directory, then `proxops diff --exit-code` to
# show the cluster converged. It exits 0 only when the diff is empty. Nothing leaves the machine: the
# simulator serves the artifacts' download URLs from examples/demo/files.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
bin=${PROXOPS:-$root/bin/proxops}
work=$(mktemp -d "${TMPDIR:-/tmp}/proxops-demo.XXXXXX")
simpid=""
cleanup() {
	if [[ -n "$simpid" ]]; then
		kill "$simpid" 2>/dev/null || true
		wait "$simpid" 2>/dev/null || true
	fi
	rm -rf "$work"
}
trap cleanup EXIT

cd "$root"
"$bin" sim --listen 127.0.0.1:0 --spec examples/demo/sim.yaml >"$work/sim.log" 2>&1 &
simpid=$!
url=""
for _ in $(seq 100); do
	url=$(grep -o 'http://127\.0\.0\.1:[0-9]*' "$work/sim.log" | head -n1 || true)
	[[ -n "$url" ]] && break
	if ! kill -0 "$simpid" 2>/dev/null; then break; fi
	sleep 0.1
done
if [[ -z "$url" ]]; then
	echo "demo: the simulator did not start:" >&2
	cat "$work/sim.log" >&2
	exit 1
fi
echo "==> simulated PVE cluster 'demo' (pve1, pve2, pve3) at $url"

cp -R examples/demo "$work/repo"
sed -i.orig "s#http://127\.0\.0\.1:8006#$url#" "$work/repo/clusters/demo/config.yaml"
rm -f "$work/repo/clusters/demo/config.yaml.orig"
git -C "$work/repo" init -q
git -C "$work/repo" add -A
git -C "$work/repo" -c user.name=demo -c user.email=demo@proxops.invalid commit -q -m "demo cluster"
echo "==> demo repository committed at $work/repo"

# The simulator's token for the demo (examples/demo/sim.yaml); in single-host mode the executors take PVE
# credentials from the environment.
export PROXOPS_PVE_TOKEN_VALUE='root@pam!demo=6d1c2f0a-7b3e-4c59-8a21-0e9f4d3b2c10'

echo "==> proxops apply"
"$bin" apply --repo "$work/repo" --data-dir "$work/data"
echo
echo "==> proxops diff --exit-code"
"$bin" diff --exit-code --repo "$work/repo" --data-dir "$work/data"
echo
echo "==> converged: PVE matches git"
