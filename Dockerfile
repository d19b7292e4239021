# syntax=docker/dockerfile:1
# Rendered by `clef-pipelines deploy render` (clef_pipelines/deploy.py): change the
# settings or the code there and render again; tests/packaging/test_deploy.py checks that
# this file is the rendering.
#
# One image for the code server (the default command), the webserver
# (`dagster-webserver`), the daemon (`dagster-daemon run`) and every run: see
# deploy/compose.yaml and deploy/helm/values.yaml, docs/deploy.md.
FROM python:3.11-slim AS build
WORKDIR /src
RUN python -m venv /opt/venv
COPY pyproject.toml README.md ./
COPY clef_pipelines ./clef_pipelines
# torch from its CPU index: the CUDA wheels add gigabytes a CPU worker never uses.
RUN /opt/venv/bin/pip install --no-cache-dir \
    --extra-index-url https://download.pytorch.org/whl/cpu ".[minilm,pdf,docx,postgres,deploy,s3]"

FROM python:3.11-slim
ENV PATH=/opt/venv/bin:$PATH \
    DAGSTER_HOME=/opt/dagster/dagster_home \
    CLEF_PIPELINES_CONFIG=/etc/clef-pipelines/clef-pipelines.yaml \
    PYTHONUNBUFFERED=1 \
    HF_HUB_OFFLINE=1 \
    DAGSTER_DG_UPDATE_CHECK_ENABLED=0
# A user of its own: nothing in the image runs as root.
RUN groupadd --gid 10001 clef \
    && useradd --uid 10001 --gid 10001 --create-home clef \
    && mkdir -p /opt/dagster/dagster_home /etc/clef-pipelines /data /opt/dagster/app \
    && chown clef:clef /opt/dagster/dagster_home /data
COPY --from=build /opt/venv /opt/venv
COPY deploy/dagster.yaml /opt/dagster/dagster_home/dagster.yaml
COPY deploy/workspace.yaml /opt/dagster/app/workspace.yaml
USER 10001:10001
WORKDIR /opt/dagster/app
# Offline (no network): the code location loads with every default, and the default
# embedder embeds a text from the weights inside the image. A run that needed to
# download a model would fail the build here.
RUN --network=none ["env", "-u", "CLEF_PIPELINES_CONFIG", "clef-pipelines", "deploy", "check"]
EXPOSE 3030 3000
CMD ["dagster", "api", "grpc", "--module-name", "clef_pipelines.definitions", "--host", "0.0.0.0", "--port", "3030"]
