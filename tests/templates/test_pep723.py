"""PEP 723 headers, and checking an interpreter's packages against them."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from jobtrail.errors import BackendError, InvalidRequestError
from jobtrail.templates import pep723

GOOD = textwrap.dedent(
    """\
    #!/usr/bin/env python3
    # /// script
    # requires-python = ">=3.11"
    # dependencies = [
    #   "trl>=1.16",
    #   "peft>=0.21",
    # ]
    #
    # [tool.jobtrail]
    # template = "sft"
    # ///
    print("hello")
    """
)
# A requirement that no environment here has installed.
ABSENT = "jobtrail-surely-absent-package"
PYTEST_VERSION = pytest.__version__


def test_reads_a_good_header() -> None:
    assert pep723.read_metadata(GOOD) == {
        "requires-python": ">=3.11",
        "dependencies": ["trl>=1.16", "peft>=0.21"],
        "tool": {"jobtrail": {"template": "sft"}},
    }


def test_reads_a_header_with_windows_line_endings() -> None:
    assert pep723.read_metadata(GOOD.replace("\n", "\r\n"))["dependencies"] == ["trl>=1.16", "peft>=0.21"]


def test_a_script_without_header_has_no_metadata() -> None:
    assert pep723.read_metadata("print('hi')\n") == {}
    # Other block types are not ours to read.
    assert pep723.read_metadata("# /// pyproject\n# x = 1\n# ///\n") == {}


@pytest.mark.parametrize(
    ("script", "complaint"),
    [
        ("# /// script\n# dependencies = [\n# ///\n", "not valid TOML"),
        ("# /// script\n# dependencies = []\n# ///\nx = 1\n# /// script\n#\n# ///\n", "more than one"),
        ("# /// script\n# dependencies = []\nprint(1)\n", "never closed"),
        ('# /// script\n# dependencies = "trl"\n# ///\n', "list of strings"),
        ('# /// script\n# dependencies = ["trl>=>1"]\n# ///\n', "not a valid requirement"),
        ('# /// script\n# requires-python = "three"\n# ///\n', "requires-python"),
    ],
)
def test_a_malformed_header_is_refused_with_a_fix(script: str, complaint: str) -> None:
    with pytest.raises(InvalidRequestError, match=complaint) as raised:
        pep723.read_metadata(script)
    assert raised.value.fix


def test_requirements_against_this_interpreter() -> None:
    requirements = [
        "pytest>=1",  # satisfied
        f"{ABSENT}>=0.21",  # missing
        "pytest>=999",  # too old
        f'{ABSENT}; python_version < "3"',  # excluded by its marker
        f'{ABSENT}-two>=1; python_version >= "3"',  # marker applies
    ]
    assert pep723.check_interpreter(requirements, sys.executable).missing == [
        f"{ABSENT}>=0.21 (not installed)",
        f"pytest>=999 (installed: {PYTEST_VERSION})",
        f"{ABSENT}-two>=1 (not installed)",
    ]


def test_no_requirements_means_nothing_missing() -> None:
    assert pep723.check_interpreter([], "/no/such/python").missing == []


def test_an_invalid_requirement_is_refused() -> None:
    with pytest.raises(InvalidRequestError):
        pep723.check_interpreter(["trl>=>1"], sys.executable)


def test_requirements_against_another_interpreter(tmp_path: Path) -> None:
    # Made from this venv's python, the new venv's python resolves to the same binary: only
    # its environment differs, which is exactly what must not be mistaken for ours.
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(tmp_path / "venv")], check=True, timeout=60)
    other = str(tmp_path / "venv" / "bin" / "python")
    assert pep723.check_interpreter(["pytest>=1", f'{ABSENT}; python_version < "3"'], other).missing == [
        "pytest>=1 (not installed)"
    ]


def test_an_interpreter_that_cannot_run_is_a_backend_error(tmp_path: Path) -> None:
    with pytest.raises(BackendError) as raised:
        pep723.check_interpreter(["pytest>=1"], str(tmp_path / "no-such-python"))
    assert raised.value.fix
