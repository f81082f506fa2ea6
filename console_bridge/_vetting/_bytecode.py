"""Bytecode for the modules mcp-console's Python worker imports before the bridge's startup code.

mcp-console sets the worker's ``PYTHONPYCACHEPREFIX`` to ``$MCP_CONSOLE_CACHE_DIR/dependencies/
python/bytecode``: a folder in the session's private cache that does not exist and that cells
cannot write. The startup code points imports back at the environments' own ``__pycache__``
(``_outcome_python``), but the worker's own bootstrap runs first and compiled about 115 modules
(json, re, typing, email, importlib.metadata, zipfile, psutil, ...) from source in every
session: 100-250 ms of each cold start.

Before the server starts, the host fills that prefix with symbolic links to the environment's
own compiled files (``<dir>/__pycache__/<name>.<tag>.pyc``, as pip and the interpreter's
installer wrote them), laid out as the prefix expects (``<prefix>/<dir>/<name>.<tag>.pyc``, each
through one link per folder to ``<dir>/__pycache__``: with absolute targets, making and removing
about 100 links took 10-80 ms of file-system work, and removing them made a loaded host's
``close()`` 150-400 ms slower).
Nothing new is trusted: they are the files every import after the startup code reads anyway.
The folder is created by the host, lives in the session's private folder and goes with it, and
is read-only to cells (the sandbox mounts the cache read-only), so no cell can plant bytecode
there. A link whose file is stale is harmless: Python checks the source's size and mtime
recorded in the file, compiles from source instead, and its write into the folder fails.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterable, Sequence
from pathlib import Path

__all__ = ["BOOT_MODULES", "bytecode_prefix", "link_bytecode"]

#: What mcp-console 0.0.5 and 0.0.6's Python worker has imported from files when the startup code
#: begins (``sys.modules`` with a ``.py`` ``__file__``; frozen modules left out). A module that is
#: missing or elsewhere is skipped; one not listed is compiled from source as before.
_BOOT_NAMES = """
    __future__ _compression _distutils_hack _weakrefset ast base64 bisect bz2 calendar collections
    collections.abc contextlib copyreg csv ctypes ctypes._endian datetime email email._encoded_words
    email._parseaddr email._policybase email.base64mime email.charset email.encoders email.errors
    email.header email.iterators email.message email.quoprimime email.utils encodings encodings.aliases
    encodings.utf_8 enum fnmatch functools glob importlib importlib._abc importlib.abc
    importlib.metadata importlib.metadata._adapters importlib.metadata._collections
    importlib.metadata._functools importlib.metadata._itertools importlib.metadata._meta
    importlib.metadata._text importlib.resources importlib.resources._adapters
    importlib.resources._common importlib.resources._legacy importlib.resources.abc ipaddress json
    json.decoder json.encoder json.scanner keyword linecache locale lzma operator pathlib psutil
    psutil._common psutil._ntuples psutil._pslinux psutil._psposix quopri random re re._casefix
    re._compiler re._constants re._parser reprlib selectors shutil signal socket string struct
    subprocess tempfile textwrap threading token tokenize traceback types typing urllib urllib.parse
    warnings weakref zipfile
"""
BOOT_MODULES: tuple[str, ...] = tuple(_BOOT_NAMES.split())


#: In each folder of the prefix, a link to the source folder's ``__pycache__`` (no module has this
#: name: ``sys.pycache_prefix`` only ever looks up ``<module>.<tag>.pyc``).
_HOP = ".cb-pycache"


def bytecode_prefix(mcp_cache: Path) -> Path:
    """The worker's ``PYTHONPYCACHEPREFIX`` for ``MCP_CONSOLE_CACHE_DIR=mcp_cache`` (0.0.5 and 0.0.6)."""
    return mcp_cache / "dependencies" / "python" / "bytecode"


def _source(name: str, search_path: Sequence[str]) -> str | None:
    """Where the import system finds the module ``name`` as a source file (packages by their
    ``__init__.py``; a submodule inside its parent's folder), or None."""
    parts = name.split(".")
    folders: Iterable[str] = [entry for entry in search_path if os.path.isabs(entry)]
    found = None
    for index, part in enumerate(parts):
        last = index == len(parts) - 1
        found = None
        for folder in folders:
            package = os.path.join(folder, part, "__init__.py")
            if os.path.isfile(package):
                found = package
                break
            module = os.path.join(folder, part + ".py")
            if last and os.path.isfile(module):
                found = module
                break
        if found is None or (not last and not found.endswith("__init__.py")):
            return None
        folders = [os.path.dirname(found)]
    return found


def link_bytecode(
    prefix: Path, search_path: Sequence[str], cache_tag: str, modules: Sequence[str] = BOOT_MODULES
) -> int:
    """Link the compiled files of ``modules`` (found along the worker's ``sys.path``) into
    ``prefix`` as ``sys.pycache_prefix`` lays them out; return how many were linked (blocking)."""
    if not cache_tag or os.sep in cache_tag:
        return 0
    made: set[str] = set()
    linked = 0
    for name in modules:
        source = _source(name, search_path)
        if source is None:
            continue
        folder, file = os.path.split(source)
        compiled = os.path.join(folder, "__pycache__", f"{file[:-3]}.{cache_tag}.pyc")
        if not os.path.isfile(compiled):
            continue
        target = os.path.join(str(prefix), folder.lstrip(os.sep))
        if target not in made:
            os.makedirs(target, mode=0o700, exist_ok=True)
            with contextlib.suppress(FileExistsError):
                os.symlink(os.path.join(folder, "__pycache__"), os.path.join(target, _HOP))
            made.add(target)
        name = f"{file[:-3]}.{cache_tag}.pyc"
        try:
            # (through the folder's hop: a target this short is kept in the link's inode, so the
            # link costs no data block to make and to remove; the session's close removes them all)
            os.symlink(os.path.join(_HOP, name), os.path.join(target, name))
        except FileExistsError:
            continue
        linked += 1
    return linked
