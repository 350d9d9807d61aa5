"""Fixtures of the Python API tests. ctest sets HALO_BUILD_DIR (default: build/ of this tree),
PYTHONPATH (the halo package with its _C module) and HALO_PLUGIN_PATH."""
import os
import socket
import subprocess
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BUILD = os.environ.get("HALO_BUILD_DIR", os.path.join(REPO, "build"))

os.environ.setdefault("HALO_PLUGIN_PATH", os.path.join(BUILD, "lib", "halo", "plugins"))
try:
    import halo  # noqa: F401
except ImportError:
    # Not on PYTHONPATH: the package the build placed under build/python.
    sys.path.insert(0, os.path.join(BUILD, "python"))
    import halo  # noqa: F401,E402


@pytest.fixture(scope="session")
def repo_root():
    return REPO


@pytest.fixture(scope="session")
def model_dir():
    return os.path.join(REPO, "models", "pkgchat-5m")


@pytest.fixture(scope="session")
def halo_bin():
    path = os.path.join(BUILD, "bin", "halo")
    if not os.access(path, os.X_OK):
        pytest.skip(f"no halo binary at {path} (set HALO_BUILD_DIR)")
    return path


@pytest.fixture(scope="session")
def subprocess_env():
    """The environment for `python -m halo...` children: this process's halo package."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([p for p in sys.path if p and os.path.isdir(os.path.join(p, "halo"))]
                                        + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    return env


@pytest.fixture(scope="module")
def llm(model_dir):
    from halo import LLM

    return LLM(model_dir, device="cpu", max_num_seqs=8, max_model_len=512)


@pytest.fixture(scope="module")
def compiled_rbln(halo_bin, model_dir, tmp_path_factory):
    """pkgchat-5m compiled for the (simulated) rbln device: batch 4, 256 tokens."""
    out = str(tmp_path_factory.mktemp("rbln") / "pkgchat-5m-rbln")
    proc = subprocess.run([halo_bin, "compile", model_dir, "--device", "rbln", "--batch-size", "4",
                           "--max-seq-len", "256", "-o", out],
                          capture_output=True, text=True, timeout=300)
    if proc.returncode != 0:
        pytest.fail(f"halo compile exited {proc.returncode}:\n{proc.stderr}")
    return out


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
