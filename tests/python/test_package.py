"""The package as users install it: one version number (CMake's project VERSION) for C++, Python,
the `laggard` program and the package metadata; an installed package carries py.typed, the
module and the program, and its `laggard` command runs that program."""

import importlib.metadata
import os
import re
import subprocess
import sys

import pytest

import laggard
import laggard.cli
from laggard import _core

import testenv


def cmake_version():
    with open(os.path.join(testenv.ROOT, "CMakeLists.txt")) as f:
        m = re.search(r"project\(laggard VERSION ([0-9]+\.[0-9]+\.[0-9]+)", f.read())
    assert m, "no `project(laggard VERSION x.y.z)` in CMakeLists.txt"
    return m.group(1)


def test_one_version_number_in_python_and_cpp():
    assert laggard.__version__ == _core.__version__ == cmake_version()


def test_the_program_reports_the_same_version():
    cli = testenv.cli()
    if cli is None:
        assert not testenv.INSTALLED, "the installed package has no `laggard` command"
        pytest.skip("the laggard program is not built")
    out = subprocess.run([cli, "--version"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "laggard " + laggard.__version__


def test_unknown_attribute_is_an_attribute_error():
    with pytest.raises(AttributeError):
        laggard.no_such_thing  # noqa: B018


installed = pytest.mark.skipif(not testenv.INSTALLED, reason="the installed package only "
                               "(LAGGARD_TEST_INSTALLED=1, scripts/wheel-test.sh)")


@installed
def test_metadata_version_is_the_same():
    assert importlib.metadata.version("laggard") == laggard.__version__ == cmake_version()


@installed
def test_installed_package_carries_py_typed_module_and_program():
    pkg = os.path.dirname(os.path.abspath(laggard.__file__))
    assert not pkg.startswith(os.path.join(testenv.ROOT, "python"))
    assert os.path.isfile(os.path.join(pkg, "py.typed"))
    assert os.path.dirname(os.path.abspath(_core.__file__)) == pkg
    program = laggard.cli.path()
    assert program == os.path.join(pkg, "bin", "laggard")
    libs = subprocess.run(["ldd", program], capture_output=True, text=True).stdout
    assert "not found" not in libs, libs


@installed
def test_console_script_and_python_m_run_the_packaged_program(tmp_path):
    script = os.path.join(os.path.dirname(sys.executable), "laggard")
    for cmd in ([script, "--version"], [sys.executable, "-m", "laggard", "--version"]):
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=60, cwd=str(tmp_path))
        assert out.returncode == 0, out.stderr
        assert out.stdout.strip() == "laggard " + laggard.__version__
    # exit status and stderr are the program's own (os.execv, no Python wrapper in between)
    out = subprocess.run([script, "analyze", str(tmp_path / "missing")], capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 2 and "missing" in out.stderr, (out.returncode, out.stderr)


@pytest.mark.skipif(testenv.INSTALLED, reason="the source tree only")
def test_python_m_laggard_in_a_source_tree_says_where_the_program_is():
    assert laggard.cli.path() is None
    out = subprocess.run([sys.executable, "-m", "laggard", "--version"], capture_output=True,
                         text=True, timeout=60, env=testenv.subprocess_env())
    assert out.returncode == 2
    assert "laggard/bin/laggard is not in this package" in out.stderr
    assert "build/tools/laggard" in out.stderr
