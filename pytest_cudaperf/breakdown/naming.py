"""Kernel names a person reads: the short name of a demangled CUDA kernel (templates, lambdas
and library boilerplate dropped, the tile and layout kept) and the key that identifies a kernel
across breakdowns."""

from __future__ import annotations

import functools
import hashlib
import re

#: a full kernel name longer than this is stored as short name + hash only
MAX_KEY_CHARS = 160
#: a short name longer than this is compacted (head tokens ... layout)
MAX_NAME_CHARS = 56
#: no short name is longer than this
MAX_SHORT_CHARS = 100


_TEMPLATE_HINT = re.compile(r"\b(\w*(?:Functor|functor)\w*)")
_LAMBDA_HOST = re.compile(r"(\w+)\([^()]*\)(?: const)?::\{lambda")
_WRAPPERS = {"Kernel", "Kernel2", "device_kernel", "kernel"}
_LAYOUT = re.compile(r"^(nn|nt|tn|tt)$")
_TILE = re.compile(r"(\d+x\d+(?:x\d+)?)")
_BOILERPLATE = re.compile(
    r"(_execute_segment_k_(?:on|off)_kernel|_execute_kernel|__\d+x_cublas|_cublas|_kernel__\d+x)+$"
)


def _split_top(text: str, start: int, opening: str, closing: str) -> tuple[str, int]:
    """The text between ``text[start] == opening`` and its matching ``closing``."""
    depth = 0
    for i in range(start, len(text)):
        ch = text[i]
        if ch == opening:
            depth += 1
        elif ch == closing:
            depth -= 1
            if depth == 0:
                return text[start + 1 : i], i + 1
    return text[start + 1 :], len(text)


def _base(identifier: str) -> str:
    """The last ``::`` component, outside templates and parentheses."""
    depth = 0
    cut = 0
    i = 0
    while i < len(identifier):
        ch = identifier[i]
        if ch in "<(":
            depth += 1
        elif ch in ">)":
            depth -= 1
        elif depth == 0 and identifier.startswith("::", i):
            cut = i + 2
            i += 1
        i += 1
    return identifier[cut:]


def _compact(name: str) -> str:
    """A long cuBLAS/CUTLASS-style name kept recognisable: its head, its tile and layout."""
    name = _BOILERPLATE.sub("", name.removeprefix("cudnn_generated_fort_native_"))
    if len(name) <= MAX_NAME_CHARS:
        return name
    tokens = name.split("_")
    head = "_".join(tokens[:4])
    tail = []
    tile = next((m.group(1) for t in tokens[4:] if (m := _TILE.search(t))), None)
    if tile:
        tail.append(tile)
    layout = next((t for t in tokens[4:] if _LAYOUT.match(t)), None)
    if layout:
        tail.append(layout)
    return "_".join([head, "..", *tail]) if tail else head + "_.."


@functools.lru_cache(maxsize=4096)
def short_name(full: str) -> str:
    """A kernel name a person reads (see ``_short_name``), clipped to ``MAX_SHORT_CHARS``."""
    name = _short_name(full)
    return name if len(name) <= MAX_SHORT_CHARS else name[: MAX_SHORT_CHARS - 2] + ".."


def _short_name(full: str) -> str:  # noqa: PLR0912 - one rule per kind of name noise
    """A kernel name a person reads: no ``void``, namespaces, argument list or template noise;
    the functor or lambda host of a generic elementwise/reduce kernel kept in brackets
    (``vectorized_elementwise_kernel<CUDAFunctor_add>``); a CUTLASS ``Kernel2<name>`` unwrapped;
    long cuBLAS/CUTLASS names compacted to head, tile and layout. Memcpy/Memset/CPU op names are
    kept as they are. At most ``MAX_SHORT_CHARS`` characters."""
    text = full.strip()
    if not text:
        return "(unnamed)"
    if text.startswith(("Memcpy", "Memset")) or ("::" not in text and "<" not in text):
        return _compact(text) if " " not in text else text
    if text.startswith(("aten::", "prim::", "autograd::", "c10d::", "profiler::")):
        return text
    if text.startswith("void "):
        text = text[5:]
    # "(anonymous namespace)::" is a namespace like any other, but its parentheses would end the
    # identifier early (seen on the H100: softmax_warp_forward and cunn_SoftMaxForward read "")
    text = text.replace("(anonymous namespace)::", "")
    # the identifier: up to the first top-level "<" or "("
    i = 0
    depth_name_end = len(text)
    while i < len(text):
        if text[i] in "<(":
            depth_name_end = i
            break
        i += 1
    ident = _base(text[:depth_name_end]) or text[:depth_name_end]
    templ = ""
    if depth_name_end < len(text) and text[depth_name_end] == "<":
        templ, _ = _split_top(text, depth_name_end, "<", ">")
    if ident in _WRAPPERS and templ:
        inner = _base(templ.split("<", 1)[0].split(",", 1)[0].strip())
        if inner:
            return f"{ident}<{_compact(inner)}>"
    hint = None
    if templ:
        m = _TEMPLATE_HINT.search(templ)
        if m:
            hint = _base(m.group(1))
        else:
            lam = _LAMBDA_HOST.search(templ)
            if lam:
                hint = lam.group(1)
    ident = _compact(ident)
    return f"{ident}<{hint}>" if hint else ident


def entry_key(full: str, short: str) -> str:
    if len(full) <= MAX_KEY_CHARS:
        return full
    digest = hashlib.sha1(full.encode(), usedforsecurity=False).hexdigest()[:8]
    return f"{short} #{digest}"


# ---------------------------------------------------------------------------------------------
# aggregation (pure: unit-tested with synthetic events)
