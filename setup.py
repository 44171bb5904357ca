"""Builds protocol/_speedups (the compiled SEND path) from its Cython source at install time.

Everything else about the package is in pyproject.toml. Without a C compiler the build of the
extension is skipped with a message and the package installs without it: protocol/_accel.py
then picks the pure-Python reference and logs that it did.
"""

from __future__ import annotations

import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext


class OptionalBuildExt(build_ext):
    """A failed compile is a slower broker, not a failed install."""

    def run(self) -> None:
        try:
            super().run()
        except Exception as exc:  # no compiler, no Python headers, ...
            self._skipped(exc)

    def build_extension(self, ext: Extension) -> None:
        try:
            super().build_extension(ext)
        except Exception as exc:
            self._skipped(exc)

    @staticmethod
    def _skipped(exc: Exception) -> None:
        print(
            f"magnetar: the compiled SEND path was not built ({exc}); "
            "the pure-Python reference will be used",
            file=sys.stderr,
        )


def _extensions() -> list[Extension]:
    try:
        from Cython.Build import cythonize
    except ImportError:  # pip installs it (build-system requires); a bare setup.py run may not
        print("magnetar: Cython is missing; the compiled SEND path is not built", file=sys.stderr)
        return []
    speedups = Extension(
        "protocol._speedups",
        ["protocol/_speedups.pyx"],
        depends=[
            "protocol/_crc32c.h",
            "protocol/_wire.pxi",
            "protocol/_frame_decoder.pxi",
            "protocol/_metadata.pxi",
            "protocol/_message.pxi",
            "protocol/_batch_builder.pxi",
            "protocol/_dispatch.pxi",
            "protocol/_keys.pxi",
            "protocol/_key_table.pxi",
            "protocol/_key_snapshot.pxi",
            "protocol/_columns.pxi",
            "protocol/_rowhash.pxi",
            "protocol/_gather.pxi",
            "protocol/_entry_metadata.pxi",
            "protocol/_acked_positions.pxi",
            "protocol/_records.pxi",
            "protocol/_send_path.pxi",
            "protocol/_split_batch.pxi",
            "protocol/_idem_window.pxi",
        ],
    )
    return cythonize([speedups], compiler_directives={"language_level": "3"}, quiet=True)


setup(ext_modules=_extensions(), cmdclass={"build_ext": OptionalBuildExt})
