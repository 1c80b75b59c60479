#!/usr/bin/env bash
# Makes throwaway certificates for running Lockstep over mutual TLS: a fresh
# CA, a server certificate, and worker and admin client certificates, all
# EC P-256, signed by that CA. For trying TLS out on one machine or a test
# cluster -- not a PKI: the CA key sits next to the certificates.
#
#   deploy/tls/make_certs.sh DIR [--server-san=SAN[,SAN...]] [--days=N] [--force]
#
# Writes into DIR (created 0700; keys 0600):
#   ca.pem, ca.key          the CA ("Lockstep throwaway CA <random>")
#   server.pem, server.key  CN lockstep-server; SAN localhost, 127.0.0.1, ::1
#                           and every --server-san (e.g. DNS:*.lockstep-ps)
#   worker.pem, worker.key  CN lockstep-worker; client and server use (the
#                           grpc-ring all-reduce serves too): SAN localhost,
#                           127.0.0.1
#   admin.pem, admin.key    CN lockstep-admin; client use only
# Servers: --tls_cert=DIR/server.pem --tls_key=DIR/server.key
#          --tls_ca=DIR/ca.pem --admin_identities=lockstep-admin
# Workers: --tls_cert=DIR/worker.pem --tls_key=DIR/worker.key --tls_ca=DIR/ca.pem
# When DIR already holds a complete set valid for another day, it is kept
# (pass --force to make a new one). Each file is moved into place by rename.
# Needs the openssl command (Debian package openssl).
set -euo pipefail

usage() {
  sed -n '2,/^set -euo/p' "$0" | sed -e '$d' -e 's/^# \{0,1\}//' >&2
  exit 2
}

dir=""
days=30
force=0
server_sans=()
for arg in "$@"; do
  case "$arg" in
    --server-san=*) IFS=, read -r -a more <<<"${arg#*=}"; server_sans+=("${more[@]}") ;;
    --days=*) days="${arg#*=}" ;;
    --force) force=1 ;;
    -h|--help) usage ;;
    -*) echo "make_certs.sh: unknown option $arg" >&2; usage ;;
    *) [[ -z "$dir" ]] || usage; dir="$arg" ;;
  esac
done
[[ -n "$dir" ]] || usage
[[ "$days" =~ ^[0-9]+$ && "$days" -ge 1 ]] || { echo "make_certs.sh: --days must be a positive integer" >&2; exit 2; }
command -v openssl >/dev/null 2>&1 || { echo "make_certs.sh: needs openssl (apt-get install openssl)" >&2; exit 1; }

files=(ca.pem ca.key server.pem server.key worker.pem worker.key admin.pem admin.key)
if [[ $force -eq 0 ]]; then
  complete=1
  for f in "${files[@]}"; do [[ -s "$dir/$f" ]] || complete=0; done
  if [[ $complete -eq 1 ]] &&
     openssl x509 -checkend 86400 -noout -in "$dir/server.pem" >/dev/null 2>&1 &&
     openssl x509 -checkend 86400 -noout -in "$dir/worker.pem" >/dev/null 2>&1; then
    echo "Using the certificates in $dir"
    exit 0
  fi
fi

umask 077
mkdir -p "$dir"
work="$(mktemp -d "$dir/.make_certs.XXXXXX")"
trap 'rm -rf "$work"' EXIT

new_key() {  # new_key FILE
  openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$1" 2>/dev/null
}

# sign NAME CN EXTENSIONS: NAME.key and NAME.pem signed by the CA.
sign() {
  local name="$1" cn="$2" ext="$3"
  new_key "$work/$name.key"
  openssl req -new -key "$work/$name.key" -subj "/O=Lockstep/CN=$cn" \
    -out "$work/$name.csr"
  printf '%s\n' "$ext" >"$work/$name.ext"
  openssl x509 -req -in "$work/$name.csr" -CA "$work/ca.pem" \
    -CAkey "$work/ca.key" -set_serial "0x$(openssl rand -hex 16)" \
    -days "$days" -sha256 -extfile "$work/$name.ext" -out "$work/$name.pem" \
    2>/dev/null
}

new_key "$work/ca.key"
openssl req -x509 -new -key "$work/ca.key" -sha256 -days "$days" \
  -subj "/O=Lockstep/CN=Lockstep throwaway CA $(openssl rand -hex 4)" \
  -addext "basicConstraints=critical,CA:TRUE,pathlen:0" \
  -addext "keyUsage=critical,keyCertSign,cRLSign" -out "$work/ca.pem"

san="DNS:localhost,IP:127.0.0.1,IP:::1"
for s in "${server_sans[@]}"; do san="$san,$s"; done
leaf="basicConstraints=critical,CA:FALSE
keyUsage=critical,digitalSignature,keyEncipherment"
sign server lockstep-server "$leaf
extendedKeyUsage=serverAuth
subjectAltName=$san"
sign worker lockstep-worker "$leaf
extendedKeyUsage=clientAuth,serverAuth
subjectAltName=DNS:lockstep-worker,DNS:localhost,IP:127.0.0.1"
sign admin lockstep-admin "$leaf
extendedKeyUsage=clientAuth
subjectAltName=DNS:lockstep-admin"

chmod 0644 "$work"/*.pem
for f in "${files[@]}"; do mv -f "$work/$f" "$dir/$f"; done
echo "Made a throwaway CA and server, worker and admin certificates in $dir"
