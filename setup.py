"""Build step that pyproject.toml cannot express: the shipped experiments become package data.

The experiments live once, in ``experiments/`` at the repository's root, where a clone runs them
(``ignite-ddl sweep experiments/quickstart/spec.yaml``) and their READMEs sit beside them. Building the package copies
each experiment's files into ``ignite_ddl/experiments/``, so an installed ignite-ddl runs them by name
(``ignite-ddl sweep quickstart``; ``ignite_ddl.sweep.experiments`` finds them either way). Everything else about the
package is declared in pyproject.toml.
"""

from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

SHIPPED = ("*.yaml", "README.md", "*.sbatch")  # an experiment's files (its specs); README.md of the folder too


class BuildWithExperiments(build_py):
    def run(self) -> None:
        super().run()
        source = Path(__file__).resolve().parent / "experiments"
        if self.editable_mode or not source.is_dir():  # editable: read from the checkout
            return
        files = [source / "README.md", *(f for pattern in SHIPPED for f in source.glob(f"*/{pattern}"))]
        for file in sorted(f for f in files if f.is_file()):
            target = Path(self.build_lib) / "ignite_ddl" / "experiments" / file.relative_to(source)
            self.mkpath(str(target.parent))
            self.copy_file(str(file), str(target))


setup(cmdclass={"build_py": BuildWithExperiments})
