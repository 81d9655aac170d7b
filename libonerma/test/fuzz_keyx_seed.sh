#!/bin/sh
# fuzz_keyx_seed.sh OUT: a credentials bundle seed for fuzz_keyx (its first
# byte 0x01 picks the bundle parser), made fresh with the openssl command
# so that no private key lives in the tree: a P-256 CA, a client
# certificate it signed, that certificate's key in PKCS #8.
set -eu
out=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cd "$tmp"
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout ca.key -out ca.pem \
	-subj "/O=OneRMA keyx/CN=fuzz" -days 1 -addext basicConstraints=critical,CA:TRUE \
	-addext keyUsage=critical,keyCertSign,cRLSign 2>/dev/null
openssl req -new -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout leaf.key -out leaf.csr \
	-subj "/O=OneRMA keyx/CN=fuzz client" 2>/dev/null
printf 'extendedKeyUsage=clientAuth\nkeyUsage=critical,digitalSignature\n' >ext
openssl x509 -req -in leaf.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 1 -extfile ext -out leaf.pem 2>/dev/null
openssl pkcs8 -topk8 -nocrypt -in leaf.key -out leaf.p8
{ printf '\001'; cat ca.pem leaf.pem leaf.p8; } >"$out"
