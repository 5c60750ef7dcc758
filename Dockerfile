# syntax=docker/dockerfile:1
# evalsvc as a container image: build the wheel in one stage, install it into a slim runtime in
# the next (no compilers, no source tree), run as a non-root user. The entrypoint is the
# `evalsvc` CLI, so one image serves every role:
#   docker run IMAGE                    -> evalsvc api serve --host 0.0.0.0 --port 8080 (default)
#   docker run IMAGE worker --schedules -> a queue worker that also fires cron schedules
#   docker run IMAGE db upgrade         -> migrate the database (EVALSVC_DATABASE_URL)
# docs/deploy.md describes the image, docker-compose.yml and deploy/k8s/ use it.
ARG PYTHON_IMAGE=python:3.11-slim

FROM ${PYTHON_IMAGE} AS build
WORKDIR /src
RUN python -m pip install --no-cache-dir build
# Only what the wheel is built from (.dockerignore keeps the rest of the context out).
COPY pyproject.toml README.md ./
COPY evalsvc ./evalsvc
RUN python -m build --wheel --outdir /dist

FROM ${PYTHON_IMAGE} AS runtime
LABEL org.opencontainers.image.title="evalsvc" \
      org.opencontainers.image.description="Quality evaluation and release gates for quantized LLM serving endpoints" \
      org.opencontainers.image.licenses="Apache-2.0"
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    EVALSVC_HOME=/var/lib/evalsvc
# A fixed, unprivileged UID/GID (Kubernetes runAsNonRoot checks a numeric user).
RUN groupadd --system --gid 10001 evalsvc \
 && useradd --system --uid 10001 --gid evalsvc --home-dir /var/lib/evalsvc --create-home \
        --shell /usr/sbin/nologin evalsvc
COPY --from=build /dist/ /tmp/dist/
RUN python -m pip install --no-cache-dir /tmp/dist/*.whl && rm -rf /tmp/dist
USER 10001:10001
WORKDIR /var/lib/evalsvc
VOLUME ["/var/lib/evalsvc"]
EXPOSE 8080
# /healthz answers 200 when the database is reachable and at head, 503 otherwise. slim has no
# curl: the image's own Python does the request. Roles that serve no HTTP (worker, migrate)
# turn this check off (docker-compose.yml: `healthcheck: disable: true`).
HEALTHCHECK --interval=30s --timeout=5s --start-period=30s --retries=3 \
    CMD ["python", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8080/healthz', timeout=4)"]
ENTRYPOINT ["evalsvc"]
CMD ["api", "serve", "--host", "0.0.0.0", "--port", "8080"]
