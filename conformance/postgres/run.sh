#!/usr/bin/env bash
# Runs a command with a real PostgreSQL server on loopback (the control plane's store in real
# mode), started as a plain process like the conformance kube-apiserver: the envtest approach.
#
#   conformance/postgres/run.sh COMMAND [ARGS...]
#
# 1. Finds Debian's PostgreSQL (postgresql-15: /usr/lib/postgresql/<version>/bin). Where it is
#    not installed, downloads the packages from the Debian archive once, without root
#    (`apt-get download` + `dpkg -x` into $ORRERY_CACHE (default ~/.cache/orrery)/postgresql-<version>).
# 2. initdb into a scratch directory (as the `postgres` user when run as root: the server
#    refuses to run as root), with password authentication (SCRAM) for a superuser `orrery`,
#    and starts the server on a free loopback port.
# 3. Exports ORRERY_POSTGRES_URL=postgres://orrery:<password>@127.0.0.1:<port>/postgres for
#    COMMAND (tests create their own databases in it), and stops the server and removes the
#    scratch directory when COMMAND ends, whatever its result. (Not ORRERY_DATABASE_URL: that
#    is what `orrery serve control-plane` reads, and every control plane the tests start would
#    take this one database.)
# 4. With openssl: the server also speaks TLS with a certificate for 127.0.0.1 that a
#    throwaway CA signed, exported as ORRERY_POSTGRES_CA (and a CA that signed nothing as
#    ORRERY_POSTGRES_OTHER_CA); role orrery_tls, should a test create it, may log in over
#    TLS only.
#
# With ORRERY_CONFORMANCE_OPTIONAL=1, a machine that cannot install or start it prints
# "POSTGRES SKIPPED: <reason>" and runs COMMAND without ORRERY_POSTGRES_URL (the PostgreSQL
# tests then say they were skipped, never that they passed); otherwise that is an error.
set -euo pipefail
# With a Docker engine (or ORRERY_CONTAINERS=on) the server runs in a container instead,
# through testcontainers (conformance/containers.sh); ORRERY_CONTAINERS=off keeps this path.
path="$("$(dirname "$0")/../containers.sh" --which)"
if [ "$path" = containers ]; then
    exec "$(dirname "$0")/../containers.sh" --postgres -- "$@"
fi

command_args=("$@")
skip() {
    if [ "${ORRERY_CONFORMANCE_OPTIONAL:-0}" = "1" ]; then
        echo "POSTGRES SKIPPED: $1"
        unset ORRERY_POSTGRES_URL
        # exec would skip the EXIT trap: clean up first.
        if declare -F cleanup >/dev/null; then cleanup; trap - EXIT; fi
        exec "${command_args[@]}"
    fi
    echo "conformance/postgres: $1" >&2
    exit 1
}

bindir="$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1 || true)"
if [ -z "$bindir" ] || [ ! -x "$bindir/initdb" ]; then
    command -v apt-get >/dev/null || skip "PostgreSQL is not installed and apt-get is missing (install Debian's postgresql-15)"
    version="$(apt-cache policy postgresql-15 2>/dev/null | awk '/Candidate:/ {print $2}' || true)"
    [ -n "$version" ] && [ "$version" != "(none)" ] || skip "no postgresql-15 package in the apt sources (run apt-get update?)"
    cache="${ORRERY_CACHE:-$HOME/.cache/orrery}/postgresql-${version//[:~+]/_}"
    mkdir -p "$(dirname "$cache")"
    exec 7>"$cache.lock"
    flock 7
    if [ ! -x "$cache/usr/lib/postgresql/15/bin/initdb" ]; then
        echo "conformance/postgres: installing postgresql-15 $version from the Debian archive into $cache (first run only)"
        tmp="$(mktemp -d "${TMPDIR:-/tmp}/orrery-pg-dl.XXXXXX")"
        if ! (cd "$tmp" && apt-get download postgresql-15 libpq5 libllvm14 libicu72 libxslt1.1 libxml2 libz3-4 >"$tmp/download.log" 2>&1); then
            tail -5 "$tmp/download.log" >&2
            skip "apt-get download postgresql-15 failed"
        fi
        mkdir -p "$cache.tmp"
        for deb in "$tmp"/*.deb; do dpkg -x "$deb" "$cache.tmp"; done
        rm -rf "$tmp" "$cache" && mv "$cache.tmp" "$cache"
    fi
    flock -u 7
    bindir="$cache/usr/lib/postgresql/15/bin"
    export LD_LIBRARY_PATH="$cache/usr/lib/x86_64-linux-gnu:$cache/usr/lib/aarch64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fi
"$bindir/postgres" --version >/dev/null 2>&1 || skip "$bindir/postgres does not start on this machine: $("$bindir/postgres" --version 2>&1 | head -1)"
version="$("$bindir/postgres" --version | awk '{print $3}')"

# The server refuses to run as root: as root, it runs as the postgres user (Debian's package
# creates it), with a scratch directory that user owns.
as_server=()
if [ "$(id -u)" = 0 ]; then
    id postgres >/dev/null 2>&1 || skip "running as root and there is no postgres user to run the server as"
    as_server=(runuser -u postgres --)
fi

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
work="$(mktemp -d "${TMPDIR:-/tmp}/orrery-postgres.XXXXXX")"
password="$(python3 -c 'import secrets; print(secrets.token_hex(16))')"
(umask 077 && printf '%s\n' "$password" > "$work/pwfile")
[ ${#as_server[@]} -eq 0 ] || chown -R postgres "$work"
cleanup() {
    "${as_server[@]}" "$bindir/pg_ctl" -D "$work/data" -m immediate stop >/dev/null 2>&1 || true
    rm -rf "$work"
}
trap cleanup EXIT

if ! "${as_server[@]}" "$bindir/initdb" -D "$work/data" -U orrery --pwfile="$work/pwfile" \
        --auth=scram-sha-256 --encoding=UTF8 --locale=C.UTF-8 >"$work/initdb.log" 2>&1; then
    tail -20 "$work/initdb.log" >&2
    skip "initdb failed"
fi
rm -f "$work/pwfile"

# TLS (when openssl is here): a throwaway CA signs the server's certificate for 127.0.0.1;
# role orrery_tls may connect only over TLS (a hostnossl reject line ahead of the rest), so a
# test that logs in as it proves its connection was TLS. A second CA signed nothing here: a
# client that trusts only it must refuse the server.
tls_opts=""
if command -v openssl >/dev/null; then
    tls="$work/tls"
    mkdir -p "$tls"
    if "$(dirname "$0")/tls.sh" "$tls" >"$work/tls.log" 2>&1; then
        [ ${#as_server[@]} -eq 0 ] || chown -R postgres "$tls"
        hba="$work/data/pg_hba.conf"
        { echo "hostnossl all orrery_tls 0.0.0.0/0 reject"; cat "$hba"; } > "$hba.new" && mv "$hba.new" "$hba"
        [ ${#as_server[@]} -eq 0 ] || chown postgres "$hba"
        tls_opts="-c ssl=on -c ssl_cert_file=$tls/server.crt -c ssl_key_file=$tls/server.key"
        export ORRERY_POSTGRES_CA="$tls/ca.crt" ORRERY_POSTGRES_OTHER_CA="$tls/other-ca.crt"
    else
        echo "conformance/postgres: no TLS (openssl failed: $(tail -1 "$work/tls.log"))"
    fi
else
    echo "conformance/postgres: no TLS (openssl is not installed)"
fi

port="$(free_port)"
if ! "${as_server[@]}" "$bindir/pg_ctl" -D "$work/data" -l "$work/server.log" -w -t 30 \
        -o "-c listen_addresses=127.0.0.1 -p $port -k $work -c fsync=on $tls_opts" start >/dev/null 2>&1; then
    tail -20 "$work/server.log" >&2 || true
    skip "PostgreSQL $version did not start within 30 s"
fi
export ORRERY_POSTGRES_URL="postgres://orrery:$password@127.0.0.1:$port/postgres"
export ORRERY_POSTGRES_VERSION="$version"
echo "conformance/postgres: PostgreSQL $version ready on 127.0.0.1:$port"
# Not exec: the trap must stop the server when COMMAND ends.
"$@"
