# posenc container image: `posenc serve` (engine + HTTP workers) on port 8000 and its KServe v2
# gRPC server on port 8001, configured by
# POSENC_* environment variables (service/core/settings.py). Build from the repository root:
#
#     docker build -t posenc:0.1.0 .
#
# docs/deploy.md covers running it, /dev/shm sizing and the Kubernetes manifests in deploy/.

# One pin for both stages: the tag says what it is, the digest (the multi-arch index of
# python:3.11.14-slim-bookworm) makes the build reproducible. Renovate/Dependabot can bump it;
# override with --build-arg PYTHON_IMAGE=... to try another base.
ARG PYTHON_IMAGE=python:3.11.14-slim-bookworm@sha256:65a93d69fa75478d554f4ad27c85c1e69fa184956261b4301ebaf6dbb0a3543d

# ---------------------------------------------------------------------------------------------
# builder: a C toolchain, so setup.py compiles the optional SIMD kernels (engine/kernels/_native)
# into the wheel. Nothing from this stage ships except the wheels it produces.
FROM ${PYTHON_IMAGE} AS builder

# Builder-only packages never reach the runtime image and Debian revisions of build-essential
# change under a stable release, so pinning them would only make rebuilds fail: the base image
# digest above is the reproducibility pin.
# libnghttp2-dev: the header the gRPC lane's extension (service/grpclane/_h2.c) builds against.
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends build-essential libnghttp2-dev \
    && rm -rf /var/lib/apt/lists/*

WORKDIR /src
# .dockerignore keeps the context to what `pip install .` needs.
COPY . .
# The README's install (`pip install .`) split in two: build posenc's wheel and a wheel of every
# dependency here, so the runtime stage installs offline, without a compiler. setup.py treats the
# C kernels as optional (a failed compile falls back to numpy quietly); the image must have them,
# so the build stops if the wheel lacks the compiled posenc/engine/kernels/_native*.so or the gRPC
# lane's posenc/service/grpclane/_h2*.so.
RUN pip wheel --no-cache-dir --wheel-dir /wheels . \
    && python -c "import glob, sys, zipfile; names = zipfile.ZipFile(glob.glob('/wheels/posenc-*.whl')[0]).namelist(); sys.exit(not all(any(n.startswith(p) and n.endswith('.so') for n in names) for p in ('posenc/engine/kernels/_native.', 'posenc/service/grpclane/_h2.')))"

# ---------------------------------------------------------------------------------------------
# runtime: the slim base, the wheels, a non-root user. No compiler, no torch (not needed to serve).
FROM ${PYTHON_IMAGE}

LABEL org.opencontainers.image.title="posenc" \
      org.opencontainers.image.description="Positional-encoding tables (RoPE, sinusoidal, ALiBi, T5) in shared memory, served over HTTP" \
      org.opencontainers.image.licenses="Apache-2.0"

ENV PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

# libnghttp2-14: the library the gRPC lane's extension links (named here, not left to the base image).
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends libnghttp2-14 \
    && rm -rf /var/lib/apt/lists/*

# The wheels are bind-mounted from the builder, not copied, so they add no layer to the image.
RUN --mount=type=bind,from=builder,source=/wheels,target=/wheels \
    pip install --no-cache-dir --no-index --find-links=/wheels /wheels/posenc-*.whl \
    && groupadd --system --gid 10001 posenc \
    && useradd --system --uid 10001 --gid posenc --no-create-home \
        --home-dir /nonexistent --shell /usr/sbin/nologin posenc

# The example co-located reader used by deploy/k8s/colocated (a few lines; see the script).
COPY deploy/examples/worker.py /opt/posenc/examples/worker.py

# Inside a container the service must listen on every interface, not the 127.0.0.1 default.
# POSENC_WORKERS is left unset: it defaults to the CPUs the process may run on; set it to the
# container's CPU limit (`--cpus` does not narrow CPU affinity, so the default would count them all).
ENV POSENC_HOST=0.0.0.0 \
    POSENC_PORT=8000 \
    POSENC_GRPC_PORT=8001 \
    POSENC_SHM_DIR=/dev/shm

# Numeric, so Kubernetes' runAsNonRoot can verify it without reading /etc/passwd.
USER 10001:10001

EXPOSE 8000 8001

# No curl in the slim image: the standard library does the probe. urlopen raises on any non-2xx,
# so the exit status is the health. Liveness only; readiness (/readyz) is the orchestrator's job.
# With POSENC_TLS_CERT set the service speaks only HTTPS: the probe does too, without checking the
# certificate (it names the service, not 127.0.0.1, and this is the container's own loopback).
HEALTHCHECK --interval=15s --timeout=3s --start-period=30s --retries=3 \
    CMD ["python", "-c", "import os, ssl, urllib.request; tls = bool(os.environ.get('POSENC_TLS_CERT')); urllib.request.urlopen(('https' if tls else 'http') + '://127.0.0.1:' + os.environ.get('POSENC_PORT', '8000') + '/healthz', timeout=2, context=ssl._create_unverified_context() if tls else None)"]

ENTRYPOINT ["posenc"]
CMD ["serve"]
