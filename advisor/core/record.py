"""Typed records for the pipeline's own data: dataclasses with pydantic's two conveniences.

Rule files and catalogues are validated by pydantic schemas when the snapshot is built
(advisor/compiled.py writes it, advisor/snapshot.py reads it); what flows between stages needs no validation, and plain dataclasses keep
start-up fast (building pydantic models costs ~0.1 s at import, more than reading a 1 GB log takes).
The method names match pydantic's so code reads the same either way.
"""

import dataclasses


class Record:
    def model_copy(self, update=None):
        return dataclasses.replace(self, **(update or {}))

    def model_dump(self):
        """Plain dicts and lists, recursively; values are shared, not deep-copied (asdict is slow)."""
        return _plain(self)


_SCALARS = frozenset((str, int, float, bool, type(None)))


def _plain(value):
    if type(value) in _SCALARS:         # most values: one set lookup, not three isinstance calls
        return value
    if isinstance(value, Record):
        return {name: _plain(getattr(value, name)) for name in value.__dataclass_fields__}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value
