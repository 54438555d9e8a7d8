"""Compiled Triton kernels kept per candidate source, so a candidate that is
evaluated again (a strict re-measurement, a sample drawn twice, a
benchmark) does not compile its kernels again.

Every candidate's process has its own Triton cache (a private tmpfs), so no
job can write what another job loads. This store keeps that rule: an entry
is keyed by the SHA-256 of the exact candidate source, written once from the
private cache of a job that ran that source, and only ever copied into the
private cache of a later job that runs the same source. A job can thus hand
compiled code only to later runs of itself, which gains it nothing: its own
process can already write into its own cache and have Triton load it.

The candidate's process sends its cache's files to the judge at the end of
a job (candidate_proc op "cache"), the judge checks their names and sizes
and writes them under its job folder (HARVEST_DIR), and the server moves
that folder into the store (publish) after the judge is gone. The judge of
a later job with the same source reads the entry and sends it with the load
request (candidate_proc op "load", "cache_files"). The store lives in the
server's cache folder, which no candidate's process can see.
"""

import hashlib
import os
import re
import shutil
import time

# Triton's cache layout: one folder per kernel hash, files in it.
NAME_RE = re.compile(r"^[A-Za-z0-9_-]{1,128}/[A-Za-z0-9_-][A-Za-z0-9_.-]{0,127}$")
MAX_FILES = 512
MAX_BYTES = 32 << 20
MAX_ENTRIES = 128
HARVEST_DIR = "kg-kernels"


def key(source):
    return hashlib.sha256(source.encode("utf-8", errors="surrogateescape")).hexdigest()


def entry_dir(store, source):
    return os.path.join(store, key(source))


def valid_files(names, sizes):
    """True when names (relative paths) and sizes fit the store's rules:
    Triton's two-level layout, no hidden or parent parts, bounded count and
    bytes."""
    if not isinstance(names, list) or len(names) != len(sizes) or len(names) > MAX_FILES:
        return False
    if sum(sizes) > MAX_BYTES:
        return False
    return all(isinstance(n, str) and NAME_RE.match(n) for n in names)


def read_tree(root):
    """([relative names], [bytes]) of the files of a cache folder that fit the
    rules (others are skipped), at most MAX_BYTES in all."""
    names, datas, total = [], [], 0
    if not root or not os.path.isdir(root):
        return names, datas
    for d in sorted(os.listdir(root)):
        sub = os.path.join(root, d)
        if not os.path.isdir(sub) or os.path.islink(sub):
            continue
        for f in sorted(os.listdir(sub)):
            rel = f"{d}/{f}"
            path = os.path.join(sub, f)
            if not NAME_RE.match(rel) or os.path.islink(path) or not os.path.isfile(path):
                continue
            try:
                size = os.path.getsize(path)
                if total + size > MAX_BYTES or len(names) >= MAX_FILES:
                    return names, datas
                with open(path, "rb") as fh:
                    datas.append(fh.read())
            except OSError:
                continue
            names.append(rel)
            total += size
    return names, datas


def write_tree(root, names, datas):
    """Writes files (names as valid_files accepts) under root."""
    for rel, data in zip(names, datas):
        path = os.path.join(root, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as fh:
            fh.write(data)


def publish(store, source, harvest):
    """Moves a job's harvested folder into the store as the entry of source,
    unless the entry exists; prunes the oldest entries past MAX_ENTRIES.
    Several servers may share the store: the entry appears by one rename."""
    final = entry_dir(store, source)
    if not os.path.isdir(harvest) or os.path.isdir(final):
        return False
    os.makedirs(store, exist_ok=True)
    tmp = f"{final}.{os.getpid()}.tmp"
    try:
        shutil.copytree(harvest, tmp)
        os.rename(tmp, final)
    except OSError:
        shutil.rmtree(tmp, ignore_errors=True)
        return False
    _prune(store)
    return True


def _prune(store):
    try:
        entries = [os.path.join(store, e) for e in os.listdir(store) if not e.endswith(".tmp")]
    except OSError:
        return
    if len(entries) <= MAX_ENTRIES:
        return
    entries.sort(key=lambda p: _mtime(p))
    for p in entries[:len(entries) - MAX_ENTRIES]:
        shutil.rmtree(p, ignore_errors=True)


def _mtime(path):
    try:
        return os.path.getmtime(path)
    except OSError:
        return time.time()
