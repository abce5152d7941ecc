# syntax=docker/dockerfile:1
# One image for every nodewright service; the command chooses the service:
#   docker run nodewright nodewright service scheduler --port 8081
#   docker run nodewright nodewright migrate
# Build: docker build -t nodewright:dev .   (deploy/README.md has the rest)

ARG PYTHON_IMAGE=python:3.11-slim-bookworm

# --- build: a virtual environment with nodewright and its dependencies --------------------------
FROM ${PYTHON_IMAGE} AS build
# A C compiler for any dependency that has no wheel for this platform; it stays in this stage.
RUN apt-get update \
    && apt-get install -y --no-install-recommends build-essential \
    && rm -rf /var/lib/apt/lists/*
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
RUN python -m venv /opt/nodewright
WORKDIR /src
COPY pyproject.toml README.md constraints.txt ./
COPY shared ./shared
COPY services ./services
COPY cli ./cli
COPY migrations ./migrations
# Not editable, no extras: a container is given its servers (NODEWRIGHT_DATABASE_URL,
# NODEWRIGHT_NATS_URL), it never starts embedded ones. Every package at the version the lock pins.
RUN /opt/nodewright/bin/pip install --upgrade pip \
    && /opt/nodewright/bin/pip install -c constraints.txt . \
    && /opt/nodewright/bin/nodewright --help >/dev/null

# --- run: the environment alone, as an unprivileged user ------------------------------------------
FROM ${PYTHON_IMAGE}
RUN groupadd --system --gid 10001 nodewright \
    && useradd --system --uid 10001 --gid nodewright --no-create-home \
        --home-dir /var/lib/nodewright --shell /usr/sbin/nologin nodewright \
    && install -d -o nodewright -g nodewright -m 0750 /var/lib/nodewright
COPY --from=build /opt/nodewright /opt/nodewright
ENV PATH=/opt/nodewright/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    NODEWRIGHT_DATA_DIR=/var/lib/nodewright
WORKDIR /var/lib/nodewright
USER 10001:10001
# 8081: /healthz and /readyz (the services' --port); 8080: /metrics (NODEWRIGHT_METRICS_ADDRESS).
EXPOSE 8080 8081
CMD ["nodewright", "--help"]
