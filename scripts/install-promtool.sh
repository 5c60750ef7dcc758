#!/bin/sh
# Install Debian's `prometheus` package for its `promtool`, if missing: tests/deploy checks the
# shipped alerting rules with `promtool check rules` and unit-tests them with `promtool test
# rules` (they skip, saying so, without it). Needs root (or sudo) and apt; elsewhere install
# promtool yourself. The package's server is not started (no init system runs it here).
set -eu
if command -v promtool >/dev/null 2>&1; then
    echo "promtool present: $(promtool --version 2>&1 | head -n 1)"
    exit 0
fi
if ! command -v apt-get >/dev/null 2>&1; then
    echo "install-promtool: no apt-get here; install promtool to run the rules tests in tests/deploy" >&2
    exit 1
fi
SUDO=""
if [ "$(id -u)" -ne 0 ]; then
    SUDO="sudo"
fi
$SUDO apt-get update
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y --no-install-recommends prometheus
promtool --version 2>&1 | head -n 1
