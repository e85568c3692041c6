#!/bin/sh
# The linker cargo calls (.cargo/config.toml): the C compiler driver, with
# mold when it is installed (scripts/install-test-deps.sh installs it for
# CI: it links the large test and server binaries several times faster),
# else the system's default linker, so a fresh machine builds as it is.
if command -v mold >/dev/null 2>&1; then
  exec cc -fuse-ld=mold "$@"
fi
exec cc "$@"
