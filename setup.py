"""Builds the `halo` package: CMake builds the extension module (target
halo_python) and the device plugins; they are copied into the package with the
embedded model, so an installed package needs nothing from the source tree."""
import os
import shutil
import subprocess
import sys
from pathlib import Path

from setuptools import Extension, find_packages, setup
from setuptools.command.build_ext import build_ext

ROOT = Path(__file__).resolve().parent


class CMakeBuild(build_ext):
    def run(self):
        build_dir = Path(os.environ.get("HALO_CMAKE_BUILD_DIR", ROOT / "build-python")).resolve()
        generator = ["-G", "Ninja"] if shutil.which("ninja") else []
        subprocess.check_call(
            ["cmake", "-S", str(ROOT), "-B", str(build_dir), *generator,
             "-DCMAKE_BUILD_TYPE=Release", "-DHALO_BUILD_TESTS=OFF",
             "-DHALO_BUILD_BENCHMARKS=OFF", f"-DHALO_PYTHON={sys.executable}"])
        targets = ["halo_python", "halo_plugin_cpu", "halo_plugin_rbln"]
        subprocess.check_call(["cmake", "--build", str(build_dir), "--target", *targets])
        package = Path(self.build_lib) / "halo"
        package.mkdir(parents=True, exist_ok=True)
        for so in (build_dir / "python" / "halo").glob("_C*.so"):
            shutil.copy2(so, package / so.name)
        plugins = package / "plugins"
        plugins.mkdir(exist_ok=True)
        for so in (build_dir / "lib" / "halo" / "plugins").glob("libhalo_plugin_*.so"):
            shutil.copy2(so, plugins / so.name)
        model = package / "models" / "pkgchat-5m"
        shutil.rmtree(model, ignore_errors=True)
        shutil.copytree(ROOT / "models" / "pkgchat-5m", model)


setup(
    packages=find_packages("python"),
    package_dir={"": "python"},
    ext_modules=[Extension("halo._C", sources=[])],
    cmdclass={"build_ext": CMakeBuild},
    zip_safe=False,
)
