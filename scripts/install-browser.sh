#!/bin/sh
# Install Debian's Chromium for the dashboard's browser tests (tests/dashboard), if missing.
# The tests drive it with Playwright for Python (`executable_path=/usr/bin/chromium`); they never
# run `playwright install`. Needs root (or sudo) and apt; elsewhere install Chromium yourself.
set -eu
if [ -x /usr/bin/chromium ]; then
    echo "chromium present: $(/usr/bin/chromium --version 2>/dev/null || echo /usr/bin/chromium)"
    exit 0
fi
if ! command -v apt-get >/dev/null 2>&1; then
    echo "install-browser: no apt-get here; install Chromium at /usr/bin/chromium to run tests/dashboard" >&2
    exit 1
fi
SUDO=""
if [ "$(id -u)" -ne 0 ]; then
    SUDO="sudo"
fi
$SUDO apt-get update
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y chromium
/usr/bin/chromium --version
