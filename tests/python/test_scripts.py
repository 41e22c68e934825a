"""The README's shell scripts, run for real with their external effects
redirected: `scripts/serve-default.sh` with a fake server binary (which records
its argv), and `scripts/setup.sh --python-only` with a Python that refuses
global installs the way Debian's and Ubuntu's do (PEP 668)."""

import json
import os
import subprocess
import sys
import textwrap
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def run_serve_default(tmp_path, *args, model="/models/m.gguf"):
    """Runs serve-default.sh with a fake binary; returns the argv it got."""
    record = tmp_path / "argv.json"
    fake = tmp_path / "fake-minisgl-host"
    fake.write_text(
        f"#!{sys.executable}\n"
        "import json, sys\n"
        f"json.dump(sys.argv[1:], open({str(record)!r}, 'w'))\n"
    )
    fake.chmod(0o755)
    env = dict(os.environ, MINISGL_SERVE_BIN=str(fake), MINISGL_SERVE_MODEL=model)
    subprocess.run(
        ["bash", str(ROOT / "scripts" / "serve-default.sh"), *args], env=env, check=True, timeout=60
    )
    return json.loads(record.read_text())


def flag_values(argv, flag):
    """Every value given for `flag`, as `--flag v` or `--flag=v`."""
    out = []
    for i, a in enumerate(argv):
        if a == flag:
            out.append(argv[i + 1])
        elif a.startswith(flag + "="):
            out.append(a.split("=", 1)[1])
    return out


def test_serve_default_passes_its_defaults(tmp_path):
    argv = run_serve_default(tmp_path)
    assert flag_values(argv, "--device") == ["cpu"]
    assert flag_values(argv, "--model") == ["/models/m.gguf"]
    assert flag_values(argv, "--served-model-name") == ["default"]


def test_serve_default_lets_the_callers_device_win(tmp_path):
    # The README's GPU command: --device must reach the binary exactly once.
    argv = run_serve_default(tmp_path, "--device", "cuda", "--port", "9000")
    assert flag_values(argv, "--device") == ["cuda"]
    assert flag_values(argv, "--port") == ["9000"]
    argv = run_serve_default(tmp_path, "--device=auto")
    assert flag_values(argv, "--device") == ["auto"]


def test_serve_default_lets_the_callers_model_and_name_win(tmp_path):
    argv = run_serve_default(tmp_path, "--model", "/other", "--served-model-name", "x")
    assert flag_values(argv, "--model") == ["/other"]
    assert flag_values(argv, "--served-model-name") == ["x"]
    assert flag_values(argv, "--device") == ["cpu"]


def externally_managed_python(where: Path) -> Path:
    """A throwaway Python whose pip refuses to install into it, exactly as a
    PEP 668 system Python does: a venv made to look like a base install
    (pip skips the check inside venvs) with an EXTERNALLY-MANAGED marker in
    its stdlib folder."""
    venv.create(where, with_pip=True, symlinks=True)
    py = where / "bin" / "python"
    purelib = subprocess.run(
        [py, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
        capture_output=True, text=True, check=True,
    ).stdout.strip()
    (Path(purelib) / "sitecustomize.py").write_text(textwrap.dedent(
        """\
        import sys, sysconfig
        sys.base_prefix = sys.prefix
        sys.base_exec_prefix = sys.exec_prefix
        sysconfig._BASE_PREFIX = sys.prefix
        sysconfig._BASE_EXEC_PREFIX = sys.exec_prefix
        sysconfig._CONFIG_VARS = None
        """
    ))
    stdlib = subprocess.run(
        [py, "-c", "import sysconfig; print(sysconfig.get_path('stdlib'))"],
        capture_output=True, text=True, check=True,
    ).stdout.strip()
    assert stdlib.startswith(str(where)), stdlib
    Path(stdlib).mkdir(parents=True, exist_ok=True)
    (Path(stdlib) / "EXTERNALLY-MANAGED").write_text(
        "[externally-managed]\nError=this Python is managed by the test (PEP 668)\n"
    )
    return py


def test_setup_installs_into_a_venv_when_the_system_python_refuses(tmp_path):
    system = tmp_path / "system"
    py = externally_managed_python(system)
    # The simulation must bite: a global install is refused before any download.
    refused = subprocess.run(
        [py, "-m", "pip", "install", "--dry-run", "pytest"], capture_output=True, text=True
    )
    assert refused.returncode != 0
    assert "externally-managed-environment" in refused.stderr

    target = tmp_path / "venv"
    env = dict(os.environ, PATH=f"{system / 'bin'}:{os.environ['PATH']}", MINISGL_VENV=str(target))
    env.pop("VIRTUAL_ENV", None)
    done = subprocess.run(
        ["bash", str(ROOT / "scripts" / "setup.sh"), "--python-only"],
        env=env, capture_output=True, text=True, timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    check = subprocess.run(
        [target / "bin" / "python", "-c", "import openai, pytest, sys; print(sys.prefix)"],
        capture_output=True, text=True,
    )
    assert check.returncode == 0, check.stderr
    assert check.stdout.strip() == str(target)
    # Nothing went into the "system" Python.
    listed = subprocess.run([py, "-m", "pip", "list"], capture_output=True, text=True).stdout
    assert "openai" not in listed and "pytest" not in listed
    # A second run finds everything in place and installs nothing.
    again = subprocess.run(
        ["bash", str(ROOT / "scripts" / "setup.sh"), "--python-only"],
        env=env, capture_output=True, text=True, timeout=120,
    )
    assert again.returncode == 0, again.stderr[-3000:]
    assert "installing" not in again.stderr
