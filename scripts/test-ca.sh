#!/usr/bin/env bash
# Makes throwaway certificates for the TLS tests in DIR, with openssl:
#   ca.pem, ca.key               a cluster/test CA
#   server.pem, server.key       for localhost and 127.0.0.1, from ca
#   node-I.pem, node-I.key       I in 1..NODES: names node-I.runnel (and
#                                localhost, 127.0.0.1), from ca
#   rogue-ca.pem, rogue-node-I.* certificates naming node-I.runnel from
#                                another CA, which peers must refuse
#   other-server.pem/.key        another certificate for localhost from ca
#                                (a reload test swaps it in)
# Valid for two days. Usage: scripts/test-ca.sh DIR [NODES]
set -euo pipefail
dir=$1
nodes=${2:-3}
mkdir -p "$dir"
cd "$dir"

new_key() { openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$1" 2>/dev/null; }
new_ca() { # NAME SUBJECT
  new_key "$1.key"
  openssl req -x509 -new -key "$1.key" -out "$1.pem" -days 2 -subj "/CN=$2" \
    -addext "basicConstraints=critical,CA:TRUE" \
    -addext "keyUsage=critical,keyCertSign,cRLSign" 2>/dev/null
}
new_leaf() { # NAME CA SUBJECT-ALT-NAMES
  new_key "$1.key"
  openssl req -new -key "$1.key" -out "$1.csr" -subj "/CN=$1" 2>/dev/null
  printf 'subjectAltName=%s\nextendedKeyUsage=serverAuth,clientAuth\nbasicConstraints=critical,CA:FALSE\nkeyUsage=critical,digitalSignature\n' "$3" >"$1.ext"
  openssl x509 -req -in "$1.csr" -CA "$2.pem" -CAkey "$2.key" -CAcreateserial \
    -out "$1.pem" -days 2 -extfile "$1.ext" 2>/dev/null
  rm -f "$1.csr" "$1.ext"
}

new_ca ca "runnel test CA"
new_ca rogue-ca "another CA"
local_names="DNS:localhost,IP:127.0.0.1"
new_leaf server ca "$local_names"
new_leaf other-server ca "$local_names"
for i in $(seq "$nodes"); do
  new_leaf "node-$i" ca "DNS:node-$i.runnel,$local_names"
  new_leaf "rogue-node-$i" rogue-ca "DNS:node-$i.runnel,$local_names"
done
