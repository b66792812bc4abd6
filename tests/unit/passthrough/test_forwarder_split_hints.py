"""The split path (several backend leaders) rewrites leader hints too. Regression: a local name
shadowed the hints module there, and every split Produce failed with AttributeError (clean-clone
CI: the 3-broker pass-through tests)."""

from __future__ import annotations

import inspect

from kshare_sidecar.passthrough import forwarder


def test_the_split_path_reaches_the_hints_module_under_its_own_name():
    source = inspect.getsource(forwarder.Forwarder._split_partitions)
    assert "leader_hints.hinted(" in source
    local_names = forwarder.Forwarder._split_partitions.__code__.co_varnames
    assert "leader_hints" not in local_names
