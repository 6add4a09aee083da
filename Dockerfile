# syntax=docker/dockerfile:1
# The reconciler daemon's image: `docker build -t gpu-gitops-reconciler .`
# Pinned base (for reproducible builds pin the digest too: python:3.11.11-slim-bookworm@sha256:...).
ARG PYTHON_IMAGE=python:3.11.11-slim-bookworm

# -- build: the wheel, and a virtualenv with it and its dependencies -------------------------------
FROM ${PYTHON_IMAGE} AS build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 PYTHONDONTWRITEBYTECODE=1
WORKDIR /src
COPY pyproject.toml README.md constraints.txt ./
COPY schemas/ schemas/
COPY reconciler/ reconciler/
# The runtime dependencies and the build backend at the versions constraints.txt pins (the
# same as scripts/install's; pins of test tools the wheel does not ask for are unused).
RUN export PIP_CONSTRAINT="$PWD/constraints.txt" \
 && python -m pip wheel --no-deps --wheel-dir /dist . \
 && python -m venv /opt/reconciler \
 && /opt/reconciler/bin/pip install /dist/*.whl \
 && /opt/reconciler/bin/reconciler --help > /dev/null

# -- runtime: the virtualenv, git and ssh, a non-root user ----------------------------------------
FROM ${PYTHON_IMAGE}
LABEL org.opencontainers.image.title="gpu-gitops-reconciler" \
      org.opencontainers.image.description="GitOps reconciler for GPU driver and firmware upgrades" \
      org.opencontainers.image.licenses="Apache-2.0"
# git and ssh talk to the policy repository; Debian's security updates are wanted, so the
# packages follow bookworm rather than an exact version that the archive drops.
# hadolint ignore=DL3008
RUN apt-get update \
 && apt-get install -y --no-install-recommends git openssh-client ca-certificates \
 && rm -rf /var/lib/apt/lists/* \
 && groupadd --gid 10001 reconciler \
 && useradd --uid 10001 --gid 10001 --home-dir /var/lib/gpu-reconciler --create-home \
      --shell /usr/sbin/nologin reconciler
COPY --from=build /opt/reconciler /opt/reconciler
ENV PATH=/opt/reconciler/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    HOME=/var/lib/gpu-reconciler
USER 10001:10001
WORKDIR /var/lib/gpu-reconciler
# 8080: /healthz /readyz /metrics; 9000: the Git host's push webhook
EXPOSE 8080 9000
HEALTHCHECK --interval=30s --timeout=5s --start-period=30s --retries=3 \
  CMD ["python", "-c", "import sys, urllib.request; sys.exit(urllib.request.urlopen('http://127.0.0.1:8080/healthz', timeout=4).status != 200)"]
ENTRYPOINT ["reconciler"]
CMD ["run", "--help"]
