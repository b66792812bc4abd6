"""Built-in SASL authenticators: a static credentials file and delegation to the backend."""

from kshare_sidecar.hookspecs import hookimpl


def _static(**options):
    from kshare_sidecar.auth.authenticators import static_authenticator

    return static_authenticator(**options)


def _delegate(**options):
    from kshare_sidecar.auth.delegate import delegate_authenticator  # backend connections only when used

    return delegate_authenticator(**options)


@hookimpl
def register_authenticators(register):
    register("static", _static, description="users from sasl.credentials.file (passwords or Kafka's salted SCRAM "
                                            "form); PLAIN, SCRAM-SHA-256, SCRAM-SHA-512")
    register("delegate", _delegate, description="the backend checks the credentials (no user database in the "
                                                "sidecar): PLAIN by authenticating with them, SCRAM-SHA-256/512 "
                                                "by relaying the exchange")
