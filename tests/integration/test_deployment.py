"""docker-compose.yml, the Dockerfile and .env.example, checked structurally (no Docker engine
runs the tests): the services, their start order and health checks, Redis persistence,
volumes, runner profiles, and that every setting carry reads is documented."""

from __future__ import annotations

import json
import os
import re
import subprocess
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml

from bot.config import Settings
from tests.support.paths import PACKAGES, REPO_ROOT

COMPOSE = REPO_ROOT / "docker-compose.yml"
ENV_EXAMPLE = REPO_ROOT / ".env.example"
CORE = ("redis", "web", "worker", "git-worker", "beat")
RUNNERS = {"runner-gaudi": "gaudi", "runner-gb10": "gb10"}
# Named by the deployment issue besides the Settings fields.
REQUIRED_VARIABLES = {
    "REDIS_URL",
    "CARRY_DOWNSTREAM_DIR",
    "CARRY_DOWNSTREAM_GIT_URL",
    "CARRY_BOT_LOGIN",
    "CARRY_VISIBILITY_TIMEOUT_S",
    "CARRY_LOCK_TTL_S",
    "CARRY_BUSY_RETRY_S",
}


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    data = yaml.safe_load(COMPOSE.read_text())  # anchors and `<<` merges resolved
    assert isinstance(data, dict)
    return data


def services(compose: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return compose["services"]


def command_text(service: dict[str, Any]) -> str:
    command = service.get("command", [])
    return command if isinstance(command, str) else " ".join(map(str, command))


def test_core_services_exist_and_run_the_carry_image(compose: dict[str, Any]) -> None:
    found = services(compose)
    assert set(CORE) <= set(found)
    for name in ("web", "worker", "git-worker", "beat", *RUNNERS):
        assert found[name]["build"] == ".", name
        assert found[name]["image"] == "carry:latest", name
    # One worker per lane (bot/queue/celery_app.py): the quick work and the git work.
    assert command_text(found["worker"]) == "worker --queues carry"
    assert command_text(found["git-worker"]) == "worker --queues carry.git"
    assert command_text(found["beat"]) == "beat"
    assert command_text(found["web"]).endswith("web --host 0.0.0.0 --port 8000")


def test_each_service_starts_only_once_its_dependencies_are_healthy(
    compose: dict[str, Any],
) -> None:
    found = services(compose)
    for name in ("web", "worker", "git-worker", "beat", *RUNNERS):
        depends = found[name]["depends_on"]
        assert isinstance(depends, dict), f"{name}: depends_on needs conditions"
        assert "redis" in depends, name
        for dependency, rule in depends.items():
            if name in RUNNERS and dependency == "runner-users":  # a one-shot: it must succeed
                assert rule == {"condition": "service_completed_successfully"}, name
                continue
            assert rule == {"condition": "service_healthy"}, f"{name} -> {dependency}"
            assert "healthcheck" in found[dependency], f"{dependency} has no healthcheck"


def test_redis_persists_with_aof_on_a_volume(compose: dict[str, Any]) -> None:
    redis = services(compose)["redis"]
    command = command_text(redis)
    assert "--appendonly yes" in command
    assert re.search(r"--appendfsync (everysec|always)", command)
    assert "redis-data:/data" in redis["volumes"]
    assert "PONG" in " ".join(redis["healthcheck"]["test"])
    assert "ports" not in redis  # reachable only on the compose network


def test_runners_are_opt_in_profiles_of_their_kind(compose: dict[str, Any]) -> None:
    found = services(compose)
    for name, kind in RUNNERS.items():
        runner = found[name]
        assert name in runner["profiles"] and "runners" in runner["profiles"]
        assert f"runner --kind {kind}" in command_text(runner)
    for name in CORE:
        assert "profiles" not in found[name], f"{name} must start without a profile"


def test_runners_get_the_broker_but_none_of_the_services_secrets(
    compose: dict[str, Any],
) -> None:
    for name in RUNNERS:
        runner = services(compose)[name]
        assert "env_file" not in runner, f"{name} must not load .env (GitHub credentials)"
        assert set(runner["environment"]) == {
            "REDIS_URL",
            "CARRY_CONFIG",
            "CARRY_JOB_PUBLIC_KEY_PATH",
        }
        # its kind's least-privilege Redis user, never Redis's own password
        user_url = (
            f"redis://carry-runner-{RUNNERS[name]}:${{RUNNER_{RUNNERS[name].upper()}_PASSWORD"
        )
        assert runner["environment"]["REDIS_URL"].startswith(user_url), name
        assert "REDIS_PASSWORD" not in json.dumps(runner)
        needs = runner["depends_on"]["runner-users"]
        assert needs == {"condition": "service_completed_successfully"}, name


def test_runners_get_the_public_half_of_the_job_signing_key_only(
    compose: dict[str, Any],
) -> None:
    """The service signs every job; a runner verifies it with the public key and must never
    hold the private one (issue 33): the key lives in carry-cache, which no runner mounts;
    runner-users copies the public half, alone, to a volume the runners mount read-only."""
    found = services(compose)
    maker = found["runner-users"]
    assert "carry job-key --public-out /var/lib/carry/job-key/public.key" in command_text(maker)
    assert maker["environment"]["CARRY_CACHE_DIR"] == "/var/cache/carry"
    assert {"carry-cache:/var/cache/carry", "job-key:/var/lib/carry/job-key"} <= set(
        maker["volumes"]
    )
    for name in RUNNERS:
        runner = found[name]
        assert runner["environment"]["CARRY_JOB_PUBLIC_KEY_PATH"] == (
            "/var/lib/carry/job-key/public.key"
        )
        assert "job-key:/var/lib/carry/job-key:ro" in runner["volumes"], name
        assert not any(v.startswith("carry-cache:") for v in runner["volumes"]), name
    dockerfile = (REPO_ROOT / "Dockerfile").read_text()
    assert "/var/lib/carry/job-key" in dockerfile  # made, and owned by carry, in the image


def test_volumes_are_declared_and_the_mirror_cache_is_shared(compose: dict[str, Any]) -> None:
    declared = set(compose["volumes"])
    used = {
        volume.split(":", 1)[0]
        for service in services(compose).values()
        for volume in service.get("volumes", [])
        if not volume.startswith((".", "/"))
    }
    assert used == declared
    for name in ("worker", "git-worker", "beat"):
        service = services(compose)[name]
        assert "carry-cache:/var/cache/carry" in service["volumes"], name
        assert service["environment"]["CARRY_CACHE_DIR"] == "/var/cache/carry"


def test_containers_reach_compose_redis_and_the_service_reads_dot_env(
    compose: dict[str, Any],
) -> None:
    for name in ("web", "worker", "git-worker", "beat", *RUNNERS):
        service = services(compose)[name]
        assert "@redis:6379/" in service["environment"]["REDIS_URL"], name
    for name in ("web", "worker", "git-worker", "beat"):
        assert services(compose)[name]["env_file"] == [{"path": ".env", "required": False}], name


def test_compose_interpolates_only_documented_variables() -> None:
    used = set(re.findall(r"(?<!\$)\$\{([A-Z_][A-Z0-9_]*)", COMPOSE.read_text()))
    assert used <= documented_variables(), used - documented_variables()


def test_dockerfile_builds_a_non_root_image_with_git_and_the_carry_entrypoint() -> None:
    text = (REPO_ROOT / "Dockerfile").read_text()
    assert re.search(r"^FROM python:3\.11", text, re.M)
    assert "git" in re.search(r"apt-get install[^\n]*", text).group(0)  # type: ignore[union-attr]
    assert re.search(r"^USER carry$", text, re.M)
    assert 'ENTRYPOINT ["tini", "--", "carry"]' in text
    assert "CARRY_CACHE_DIR=/var/cache/carry" in text
    assert "PYTHONNOUSERSITE=1" in text  # a step (same user) cannot plant code for the runner
    ignored = (REPO_ROOT / ".dockerignore").read_text().split()
    assert {".env", ".git", ".venv", "tests"} <= set(ignored)


# --------------------------------------------------------------------------- .env.example


def documented_variables() -> set[str]:
    return set(re.findall(r"^([A-Z_][A-Z0-9_]*)=", ENV_EXAMPLE.read_text(), re.M))


def read_variables() -> set[str]:
    """Every environment variable carry's packages read (os.environ / getenv)."""
    pattern = re.compile(r"""(?:environ(?:\.get)?\(|environ\[|getenv\()\s*["']([A-Z_][A-Z0-9_]*)""")
    found = set()
    for package in PACKAGES:
        for path in (REPO_ROOT / package).rglob("*.py"):
            found |= set(pattern.findall(path.read_text()))
    return found


def test_every_setting_is_documented_with_a_comment() -> None:
    aliases = {str(field.validation_alias) for field in Settings.model_fields.values()}
    internal = {"CARRY_RUNNER_KIND"}  # set by `carry runner` for its own children
    ours = {n for n in read_variables() if n.startswith(("CARRY_", "GITHUB_", "REDIS_"))}
    wanted = aliases | REQUIRED_VARIABLES | (ours - internal)
    missing = wanted - documented_variables()
    assert missing == set()
    lines = ENV_EXAMPLE.read_text().splitlines()
    for index, line in enumerate(lines):
        if re.match(r"^[A-Z_][A-Z0-9_]*=", line):
            above = lines[index - 1] if index else ""
            assert above.startswith("#") or re.match(r"^[A-Z_]+=", above), line


def test_no_secret_has_a_value_in_the_example() -> None:
    values = dict(
        line.split("=", 1)
        for line in ENV_EXAMPLE.read_text().splitlines()
        if re.match(r"^[A-Z_][A-Z0-9_]*=", line)
    )
    for name in ("CARRY_WEBHOOK_SECRET", "GITHUB_TOKEN", "GITHUB_APP_PRIVATE_KEY"):
        assert values[name] == "", name
    assert values["CARRY_DASHBOARD_TOKEN"] == "" and values["REDIS_PASSWORD"] == ""


def test_example_values_are_accepted_by_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    for line in ENV_EXAMPLE.read_text().splitlines():
        if re.match(r"^[A-Z_][A-Z0-9_]*=", line):
            name, value = line.split("=", 1)
            monkeypatch.setenv(name, value)
    settings = Settings()
    assert settings.github_auth == "none"
    assert settings.webhook_secret is None  # empty counts as unset
    assert str(settings.cache_dir) == str(Path("~/.cache/carry").expanduser())


# --------------------------------------------------------------------------- Makefile and lock

MAKEFILE = REPO_ROOT / "Makefile"
LOCK = REPO_ROOT / "requirements.lock"


def recipe(target: str) -> list[str]:
    """The recipe lines of one Makefile target."""
    lines = MAKEFILE.read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(f"{target}:"))
    body = []
    for line in lines[start + 1 :]:
        if not line.startswith("\t"):
            break
        body.append(line.strip())
    return body


def dry_run(*args: str) -> str:
    """`make -n` (prints the commands, runs none) with the environment's PORT left out."""
    env = {k: v for k, v in os.environ.items() if k not in {"PORT", "MAKEFLAGS", "MFLAGS"}}
    done = subprocess.run(
        ["make", "-n", "--no-print-directory", *args],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def dependency_names() -> set[str]:
    project = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]
    wanted = [*project["dependencies"], *project["optional-dependencies"]["dev"]]
    return {canonical(re.split(r"[\[<>=!~ ;]", item, maxsplit=1)[0]) for item in wanted}


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def test_the_lock_pins_every_dependency_exactly() -> None:
    pins = [line for line in LOCK.read_text().splitlines() if line and not line.startswith("#")]
    assert pins and all(re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*==[^=\s]+", p) for p in pins)
    pinned = {canonical(pin.split("==")[0]) for pin in pins}
    assert dependency_names() <= pinned, dependency_names() - pinned
    assert "vllm" not in pinned  # the runner extra: runner hosts bring their own
    assert "make lock" in LOCK.read_text()  # the header says how to regenerate it


def test_make_install_and_the_image_install_with_the_lock() -> None:
    stamp = next(line for line in MAKEFILE.read_text().splitlines() if line.startswith("$(STAMP):"))
    assert "$(LOCK)" in stamp  # a changed lock re-installs
    assert any("-c $(LOCK) -e '.[dev]'" in line for line in recipe("$(STAMP)"))
    assert "-c requirements.lock" in (REPO_ROOT / "Dockerfile").read_text()


def test_make_test_lints_before_it_tests() -> None:
    steps = recipe("test")
    lint = next(i for i, step in enumerate(steps) if step.endswith(" lint"))
    pytest_step = next(i for i, step in enumerate(steps) if "pytest" in step)
    assert lint < pytest_step
    assert (REPO_ROOT / ".ci" / "run").read_text().strip().endswith("make test")


@pytest.mark.parametrize(
    ("target", "package", "skipped"),
    [
        ("browser", "chromium", "the browser tests will be skipped"),
        ("bwrap", "bubblewrap", "the bubblewrap sandbox tests will be skipped"),
    ],
)
def test_a_debian_package_step_says_what_it_installs_before_it_does(
    target: str, package: str, skipped: str
) -> None:
    text = dry_run(target)  # the whole shell command, whether the package is there or not
    installs = [m.start() for m in re.finditer(rf"apt-get install -y -qq {package}\b", text)]
    assert len(installs) == 2  # as root, and with sudo in CI
    for at in installs:
        said = text.rfind("echo", 0, at)
        assert f"installing the Debian package {package}" in text[said:at], text
    assert skipped in text
    assert any(step.endswith(f"--no-print-directory {target}") for step in recipe("test"))


def test_make_run_and_demo_take_port_and_redis_url_from_the_caller() -> None:
    assert "carry run --port 8000" in dry_run("run")
    assert "carry run --port 9123" in dry_run("run", "PORT=9123")
    demo = recipe("demo")
    assert demo == ["$(PY) -m bot.demo"]  # the demo reads PORT and REDIS_URL itself


def test_compose_refuses_to_start_without_a_redis_password() -> None:
    """Issue 33: compose set a password only when REDIS_PASSWORD was set, and .env.example left
    it empty, so the default deployment's broker was open. Every use of it is now `:?` (compose
    stops with the message) and redis-server always gets --requirepass."""
    text = (REPO_ROOT / "docker-compose.yml").read_text()
    uses = re.findall(r"\$\{REDIS_PASSWORD([^}]*)\}", text)
    assert uses and all(use.startswith(":?set REDIS_PASSWORD in .env") for use in uses), uses
    assert '--requirepass "$$REDIS_PASSWORD"' in text and "REDIS_PASSWORD:+" not in text
