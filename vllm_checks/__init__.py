"""The downstream-specific Verify checks that run on runner hosts against vLLM, and the scheduler
probe vLLM loads as a plugin (vllm_probe, entry point `carry-probe`).

Each check is a command, ``python -m vllm_checks.<module>``, that the configuration names under
``runners.<kind>.checks`` (config/carry.yaml); there is no second list of checks here. Exit codes
and verdicts are ``vllm_checks.report``'s. Only the standard library, httpx and each other are
imported: nothing of carry's service or runner.
"""
