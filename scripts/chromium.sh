#!/usr/bin/env bash
# Runs a command with headless Chromium available: Debian's `chromium` package, installed
# here when missing (as root, through apt-get). The command finds the browser in $CHROMIUM.
#
#   scripts/chromium.sh COMMAND [ARGS...]
#
# A machine that cannot install it fails, naming what to install (make conformance: nothing is
# skipped). With ORRERY_CONFORMANCE_OPTIONAL=1 it prints "SKIPPED: <reason>" and exits 0
# without running COMMAND instead: the browser check then counts as not run, never as passed.
set -euo pipefail
skip() {
    if [ "${ORRERY_CONFORMANCE_OPTIONAL:-0}" = "1" ]; then
        echo "SKIPPED: the browser check of reports/index.html did not run: $1"
        exit 0
    fi
    echo "browser-check: $1 (install Debian's chromium package: apt-get install chromium)" >&2
    exit 1
}
browser="${CHROMIUM:-$(command -v chromium || true)}"
if [ -z "$browser" ]; then
    command -v apt-get >/dev/null || skip "no chromium and no apt-get to install Debian's package"
    [ "$(id -u)" = 0 ] || skip "no chromium, and installing Debian's package needs root (apt-get install chromium)"
    echo "browser: installing Debian's chromium package (first run only)"
    if ! DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium > /tmp/orrery-chromium-install.log 2>&1; then
        apt-get update -q > /dev/null 2>&1 || true
        DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium > /tmp/orrery-chromium-install.log 2>&1 \
            || { tail -3 /tmp/orrery-chromium-install.log; skip "apt-get install chromium failed (above)"; }
    fi
    browser="$(command -v chromium || true)"
    [ -n "$browser" ] || skip "the chromium package installed no chromium command"
fi
"$browser" --version > /dev/null 2>&1 || skip "$browser does not start"
export CHROMIUM="$browser"
exec "$@"
