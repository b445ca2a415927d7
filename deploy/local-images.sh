#!/usr/bin/env bash
# Build, from Debian packages, the three images docker compose otherwise pulls from a registry:
# the Python base of mocapline's images (PYTHON_IMAGE) and stand-ins for NATS and Prometheus
# (NATS_IMAGE, PROMETHEUS_IMAGE), tagged as deploy/local-images.env names them. For a machine that
# reaches Debian's archive and PyPI but no image registry; then:
#
#   docker compose --env-file .env --env-file deploy/local-images.env --profile demo up -d
#
# The base is `debootstrap --variant=minbase` of Debian 12 (its python3 is 3.11) with the host's CA
# bundle, so that builds inside it reach PyPI wherever the host does (TLS interception included).
# Images that exist are kept (layers are cached by docker too): --rebuild makes them again.
# Needs root (debootstrap) and a running docker engine. Builds use the host network (an engine
# started with --bridge=none has no other).
set -euo pipefail
cd "$(dirname "$0")/.."

rebuild=0
case "${1:-}" in
  --rebuild) rebuild=1 ;;
  "") ;;
  *) echo "usage: $0 [--rebuild]" >&2; exit 2 ;;
esac

set -a
# shellcheck source=local-images.env
. deploy/local-images.env
set +a
suite=bookworm
mirror=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
ca_bundle=${CA_BUNDLE:-/etc/ssl/certs/ca-certificates.crt}

step() {  # step NAME COMMAND...: run it and say how long it took
  local name=$1 start=$SECONDS
  shift
  "$@"
  echo "local-images: $name: $((SECONDS - start)) s"
}

root=""  # debootstrap's target, removed on exit
trap '[ -z "$root" ] || rm -rf "$root"' EXIT

have_image() { [ "$rebuild" = 0 ] && docker image inspect "$1" >/dev/null 2>&1; }

make_base() {
  command -v debootstrap >/dev/null || { apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q debootstrap; }
  root=$(mktemp -d /tmp/mocapline-rootfs.XXXXXX)
  debootstrap --variant=minbase --include=python3,python3-venv,python-is-python3,ca-certificates \
    "$suite" "$root" "$mirror" >/dev/null
  cp "$ca_bundle" "$root/etc/ssl/certs/ca-certificates.crt"
  # as Debian's official images: no package lists or downloaded .debs kept, in this or later layers
  rm -rf "$root"/var/lib/apt/lists/* "$root"/var/cache/apt/archives/*.deb "$root"/var/cache/apt/*.bin
  printf '%s\n' 'DPkg::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb /var/cache/apt/*.bin || true"; };' \
    'APT::Update::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb /var/cache/apt/*.bin || true"; };' \
    > "$root/etc/apt/apt.conf.d/docker-clean"
  tar -C "$root" -c . | docker import \
    --change 'ENV PIP_CERT=/etc/ssl/certs/ca-certificates.crt' \
    --change 'ENV SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt' \
    --change 'CMD ["python3"]' - "$PYTHON_IMAGE" >/dev/null
  rm -rf "$root"
}

stand_in() {  # stand_in TARGET TAG
  docker build -q --network host --build-arg BASE_IMAGE="$PYTHON_IMAGE" --target "$1" -t "$2" deploy/local >/dev/null
}

if have_image "$PYTHON_IMAGE"; then echo "local-images: $PYTHON_IMAGE exists"; else step "base $PYTHON_IMAGE (debootstrap)" make_base; fi
if have_image "$NATS_IMAGE"; then echo "local-images: $NATS_IMAGE exists"; else step "$NATS_IMAGE" stand_in nats "$NATS_IMAGE"; fi
if have_image "$PROMETHEUS_IMAGE"; then echo "local-images: $PROMETHEUS_IMAGE exists"; else step "$PROMETHEUS_IMAGE" stand_in prometheus "$PROMETHEUS_IMAGE"; fi
docker image ls --format '{{.Repository}}:{{.Tag}}  {{.Size}}' | grep -F -e "$PYTHON_IMAGE" -e "$NATS_IMAGE" -e "$PROMETHEUS_IMAGE"
