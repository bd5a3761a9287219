"""The job runtime modules (scripts/_*.py) loaded into the server: one source for what both sides know.

A runtime module is a plain file that render.py inlines into the jobs that import it; where the
server needs the same logic (dataset mappings, llama.cpp's facts), it loads that file as a module
of its own rather than keeping a copy, so job and server cannot drift apart. Runtime modules are
standard-library only at import time, so loading one costs milliseconds. The runtime modules a module
imports (its `from _other import ...` block, which a job has inlined before it) are loaded first, the same
way, and are found under their bare names only while it loads.
"""

from __future__ import annotations

import functools
import importlib.util
import sys
import threading
from types import ModuleType

from jobtrail.errors import InvalidRequestError
from jobtrail.templates.render import runtime_imports, scripts_dir

_LOADING = threading.RLock()  # sys.modules holds a bare name only while one module loads


@functools.cache
def runtime_module(name: str) -> ModuleType:
    """scripts/<name>.py (e.g. "_runtime", "_llama_cpp") as a module: the source jobs inline."""
    path = scripts_dir() / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"jobtrail_job{name}", path)
    if not path.is_file() or spec is None or spec.loader is None:
        raise InvalidRequestError(f"Cannot load the job runtime module {path}.", fix="Reinstall jobtrail.")
    module = importlib.util.module_from_spec(spec)
    with _LOADING:
        needed = {dependency: runtime_module(dependency) for dependency in runtime_imports(path.read_text())}
        before = {dependency: sys.modules.get(dependency) for dependency in needed}
        sys.modules.update(needed)
        try:
            spec.loader.exec_module(module)
        finally:
            for dependency, was in before.items():
                if was is None:
                    del sys.modules[dependency]
                else:
                    sys.modules[dependency] = was
    return module
