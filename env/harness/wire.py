"""The framed messages between the judge and the candidate's process.

A message is a JSON header followed by raw byte blobs:

    b"KGW" + 12-digit header length + header JSON + the blobs

the header's "blobs" field lists the blob lengths in order. With a shared
memory file (a memfd the judge made before it forked the candidate's
process, "shm" below) the blobs are not in the pipe but at the start of
that file, one after another (the header says "shm": true): an output goes
from the device into the shared pages and from there to the judge's device
in one copy each way, where a pipe costs several. The receiver copies the
blobs out before it reads them, so later writes to the file change nothing
it holds. Each side maps the file once and keeps the mapping while the file
does not grow (a fresh mapping per message paid a page fault per 4 KB page
of every output, each way); the file is sealed against shrinking where the
kernel allows it, so a mapping never reaches past its end. Values travel as
plain data only: None, bool, int, float, str, lists (tuples arrive as
lists) and tensors. A tensor is described by {"T": blob index, "dtype",
"shape", "stride", "offset", "type", "ptr"} and its bytes are the whole span
of storage its view covers, so the judge rebuilds exactly the view the
candidate returned (strides and storage offset included) from bytes, in a
plain torch.Tensor of its own: nothing the candidate's process defines (a
Tensor subclass, a __torch_function__, a re-registered aten op) reaches the
comparison.

"type" and "ptr" are what the sender says about the object it held (its
exact class and storage address); the judge treats them as claims to check,
never as facts.
"""

import json
import mmap
import os

import torch

MAGIC = b"KGW"
MAX_HEADER = 64 << 20
MAX_TOTAL = 16 << 30

DTYPES = {str(d): d for d in (
    torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int8, torch.uint8,
    torch.int16, torch.int32, torch.int64, torch.bool, torch.complex64, torch.complex128)}


class WireError(Exception):
    """A malformed message, or a value that cannot travel."""


def _span_bytes(t):
    """(first byte, byte count) of the storage a view reaches."""
    if t.numel() == 0:
        return t.storage_offset() * t.element_size(), 0
    last = t.storage_offset() + sum((s - 1) * st for s, st in zip(t.shape, t.stride()))
    return t.storage_offset() * t.element_size(), (last - t.storage_offset() + 1) * t.element_size()


# The deepest nesting of lists and tuples an output may have. A task's
# output is a tensor or a short tuple; a deeper one is refused on both sides
# (the judge's JSON reader and decode_value would otherwise recurse out of
# the stack, which is an error of the judge's rather than the candidate's).
MAX_NESTING = 32


def encode_value(x, blobs, depth=0):
    """x as JSON-able data; tensor bytes are appended to blobs."""
    if depth > MAX_NESTING:
        raise WireError(f"an output nested deeper than {MAX_NESTING} levels cannot be returned")
    if x is None or isinstance(x, (bool, int, float, str)):
        if isinstance(x, float) and x != x:
            return {"F": "nan"}
        if isinstance(x, float) and x in (float("inf"), float("-inf")):
            return {"F": "inf" if x > 0 else "-inf"}
        return x
    if isinstance(x, (list, tuple)):
        return [encode_value(e, blobs, depth + 1) for e in x]
    if isinstance(x, torch.Tensor):
        kind = f"{type(x).__module__}.{type(x).__qualname__}"
        # Read through the base class, whatever the object overrides.
        with torch._C.DisableTorchFunctionSubclass():
            t = x.detach()
        if str(t.dtype) not in DTYPES:
            raise WireError(f"a tensor of dtype {t.dtype} cannot be returned")
        start, n = _span_bytes(t)
        flat = torch.as_strided(t, (n // t.element_size(),), (1,), t.storage_offset()) if n else t.reshape(0)
        # A blob is a flat uint8 tensor, on the tensor's device until sent.
        blobs.append(flat.contiguous().view(torch.uint8) if n else torch.empty(0, dtype=torch.uint8))
        return {"T": len(blobs) - 1, "dtype": str(t.dtype), "shape": list(t.shape), "stride": list(t.stride()),
                "type": kind, "ptr": t.untyped_storage().data_ptr() if t.numel() else 0,
                "device": t.device.type}
    if isinstance(x, dict):
        raise WireError("a dict cannot be returned (a tensor or a tuple of tensors is expected)")
    raise WireError(f"a value of type {type(x).__name__} cannot be returned")


def decode_value(x, blobs, notes=None, depth=0):
    """The value encode_value described, rebuilt in plain tensors on the CPU.
    notes (a list) collects what the sender claimed about each tensor."""
    if depth > MAX_NESTING:
        raise WireError(f"an output nests deeper than {MAX_NESTING} levels")
    if isinstance(x, list):
        return [decode_value(e, blobs, notes, depth + 1) for e in x]
    if isinstance(x, dict):
        if "F" in x:
            return float(x["F"])
        if "T" not in x:
            raise WireError("a value is neither data nor a tensor")
        try:
            dtype = DTYPES[x["dtype"]]
            shape, stride = [int(s) for s in x["shape"]], [int(s) for s in x["stride"]]
            data = blobs[int(x["T"])]
        except (KeyError, ValueError, TypeError, IndexError) as e:
            raise WireError(f"a tensor description is malformed ({type(e).__name__})")
        if len(shape) != len(stride) or any(s < 0 for s in shape) or any(s < 0 for s in stride):
            raise WireError(f"a tensor has shape {shape} and strides {stride}")
        esize = torch.empty(0, dtype=dtype).element_size()
        if data.numel() % esize:
            raise WireError("a tensor's bytes are not a whole number of elements")
        numel = 1
        for s in shape:
            numel *= s
        need = 0 if numel == 0 else 1 + sum((s - 1) * st for s, st in zip(shape, stride))
        if need * esize > data.numel():
            raise WireError(f"a tensor's view reaches {need} elements but {data.numel() // esize} were sent")
        flat = data.view(dtype)
        t = torch.as_strided(flat, shape, stride, flat.storage_offset()) if numel else torch.empty(shape, dtype=dtype)
        if notes is not None:
            notes.append({"type": x.get("type"), "ptr": x.get("ptr"), "stride": stride, "shape": shape,
                          "device": x.get("device")})
        return t
    return x


def _nbytes(b):
    return b.numel() if isinstance(b, torch.Tensor) else len(b)


def seal_shm(fd):
    """Seals a memfd made with MFD_ALLOW_SEALING against shrinking: a peer
    holding the same file cannot cut it under the other side's mapping
    (a read there past the end would kill the reader with SIGBUS). False
    where the kernel refuses."""
    try:
        import fcntl

        fcntl.fcntl(fd, fcntl.F_ADD_SEALS, fcntl.F_SEAL_SHRINK)
        return True
    except (ImportError, AttributeError, OSError):
        return False


_maps = {}  # (fd, dev, ino) -> (mmap, address pinned for the GPU or None)


def _mapping(shm, total):
    """A mapping of the shared file's first bytes, at least total long (the
    caller made sure the file is); kept per file (device and inode) and made
    again only for a longer message, or when the file is now shorter than
    the mapping. Only what a message needs is mapped: the peer sets the
    file's size. MAP_POPULATE fills the page table in one call. In a
    process with a CUDA context the mapping is also pinned for the GPU
    (_pin), so an output's copy into it and out of it runs at DMA speed:
    pageable memory goes through the driver's staging buffer, several
    times slower (a 64 MB output cost tens of ms each way)."""
    st = os.fstat(shm)
    key = (shm, st.st_dev, st.st_ino)
    held = _maps.get(key)
    if held is not None and len(held[0]) >= total and st.st_size >= len(held[0]):
        return held[0]
    if held is not None:
        _maps.pop(key)
        _unpin(held[1])
        try:
            held[0].close()
        except BufferError:  # a view still holds it: left to the collector
            pass
    mm = mmap.mmap(shm, total, flags=mmap.MAP_SHARED | getattr(mmap, "MAP_POPULATE", 0))
    _maps[key] = (mm, _pin(mm))
    return mm


_driver = []  # [libcuda's (register, unregister)] once looked up, [None] where it is not there


def _cuda_driver():
    """cuMemHostRegister / cuMemHostUnregister from the driver library
    torch already loaded. The driver's calls are used rather than the
    runtime's: a refused runtime registration would leave an error behind
    that torch reads, and raises, at its next kernel launch."""
    if not _driver:
        try:
            import ctypes

            lib = ctypes.CDLL("libcuda.so.1")
            reg, unreg = lib.cuMemHostRegister_v2, lib.cuMemHostUnregister
            reg.argtypes, reg.restype = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_uint], ctypes.c_int
            unreg.argtypes, unreg.restype = [ctypes.c_void_p], ctypes.c_int
            _driver.append((reg, unreg))
        except (OSError, AttributeError):
            _driver.append(None)
    return _driver[0]


def _pin(mm):
    """Pins mm's pages for the GPU when this process has a CUDA context;
    returns the pinned address, or None (no context, or the driver said
    no: the copies then take the slower path, with the same bytes)."""
    if not len(mm) or not torch.cuda.is_initialized():
        return None
    driver = _cuda_driver()
    if driver is None:
        return None
    view = torch.frombuffer(mm, dtype=torch.uint8)
    ptr = view.data_ptr()
    del view
    try:
        torch.cuda.current_device()  # the primary context current on this thread
        return ptr if driver[0](ptr, len(mm), 0) == 0 else None
    except Exception:
        return None


def _unpin(ptr):
    if ptr is not None and _driver and _driver[0] is not None:
        _driver[0][1](ptr)


def send(fd, header, blobs=(), shm=None):
    """Writes one message (header: a JSON-able dict; blobs: bytes or flat
    uint8 tensors on any device), its blobs through shm when given."""
    sizes = [_nbytes(b) for b in blobs]
    use_shm = False
    if shm is not None and sum(sizes):
        try:
            _to_shm(shm, blobs, sizes)
            use_shm = True
        except OSError:  # a file size limit: the pipe carries them
            pass
    header = dict(header, blobs=sizes, shm=use_shm)
    head = json.dumps(header).encode("utf-8")  # NaN travels as NaN (json.loads reads it)
    _write_all(fd, MAGIC + b"%012d" % len(head) + head)
    if use_shm:
        return
    for b in blobs:
        _write_all(fd, b.cpu().numpy().tobytes() if isinstance(b, torch.Tensor) else b)


def _to_shm(shm, blobs, sizes):
    total = sum(sizes)
    if os.fstat(shm).st_size < total:
        os.ftruncate(shm, total)
    mm = _mapping(shm, total)
    at = 0
    for b, n in zip(blobs, sizes):
        if n:
            dst = torch.frombuffer(mm, dtype=torch.uint8, count=n, offset=at)
            dst.copy_(b if isinstance(b, torch.Tensor) else torch.frombuffer(bytearray(b), dtype=torch.uint8))
            del dst
        at += n


def _write_all(fd, data):
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def _read_exact(fd, n):
    chunks, got = [], 0
    while got < n:
        chunk = os.read(fd, min(n - got, 1 << 24))
        if not chunk:
            raise EOFError("the other side closed the channel")
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


def recv(fd, shm=None, device=None):
    """(header, blobs) of the next message, the blobs as flat uint8 tensors
    of their own (on device when given: copied there straight from the
    shared pages; else on the CPU); EOFError when the channel is closed,
    WireError when the bytes are not a message."""
    lead = _read_exact(fd, 15)
    if lead[:3] != MAGIC or not lead[3:].isdigit():
        raise WireError("the channel carried bytes that are not a message")
    n = int(lead[3:])
    if n > MAX_HEADER:
        raise WireError(f"a message header of {n} bytes is over the limit")
    try:
        header = json.loads(_read_exact(fd, n).decode("utf-8"))
    except ValueError:
        raise WireError("a message header is not JSON")
    except RecursionError:
        raise WireError("a message header nests too deep to read")
    sizes = header.get("blobs") if isinstance(header, dict) else None
    if not isinstance(sizes, list) or not all(isinstance(s, int) and s >= 0 for s in sizes) \
            or sum(sizes) > MAX_TOTAL:
        raise WireError("a message lists bad blob sizes")
    if header.get("shm") and sum(sizes):
        total = sum(sizes)
        if shm is None or os.fstat(shm).st_size < total:
            raise WireError("a message's blobs are not in the shared memory")
        blobs = []
        mm = _mapping(shm, total)
        at = 0
        for n in sizes:
            if n:
                src = torch.frombuffer(mm, dtype=torch.uint8, count=n, offset=at)
                if device is None or torch.device(device).type == "cpu":
                    blobs.append(src.clone())
                else:
                    blobs.append(torch.empty(n, dtype=torch.uint8, device=device).copy_(src))
                del src
            else:
                blobs.append(torch.empty(0, dtype=torch.uint8, device=device))
            at += n
        return header, blobs
    blobs = [torch.frombuffer(bytearray(_read_exact(fd, s)), dtype=torch.uint8) if s
             else torch.empty(0, dtype=torch.uint8) for s in sizes]
    return header, blobs if device is None else [b.to(device) for b in blobs]


def _digest_weights(n, device, cache={}):
    """Fixed position weights for digest: w_i = (i * 2654435761 + 40503)
    mod 2^31, the same in every process. A few sizes are kept: the judge
    digests outputs of one size on its device for its own batches and for
    the outputs it fetches, and one slot made them evict each other."""
    key = (n, str(device))
    if key not in cache:
        i = torch.arange(n, dtype=torch.int64, device=device)
        if len(cache) >= 4:
            cache.pop(next(iter(cache)))
        cache[key] = (i * 2654435761 + 40503) % (1 << 31)
    return cache[key]


def digest(blobs):
    """An exact integer digest of blobs (flat uint8 tensors, as encode_value
    makes them, on any device): the sum of each 4-byte word times its
    position weight, wrapping at 2^64. It takes every bit of the output to
    compute, so a digest sent with a timed call commits the sender to that
    call's output before the judge chooses which output it fetches."""
    return int(digest_tensor(blobs))


def digest_tensor(blobs):
    """digest as a 0-dim int64 tensor on the blobs' device, not yet read:
    a timed batch queues one per call behind the call's forward and reads
    them all at its end (read_digests), so no call waits on the device for
    its digest."""
    words = []
    for b in blobs:
        b = b if isinstance(b, torch.Tensor) else torch.frombuffer(bytearray(b), dtype=torch.uint8)
        pad = (-b.numel()) % 4
        if pad:
            b = torch.cat([b, torch.zeros(pad, dtype=torch.uint8, device=b.device)])
        words.append(b.view(torch.int32).to(torch.int64))
    if not words:
        return torch.zeros((), dtype=torch.int64)
    v = torch.cat(words) if len(words) > 1 else words[0]
    return (v * _digest_weights(v.numel(), v.device)).sum()


def value_digest(x):
    """digest of the blobs encode_value makes of x (WireError when x cannot
    travel): what a timed call commits to."""
    return int(value_digest_tensor(x))


def value_digest_tensor(x):
    """value_digest, not yet read (digest_tensor)."""
    blobs = []
    encode_value(x, blobs)
    return digest_tensor(blobs)


def read_digests(pending):
    """{key: str(digest)} of {key: digest_tensor(...)}, read in one go."""
    keys = list(pending)
    tensors = [pending[k] for k in keys]
    if len({t.device for t in tensors}) == 1:
        values = torch.stack(tensors).tolist()
    else:
        values = [int(t) for t in tensors]
    return {k: str(v) for k, v in zip(keys, values)}


def exact_layout_problem(out, ref):
    """Why an output leaf's layout is not acceptable, or None: it must be a
    plain tensor (claimed type torch.Tensor) whose view does not overlap,
    so every element is its own storage (an expanded stride-0 view does not
    hold its elements). Holes are fine: y[:, :N] of a buffer padded to the
    block size holds every element once."""
    if not isinstance(out, torch.Tensor):
        return None
    if out.numel() > 1:
        if any(st == 0 and s > 1 for s, st in zip(out.shape, out.stride())):
            return f"a view with stride 0 (strides {tuple(out.stride())}): the elements are not stored"
        if not _non_overlapping(out):
            return f"strides {tuple(out.stride())} overlap for shape {tuple(out.shape)}"
    return None


def _non_overlapping(t):
    """Sufficient for no two indices to share an element: in the order of
    their strides, each dimension steps past all the smaller ones span."""
    dims = sorted((st, s) for s, st in zip(t.shape, t.stride()) if s > 1)
    span = 1
    for st, s in dims:
        if st < span:
            return False
        span += st * (s - 1)
    return True
