"""Maps the four code folders onto one import name (DESIGN.md, "Layout").

`evaluator/`, `sandbox/` and `rl/` live at the top of the repository so a reader finds them at a
glance, but install as `agentforge.evaluator`, `agentforge.sandbox` and `agentforge.rl`.
setuptools' package discovery cannot rename folders, hence this file; everything else is in
pyproject.toml.
"""

from setuptools import find_packages, setup

MAPPED_FOLDERS = {"evaluator": "agentforge.evaluator", "sandbox": "agentforge.sandbox", "rl": "agentforge.rl"}

packages = find_packages(include=["agentforge", "agentforge.*"])
package_dir = {"agentforge": "agentforge"}
for folder, import_name in MAPPED_FOLDERS.items():
    package_dir[import_name] = folder
    packages.append(import_name)
    packages += [f"{import_name}.{sub}" for sub in find_packages(where=folder)]

setup(packages=packages, package_dir=package_dir)
