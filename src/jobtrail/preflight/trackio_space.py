"""Preflight of a remote job's trackio run: can its token make the Space, and is the Space a dashboard?

trackio creates the Space from inside the job (create the repo, upload its app, set its variables and
secrets), so the token needs write rights on the Space's namespace: a read token, or a fine-grained one
without repo.write there, gets 403 (typically on the Space's variables). A Space that exists but was not
made by trackio has no trackio app: runs logged to it never show (an empty, or 404, dashboard). Neither
stops the training (the job turns a trackio failure into an alert), so these are warnings, each with the
change that fixes it. jobtrail never creates the Space itself: that is what makes a hand-made one.
"""

from __future__ import annotations

from jobtrail.backends.registry import traits_of
from jobtrail.models import Finding, JobSpec
from jobtrail.preflight.facts import Facts, remote_trackio_space
from jobtrail.preflight.probes import HubIdentity

_OFF = "or pass hyperparameters={'report_to': 'none'} to leave trackio out (training is the same)"


def check_trackio(spec: JobSpec, facts: Facts) -> list[Finding]:
    identity = facts.identity
    if traits_of(spec.backend).trackio != "space" or identity is None or identity.error or not identity.name:
        return []  # a local run's trackio folder is the server's own; token problems are auth.* findings
    space = remote_trackio_space(spec, facts.job_values, identity)
    if space is None:
        return []
    owner = space.split("/")[0]
    findings = []
    if _can_manage_spaces(identity, owner) is False:
        findings.append(
            _warning(
                "trackio.space_rights",
                f"The token of {identity.name} ({identity.role}) cannot create or configure the Space {space} "
                "(its variables and secrets need write rights): trackio will fail in the job, which goes on "
                "without it.",
                f"Use a write token, or a fine-grained token with repo.write on {owner}; {_OFF}.",
            )
        )
    found = facts.trackio_space
    if found is not None and found.exists and found.trackio is False:
        findings.append(
            _warning(
                "trackio.space_not_trackio",
                f"The Space {space} exists but trackio did not make it: runs logged there never show on it "
                "(an empty or 404 dashboard).",
                f"Pass hyperparameters={{'trackio_space_id': '{owner}/<a new name>'}} (trackio creates it in the "
                f"job), or delete that Space; {_OFF}.",
            )
        )
    if found is not None and found.exists and found.private is False:
        findings.append(
            _warning(
                "trackio.space_public",
                f"The Space {space} is public: anyone can see this run's metrics and config there.",
                f"Make it private in its settings, or pass hyperparameters={{'trackio_space_id': "
                f"'{owner}/<a new name>'}} (trackio creates new Spaces private); {_OFF}.",
            )
        )
    if not findings:
        made = "; trackio creates it, private, in the job" if found is not None and found.exists is False else ""
        findings.append(
            Finding(
                code="trackio.space",
                severity="info",
                message=f"trackio logs the run to the Space https://huggingface.co/spaces/{space}{made}.",
                fix=f"hyperparameters={{'trackio_space_id': ...}} picks another Space; {_OFF}.",
            )
        )
    return findings


def _can_manage_spaces(identity: HubIdentity, owner: str) -> bool | None:
    """Whether the token may create a Space in `owner` and set its variables; None when its scopes are unknown."""
    if identity.role == "write":
        return True
    if identity.role == "read":
        return False
    if not identity.scopes:
        return None
    return "repo.write" in identity.scopes.get(owner, [])


def _warning(code: str, message: str, fix: str) -> Finding:
    return Finding(code=code, severity="warning", message=message, fix=fix)
