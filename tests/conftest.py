"""Project-wide test settings. The real-broker fixtures come from kshare_sidecar.testing."""
