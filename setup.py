"""Builds rlix's one compiled module, the simulator's rollout engines (rlix/sim/_engine.pyx).

Everything else about the package is in pyproject.toml. The engines are C via Cython because
they are the simulator's hot path; `-ffp-contract=off` keeps every float expression evaluated
as written (no fused multiply-adds), so results do not depend on the machine's instruction set.
"""

from Cython.Build import cythonize
from setuptools import Extension, setup

setup(
    ext_modules=cythonize(
        [
            Extension(
                "rlix.sim._engine",
                ["rlix/sim/_engine.pyx"],
                extra_compile_args=["-O2", "-ffp-contract=off"],
            )
        ],
        compiler_directives={"language_level": "3"},
    )
)
