"""Why a secured backend refuses the sidecar, in one line (``kshare sidecar run`` at a failed start).

Apart from ``security.py`` because it opens a raw connection (``brokerconn.py``), which itself
takes its settings from ``security.py``: one module for both would import itself round a loop.
"""

from __future__ import annotations

from kio.schema.api_versions.v3.request import ApiVersionsRequest

from ..protocol.address import first_server
from ..protocol.requests import request_payload
from .brokerconn import TLS_ANSWER, BrokerAuthError, BrokerConn, BrokerConnError
from .oauth import OAuthTokenError
from .security import BackendSecurity


async def diagnose(bootstrap_servers: str, security: BackendSecurity, timeout_s: float = 10.0) -> str | None:
    """Why a secured backend refuses the sidecar, in one line — or ``None`` if it does not.

    Why: start-up fails inside aiokafka's clients, which report a refused OAUTHBEARER token as
    "NodeNotReadyError" and a missing client certificate (TLS 1.3 checks it after the handshake)
    as "Unable to bootstrap". One raw connection with the same settings (TLS, then SASL, then
    ApiVersions) names the real cause: the broker's SASL error message or the TLS alert.
    """
    host, port = first_server(bootstrap_servers)
    conn = BrokerConn(host, port, security=security, connect_timeout_s=timeout_s)
    payload = request_payload(ApiVersionsRequest(client_software_name="kshare", client_software_version="0"),
                              0, "kshare")
    try:
        if security.mechanism == "OAUTHBEARER" and security.sasl:
            await security._token_provider().token()
        await conn.request(payload, timeout_s=timeout_s)
    except OAuthTokenError as exc:
        return f"no OAUTHBEARER token for the backend: {exc}"
    except BrokerAuthError as exc:
        return f"the backend refused the sidecar's credentials ({security.describe()}): {exc}"
    except (BrokerConnError, TimeoutError, OSError) as exc:
        text = str(exc)
        if not security.tls and ("closed" in text or TLS_ANSWER in text):
            # a TLS listener drops (or answers with a TLS alert) a plaintext request
            return (f"the backend closed the connection ({security.describe()}) at {host}:{port} without a Kafka "
                    f"answer: a TLS listener? backend.security.protocol = {security.protocol}; SSL and SASL_SSL "
                    f"speak TLS")
        if "SSL" in text or "CERTIFICATE" in text.upper() or "TLS" in text:
            return f"TLS with the backend failed ({security.describe()}): {text}"
        return None
    finally:
        await conn.close()
    return None
