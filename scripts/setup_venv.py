#!/usr/bin/env python3
"""Create (or complete) the project's virtual environment.

Run by ``make test`` / ``make demo`` / ``make setup``; safe to run again: every
step checks what is already installed and does nothing when it is there.

Policy (see README.md):

* torch: an installed torch >= 2.4 is kept and never replaced; where there is
  none, ``torch==2.13.0`` is installed (a local CPU wheel on the project's
  machines).  Every later ``pip install`` runs with a constraints file that
  pins the installed torch, so no dependency can pull another build in: pip
  fails loudly instead.
* fairseq: PyPI ``fairseq-fixed==0.12.3.1`` on Python >= 3.11 (official
  0.12.2 does not import there), ``fairseq==0.12.2`` below; both with
  ``--no-deps`` so that fairseq's ``torchaudio`` pin never reaches pip, and
  with its runtime dependencies listed here explicitly.
"""

import argparse
import os
import subprocess
import sys
from pathlib import Path

MIN_PYTHON = (3, 8)
MIN_TORCH = (2, 4)  # torch.serialization.add_safe_globals: checkpoints load weights_only
DEFAULT_TORCH = "torch==2.13.0"
BUILD_DEPS = ["numpy<2", "cython", "setuptools", "wheel"]
# fairseq 0.12's install_requires, less torch/torchaudio (see module doc).
FAIRSEQ_RUNTIME_DEPS = [
    "hydra-core==1.3.2",
    "omegaconf==2.3.0",
    "bitarray",
    "regex",
    "sacrebleu>=2.0",
    "tqdm",
    "scikit-learn",
    "cffi",
    "packaging",
]
# ctranslate2: the deployment (scripts/export_ctranslate2.py) and its tests; it depends on no torch
PROJECT_DEPS = ["sentencepiece", "matplotlib", "pytest", "pytest-xdist", "ruff",
                "mypy==2.4.1; python_version >= '3.10'",  # (make lint's type check; it runs on Python >= 3.10)
                "ctranslate2>=4,<5"]
REPO = Path(__file__).resolve().parent.parent


class SetupError(RuntimeError):
    pass


def fairseq_requirement(python_version):
    """The fairseq distribution that imports on this Python version."""
    if tuple(python_version[:2]) >= (3, 11):
        return "fairseq-fixed==0.12.3.1"
    return "fairseq==0.12.2"


def parse_version(text):
    """'2.13.0+cpu' -> (2, 13, 0); tolerant of local and pre-release tags."""
    parts = []
    for piece in text.split("+")[0].split("."):
        digits = ""
        for ch in piece:
            if not ch.isdigit():
                break
            digits += ch
        if not digits:
            break
        parts.append(int(digits))
    return tuple(parts)


def torch_plan(installed_version):
    """What to do about torch: ('keep', version) or ('install', requirement).

    Raises SetupError for a torch older than MIN_TORCH: replacing a user's
    torch is never done silently."""
    if installed_version is None:
        return "install", os.environ.get("TORCH_REQUIREMENT", DEFAULT_TORCH)
    if parse_version(installed_version) < MIN_TORCH:
        raise SetupError(
            f"the environment has torch {installed_version}, older than the "
            f"{'.'.join(map(str, MIN_TORCH))} this project needs (the first torch "
            "that loads fairseq checkpoints with weights_only=True and an allow-list, "
            "so that a checkpoint cannot run code); it is not replaced automatically. Upgrade it yourself (for example "
            f"'pip install {DEFAULT_TORCH}') or remove the virtual environment "
            "and run make again."
        )
    return "keep", installed_version


def probe(python, code):
    """Run ``python -c code``; its stripped stdout, or None if it failed."""
    result = subprocess.run(
        [python, "-c", code], capture_output=True, text=True, check=False
    )
    return result.stdout.strip() if result.returncode == 0 else None


def run(cmd):
    print("+ " + " ".join(cmd), flush=True)
    result = subprocess.run(cmd, check=False)
    if result.returncode != 0:
        raise SetupError(f"command failed with exit code {result.returncode}: {' '.join(cmd)}")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--venv", default=str(REPO / ".venv"))
    parser.add_argument(
        "--system-site-packages",
        action="store_true",
        help="let a new venv see the system's packages (to reuse a system torch)",
    )
    args = parser.parse_args(argv)

    if sys.version_info[:2] < MIN_PYTHON:
        raise SetupError(
            f"Python >= {'.'.join(map(str, MIN_PYTHON))} is required; "
            f"{sys.executable} is {sys.version.split()[0]}"
        )
    venv = Path(args.venv)
    python = str(venv / "bin" / "python")
    if not Path(python).exists():
        cmd = [sys.executable, "-m", "venv", str(venv)]
        if args.system_site_packages:
            cmd.append("--system-site-packages")
        run(cmd)
    pip = [python, "-m", "pip", "install", "--disable-pip-version-check"]

    torch_before = probe(python, "import torch; print(torch.__version__)")
    action, what = torch_plan(torch_before)
    if action == "install":
        run(pip + [what])
        torch_before = probe(python, "import torch; print(torch.__version__)")
        if torch_before is None:
            raise SetupError(f"'{what}' installed but 'import torch' fails in {venv}")
    else:
        print(f"keeping the installed torch {what}", flush=True)
    constraints = venv / "torch-constraints.txt"
    constraints.write_text(f"torch=={torch_before}\n")
    pip_c = pip + ["-c", str(constraints)]

    run(pip_c + BUILD_DEPS)
    py_version = tuple(int(x) for x in probe(python, "import sys; print('%d %d' % sys.version_info[:2])").split())
    fairseq_version = probe(python, "import fairseq; print(fairseq.__version__)")
    if fairseq_version is None:
        # The build compiles fairseq's C++/Cython extensions against the torch
        # and numpy in the venv: no build isolation, no dependencies.
        run(pip_c + ["--no-deps", "--no-build-isolation", fairseq_requirement(py_version)])
    else:
        print(f"keeping the installed fairseq {fairseq_version}", flush=True)
    run(pip_c + FAIRSEQ_RUNTIME_DEPS + PROJECT_DEPS)
    run(pip_c + ["--no-deps", "--no-build-isolation", "-e", str(REPO)])

    torch_after = probe(python, "import torch; print(torch.__version__)")
    if torch_after != torch_before:
        raise SetupError(f"torch changed from {torch_before} to {torch_after} during set-up")
    check = subprocess.run([python, "-c", "import fairseq_smallvocab, fairseq; print(fairseq.__version__)"],
                           capture_output=True, text=True, check=False)
    if check.returncode != 0:
        raise SetupError(f"'import fairseq_smallvocab' fails in {venv}:\n{check.stderr[-3000:]}")
    check = check.stdout.strip()
    print(f"environment ready: {venv} (torch {torch_after}, fairseq {check})", flush=True)


if __name__ == "__main__":
    try:
        main()
    except SetupError as err:
        print(f"setup error: {err}", file=sys.stderr)
        sys.exit(1)
