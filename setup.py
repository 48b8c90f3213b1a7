"""Build hook for the optional compiled accelerator ``rlstore._accel`` (metadata: pyproject.toml).

``optional=True``: without a C compiler the install still succeeds and rlstore uses its
pure-Python fast path (same results, measured slower; see ``rlstore/buffers/_replay_fast.py``).
"""

from setuptools import Extension, setup

try:
    import numpy
except ImportError:  # build without numpy headers: no accelerator
    ext_modules = []
else:
    ext_modules = [
        Extension(
            "rlstore._accel",
            sources=["src/rlstore/_accel.c"],
            include_dirs=[numpy.get_include()],
            extra_compile_args=["-O2"],
            optional=True,
        )
    ]

setup(ext_modules=ext_modules)
