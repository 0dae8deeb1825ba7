"""TLS for `ttft serve`: vLLM's --ssl-keyfile, --ssl-certfile, --ssl-ca-certs, --ssl-cert-reqs,
handed to uvicorn as vLLM hands them.

They are checked before anything starts (before the weights load): each file must be readable, and
the certificate, key and CA file must load into a TLS context as uvicorn will build it. A mistake
is a one-line start-up error naming the flag, never a traceback from inside uvicorn after the model
has loaded. An encrypted key is refused (no flag gives its password, and OpenSSL would otherwise
stop to ask for it on the terminal).
"""
from __future__ import annotations

import ssl
from typing import Any

from uvicorn.config import SSL_PROTOCOL_VERSION, create_ssl_context

CERT_REQS = {0: "none", 1: "optional", 2: "required"}  # ssl.CERT_NONE, CERT_OPTIONAL, CERT_REQUIRED


class _EncryptedKey(Exception):
    pass


def _no_password() -> str:
    raise _EncryptedKey


def tls_settings(keyfile: str | None, certfile: str | None, ca_certs: str | None,
                 cert_reqs: int = ssl.CERT_NONE) -> dict[str, Any]:
    """uvicorn.Config's ssl_* arguments ({} when TLS is off), or ValueError saying what is wrong."""
    if keyfile is None and certfile is None:
        if ca_certs is not None or cert_reqs != ssl.CERT_NONE:
            raise ValueError("--ssl-ca-certs and --ssl-cert-reqs need --ssl-certfile (and --ssl-keyfile)")
        return {}
    if certfile is None:
        raise ValueError("--ssl-keyfile needs --ssl-certfile: the server's certificate")
    if cert_reqs not in CERT_REQS:
        raise ValueError(f"--ssl-cert-reqs must be 0 (none), 1 (optional) or 2 (required), got {cert_reqs}")
    if cert_reqs != ssl.CERT_NONE and ca_certs is None:
        raise ValueError(f"--ssl-cert-reqs {cert_reqs} ({CERT_REQS[cert_reqs]} client certificates) needs "
                         "--ssl-ca-certs: the CA that signs them")
    for flag, path in (("--ssl-certfile", certfile), ("--ssl-keyfile", keyfile), ("--ssl-ca-certs", ca_certs)):
        if path is not None:
            _check_readable(flag, path)
    try:
        ctx = ssl.SSLContext(SSL_PROTOCOL_VERSION)
        ctx.load_cert_chain(certfile, keyfile, _no_password)
        create_ssl_context(certfile, keyfile, None, SSL_PROTOCOL_VERSION, cert_reqs, ca_certs, None)
    except _EncryptedKey:
        raise ValueError(f"the TLS key in {keyfile or certfile} is encrypted: give an unencrypted key "
                         "(no flag takes its password)") from None
    except ssl.SSLError as exc:
        raise ValueError(f"the TLS certificate ({certfile}), key ({keyfile or certfile})"
                         f"{f' or CA file ({ca_certs})' if ca_certs else ''} do not load: {exc.reason or exc}") from None
    return {"ssl_keyfile": keyfile, "ssl_certfile": certfile, "ssl_ca_certs": ca_certs, "ssl_cert_reqs": cert_reqs}


def _check_readable(flag: str, path: str) -> None:
    try:
        with open(path, "rb") as f:
            f.read(1)
    except OSError as exc:
        raise ValueError(f"{flag} {path}: cannot be read ({exc.strerror or exc})") from None
