#!/bin/sh
# Makes a self-signed development certificate for the TLS proxy, unless
# one is already there: DIR/wallet.pem holds the certificate, then its
# private key (the one file HAProxy's `crt` reads). A real certificate
# replaces that file (certificate, chain, then key); this script never
# overwrites it.
#
#   deploy/tls/dev-cert.sh DIR [NAME ...]
#
# The certificate names localhost, 127.0.0.1 and each NAME (a host name,
# or an IPv4 address), with a P-256 key, for 90 days. Browsers warn about it:
# it is for trying the service, not for players.
set -eu
dir=${1:?usage: dev-cert.sh DIR [NAME ...]}
shift
pem="$dir/wallet.pem"
if [ -s "$pem" ]; then
    echo "dev-cert: $pem exists; keeping it"
    exit 0
fi
mkdir -p "$dir"
names="DNS:localhost,IP:127.0.0.1"
for name in "$@"; do
    case "$name" in
        *[!0-9.]*) names="$names,DNS:$name" ;;
        *) names="$names,IP:$name" ;;
    esac
done
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 90 \
    -subj "/CN=wallet development" -addext "subjectAltName=$names" \
    -addext "extendedKeyUsage=serverAuth" \
    -keyout "$work/key.pem" -out "$work/cert.pem" 2>/dev/null
umask 077
cat "$work/cert.pem" "$work/key.pem" > "$pem.new"
mv "$pem.new" "$pem"
echo "dev-cert: made $pem for $names"
openssl x509 -in "$work/cert.pem" -noout -fingerprint -sha256
