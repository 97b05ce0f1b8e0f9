#!/usr/bin/env bash
# Makes the TLS material of the PostgreSQL conformance server in DIR (openssl):
#
#   conformance/postgres/tls.sh DIR
#
# ca.crt: a throwaway CA that signs server.crt/server.key, the server's certificate for
# 127.0.0.1 (and localhost); other-ca.crt: a second CA that signed nothing, so a client that
# trusts only it must refuse the server. Valid for two days. Used by conformance/postgres/run.sh
# (a local server) and conformance/containers.sh (PostgreSQL in a container), so both serve the
# same TLS test.
set -euo pipefail
dir="${1:?usage: conformance/postgres/tls.sh DIR}"
command -v openssl >/dev/null || { echo "openssl is not installed" >&2; exit 1; }
mkdir -p "$dir"
cd "$dir"
openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj "/CN=orrery test CA" \
    -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign" \
    -keyout ca.key -out ca.crt
openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj "/CN=orrery other CA" \
    -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign" \
    -keyout other-ca.key -out other-ca.crt
openssl req -newkey rsa:2048 -nodes -subj "/CN=127.0.0.1" -keyout server.key -out server.csr
printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n' > server.ext
openssl x509 -req -in server.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 2 \
    -extfile server.ext -out server.crt
chmod 600 server.key
