# labctl CUDA image for people who have a registry: labctl + workloads on top of
# an image that already brings torch, CUDA and NCCL (e.g. pytorch/pytorch:*).
# The default, air-gapped build is ./Dockerfile; this one is used only when
# BASE_IMAGE is set:
#
#   BASE_IMAGE=pytorch/pytorch:<tag> bash images/build.sh cuda      # or: make images-cuda BASE_IMAGE=...
#
# The workloads need nothing but torch, so any Python the base has will do; torch's
# debug server frontend (--debug-server) also needs aiohttp, Jinja2 and tabulate, which
# pip installs when the base has pip and the build can reach an index (else rank 0 says
# the debug server lacks them, and the lab runs without it). images/build.sh labels the
# result with the versions torch reports.
ARG BASE_IMAGE
FROM ${BASE_IMAGE}

USER root
COPY src/labctl /opt/labctl/labctl
COPY src/workloads /opt/labctl/workloads
# Bases differ (conda in pytorch/pytorch, a venv in labctl-cpu): find their python.
RUN set -e; \
    PY=$(command -v python || command -v python3); \
    "$PY" -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda)"; \
    command -v python >/dev/null || ln -s "$PY" /usr/local/bin/python; \
    command -v torchrun >/dev/null || ln -s "$(dirname "$PY")/torchrun" /usr/local/bin/torchrun; \
    getent passwd 1000 >/dev/null || useradd --uid 1000 --user-group --create-home --home-dir /home/lab --shell /bin/bash lab; \
    mkdir -p /work && chown 1000:1000 /work; \
    chmod -R a+rX /opt/labctl; \
    "$PY" -m pip install -q "aiohttp>=3.9" "Jinja2>=3.1" "tabulate>=0.9" \
      || echo "note: no aiohttp/Jinja2/tabulate: --debug-server will not start in this image"

# `-m workloads` and `import labctl` work from any directory.
ENV PYTHONPATH=/opt/labctl \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1
# Numeric: Kubernetes' runAsNonRoot can only verify a numeric user.
USER 1000:1000
WORKDIR /work
CMD ["torchrun", "--help"]
