"""TLS: --ssl-keyfile/--ssl-certfile serve https, which the official `openai` client uses with the
test's own CA; --ssl-ca-certs with --ssl-cert-reqs 2 requires a client certificate; every mistake
in the flags (a missing or unreadable file, a key that is not the certificate's, an encrypted key,
a flag without the ones it needs) is a one-line start-up error, exit status 2.

The certificates are made here with the `openssl` command (EC keys: fast), valid for a day.
"""
from __future__ import annotations

import shutil
import ssl
import subprocess
import sys
from pathlib import Path

import httpx
import openai
import pytest

from pipeline.tls import tls_settings
from reliability_kit import TINY

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.skipif(shutil.which("openssl") is None, reason="needs the openssl command")


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


def _key_and_csr(name: str, cn: str, cwd: Path) -> None:
    _openssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-keyout",
             f"{name}.key", "-out", f"{name}.csr", "-subj", f"/CN={cn}", cwd=cwd)


def _sign(name: str, ext: str, cwd: Path) -> None:
    (cwd / f"{name}.ext").write_text(ext + "\n")
    _openssl("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial",
             "-out", f"{name}.pem", "-days", "1", "-extfile", f"{name}.ext", cwd=cwd)


@pytest.fixture(scope="module")
def pki(tmp_path_factory) -> Path:
    """ca.pem/ca.key, server.pem/server.key (for 127.0.0.1 and localhost), client.pem/client.key,
    other.key (a key of no certificate here) and encrypted.key (server.key under a passphrase)."""
    d = tmp_path_factory.mktemp("pki")
    _openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-keyout",
             "ca.key", "-out", "ca.pem", "-days", "1", "-subj", "/CN=ttft test CA", cwd=d)
    _key_and_csr("server", "localhost", d)
    _sign("server", "subjectAltName=IP:127.0.0.1,DNS:localhost", d)
    _key_and_csr("client", "ttft test client", d)
    _sign("client", "extendedKeyUsage=clientAuth", d)
    _key_and_csr("other", "other", d)
    _openssl("ec", "-in", "server.key", "-out", "encrypted.key", "-aes256", "-passout", "pass:secret", cwd=d)
    return d


def client_context(pki: Path, with_cert: bool) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=str(pki / "ca.pem"))
    if with_cert:
        ctx.load_cert_chain(pki / "client.pem", pki / "client.key")
    return ctx


def complete(base_url: str, ctx: ssl.SSLContext) -> str:
    """One completion through the official client over https."""
    with httpx.Client(verify=ctx, timeout=30) as http:
        client = openai.OpenAI(base_url=f"{base_url}/v1", api_key="unused", http_client=http, max_retries=0)
        reply = client.completions.create(model="dummy:tiny", prompt="hello", max_tokens=3, extra_body={
            "ignore_eos": True})
    assert reply.usage.completion_tokens == 3
    return reply.choices[0].text


def test_https_with_the_openai_client(launch, pki):
    server = launch(*TINY, "--ssl-keyfile", str(pki / "server.key"), "--ssl-certfile", str(pki / "server.pem"),
                    ssl_context=client_context(pki, with_cert=False))
    assert server.base_url.startswith("https://")
    complete(server.base_url, client_context(pki, with_cert=False))
    with pytest.raises(httpx.ConnectError):  # a client that does not trust the test CA
        httpx.get(f"{server.base_url}/health", timeout=10)
    with pytest.raises(httpx.HTTPError):  # plain http on the TLS port
        httpx.get(server.base_url.replace("https://", "http://") + "/health", timeout=10)


def test_client_certificates_required(launch, pki):
    server = launch(*TINY, "--ssl-keyfile", str(pki / "server.key"), "--ssl-certfile", str(pki / "server.pem"),
                    "--ssl-ca-certs", str(pki / "ca.pem"), "--ssl-cert-reqs", "2",
                    ssl_context=client_context(pki, with_cert=True))
    complete(server.base_url, client_context(pki, with_cert=True))
    with pytest.raises(openai.APIConnectionError):
        complete(server.base_url, client_context(pki, with_cert=False))


def _settings(pki: Path, **given) -> dict:
    args = {"keyfile": str(pki / "server.key"), "certfile": str(pki / "server.pem"), "ca_certs": None,
            "cert_reqs": 0, **given}
    return tls_settings(**args)


@pytest.mark.parametrize("given, fragment", [
    ({"keyfile": "/no/such.key"}, "--ssl-keyfile /no/such.key: cannot be read (No such file or directory)"),
    ({"certfile": "/no/such.pem"}, "--ssl-certfile /no/such.pem: cannot be read"),
    ({"ca_certs": "/no/ca.pem", "cert_reqs": 2}, "--ssl-ca-certs /no/ca.pem: cannot be read"),
    ({"keyfile": "."}, "--ssl-keyfile .: cannot be read (Is a directory)"),
    ({"certfile": None}, "--ssl-keyfile needs --ssl-certfile"),
    ({"cert_reqs": 2}, "needs --ssl-ca-certs"),
    ({"cert_reqs": 3, "ca_certs": "x"}, "--ssl-cert-reqs must be 0 (none), 1 (optional) or 2 (required)"),
    ({"keyfile": "OTHER"}, "do not load"),
    ({"keyfile": "ENCRYPTED"}, "is encrypted"),
    ({"ca_certs": "KEY", "cert_reqs": 2}, "do not load"),
])
def test_flag_mistakes_are_clear_errors(pki, given, fragment):
    names = {"OTHER": "other.key", "ENCRYPTED": "encrypted.key", "KEY": "server.key"}
    given = {k: str(pki / names[v]) if v in names else v for k, v in given.items()}
    with pytest.raises(ValueError) as info:
        _settings(pki, **given)
    assert fragment in str(info.value)


def test_settings_off_and_on(pki):
    assert tls_settings(None, None, None, 0) == {}
    with pytest.raises(ValueError, match="need --ssl-certfile"):
        tls_settings(None, None, str(pki / "ca.pem"), 2)
    assert _settings(pki, ca_certs=str(pki / "ca.pem"), cert_reqs=2) == {
        "ssl_keyfile": str(pki / "server.key"), "ssl_certfile": str(pki / "server.pem"),
        "ssl_ca_certs": str(pki / "ca.pem"), "ssl_cert_reqs": 2}


def test_serve_with_a_missing_key_exits_2_at_once(pki, tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "pipeline.cli", "serve", *TINY, "--port", "0", "--ssl-certfile",
         str(pki / "server.pem"), "--ssl-keyfile", str(tmp_path / "missing.key")],
        cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert f"ttft: cannot start: --ssl-keyfile {tmp_path / 'missing.key'}: cannot be read" in proc.stderr
    assert "Traceback" not in proc.stdout + proc.stderr
