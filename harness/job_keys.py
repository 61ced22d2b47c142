"""The job signing key pair of a test or bench deployment (issue 33): the service signs every
job it hands to a runner with the private half, the runners it starts verify with the public
half. Made once per process in a private directory, and named in the environment that the
service code in this process and every process it starts read."""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

from bot.ci.job_keys import PRIVATE_NAME, PUBLIC_NAME, JobIssuer, ensure_key_pair
from bot.ci.signing import private_key_from_pem, sign_job
from bot.config import load_settings

SIGNING_VARIABLES = ("CARRY_JOB_SIGNING_KEY_PATH", "CARRY_JOB_PUBLIC_KEY_PATH")


def install_job_keys() -> Path:
    """Makes this process's key pair (once) and points CARRY_JOB_SIGNING_KEY_PATH and
    CARRY_JOB_PUBLIC_KEY_PATH at it, unless the environment already names one; returns the
    private key's path."""
    if "CARRY_JOB_SIGNING_KEY_PATH" not in os.environ:
        directory = Path(tempfile.mkdtemp(prefix="carry-job-keys-"))
        atexit.register(shutil.rmtree, directory, True)
        ensure_key_pair(directory / PRIVATE_NAME)
        os.environ["CARRY_JOB_SIGNING_KEY_PATH"] = str(directory / PRIVATE_NAME)
        os.environ.setdefault("CARRY_JOB_PUBLIC_KEY_PATH", str(directory / PUBLIC_NAME))
    return Path(os.environ["CARRY_JOB_SIGNING_KEY_PATH"])


def job_issuer() -> JobIssuer:
    """How the service code in this process signs the jobs it hands to runners, as this
    process's settings (its environment: the key install_job_keys named) give it; a worker
    has the same from its Runtime (`job_issuer`)."""
    return JobIssuer.from_settings(load_settings())


def service_signed(payload: dict[str, Any], *, ttl_s: int = 3600) -> dict[str, Any]:
    """The task's keyword arguments for `payload` signed as carry's service signs it (with
    this process's key): for the tests that show what a runner still refuses in a job the
    service did sign (its own config's commands, the run as issued)."""
    key = private_key_from_pem(install_job_keys().read_bytes())
    return {"signed": sign_job(key, payload, now=time.time(), ttl_s=ttl_s).to_dict()}
