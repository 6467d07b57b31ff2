#!/usr/bin/env bash
# Installs and starts the optional system tools the test suite can use, when that is possible:
#   bubblewrap  - the sandbox's read-only root and network isolation
#   postgresql  - the results store's tests against a real server
#   docker.io   - the docker sandbox's tests against a real dockerd, with a base image built
#                 locally by debootstrap (no image registry is needed)
# Without root or apt it only reports what is missing; the tests that need it skip and say why.
# AGENTFORGE_NO_DOCKER=1 skips the docker part (it is the slow one on a new machine).
set -u
say() { echo "system-deps: $*"; }
can_install() { [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; }

missing=()
command -v bwrap >/dev/null 2>&1 || missing+=(bubblewrap)
ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || missing+=(postgresql)
if [ "${AGENTFORGE_NO_DOCKER:-0}" != 1 ]; then
    command -v dockerd >/dev/null 2>&1 || missing+=(docker.io)
    command -v debootstrap >/dev/null 2>&1 || missing+=(debootstrap)
fi
if [ ${#missing[@]} -gt 0 ]; then
    if can_install; then
        say "installing ${missing[*]}"
        (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}") >/dev/null 2>&1 \
            || say "could not install ${missing[*]}: the tests that need them will skip"
    else
        say "not installed: ${missing[*]}; the tests that need them skip"
    fi
fi

[ "${AGENTFORGE_NO_DOCKER:-0}" = 1 ] && exit 0
command -v dockerd >/dev/null 2>&1 && can_install || exit 0
if ! timeout 10 docker info >/dev/null 2>&1; then
    say "starting dockerd"
    (setsid dockerd >/tmp/agentforge-dockerd.log 2>&1 &)
    for _ in $(seq 30); do timeout 5 docker info >/dev/null 2>&1 && break; sleep 1; done
fi
timeout 10 docker info >/dev/null 2>&1 || { say "dockerd did not start: docker tests skip"; exit 0; }
if ! docker image inspect agentforge-base:local >/dev/null 2>&1 && command -v debootstrap >/dev/null 2>&1; then
    say "building agentforge-base:local with debootstrap (a few minutes, once per machine)"
    rootfs=$(mktemp -d)
    if timeout 900 debootstrap --variant=minbase --include=python3 bookworm "$rootfs" >/tmp/agentforge-debootstrap.log 2>&1; then
        tar -C "$rootfs" -c . | docker import - agentforge-base:local >/dev/null || say "docker import failed"
    else
        say "debootstrap failed (see /tmp/agentforge-debootstrap.log): docker tests skip"
    fi
    rm -rf "$rootfs"
fi
exit 0
