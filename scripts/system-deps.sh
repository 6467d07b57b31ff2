#!/usr/bin/env bash
# Installs the optional system tools the test suite can use, when that is possible here:
#   bubblewrap  - the sandbox's read-only root and network isolation
#   postgresql  - the results store's tests against a real server
# Without root or apt, it only reports what is missing; the tests that need it skip.
set -u
missing=()
command -v bwrap >/dev/null 2>&1 || missing+=(bubblewrap)
ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || missing+=(postgresql)
[ ${#missing[@]} -eq 0 ] && exit 0
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "installing ${missing[*]} (apt)"
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}") >/dev/null 2>&1 \
        || echo "could not install ${missing[*]}: the tests that need them will skip"
else
    echo "not installed: ${missing[*]} (run as root with apt, or install them); the tests that need them skip"
fi
exit 0
