#!/usr/bin/env bash
# Regenerates the SOPS fixtures of internal/secrets/testdata with the real sops and age-keygen commands, at
# the versions ProxOps builds against. Run it only when a fixture must change; the output is committed (sops
# output is randomised, so every run rewrites every encrypted file).
#
#   scripts/make-secrets-fixtures.sh              encrypt the committed plaintext with the committed keys
#   scripts/make-secrets-fixtures.sh --new-keys   also replace the throwaway age keys first
#
# Every key and value involved is throwaway test material (see internal/secrets/testdata/README.md).
set -euo pipefail

SOPS_VERSION=v3.13.3
AGE_VERSION=v1.3.1

root=$(cd "$(dirname "$0")/.." && pwd)
td="$root/internal/secrets/testdata"
new_keys=0
[ "${1:-}" = "--new-keys" ] && new_keys=1

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
echo "building sops ${SOPS_VERSION} and age-keygen ${AGE_VERSION}"
GOWORK=off GOBIN="$work/bin" go install "github.com/getsops/sops/v3/cmd/sops@${SOPS_VERSION}"
GOWORK=off GOBIN="$work/bin" go install "filippo.io/age/cmd/age-keygen@${AGE_VERSION}"
sops="$work/bin/sops"
keygen="$work/bin/age-keygen"

# sops must see no key or config of the machine it runs on.
unset SOPS_AGE_KEY SOPS_AGE_KEY_FILE SOPS_AGE_KEY_CMD SOPS_AGE_SSH_PRIVATE_KEY_FILE
export XDG_CONFIG_HOME="$work/config" HOME="$work/home"
mkdir -p "$XDG_CONFIG_HOME" "$HOME"

# newkey FILE NAME: a throwaway identity with a header saying so.
newkey() {
  "$keygen" -o "$work/k" 2>/dev/null
  {
    echo "# THROWAWAY TEST KEY ($2): made by scripts/make-secrets-fixtures.sh for ProxOps' tests and demo."
    echo "# It is public. Never use it, or anything encrypted to it, for anything real."
    cat "$work/k"
  } > "$1"
  rm -f "$work/k"
}

if [ "$new_keys" = 1 ] || [ ! -f "$td/age/lab.agekey" ]; then
  newkey "$td/age/lab.agekey" lab
  newkey "$td/age/edge.agekey" edge
  newkey "$td/demo/demo.agekey" demo
fi
# One key file holding both test identities (the way one key file serves several clusters).
cat "$td/age/lab.agekey" "$td/age/edge.agekey" > "$td/age/both.agekey"

recipient() { "$keygen" -y "$1"; }
lab=$(recipient "$td/age/lab.agekey")
edge=$(recipient "$td/age/edge.agekey")
demo=$(recipient "$td/demo/demo.agekey")

# encrypt RECIPIENT PLAIN OUT: run from an empty directory so no .sops.yaml applies.
encrypt() {
  (cd "$work" && "$sops" encrypt --age "$1" --input-type yaml --output-type yaml "$2") > "$3"
}

for f in valid rotated missing-entry malformed-shape malformed-sshkey neither clear-value; do
  encrypt "$lab" "$td/plain/$f.yaml" "$td/$f.sops.yaml"
done
encrypt "$edge" "$td/plain/edge.yaml" "$td/edge.sops.yaml"

# Encrypted to a key that is thrown away at once: nobody can decrypt it.
"$keygen" -o "$work/gone" 2>/dev/null
encrypt "$(recipient "$work/gone")" "$td/plain/valid.yaml" "$td/wrong-key.sops.yaml"
rm -f "$work/gone"

# A plain YAML file with the right shape and no sops metadata.
cp "$td/plain/valid.yaml" "$td/unencrypted.yaml"

# flip FILE LINE-PATTERN: change the first base64 character of data: on the matching line (still valid
# base64, so only authentication can catch it).
flip() {
  sed -E -i "/$2/{s/data:A/data:B/;t;s/data:[^,]/data:A/}" "$1"
}
cp "$td/valid.sops.yaml" "$td/tampered-value.sops.yaml"
flip "$td/tampered-value.sops.yaml" '^ +proxops-token: ENC'
cp "$td/valid.sops.yaml" "$td/tampered-mac.sops.yaml"
flip "$td/tampered-mac.sops.yaml" '^ +mac: ENC'
# An entry deleted after encryption: every remaining value authenticates, the MAC does not.
grep -v -E '^ +proxops-git-token: ENC' "$td/valid.sops.yaml" > "$td/entry-removed.sops.yaml"

# The demo set follows the documented workflow: a .sops.yaml creation rule, then sops encrypt.
cat > "$td/demo/.sops.yaml" <<RULES
# Which age recipients sops encrypts the demo's secrets files to (the public half of demo.agekey).
creation_rules:
  - path_regex: secrets\.sops\.yaml\$
    age: ${demo}
RULES
(cd "$td/demo" && "$sops" encrypt --filename-override secrets.sops.yaml secrets.plain.yaml) > "$td/demo/secrets.sops.yaml"
# The same file after a token rotation (committed over secrets.sops.yaml by the rotation tests).
(cd "$td/demo" && "$sops" encrypt --filename-override secrets.sops.yaml rotated.plain.yaml) > "$td/demo/rotated.sops.yaml"
# The demo repository carries the cluster's secrets file.
cp "$td/demo/secrets.sops.yaml" "$root/examples/demo/clusters/demo/secrets.sops.yaml"

for f in "$td"/*.sops.yaml "$td/demo/secrets.sops.yaml" "$td/demo/rotated.sops.yaml"; do
  if ! grep -q '^sops:' "$f"; then echo "not encrypted: $f" >&2; exit 1; fi
done
echo "fixtures written under ${td#"$root"/}"
