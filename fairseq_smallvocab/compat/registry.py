"""Import every module of a plugin sub-package, so that its ``@register_*``
decorators run, the way fairseq's own ``tasks/``, ``models/`` and
``criterions/`` packages do."""

import importlib
import pkgutil


def import_all_modules(package_name, package_path):
    for info in pkgutil.iter_modules(package_path):
        if not info.name.startswith("_"):
            importlib.import_module(f"{package_name}.{info.name}")


def register_alias(registry_name: str, alias: str, name: str):
    """Make ``alias`` a second name of the registered ``name`` in fairseq's registry ``registry_name`` (e.g.
    "criterion"): the same class and config, so that commands written with a former name run unchanged.
    (fairseq's own ``register_*`` refuses a class registered twice, by its class name.)"""
    from fairseq.registry import REGISTRIES
    from hydra.core.config_store import ConfigStore

    registry = REGISTRIES[registry_name]
    if alias in registry["registry"]:
        raise ValueError(f"--{registry_name} {alias} is registered already")
    cls, dataclass = registry["registry"][name], registry["dataclass_registry"].get(name)
    registry["registry"][alias] = cls
    if dataclass is not None:
        registry["dataclass_registry"][alias] = dataclass
        node = dataclass()
        node._name = alias
        ConfigStore.instance().store(name=alias, group=registry_name, node=node, provider="fairseq")
    return cls
