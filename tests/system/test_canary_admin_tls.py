"""The admin API over TLS (issue 28): ``admin.tls`` serves HTTPS with the operator's certificate; plain HTTP is refused."""

from __future__ import annotations

import asyncio
import ssl
import subprocess
import time
from pathlib import Path

import aiohttp
import pytest

from tests.canary_harness import TOKEN, TOKEN_ENV, CanaryRun, write_rollout


@pytest.fixture(autouse=True)
def _admin_token(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(TOKEN_ENV, TOKEN)


async def test_the_admin_api_serves_https_with_the_rollouts_certificate(scripted, tmp_path: Path) -> None:
    cert, key = tmp_path / "admin.pem", tmp_path / "admin.key"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=127.0.0.1",
         "-addext", "subjectAltName=IP:127.0.0.1", "-keyout", str(key), "-out", str(cert)],
        check=True, capture_output=True,
    )  # fmt: skip
    pools = {"baseline": [scripted(chunks=2).base_url], "candidate": [scripted(chunks=2).base_url]}
    path = write_rollout(tmp_path, pools, steps=[{"percent": 50}, {"percent": 100}])
    path.write_text(path.read_text().replace("  token_env:", "  tls: {cert: admin.pem, key: admin.key}\n  token_env:", 1))
    run = CanaryRun(path, tmp_path / "logs", exit_when_finished=False)
    trusted = ssl.create_default_context(cafile=str(cert))
    auth = {"Authorization": f"Bearer {TOKEN}"}
    run.start()
    try:
        status = None
        async with aiohttp.ClientSession() as session:
            deadline = time.monotonic() + 30
            while status is None and time.monotonic() < deadline:
                assert run.task is not None and not run.task.done(), "the canary ended before it served"
                try:
                    async with session.get(f"https://{run.rollout.admin.listen}/status", headers=auth, ssl=trusted) as r:
                        status = r.status
                except aiohttp.ClientConnectorError:
                    await asyncio.sleep(0.1)
            assert status == 200
            with pytest.raises(aiohttp.ClientError):  # plain HTTP to a TLS listener gets no answer it can read
                async with session.get(f"http://{run.rollout.admin.listen}/status", headers=auth) as r:
                    await r.read()
                    assert r.status != 200
    finally:
        await run.stopped()
