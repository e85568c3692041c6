#!/usr/bin/env bash
# Installs what the tests need beyond the Rust toolchain, pinned:
# - moto's S3-compatible server (scripts/requirements-test.txt) in a
#   virtualenv at target/test-venv, for the tiering tests;
# - the JavaScript test tools (js-tests/package-lock.json: the conformance
#   suite, and puppeteer-core for the console's browser test), one npm ci;
# - Debian's nftables, for the partition test's packet drops;
# - Debian's openssl, for the TLS tests' throwaway certificates;
# - Debian's chromium, for the console's browser test;
# - Debian's nginx (light), the caching proxy of the cache test;
# - Debian's mold, the linker CI builds with.
# Re-running it is cheap: each part is skipped when already installed at
# the pinned versions.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)

venv=$root/target/test-venv
requirements=$root/scripts/requirements-test.txt
if [ ! -x "$venv/bin/moto_server" ] || ! cmp -s "$requirements" "$venv/.installed-requirements"; then
  echo "== installing moto (S3 test server) into $venv"
  python3 -m venv "$venv"
  "$venv/bin/pip" install --quiet --disable-pip-version-check -r "$requirements"
  cp "$requirements" "$venv/.installed-requirements"
fi

js=$root/js-tests
if ! cmp -s "$js/package-lock.json" "$js/node_modules/.installed-lock" 2>/dev/null; then
  echo "== installing the JavaScript test tools (npm ci in js-tests)"
  (cd "$js" && npm ci --no-audit --no-fund --loglevel=error >/dev/null)
  cp "$js/package-lock.json" "$js/node_modules/.installed-lock"
fi

# The partition test drops packets with nftables inside its namespaces.
nftables_version=1.0.6-2+deb12u2
if ! command -v nft >/dev/null; then
  echo "== installing nftables $nftables_version (partition test)"
  export DEBIAN_FRONTEND=noninteractive
  apt-get install -y -q "nftables=$nftables_version" >/dev/null ||
    { apt-get update -q >/dev/null && apt-get install -y -q "nftables=$nftables_version" >/dev/null; }
fi

# mold links the test and server binaries (scripts/linker.sh uses it when
# it is there; a fresh machine without it links with the default linker).
mold_version=1.10.1+dfsg-1
if [ "$(dpkg-query -W -f='${Version}' mold 2>/dev/null)" != "$mold_version" ]; then
  echo "== installing mold $mold_version (linker)"
  export DEBIAN_FRONTEND=noninteractive
  apt-get install -y -q "mold=$mold_version" >/dev/null ||
    { apt-get update -q >/dev/null && apt-get install -y -q "mold=$mold_version" >/dev/null; }
fi

# The TLS tests make their certificates with openssl (scripts/test-ca.sh).
openssl_version=3.0.19-1~deb12u2
if ! command -v openssl >/dev/null; then
  echo "== installing openssl $openssl_version (TLS tests)"
  export DEBIAN_FRONTEND=noninteractive
  apt-get install -y -q "openssl=$openssl_version" >/dev/null ||
    { apt-get update -q >/dev/null && apt-get install -y -q "openssl=$openssl_version" >/dev/null; }
fi

# The cache test puts Debian's nginx in front of the server
# (scripts/cache-proxy.sh); the package's own service is not started.
nginx_version=1.22.1-9+deb12u7
if [ "$(dpkg-query -W -f='${Version}' nginx-light 2>/dev/null)" != "$nginx_version" ]; then
  echo "== installing nginx-light $nginx_version (cache test)"
  export DEBIAN_FRONTEND=noninteractive
  # Keep the package's scripts from starting a server on port 80 (a
  # policy already in place, as container images have, is kept).
  own_policy=
  if [ ! -e /usr/sbin/policy-rc.d ]; then
    printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d && chmod +x /usr/sbin/policy-rc.d
    own_policy=1
  fi
  apt-get install -y -q "nginx-light=$nginx_version" "nginx-common=$nginx_version" >/dev/null ||
    { apt-get update -q >/dev/null &&
      apt-get install -y -q "nginx-light=$nginx_version" "nginx-common=$nginx_version" >/dev/null; }
  if [ -n "$own_policy" ]; then rm -f /usr/sbin/policy-rc.d; fi
fi

# The console's browser test drives Debian's chromium (scripts/console-test.sh).
chromium_version=148.0.7778.167-1~deb12u1
if [ "$(dpkg-query -W -f='${Version}' chromium 2>/dev/null)" != "$chromium_version" ]; then
  echo "== installing chromium $chromium_version (console test)"
  export DEBIAN_FRONTEND=noninteractive
  apt-get install -y -q "chromium=$chromium_version" >/dev/null ||
    { apt-get update -q >/dev/null && apt-get install -y -q "chromium=$chromium_version" >/dev/null; }
fi
