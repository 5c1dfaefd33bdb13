"""Sizes as allocators print them ("20.00 MiB", "1.2 GB", "104857600 bytes") converted to GiB."""

import re

_FACTORS = {
    "b": 1, "byte": 1, "bytes": 1,
    "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40, "pib": 2**50, "eib": 2**60,
    # Decimal-looking units: PyTorch's old messages and DeepSpeed print "GB" meaning GiB-ish
    # values computed with 1024 divisors, so they are read as binary units.
    "kb": 2**10, "mb": 2**20, "gb": 2**30, "tb": 2**40, "pb": 2**50, "eb": 2**60,   # "more than 1EB": overflowed
    "k": 2**10, "m": 2**20, "g": 2**30, "t": 2**40,
}

SIZE = r"\d+(?:\.\d+)?\s*(?:bytes|byte|[KMGTPE]i?B|B)\b"
# a bare letter stays K-T: "1e-5" is no exabyte
_SIZE_RE = re.compile(r"(\d+(?:\.\d+)?)\s*([KMGTPE]i?B|bytes?|B|[KMGT])\b", re.I)


def to_gib(text):
    """'20.00 MiB' -> 0.01953...; None when the text holds no size."""
    if text is None:
        return None
    m = _SIZE_RE.search(str(text))
    if not m:
        return None
    return float(m.group(1)) * _FACTORS[m.group(2).lower()] / 2**30


def parse_count(text):
    """'7B' -> 7e9, '1.5b' -> 1.5e9, '350M' -> 3.5e8, '20,971,520' -> 20971520."""
    t = str(text).strip().replace(",", "").replace("_", "")
    m = re.fullmatch(r"(\d+(?:\.\d+)?)\s*([kKmMbBtT]?)", t)
    if not m:
        return None
    mult = {"": 1, "k": 1e3, "m": 1e6, "b": 1e9, "t": 1e12}[m.group(2).lower()]
    return float(m.group(1)) * mult


def round_gib(x, nd=3):
    return None if x is None else round(x, nd)


def fmt_gib(x, missing="—"):
    """0.5 -> '512 MiB', 23.6 -> '23.60 GiB': the way the allocator would print it."""
    if x is None:
        return missing
    return f"{x * 1024:.0f} MiB" if abs(x) < 1 else f"{x:.2f} GiB"
