# syntax=docker/dockerfile:1
# carry's image: web, worker, beat and runner are the same image with another command
# (see docker-compose.yml). Build: docker build -t carry .
# Runner hosts that run the checks themselves: docker build --build-arg CARRY_EXTRAS=runner .

FROM python:3.11-slim AS build
WORKDIR /src
COPY pyproject.toml ./
COPY bot ./bot
COPY workers ./workers
COPY runner ./runner
COPY vllm_checks ./vllm_checks
# carry's wheel alone; the final stage installs it with its declared dependencies at the
# versions of requirements.lock, as tests/integration/test_installed_package.py does.
RUN pip wheel --no-deps --wheel-dir /dist .

FROM python:3.11-slim
ARG CARRY_EXTRAS=""
# git: the engine applies patches against bare mirrors; tini: signals and zombie reaping for
# the worker's child processes.
# slirp4netns: the network of a runner's step with `network: true` (its own, no route to the
# broker); bubblewrap: `sandbox: bwrap`. util-linux's unshare (`sandbox: namespaces`) is in the base.
RUN apt-get update \
 && apt-get install -y --no-install-recommends git ca-certificates tini slirp4netns bubblewrap \
 && rm -rf /var/lib/apt/lists/* \
 && useradd --create-home --uid 10001 carry
COPY --from=build /dist /dist
COPY requirements.lock /tmp/requirements.lock
RUN cd /tmp && wheel="$(ls /dist/carry-*.whl)" \
 && pip install -c requirements.lock --no-cache-dir "$wheel${CARRY_EXTRAS:+[$CARRY_EXTRAS]}" \
 && rm -rf /dist /tmp/requirements.lock
WORKDIR /app
# The series and the example config; compose mounts ./config over /app/config.
COPY --chown=carry:carry config ./config
COPY --chown=carry:carry patches ./patches
RUN mkdir -p /var/cache/carry /var/lib/carry/runner /var/lib/carry/job-key \
 && chown carry:carry /var/cache/carry /var/lib/carry/runner /var/lib/carry/job-key
# PYTHONNOUSERSITE: carry's own processes never load ~/.local's site-packages. A runner's steps
# run as the same user here (no root in the container for a step user), so a check could write
# a .pth there for the runner's next start; steps get a HOME of the job's own and none of this
# environment.
ENV PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONNOUSERSITE=1 \
    CARRY_CONFIG=/app/config/carry.yaml \
    CARRY_CACHE_DIR=/var/cache/carry \
    GIT_CONFIG_NOSYSTEM=1
USER carry
# Volumes are declared in docker-compose.yml (a VOLUME here would hide them from `down -v`).
EXPOSE 8000
ENTRYPOINT ["tini", "--", "carry"]
CMD ["--log-level", "INFO", "web", "--host", "0.0.0.0", "--port", "8000"]
