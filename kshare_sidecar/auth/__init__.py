"""Who a client is: SASL mechanisms (server side), credential stores, principals.

Sans-I/O except the authenticators that need the backend (``delegate``). The wire protocol around
it (SaslHandshake / SaslAuthenticate, the pre-authentication gate) is ``kshare_sidecar.api.sasl``.
"""

ANONYMOUS = "User:ANONYMOUS"
