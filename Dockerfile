# One image for every process kind: `docker run IMAGE api|relay|worker GROUP|scheduler|migrate`.
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

WORKDIR /app

# Only what the build needs: the repo's .venv/ and var/ must not end up in the image.
# The runtime lock first (every package pinned with its hashes: what CI tested; its own
# layer, kept while the lock is unchanged), then sluice alone on top of it.
COPY requirements/run.txt ./requirements/run.txt
RUN pip install --require-hashes -r requirements/run.txt
COPY pyproject.toml README.md ./
COPY sluice ./sluice
RUN pip install --no-deps . \
    && rm -rf /app/build

# A named volume mounted on /data starts with the image's ownership and mode of
# /data, so the non-root user can write the SQLite file, mail and exports there,
# and nobody else can read them (sluice would narrow it to 0700 at start anyway).
RUN useradd --system --uid 10001 --user-group --home-dir /data --no-create-home sluice \
    && mkdir -p /data \
    && chown sluice:sluice /data \
    && chmod 0700 /data

USER sluice
WORKDIR /data

ENV SLUICE_HOST=0.0.0.0 \
    SLUICE_PORT=8080 \
    SLUICE_DATA_DIR=/data

EXPOSE 8080

# Meaningful for `api` only; compose disables it for the other process kinds.
HEALTHCHECK --interval=10s --timeout=3s --start-period=10s --retries=3 \
    CMD ["python", "-c", "import os, urllib.request; urllib.request.urlopen('http://127.0.0.1:%s/healthz' % os.environ.get('SLUICE_PORT', '8080'), timeout=2)"]

ENTRYPOINT ["sluice"]
CMD ["api"]
