"""Where jobtrail's state lives and the folders its inputs may come from: two settings read from the environment,
here below everything so that the server's start (app.py, surface/http_server.py) and preflight read them alike.

    JOBTRAIL_HOME        the ledger, logs and jobs' own directories (default ~/.jobtrail)
    JOBTRAIL_DATA_ROOTS  folders, os.pathsep-separated, under which data, models, reward files and path-valued
                         hyperparameters must resolve (default: the server's working directory and the user's home;
                         preflight/data_roots.py says what is refused even under a root)
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from jobtrail.errors import InvalidRequestError

HOME_ENV = "JOBTRAIL_HOME"
DATA_ROOTS_ENV = "JOBTRAIL_DATA_ROOTS"


def jobtrail_home() -> Path:
    return Path(os.environ.get(HOME_ENV) or Path.home() / ".jobtrail").expanduser().resolve()


@dataclass(frozen=True)
class DataRoots:
    """The folders inputs may come from, resolved; `explicit` when JOBTRAIL_DATA_ROOTS named them."""

    paths: tuple[Path, ...]
    explicit: bool
    given: tuple[Path, ...] = ()  # as written (absolute, links unresolved): a path may name a root through a link

    def describe(self) -> str:
        shown = os.pathsep.join(str(p) for p in self.paths) or "none"
        how = f"{DATA_ROOTS_ENV}" if self.explicit else f"the defaults: working directory and home; {DATA_ROOTS_ENV}"
        return f"{shown} ({how})"


def data_roots() -> DataRoots:
    """JOBTRAIL_DATA_ROOTS as set now, else the defaults. The filesystem root is never a default: a server started
    in `/` (some MCP clients start it there) or with HOME=/ would otherwise read everything."""
    raw = os.environ.get(DATA_ROOTS_ENV, "").strip()
    if not raw:
        given = tuple(p for p in (Path.cwd(), Path.home()) if p.resolve() != Path("/"))
        return DataRoots(paths=_unique(p.resolve() for p in given), explicit=False, given=given)
    entries = [entry.strip() for entry in raw.split(os.pathsep) if entry.strip()]
    given = tuple(Path(entry).expanduser() for entry in entries)
    relative = [entry for entry, path in zip(entries, given, strict=True) if not path.is_absolute()]
    if relative:
        raise InvalidRequestError(
            f"{DATA_ROOTS_ENV} holds {relative[0]!r}, which is not an absolute path: the server's working directory "
            "is not what a reader of the setting would assume.",
            fix=f"Set {DATA_ROOTS_ENV} to absolute folders separated by {os.pathsep!r}, e.g. "
            f"{DATA_ROOTS_ENV}=/data{os.pathsep}/home/me/projects.",
        )
    return DataRoots(paths=_unique(p.resolve() for p in given), explicit=True, given=given)


def _unique(paths: Iterable[Path]) -> tuple[Path, ...]:
    return tuple(dict.fromkeys(paths))
