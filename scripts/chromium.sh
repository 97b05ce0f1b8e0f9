#!/usr/bin/env bash
# Runs a command with headless Chromium available: Debian's `chromium` package, installed
# here when missing (as root, through apt-get). The command finds the browser in $CHROMIUM.
#
#   scripts/chromium.sh COMMAND [ARGS...]
#
# A machine that cannot install it prints "SKIPPED: <reason>" and exits 0 without running
# COMMAND: the browser check counts as not run, never as passed.
set -euo pipefail
skip() { echo "SKIPPED: the browser check of reports/index.html did not run: $1"; exit 0; }
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
