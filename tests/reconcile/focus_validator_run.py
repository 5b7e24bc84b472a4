"""Running the FinOps Foundation's focus-validator on a file (a uniquely named test helper module).

The validator (2.2.1, FOCUS 1.2 rules bundled) needs Python >= 3.12 and pins
numpy<2, so it lives in a venv of its own: ``~/.cache/farebox/focus-validator-
<hash of focus-validator.txt>`` (``$FAREBOX_FOCUS_VALIDATOR_VENV`` overrides),
made here on first use from ``focus-validator.txt`` beside this file with a
Python 3.12 interpreter (``$FAREBOX_PYTHON312``, else pyenv's 3.12, else
``python3.12`` on PATH), outside the checkout like the Kafka jars, so a fresh
clone on the same machine reuses it. A failed install fails the test, it
never skips it.

It runs as a subprocess with ``--validate-version 1.2 --block-download`` (the
rules it ships, no network) and the applicability criteria that hold for
farebox's export (``CRITERIA``: the rules gated on them are checked, not
skipped), writing its JUnit-style report (``--output-type unittest``), which is
parsed into failed and errored checks with their messages.

One reading of the report is the validator's, not the spec's: a nullability
rule written as an OR of two model rules (``InvoiceId-C-003-C``: null when the
charge has no invoice, not null when it has one) is checked by the validator
as the OR, and each alternative is also reported on its own, over the whole
file; so the alternative that does not hold for a file is always reported
failed, while the rule itself passes. ``Report.alternatives`` holds those
(an alternative of an OR rule that passed), kept apart from ``failed``, from
the rule model the validator ships; everything else that fails is a failure.
The validator reads its currency list from a path relative to its package, so
it runs with its site-packages folder as the working directory.
"""

from __future__ import annotations

import fcntl
import glob
import hashlib
import json
import os
import shutil
import subprocess
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).parent
REQUIREMENTS = HERE / "focus-validator.txt"
VENV = Path(os.environ.get("FAREBOX_FOCUS_VALIDATOR_VENV") or Path.home() / ".cache" / "farebox" / (
    "focus-validator-" + hashlib.sha256(REQUIREMENTS.read_bytes()).hexdigest()[:12]))
VERSION = "1.2"
# What holds for farebox's export: usage is measured and unit-priced per token type, in a region, with tags,
# per sub-account (project), on resources of a type, priced in the book's currency and billed in another.
CRITERIA = ("USAGE_MEASUREMENT_SUPPORTED", "UNIT_PRICING_SUPPORTED", "REGION_SUPPORTED", "TAGGING_SUPPORTED",
            "SUB_ACCOUNT_SUPPORTED", "RESOURCE_TYPE_ASSIGNMENT_SUPPORTED",
            "PRICING_BILLING_CURRENCY_DIFFERENCES_SUPPORTED", "ACCOUNT_NAMING_SUPPORTED",
            "MULTIPLE_BILLING_ACCOUNT_TYPES_SUPPORTED", "MULTIPLE_SUB_ACCOUNT_TYPES_SUPPORTED")


@dataclass(frozen=True)
class Report:
    tests: int
    passes: set[str]  # rule ids that passed
    failed: list[str]  # "rule id :: check: message"
    errored: list[str]
    alternatives: list[str]  # failed alternatives of an OR rule that passed (see the module docstring)
    skipped: int
    output: str

    @property
    def passed(self) -> bool:
        return self.tests > 0 and not self.failed and not self.errored

    def explain(self) -> str:
        return "focus-validator failed:\n" + "\n".join(self.failed + self.errored) + "\n" + self.output[-4000:]


def _interpreter() -> str:
    found = os.environ.get("FAREBOX_PYTHON312") or next(iter(sorted(glob.glob(
        str(Path(os.environ.get("PYENV_ROOT") or Path.home() / ".pyenv") / "versions" / "3.12*" / "bin" /
            "python3.12")), reverse=True)), None) or shutil.which("python3.12")
    if not found:
        raise RuntimeError("focus-validator 2.2.1 needs Python 3.12: none found (set FAREBOX_PYTHON312)")
    return found


def _python() -> Path:
    python = VENV / "bin" / "python"
    stamp = VENV / ".installed"
    want = REQUIREMENTS.read_text()
    VENV.parent.mkdir(parents=True, exist_ok=True)
    with open(VENV.parent / ".focus-validator.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if stamp.exists() and stamp.read_text() == want and python.exists():
            return python
        subprocess.run([_interpreter(), "-m", "venv", "--clear", str(VENV)], check=True)
        done = subprocess.run([str(python), "-m", "pip", "install", "-q", "-r", str(REQUIREMENTS)],
                              capture_output=True, text=True, timeout=900)
        if done.returncode:
            raise RuntimeError(f"installing focus-validator into {VENV} failed:\n{done.stdout}\n{done.stderr}")
        stamp.write_text(want)
    return python


def _or_alternatives(package: Path) -> dict[str, str]:
    """Rule id -> the OR rule it is an alternative of, from the rule model the validator ships."""
    models = sorted((package / "focus_validator" / "rules").glob(f"model-{VERSION}*.json"))
    if not models:
        raise AssertionError(f"focus-validator ships no FOCUS {VERSION} rule model under {package}")
    rules = json.loads(models[-1].read_text())["ModelRules"]
    out = {}
    for rule_id, rule in rules.items():
        requirement = rule.get("ValidationCriteria", {}).get("Requirement") or {}
        if requirement.get("CheckFunction") == "OR":
            out.update({item["ModelRuleId"]: rule_id for item in requirement.get("Items", ())
                        if item.get("CheckFunction") == "CheckModelRule"})
    return out


def run_validator(path: Path, report: Path, extra_criteria: tuple[str, ...] = ()) -> Report:
    """Validate ``path`` (CSV or Parquet) against FOCUS 1.2 with focus-validator 2.2.1 (``extra_criteria``: more
    applicability criteria that hold for this file, e.g. ``COMMITMENT_DISCOUNT_SUPPORTED``)."""
    python = _python()
    site = Path(subprocess.run([str(python), "-I", "-c", "import focus_validator, os; "
                                "print(os.path.dirname(os.path.dirname(focus_validator.__file__)))"],
                               capture_output=True, text=True, check=True).stdout.strip())
    done = subprocess.run(
        [str(python), "-I", "-m", "focus_validator.main", "--data-file", str(path), "--validate-version", VERSION,
         "--block-download", "--applicability-criteria", ",".join(CRITERIA + extra_criteria), "--output-type", "unittest",
         "--output-destination", str(report)],
        capture_output=True, text=True, cwd=site, timeout=600)
    output = done.stdout + done.stderr
    if done.returncode or not report.exists():
        raise AssertionError(f"focus-validator did not run (exit {done.returncode}):\n{output}")
    root = ET.parse(report).getroot()
    passes: set[str] = set()
    outcomes: list[tuple[str, str, str]] = []  # (rule id, kind, text)
    for case in root.iter("testcase"):
        name = case.get("name") or ""
        rule_id = name.split(" ::")[0]
        bad = [(kind, node) for kind in ("failure", "error") for node in case.findall(kind)]
        if not bad and case.find("skipped") is None:
            passes.add(rule_id)
        outcomes += [(rule_id, kind, f"{name}: {node.get('message')}") for kind, node in bad]
    alternative_of = _or_alternatives(site)
    failed, errored, alternatives = [], [], []
    for rule_id, kind, text in outcomes:
        if kind == "failure" and alternative_of.get(rule_id) in passes:
            alternatives.append(text)
        else:
            (failed if kind == "failure" else errored).append(text)
    return Report(int(root.get("tests", 0)), passes, failed, errored, alternatives, int(root.get("skipped", 0)),
                  output)
