"""Import every module of a plugin sub-package, so that its ``@register_*``
decorators run, the way fairseq's own ``tasks/``, ``models/`` and
``criterions/`` packages do."""

import importlib
import pkgutil


def import_all_modules(package_name, package_path):
    for info in pkgutil.iter_modules(package_path):
        if not info.name.startswith("_"):
            importlib.import_module(f"{package_name}.{info.name}")
