"""`pip install ./python`: builds the extension module with the project's own CMake tree (target h3c_python, the
same build as `bash scripts/main.sh`, reused when it is there) and installs it with the package's Python files.

H3C_BUILD_DIR: the build folder (default: <repo>/build); configured here when it has no CMakeCache.txt, for the
interpreter running pip. Extra CMake arguments: H3C_CMAKE_ARGS (e.g. "-DH3C_ENABLE_MLIR=OFF" on a GPU machine)."""
import glob
import os
import shlex
import shutil
import subprocess
import sys
import sysconfig

from setuptools import setup
from setuptools.command.build_py import build_py

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class BuildWithCMake(build_py):
    def run(self):
        build = os.environ.get("H3C_BUILD_DIR", os.path.join(ROOT, "build"))
        if not os.path.exists(os.path.join(build, "CMakeCache.txt")):
            subprocess.check_call(["cmake", "-S", ROOT, "-B", build, "-G", "Ninja", "-DCMAKE_BUILD_TYPE=Release",
                                   f"-DPython3_EXECUTABLE={sys.executable}",
                                   *shlex.split(os.environ.get("H3C_CMAKE_ARGS", ""))])
        subprocess.check_call(["cmake", "--build", build, "--target", "h3c_python"])
        super().run()
        suffix = sysconfig.get_config_var("EXT_SUFFIX")
        module = os.path.join(build, "python", "h3c", "_h3c" + suffix)
        if not os.path.exists(module):
            found = glob.glob(os.path.join(build, "python", "h3c", "_h3c*"))
            sys.exit(f"h3c: {build} built {found or 'no module'} but this Python needs _h3c{suffix}: set "
                     f"H3C_BUILD_DIR to a new folder (configured for {sys.executable}), or use the Python that "
                     f"folder was configured for")
        shutil.copy2(module, os.path.join(self.build_lib, "h3c"))


setup(cmdclass={"build_py": BuildWithCMake})
