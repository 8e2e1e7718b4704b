"""Builds librewy with the repository's Makefile and ships it inside the package.

    pip install ./python                    # make lib            -> rewy/librewy.so
    REWY_CUDA=1 pip install ./python        # make CUDA=1 lib     (needs nvcc)
    REWY_LIBRARY=/path/librewy.so pip install ./python   # ship an existing build
"""
import os
import shutil
import subprocess

from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools.dist import Distribution

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class BuildPyWithLibrary(build_py):
    def run(self):
        super().run()
        lib = os.environ.get("REWY_LIBRARY") or self.make_library()
        shutil.copyfile(lib, os.path.join(self.build_lib, "rewy", "librewy.so"))

    @staticmethod
    def make_library():
        cuda = os.environ.get("REWY_CUDA") == "1"
        build = "build/cuda-on" if cuda else "build"
        if not os.path.exists(os.path.join(REPO, "Makefile")):
            raise RuntimeError("rewy: no Makefile at %s; build librewy yourself and set REWY_LIBRARY" % REPO)
        subprocess.check_call(["make", "-C", REPO, "lib", "BUILD=" + build] + (["CUDA=1"] if cuda else []))
        return os.path.join(REPO, build, "librewy.so")


class BinaryDistribution(Distribution):
    """librewy.so is native code: the wheel is platform-specific."""
    def has_ext_modules(self):
        return True


setup(cmdclass={"build_py": BuildPyWithLibrary}, distclass=BinaryDistribution)
