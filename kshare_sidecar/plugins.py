"""Plugin discovery and the registries built from the ``register_*`` hooks.

Nothing is loaded at import time: the CLI / server entry point calls :func:`load_plugins`.
Built-in features live in :mod:`kshare_sidecar.default_plugins` and register through the same
hooks as third-party plugins (entry-point group ``kshare_sidecar``).

One switch says which plugins load: the sidecar settings ``plugins.load`` (allowlist of
entry-point or distribution names; empty = every installed plugin), ``plugins.disable`` (names to
block, built-ins included) and ``plugins.trace`` (log every hook call and registration), from the
config file or ``KSHARE_PLUGINS_*`` like every other setting; :func:`load_configured` applies
them (the sidecar and ``kshare plugins`` both call it).

A plugin that fails to import, fails validation or raises inside a hook is recorded as a
:class:`PluginFailure` (logged at ERROR with its name, listed by ``kshare plugins``); the
other plugins and the server keep working.
"""

from __future__ import annotations

import importlib
import importlib.metadata as importlib_metadata
import logging
import sys
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import pluggy

from kshare_sidecar import hookspecs

log = logging.getLogger("kshare_sidecar.plugins")

ENTRYPOINT_GROUP = hookspecs.PROJECT_NAME

DEFAULT_PLUGINS: tuple[str, ...] = (
    "kshare_sidecar.default_plugins.assignors",
    "kshare_sidecar.default_plugins.authenticators",
    "kshare_sidecar.default_plugins.persisters",
)

# registry kind -> the hook that fills it
REGISTRY_HOOKS: dict[str, str] = {
    "assignors": "register_assignors",
    "persisters": "register_persisters",
    "authenticators": "register_authenticators",
}


class UnknownPluginObjectError(LookupError):
    """An assignor / persister name that no loaded plugin registered."""

    def __init__(self, kind: str, name: str, available: Iterable[str]):
        self.kind = kind
        self.name = name
        self.available = sorted(available)
        singular = kind[:-1] if kind.endswith("s") else kind
        allowed = ", ".join(self.available) if self.available else "(none registered)"
        super().__init__(f"unknown {singular} {name!r}; allowed values: {allowed}")

    def __str__(self) -> str:  # LookupError would repr() the message
        return self.args[0]


@dataclass(frozen=True, slots=True)
class PluginFailure:
    """A plugin that could not be loaded, or whose hook raised."""

    name: str  # entry-point or module name
    stage: str  # "load", "register", "validate" or "hook:<hook name>"
    error: str  # "ExceptionType: message"
    distribution: str | None = None


@dataclass(frozen=True, slots=True)
class Registration:
    """One named object registered through a ``register_*`` hook."""

    kind: str
    name: str
    factory: Callable[..., Any]
    plugin: str
    description: str = ""


@dataclass(slots=True)
class _PluginMeta:
    distribution: str | None = None
    version: str | None = None
    builtin: bool = False


def names(text: str) -> list[str]:
    """The names of a comma-separated setting (``plugins.load``, ``plugins.disable``)."""
    return [part.strip() for part in text.split(",") if part.strip()]


def _error_text(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


@dataclass
class PluginHost:
    """A plugin manager plus its load state, failures and registries.

    The module keeps one default host (:data:`host`); tests make their own so they never
    depend on what is installed in the environment.
    """

    pm: pluggy.PluginManager = field(default_factory=lambda: pluggy.PluginManager(hookspecs.PROJECT_NAME))
    failures: list[PluginFailure] = field(default_factory=list)
    _meta: dict[str, _PluginMeta] = field(default_factory=dict)
    _loaded: bool = False
    _registry_cache: dict[str, Any] = field(default_factory=dict)
    _trace: bool = False

    def __post_init__(self) -> None:
        self.pm.add_hookspecs(hookspecs)

    # ----------------------------------------------------------------------------- loading
    def load_plugins(
        self,
        *,
        load: Iterable[str] | None = None,
        disable: Iterable[str] | None = None,
        entry_points: bool = True,
        trace: bool = False,
    ) -> None:
        """Load built-ins and the allowed entry points, once (idempotent).

        ``load``: allowlist of entry-point / distribution names (``None`` = every installed
        plugin, ``[]`` = none from outside); ``disable``: names to block.
        """
        if self._loaded:
            return
        self._loaded = True
        allow = list(load) if load is not None else None
        blocked = list(disable or ())
        if trace:
            self._install_trace()
        for name in blocked:
            self.pm.set_blocked(name)
        if entry_points:
            self._load_entry_points(allow, set(blocked))
        for module_name in DEFAULT_PLUGINS:
            if self.pm.is_blocked(module_name) or self.pm.has_plugin(module_name):
                continue
            try:
                module = importlib.import_module(module_name)
            except Exception as exc:  # a broken built-in must be visible, not fatal
                self._fail(module_name, "load", exc)
                continue
            self._register(module, module_name, _PluginMeta(builtin=True, **self._own_version()))

    def _own_version(self) -> dict[str, str | None]:
        from kshare_sidecar import __version__

        return {"distribution": "kshare-sidecar", "version": __version__}

    def _load_entry_points(self, allow: list[str] | None, blocked: set[str]) -> None:
        try:
            eps = sorted(importlib_metadata.entry_points(group=ENTRYPOINT_GROUP), key=lambda ep: ep.name)
        except Exception as exc:  # pragma: no cover - broken metadata in site-packages
            self._fail("<entry points>", "load", exc)
            return
        seen: set[str] = set()
        for ep in eps:
            dist = getattr(ep, "dist", None)
            dist_name = dist.metadata["Name"] if dist is not None else None
            dist_version = dist.version if dist is not None else None
            if ep.name in seen:  # the same distribution visible twice on sys.path
                continue
            seen.add(ep.name)
            names = {ep.name, *([dist_name] if dist_name else [])}
            if allow is not None and not (names & set(allow)):
                continue
            if names & blocked or self.pm.is_blocked(ep.name):
                continue
            if self.pm.has_plugin(ep.name):
                continue
            try:
                plugin = ep.load()
            except (Exception, SystemExit) as exc:
                self._fail(ep.name, "load", exc, dist_name)
                continue
            self._register(plugin, ep.name, _PluginMeta(distribution=dist_name, version=dist_version))

    def _register(self, plugin: object, name: str, meta: _PluginMeta) -> bool:
        try:
            self.pm.register(plugin, name=name)
        except Exception as exc:  # PluginValidationError (bad hookimpl signature), duplicates
            self._fail(name, "register", exc, meta.distribution)
            return False
        try:
            self.pm.check_pending()  # hookimpls matching no spec: misspelled hook names
        except Exception as exc:
            self.pm.unregister(name=name)
            self._fail(name, "validate", exc, meta.distribution)
            return False
        self._meta[name] = meta
        self._registry_cache.clear()
        if self._trace:
            log.info("plugin registered: %s (%s %s)", name, meta.distribution, meta.version)
        return True

    def _fail(self, name: str, stage: str, exc: BaseException, dist: str | None = None) -> None:
        failure = PluginFailure(name=name, stage=stage, error=_error_text(exc), distribution=dist)
        if failure not in self.failures:
            self.failures.append(failure)
            log.error("kshare plugin %r failed (%s): %s", name, stage, failure.error)

    def _install_trace(self) -> None:
        self._trace = True

        def before(hook_name, hook_impls, kwargs):
            log.info("hook call %s(%s) -> %s", hook_name, ", ".join(kwargs), [i.plugin_name for i in hook_impls])

        def after(outcome, hook_name, hook_impls, kwargs):
            log.info("hook done %s: %r", hook_name, outcome.exception or "ok")

        self.pm.add_hookcall_monitoring(before, after)

    def register_plugin(self, plugin: object, name: str, *, distribution: str | None = None,
                        version: str | None = None) -> bool:
        """Register an in-process plugin object (tests, embedding). Returns False on failure."""
        return self._register(plugin, name, _PluginMeta(distribution=distribution, version=version))

    def unregister_plugin(self, name: str) -> None:
        if self.pm.has_plugin(name):
            self.pm.unregister(name=name)
        self._meta.pop(name, None)
        self._registry_cache.clear()

    # ---------------------------------------------------------------------------- registries
    def _collect(self, kind: str) -> dict[str, Registration]:
        hook_name = REGISTRY_HOOKS[kind]
        cache_key = (kind, tuple(id(p) for p in self.pm.get_plugins()))
        cached = self._registry_cache.get(kind)
        if cached is not None and cached[0] == cache_key:
            return cached[1]
        registry: dict[str, Registration] = {}
        caller = getattr(self.pm.hook, hook_name)
        # pluggy calls the most recently registered first; built-ins register last, so walk
        # in registration order to let the first registration of a name win predictably.
        impls = [i for i in caller.get_hookimpls() if not (i.hookwrapper or i.wrapper)]
        impls.sort(key=lambda i: (not self._meta.get(i.plugin_name, _PluginMeta()).builtin, i.plugin_name))
        for impl in impls:
            plugin_name = impl.plugin_name

            def register(name: str, factory: Callable[..., Any], description: str = "",
                         _plugin: str = plugin_name) -> None:
                if not isinstance(name, str) or not name:
                    raise ValueError(f"{kind} names must be non-empty strings, got {name!r}")
                if not callable(factory):
                    raise TypeError(f"{kind} {name!r}: factory must be callable, got {factory!r}")
                if name in registry:
                    other = registry[name].plugin
                    raise ValueError(f"{kind[:-1]} name {name!r} is already registered by {other!r}")
                registry[name] = Registration(kind, name, factory, _plugin, description or "")
                if self._trace:
                    log.info("%s registered %s %r", _plugin, kind[:-1], name)

            kwargs = {"register": register}
            try:
                if self._trace:
                    log.info("hook call %s -> %s", hook_name, plugin_name)
                impl.function(**{arg: kwargs[arg] for arg in impl.argnames})
            except Exception as exc:
                self._fail(plugin_name, f"hook:{hook_name}", exc, self._meta.get(plugin_name, _PluginMeta()).distribution)
        self._registry_cache[kind] = (cache_key, registry)
        return registry

    def registrations(self, kind: str) -> dict[str, Registration]:
        self.load_plugins()
        return dict(self._collect(kind))

    def get_assignors(self) -> dict[str, Callable[..., Any]]:
        return {name: reg.factory for name, reg in self.registrations("assignors").items()}

    def get_persisters(self) -> dict[str, Callable[..., Any]]:
        return {name: reg.factory for name, reg in self.registrations("persisters").items()}

    def get_authenticators(self) -> dict[str, Callable[..., Any]]:
        return {name: reg.factory for name, reg in self.registrations("authenticators").items()}

    def get_authenticator(self, name: str, **options: Any) -> Any:
        """Instantiate the SASL authenticator registered as ``name``."""
        return self._lookup("authenticators", name)(**options)

    def _lookup(self, kind: str, name: str) -> Callable[..., Any]:
        regs = self.registrations(kind)
        if name not in regs:
            raise UnknownPluginObjectError(kind, name, regs)
        return regs[name].factory

    def get_assignor(self, name: str, **options: Any) -> Any:
        """Instantiate the assignor registered as ``name``."""
        return self._lookup("assignors", name)(**options)

    def get_persister(self, name: str, **options: Any) -> Any:
        """Instantiate the persister registered as ``name`` with its options."""
        return self._lookup("persisters", name)(**options)

    # ------------------------------------------------------------------------- introspection
    def get_plugins(self) -> list[dict[str, Any]]:
        """One dict per registered plugin: name, version, distribution, hooks, registrations."""
        self.load_plugins()
        regs = {kind: self._collect(kind) for kind in REGISTRY_HOOKS}
        out = []
        for name, plugin in sorted(self.pm.list_name_plugin(), key=lambda np: np[0] or ""):
            if plugin is None or name is None:
                continue  # blocked
            meta = self._meta.get(name, _PluginMeta())
            hooks = sorted(h.name for h in (self.pm.get_hookcallers(plugin) or []))
            registered = {kind: sorted(r.name for r in by_name.values() if r.plugin == name)
                          for kind, by_name in regs.items()}
            out.append({
                "name": name,
                "distribution": meta.distribution,
                "version": meta.version,
                "builtin": meta.builtin,
                "hooks": hooks,
                "registers": {k: v for k, v in registered.items() if v},
            })
        return out

    def get_failures(self) -> list[PluginFailure]:
        self.load_plugins()
        for kind in REGISTRY_HOOKS:  # hook failures surface when registries are built
            self._collect(kind)
        return list(self.failures)


host = PluginHost()
pm = host.pm


def load_plugins(*, load: Iterable[str] | None = None, disable: Iterable[str] | None = None,
                 entry_points: bool = True, trace: bool = False) -> None:
    """Load built-ins and allowed entry-point plugins into the default host (idempotent)."""
    host.load_plugins(load=load, disable=disable, entry_points=entry_points, trace=trace)


def load_configured(settings: Any) -> None:
    """Load plugins as the config's plugin settings say (``SidecarConfig.plugins``: ``load``,
    ``disable``, ``trace``): the one switch."""
    load_plugins(load=names(settings.load) or None, disable=names(settings.disable), trace=settings.trace)


def get_plugins() -> list[dict[str, Any]]:
    return host.get_plugins()


def get_plugin_failures() -> list[PluginFailure]:
    return host.get_failures()


def get_assignors() -> dict[str, Callable[..., Any]]:
    return host.get_assignors()


def get_persisters() -> dict[str, Callable[..., Any]]:
    return host.get_persisters()


def get_assignor(name: str, **options: Any) -> Any:
    return host.get_assignor(name, **options)


def get_persister(name: str, **options: Any) -> Any:
    return host.get_persister(name, **options)


def get_authenticators() -> dict[str, Callable[..., Any]]:
    return host.get_authenticators()


def get_authenticator(name: str, **options: Any) -> Any:
    return host.get_authenticator(name, **options)


def describe(h: PluginHost | None = None) -> Mapping[str, Any]:
    """Everything ``kshare plugins --json`` prints."""
    h = h or host
    plugins = h.get_plugins()
    regs = {kind: {name: {"plugin": r.plugin, "description": r.description}
                   for name, r in sorted(h.registrations(kind).items())} for kind in REGISTRY_HOOKS}
    return {
        "plugins": plugins,
        "failures": [{"name": f.name, "stage": f.stage, "error": f.error, "distribution": f.distribution}
                     for f in h.get_failures()],
        **regs,
        "python": sys.version.split()[0],
    }
