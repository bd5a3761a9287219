"""Every backend's traits (base.BackendTraits), by name.

A job's row names its backend, and much of what the service does with a job (price it, find its output, say
whose it is) depends on what that backend is, also where this server has no such backend object. So the traits
are declared here, apart from the backends' code: reading them imports neither a backend's runner nor its SDK,
and the server starts without either. Each backend class carries its own as `traits`. A new backend is its module,
its traits registered here (register) and its name in models.BackendName.
"""

from __future__ import annotations

from jobtrail.backends.base import BackendTraits
from jobtrail.errors import InvalidRequestError

_registered: dict[str, BackendTraits] = {}


def register(traits: BackendTraits) -> BackendTraits:
    """Make `traits` the traits of the backend of its name (refused when another backend has the name)."""
    known = _registered.setdefault(traits.name, traits)
    if known != traits:
        raise ValueError(f"Another backend is already registered as {traits.name!r}.")
    return traits


def traits_of(name: str) -> BackendTraits:
    """The traits of the backend called `name` (a job's row names it)."""
    try:
        return _registered[name]
    except KeyError:
        raise InvalidRequestError(
            f"Unknown backend {name!r}.", fix=f"Use one of: {', '.join(sorted(_registered))}."
        ) from None


# The declarations are alike in shape by design: every trait named, none defaulted, so a new backend answers each.
LOCAL = register(
    BackendTraits(
        name="local",
        place="this machine",
        runs_here=True,
        output="directory",
        flavors=False,
        billed=False,
        host_noun="host",
        host_in="on host",
        host_title="Host",
        host_set_by="JOBTRAIL_HOST_ID, else its hostname",
        cancel="SIGTERM, then SIGKILL after the grace period, to every process the job started",
        script_table=None,
        trackio="folder",
    )
)
HF_JOBS = register(
    BackendTraits(
        name="hf-jobs",
        place="HF Jobs",
        runs_here=False,
        output="hub_repo",
        flavors=True,
        billed=True,
        host_noun="namespace",
        host_in="in namespace",
        host_title="HF namespace",
        host_set_by="JOBTRAIL_HF_NAMESPACE, else its token's user",
        cancel="HF's cancel",
        script_table="tool.hf-jobs",
        trackio="space",
    )
)
