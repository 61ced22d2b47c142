"""Where the job signing keys live (bot/ci/job_keys.py, issue 33): the service's private key
made once in the data dir, owner-only; `carry job-key` prints the public half and never the
private one; processes racing to make it agree on one key; a runner reads only a public key."""

from __future__ import annotations

import os
import subprocess
import sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import pytest
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from bot.ci import job_keys, signing
from bot.config import ConfigError, load_settings
from tests.support.paths import REPO_ROOT


def _carry(tmp_path: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CARRY_JOB_")}
    env |= {"CARRY_CACHE_DIR": str(tmp_path / "data"), "PYTHONPATH": str(REPO_ROOT)}
    return subprocess.run(
        [sys.executable, "-m", "bot.cli", *argv],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_carry_job_key_makes_the_key_once_and_prints_only_its_public_half(tmp_path: Path) -> None:
    first = _carry(tmp_path, "job-key", "--public-out", str(tmp_path / "shared" / "public.key"))
    assert first.returncode == 0, first.stderr
    private = tmp_path / "data" / "job-signing" / "private.pem"
    assert private.stat().st_mode & 0o777 == 0o600
    assert private.parent.stat().st_mode & 0o777 == 0o700
    key = signing.private_key_from_pem(private.read_bytes())
    line = f"CARRY_JOB_PUBLIC_KEY={signing.public_key_text(key)}"
    assert first.stdout.splitlines() == [line]
    assert (tmp_path / "shared" / "public.key").read_text() == f"{signing.public_key_text(key)}\n"
    assert (private.parent / "public.key").read_text().strip() == signing.public_key_text(key)
    body = [ln for ln in private.read_text().splitlines() if "-----" not in ln]
    assert body and not any(ln in first.stdout + first.stderr for ln in body)
    again = _carry(tmp_path, "job-key")
    assert again.returncode == 0 and again.stdout.splitlines() == [line]
    assert "kept the job signing key" in again.stderr


def _make(path: str) -> str:
    key, _ = job_keys.ensure_key_pair(Path(path))
    return signing.public_key_text(key)


def test_processes_racing_to_make_the_key_agree_on_one(tmp_path: Path) -> None:
    path = str(tmp_path / "keys" / "private.pem")
    with ProcessPoolExecutor(4) as pool:
        made = list(pool.map(_make, [path] * 8))
    assert len(set(made)) == 1
    assert sorted(p.name for p in (tmp_path / "keys").iterdir()) == ["private.pem", "public.key"]


def test_a_runner_reads_its_public_key_from_the_setting_a_file_or_beside_the_service_key(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("CARRY_JOB_SIGNING_KEY_PATH", "CARRY_JOB_PUBLIC_KEY_PATH", "CARRY_JOB_PUBLIC_KEY"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("CARRY_CACHE_DIR", str(tmp_path / "data"))
    with pytest.raises(ConfigError) as none:
        job_keys.runner_public_keys(load_settings())
    assert none.value.problems == [job_keys.NO_PUBLIC_KEY]
    key = job_keys.service_signing_key(load_settings())  # made on first use, beside its half
    text = signing.public_key_text(key)
    assert signing.public_keys_text(job_keys.runner_public_keys(load_settings())) == text
    monkeypatch.setenv("CARRY_JOB_PUBLIC_KEY_PATH", str(tmp_path / "missing.key"))
    with pytest.raises(ConfigError, match="CARRY_JOB_PUBLIC_KEY_PATH: no file"):
        job_keys.runner_public_keys(load_settings())
    monkeypatch.setenv("CARRY_JOB_PUBLIC_KEY", text)
    assert signing.public_keys_text(job_keys.runner_public_keys(load_settings())) == text
    monkeypatch.setenv("CARRY_JOB_PUBLIC_KEY", "not a key")
    with pytest.raises(ConfigError, match="CARRY_JOB_PUBLIC_KEY: not base64"):
        job_keys.runner_public_keys(load_settings())


def test_during_a_rotation_a_runner_holds_both_keys_from_the_setting_or_a_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The new public key and the old one, commas or one per line, PEM or one-line forms."""
    for name in ("CARRY_JOB_SIGNING_KEY_PATH", "CARRY_JOB_PUBLIC_KEY_PATH", "CARRY_JOB_PUBLIC_KEY"):
        monkeypatch.delenv(name, raising=False)
    old, new = (signing.private_key_from_pem(signing.new_private_key_pem()) for _ in range(2))
    texts = [signing.public_key_text(new), signing.public_key_text(old)]
    monkeypatch.setenv("CARRY_JOB_PUBLIC_KEY", f" {texts[0]} , {texts[1]} ")
    held = job_keys.runner_public_keys(load_settings())
    assert [signing.public_key_text(k) for k in held] == texts
    pem = old.public_key().public_bytes(Encoding.PEM, PublicFormat.SubjectPublicKeyInfo).decode()
    listed = tmp_path / "public.keys"
    listed.write_text(f"{texts[0]}\n{pem}")
    monkeypatch.delenv("CARRY_JOB_PUBLIC_KEY")
    monkeypatch.setenv("CARRY_JOB_PUBLIC_KEY_PATH", str(listed))
    held = job_keys.runner_public_keys(load_settings())
    assert sorted(signing.public_key_text(k) for k in held) == sorted(texts)
    monkeypatch.setenv("CARRY_JOB_PUBLIC_KEY", f"{texts[0]},garbage")
    with pytest.raises(ConfigError, match="CARRY_JOB_PUBLIC_KEY: key 2 of 2: not base64"):
        job_keys.runner_public_keys(load_settings())
    monkeypatch.setenv("CARRY_JOB_PUBLIC_KEY", " , ")
    with pytest.raises(ConfigError, match="CARRY_JOB_PUBLIC_KEY: no public key in it"):
        job_keys.runner_public_keys(load_settings())
