"""The typed config: every setting is exactly one attribute of one section, of the setting's type,
converted once at load; secrets stay out of reprs; the object cannot be changed after load."""

from __future__ import annotations

import dataclasses
import typing
from collections import Counter

import pytest

from kshare_sidecar.config import sections as config_sections
from kshare_sidecar.config import GROUP_CONFIGS, SETTINGS, SidecarConfig, load_config
from kshare_sidecar.config.sections import SECTIONS, GroupConfig, section_keys

BASE = {"bootstrap.servers": "127.0.0.1:9092"}


def _field_types(cls: type) -> dict[str, object]:
    return typing.get_type_hints(cls, vars(config_sections))


def test_every_setting_is_exactly_one_attribute_and_every_attribute_one_setting():
    keys = Counter(key for cls in SECTIONS.values() for key in section_keys(cls).values())
    assert [k for k, n in keys.items() if n > 1] == []
    assert set(keys) == {s.key for s in SETTINGS}
    assert len(keys) == len(SETTINGS)


def test_each_attribute_has_its_settings_type():
    kinds = {s.key: s.kind for s in SETTINGS}
    for cls in SECTIONS.values():
        types = _field_types(cls)
        for name, key in section_keys(cls).items():
            assert types[name] is kinds[key], f"{cls.__name__}.{name} ({key})"


def test_sidecar_config_carries_every_section():
    hints = typing.get_type_hints(SidecarConfig)
    assert {name: hints[name] for name in SECTIONS} == SECTIONS


def test_values_are_converted_once_at_load():
    cfg = load_config(env={"KSHARE_GROUP_SHARE_MAX_SIZE": "9", "KSHARE_READ_AHEAD_ENABLE": "on",
                           "KSHARE_SHARE_RELEASE_BACKOFF_MULTIPLIER": "1.5"}, overrides=BASE)
    assert cfg.share.max_size == 9 and type(cfg.share.max_size) is int
    assert cfg.server.read_ahead_enable is True
    assert cfg.share.release_backoff_multiplier == 1.5
    for cls_name, cls in SECTIONS.items():  # every attribute equals the value read by name
        section = getattr(cfg, cls_name)
        for name, key in section_keys(cls).items():
            assert getattr(section, name) == cfg[key]
    assert cfg.backend.bootstrap_servers == "127.0.0.1:9092"


def test_config_and_sections_are_frozen():
    cfg = load_config(env={}, overrides=BASE)
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.share = cfg.share  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.share.max_size = 1  # type: ignore[misc]
    with pytest.raises(TypeError):
        cfg.values["group.share.max.size"] = 1  # type: ignore[index]


def test_secrets_stay_out_of_section_reprs():
    secret = "s3cr3t-value"
    cfg = load_config(env={}, overrides={**BASE, "backend.sasl.password": secret, "ssl.key.password": secret,
                                         "backend.ssl.key.password": secret})
    assert cfg.backend.sasl_password == secret
    for text in (repr(cfg), repr(cfg.backend), repr(cfg.listener_security)):
        assert secret not in text


def test_group_config_view_names_every_group_config_once():
    names = Counter(f.metadata[config_sections.KEY] for f in dataclasses.fields(GroupConfig))
    assert [n for n, c in names.items() if c > 1] == []
    assert set(names) == set(GROUP_CONFIGS)
    kinds = {s.key: s.kind for s in SETTINGS}
    types = _field_types(GroupConfig)
    for f in dataclasses.fields(GroupConfig):
        assert types[f.name] is kinds[GROUP_CONFIGS[f.metadata[config_sections.KEY]]], f.name


def test_group_config_view_reads_defaults_overrides_and_partial_mappings():
    cfg = load_config(env={}, overrides={**BASE, "share.release.backoff.ms": 100})
    group = GroupConfig.of(cfg.group_config({"share.record.lock.duration.ms": 20000}))
    assert group.record_lock_duration_ms == 20000
    assert group.release_backoff_ms == 100
    assert group.delivery_count_limit == cfg.share.delivery_count_limit
    partial = GroupConfig.of({"share.record.lock.duration.ms": 30000})  # tests, embedders: extensions off
    assert partial.deadletter_topic_name == "" and partial.release_backoff_ms == 0 and not partial.key_ordering
    assert GroupConfig.of(None) == GroupConfig.of({})
