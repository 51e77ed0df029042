"""``aclprof doctor --check`` (issue 22, "For the first user with an NPU") on the mock: the
library set and its groups, a profiling session, a subscription with the layout check, the
clock calibration and the record rate, the report files, and the exit codes (0 passed,
1 a check failed, 2 bad arguments or an unwritable report)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from aclprof.api.selfcheck import cann_version

MODEL = "aclmock-model 1\ndevice 0\nop\tconv1\tConv2D\t120000\t0\t0\t0\nop\trelu1\tRelu\t30000\t0\t0\t0\n"


def _doctor(make_env, cwd: Path, *args: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "aclprof", "doctor", "--check", *args],
                          env=make_env(**env), cwd=cwd, capture_output=True, text=True, timeout=60)


def _steps(path: Path) -> dict[str, dict]:
    return {s["name"]: s for s in json.loads(path.read_text())["steps"]}


def test_check_with_a_model_passes_and_writes_both_reports(make_env, tmp_path):
    model = tmp_path / "m.txt"
    model.write_text(MODEL)
    p = _doctor(make_env, tmp_path, "--model", str(model), "--executions", "7", "--report", "r.json",
                ACLPROF_BACKEND="mock")
    assert p.returncode == 0, p.stdout + p.stderr
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["ok"] is True
    steps = _steps(tmp_path / "r.json")
    assert list(steps) == ["library", "CANN version", "symbol groups", "runtime", "profiling session",
                           "subscription"]
    assert steps["library"]["data"]["is_mock"] and steps["library"]["data"]["op_desc_size"] == 80
    groups = {g["group"]: g for g in steps["symbol groups"]["data"]["groups"]}
    assert {"session", "op-desc getters", "msproftx", "step info", "runtime", "model"} <= set(groups)
    assert all(g["files"] == [steps["library"]["data"]["path"]] for g in groups.values())
    assert steps["profiling session"]["ok"] and steps["profiling session"]["data"]["files_written"] > 0
    sub = steps["subscription"]
    assert sub["ok"] is True
    assert sub["data"]["records"] == 14 == sub["data"]["delivered"]  # 7 executions x 2 ops
    assert sub["data"]["layout_mismatch"] is False and sub["data"]["dropped"] == 0
    assert sub["data"]["records_per_second"] > 0 and sub["data"]["clock_offset_ns_min"] is not None
    text = (tmp_path / "r.txt").read_text()
    assert "aclprof self-check: passed" in text and "[ok  ] subscription: 14 records" in text
    assert text in p.stdout


def test_check_without_a_model_skips_the_subscription(make_env, tmp_path):
    p = _doctor(make_env, tmp_path, ACLPROF_BACKEND="mock")
    assert p.returncode == 0, p.stdout + p.stderr
    steps = _steps(tmp_path / "aclprof-check.json")  # the default report, in the working directory
    assert steps["subscription"]["ok"] is None and "skipped" in steps["subscription"]["detail"]
    assert (tmp_path / "aclprof-check.txt").is_file()


def test_a_failing_check_exits_1_and_says_why(make_env, tmp_path):
    # No library: the library step fails with the loader's message (what was tried, the fix).
    p = _doctor(make_env, tmp_path, ACLPROF_LIBRARY=str(tmp_path / "nope" / "libmsprofiler.so"))
    assert p.returncode == 1, p.stdout + p.stderr
    steps = _steps(tmp_path / "aclprof-check.json")
    assert list(steps) == ["library"] and steps["library"]["ok"] is False
    assert "nope/libmsprofiler.so" in steps["library"]["detail"] and "ACLPROF_LIBRARY" in steps["library"]["detail"]
    # A model file the library refuses: the subscription step fails, the others pass.
    bad = tmp_path / "bad.txt"
    bad.write_text("not a model\n")
    p = _doctor(make_env, tmp_path, "--model", str(bad), ACLPROF_BACKEND="mock")
    assert p.returncode == 1, p.stdout + p.stderr
    steps = _steps(tmp_path / "aclprof-check.json")
    assert steps["profiling session"]["ok"] is True and steps["subscription"]["ok"] is False
    assert "aclmdlLoadFromFile" in steps["subscription"]["detail"]
    assert "[FAIL] subscription" in p.stdout and "Traceback" not in p.stderr


def test_bad_arguments_exit_2(make_env, tmp_path):
    p = _doctor(make_env, tmp_path, "--model", str(tmp_path / "missing.om"), ACLPROF_BACKEND="mock")
    assert p.returncode == 2 and "missing.om: no such file" in p.stderr
    p = _doctor(make_env, tmp_path, "--report", str(tmp_path / "no" / "dir" / "r.json"), ACLPROF_BACKEND="mock")
    assert p.returncode == 2 and "cannot write the report" in p.stderr
    p = _doctor(make_env, tmp_path, "--device", "64", ACLPROF_BACKEND="mock")
    assert p.returncode == 2 and "a device id" in p.stderr


def test_in_process_check_of_a_model_the_application_loaded(run_python):
    out = run_python(r"""
import json
from aclprof import mock
from aclprof.api.selfcheck import run_check
model = mock.load_model([{"name": "a", "type": "A", "duration_ns": 1000}] * 3)
report = run_check(model_id=model, run=lambda: mock.execute(model, 4))
sub = [s for s in report.steps if s.name == "subscription"][0]
print(json.dumps({"ok": report.ok, "records": sub.data["records"], "model": sub.data["model_id"] == model}))
""")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout.strip().splitlines()[-1]) == {"ok": True, "records": 12, "model": True}


def test_cann_version_from_the_install_around_lib64(tmp_path):
    lib64 = tmp_path / "latest" / "lib64"
    lib64.mkdir(parents=True)
    assert cann_version(str(lib64 / "libmsprofiler.so")) == (None, None)
    (tmp_path / "latest" / "runtime").mkdir()
    (tmp_path / "latest" / "runtime" / "version.info").write_text(
        "Version=8.0.RC2\nruntime_running_version=[8.0.RC2:8.0.0]\n")
    assert cann_version(str(lib64 / "libmsprofiler.so")) == (
        "8.0.RC2", str(tmp_path / "latest" / "runtime" / "version.info"))
    (tmp_path / "latest" / "version.cfg").write_text("# CANN\nruntime_running_version=[7.0.0:7.0.0]\n")
    assert cann_version(str(lib64 / "libmsprofiler.so"))[0] == "7.0.0"  # version.cfg is looked at first
