"""The installed distribution owns only its own top-level names, and imports cheaply.

python-daemon (PyPI) installs the top-level package ``daemon``; inference services, where
the agent runs, use it. aclprof must install nothing under that name, so that both work
whichever was installed last.
"""

from __future__ import annotations

import importlib.metadata as md
import json
from pathlib import Path

import pytest


def test_installs_no_top_level_daemon_package():
    # packages_distributions() reads each distribution's top_level.txt / RECORD: the names
    # a distribution puts on sys.path, for normal and editable installs alike.
    owners = md.packages_distributions()
    ours = {name for name, dists in owners.items() if "aclprof" in dists}
    assert ours == {"aclprof", "aclprofd"}, ours
    assert "aclprof" not in owners.get("daemon", [])


def test_python_daemon_and_aclprofd_import_side_by_side(run_python):
    pytest.importorskip("daemon", reason="python-daemon is in the [test] extra")
    code = (
        "import json, daemon, aclprofd, aclprofd.main\n"
        "from daemon import DaemonContext\n"
        "print(json.dumps({'daemon': daemon.__file__, 'ctx': DaemonContext.__module__,"
        " 'aclprofd': aclprofd.__file__, 'version': aclprofd.__version__}))\n")
    proc = run_python(code)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert "aclprof" not in out["daemon"], out  # python-daemon's own package, not ours
    assert out["ctx"].startswith("daemon.")
    assert out["aclprofd"].replace("\\", "/").endswith("aclprofd/__init__.py")
    assert out["version"] == md.version("aclprof")


def test_one_version_everywhere():
    import aclprofd

    import aclprof

    assert aclprof.__version__ == aclprofd.__version__ == md.version("aclprof")


_BINDING = ("_cffi_backend", "cffi", "aclprof.binding._fast", "aclprof.binding._acl_ffi", "aclprof.binding.loader",
            "aclprof.binding.lowlevel", "aclprof.api.markers", "aclprof.api.session", "aclprof.api.subscription")


@pytest.mark.parametrize("modules", [
    "aclprof",
    "aclprofd.server, aclprofd.main, aclprofd.metrics",
    "aclprof.cli.client, aclprof.cli",
])
def test_daemon_and_cli_never_load_the_binding(run_python, modules):
    code = (f"import sys, json\nimport {modules}\n"
            f"print(json.dumps(sorted(m for m in {_BINDING!r} if m in sys.modules)))")
    proc = run_python(code)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == []


def test_lazy_names_resolve_and_list():
    import aclprof

    assert sorted(aclprof.__all__) == sorted(["__version__", *aclprof._LAZY.exports])
    assert len(aclprof.__all__) == len(set(aclprof.__all__))
    for name in aclprof.__all__:
        assert getattr(aclprof, name) is not None, name
    assert set(aclprof.__all__) <= set(dir(aclprof))
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        aclprof.nope  # noqa: B018


def test_every_package_folder_is_listed_for_the_wheel():
    """pyproject.toml lists packages by hand (the daemon's lives outside aclprof/): a new
    subpackage missing from the list would be left out of wheels, while editable installs
    and these tests would still find it."""
    import sys

    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover
        import tomli as tomllib

    repo = Path(__file__).resolve().parent.parent
    listed = set(tomllib.loads((repo / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    found = {".".join(p.parent.relative_to(repo).parts) for p in (repo / "aclprof").rglob("__init__.py")}
    daemon = repo / "daemon"
    found |= {".".join(p.parent.relative_to(daemon).parts) for p in (daemon / "aclprofd").rglob("__init__.py")}
    assert listed == found


def test_every_stub_is_listed_for_the_wheel():
    """``include-package-data`` is off, so a ``.pyi`` ships only if package-data names it:
    ``aclprof/__init__.pyi`` is the list of public names read at run time (an installed
    aclprof without it resolves none of them), the C helpers' stubs are their types."""
    import fnmatch
    import sys

    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover
        import tomli as tomllib

    repo = Path(__file__).resolve().parent.parent
    data = tomllib.loads((repo / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]
    stubs = sorted((repo / "aclprof").rglob("*.pyi"))
    assert repo / "aclprof" / "__init__.pyi" in stubs
    unlisted = [str(p.relative_to(repo)) for p in stubs
                if not any(fnmatch.fnmatch(p.name, pat)
                           for pat in data.get(".".join(p.parent.relative_to(repo).parts), []))]
    assert unlisted == []
    assert "*.pyi" in (repo / "MANIFEST.in").read_text()  # and the sdist carries them


def test_a_missing_stub_is_a_clear_import_error(tmp_path):
    from aclprof._lazy import LazyNames

    lazy = LazyNames("aclprof", str(tmp_path / "__init__.pyi"), {})
    with pytest.raises(ImportError, match=r"^aclprof: its list of public names .*__init__\.pyi cannot be read"):
        lazy.getattr("Profiler")
