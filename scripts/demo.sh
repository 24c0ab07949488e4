#!/usr/bin/env bash
# make demo: ProxOps end to end on this machine, against a simulated three-node PVE cluster.
#
# It starts `proxops sim` with examples/demo/sim.yaml on a free loopback port, copies examples/demo into a
# temporary git repository (its base-url rewritten to the simulator's port, then committed: proxops plans
# committed trees), runs `proxops up --once` on a temporary data directory (every service in one process:
# it reconciles once and exits 0 when the cluster converged), then `proxops diff --exit-code` to show the
# cluster converged, and prints `proxops status`. Then it changes a VM by hand through the simulator's PVE
# API and runs `proxops up --once` again: the drift is corrected and the notifier tells a generic webhook
# receiver on loopback (`proxops notifications listen`), whose output the demo prints. It exits 0 only when
# the diffs are empty and the notification arrived. Nothing leaves
# the machine: the simulator serves the artifacts' download URLs from examples/demo/files.
#
# With --live it runs `proxops up` instead, until Ctrl-C, and prints the status page's address.
#
# The demo cluster's PVE token, SSH keys and password are in a SOPS file encrypted to a throwaway TEST key,
# internal/secrets/testdata/demo/demo.agekey: a public key for the demo only, never for anything real.
set -euo pipefail

live=0
[[ "${1:-}" == "--live" ]] && live=1

root=$(cd "$(dirname "$0")/.." && pwd)
bin=${PROXOPS:-$root/bin/proxops}
work=$(mktemp -d "${TMPDIR:-/tmp}/proxops-demo.XXXXXX")
simpid=""
hookpid=""
cleanup() {
	if [[ -n "$hookpid" ]]; then
		kill "$hookpid" 2>/dev/null || true
		wait "$hookpid" 2>/dev/null || true
	fi
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

# A generic webhook receiver on loopback: proxops notifications listen prints what it receives, so the demo
# shows what would have been sent to a chat or an incident tool.
"$bin" notifications listen --listen 127.0.0.1:0 >"$work/hook.log" 2>&1 &
hookpid=$!
hook=""
for _ in $(seq 100); do
	hook=$(grep -o 'http://127\.0\.0\.1:[0-9]*/' "$work/hook.log" | head -n1 || true)
	[[ -n "$hook" ]] && break
	sleep 0.1
done
if [[ -z "$hook" ]]; then
	echo "demo: the webhook receiver did not start:" >&2
	cat "$work/hook.log" >&2
	exit 1
fi
printf 'notifications:\n  external-url: http://127.0.0.1:9494\n  providers:\n    - name: demo-hook\n      type: webhook\n      url: %s\n' \
	"$hook" >>"$work/repo/proxops.yaml"
echo "==> notifications go to a webhook receiver on loopback at $hook"
git -C "$work/repo" init -q
git -C "$work/repo" add -A
git -C "$work/repo" -c user.name=demo -c user.email=demo@proxops.invalid commit -q -m "demo cluster"
echo "==> demo repository committed at $work/repo"

# The cluster's credentials are in clusters/demo/secrets.sops.yaml; proxops decrypts it in-process with this
# age key. It is a throwaway TEST key, committed for the demo: never use it for anything real.
export SOPS_AGE_KEY_FILE="$root/internal/secrets/testdata/demo/demo.agekey"
unset SOPS_AGE_KEY PROXOPS_PVE_TOKEN_VALUE PROXOPS_PVE_TOKEN PROXOPS_PVE_USER PROXOPS_PVE_PASSWORD
echo "==> age key: $SOPS_AGE_KEY_FILE (a throwaway test key, for the demo only)"

if [[ $live == 1 ]]; then
	echo "==> proxops up (Ctrl-C stops it); the status page's address follows"
	# up prints the status page's address on stdout and logs on stderr: both go to up.log.
	"$bin" up --repo "$work/repo" --data-dir "$work/data" --listen 127.0.0.1:9494 >"$work/up.log" 2>&1 &
	uppid=$!
	trap 'kill -INT "$uppid" 2>/dev/null || true; wait "$uppid" 2>/dev/null || true; cleanup' EXIT
	trap 'exit 0' INT TERM
	for _ in $(seq 100); do
		grep -q 'status page at' "$work/up.log" 2>/dev/null && break
		if ! kill -0 "$uppid" 2>/dev/null; then cat "$work/up.log" >&2; exit 1; fi
		sleep 0.1
	done
	echo "==> status page: http://127.0.0.1:9494/ (JSON at /status, metrics at /metrics); logs in $work/up.log"
	echo "    try: $bin status --data-dir $work/data"
	wait "$uppid"
	exit 0
fi

# up_once LOG FAILURE runs one reconcile of the whole system, its log in $work/LOG; on failure it says FAILURE
# and shows the end of the log.
up_once() {
	"$bin" up --once --repo "$work/repo" --data-dir "$work/data" --listen 127.0.0.1:0 2>"$work/$1" || {
		echo "demo: proxops up --once $2; its log:" >&2
		tail -n 50 "$work/$1" >&2
		exit 1
	}
}

echo "==> proxops up --once"
up_once up.log "did not converge"
echo
echo "==> proxops diff --exit-code"
"$bin" diff --exit-code --repo "$work/repo" --data-dir "$work/data"
echo
echo "==> proxops status"
"$bin" status --data-dir "$work/data"
echo
echo "==> someone changes VM web-01 by hand on PVE: memory 3072 MiB, through the PVE API"
curl -fsS -X PUT -H 'Authorization: PVEAPIToken=root@pam!demo=6d1c2f0a-7b3e-4c59-8a21-0e9f4d3b2c10' \
	--data memory=3072 "$url/api2/json/nodes/pve1/qemu/101/config" >/dev/null
echo "==> proxops up --once: the drift is corrected and the notifier tells the webhook receiver"
up_once up2.log "did not correct the drift"
echo
echo "==> what the webhook receiver got (nothing left the machine)"
grep -v '^listening on' "$work/hook.log" || { echo "demo: no notification arrived" >&2; exit 1; }
echo
"$bin" diff --exit-code --repo "$work/repo" --data-dir "$work/data" >/dev/null
echo "==> converged: PVE matches git"
