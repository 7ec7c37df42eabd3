#!/usr/bin/env bash
# The web page's tests: a real `weir serve` driven in Debian's headless Chromium by
# playwright-core (node's test runner, tests/web/page.test.js). Installs what they need when it
# is missing: Debian's chromium (apt) and the pinned npm packages (npm ci; playwright-core never
# downloads a browser). Uses the weir binary the cargo tests build; with WEIR_KAFKA_BOOTSTRAP
# set (tests/run.sh sets it) the exactly-once panel is tested against that broker.
# Screenshots land in tests/web/screenshots/ (or $WEIR_WEB_SCREENSHOTS).
set -euo pipefail

cd "$(dirname "$0")"
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$HOME/.cache/weir/target}

if [[ ! -x ${WEIR_CHROMIUM:-/usr/bin/chromium} ]]; then
  echo "web tests: installing chromium from Debian's packages" >&2
  sudo=""
  [[ $(id -u) -ne 0 ]] && sudo=sudo
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get install -y -qq chromium >/dev/null || { $sudo apt-get update -qq && $sudo apt-get install -y -qq chromium >/dev/null; }
fi
echo "web tests: npm ci" >&2
npm ci --no-audit --no-fund --loglevel=error
if [[ -z ${WEIR_BIN:-} ]]; then
  # The same build as the cargo tests' (the binary their integration tests run): nothing to do
  # after them, and no second feature set compiled.
  cargo test --workspace --all-features --no-run --quiet
  export WEIR_BIN=$CARGO_TARGET_DIR/debug/weir
fi
echo "web tests: $WEIR_BIN in $(${WEIR_CHROMIUM:-/usr/bin/chromium} --version 2>/dev/null)" >&2
node --test --test-concurrency=1 --test-reporter=spec page.test.js
