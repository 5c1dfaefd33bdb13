"""`oom-doctor triage --engine ray`: the same map and reduce as the local engine (advisor.triage.batch), the
map run by Ray Data.

    read_binary_files(paths, include_paths=True).map_batches(_map) -> rows (JSON) -> the driver folds
    them into one partial grouping as they stream in (batch.add) -> batch.finish

Only rows come back to the driver, never the logs' text, and it keeps for each file its path, mtime
and request size (see batch._keep): its memory grows with the number of files, not their size.
Local paths are expanded here exactly as the local engine does (folders, globs, files without a
suffix, run folders), so both engines diagnose the same files; an URI (s3://bucket/logs/) goes to
Ray Data as given. RAY_ADDRESS selects a cluster; without it a local Ray starts. Ray is imported
here only, and only when this engine runs.
"""

import json
import os
import sys

INSTALL = "pip install '.[ray]' (in a clone of oom-doctor)"
BATCH = 64                  # logs per map call: amortises the call, keeps a block's rows small


class EngineMissing(RuntimeError):
    """Ray cannot run here: not installed, or the cluster RAY_ADDRESS names cannot be reached."""


def _ray():
    try:
        import ray
        import ray.data  # noqa: F401
    except ImportError as e:
        raise EngineMissing(f"--engine ray needs Ray Data ({e}); install it with: {INSTALL}") from None
    return ray


def _is_uri(arg):
    return "://" in arg


def _map(batch, lang="en"):
    """One Ray Data batch {"bytes", "path"} (or {"item"}: run folders, read by path) -> {"row": JSON}."""
    import numpy as np
    from .batch import diagnose_item
    from .config import config_beside
    if "item" in batch:
        rows = [diagnose_item(p, p, lang) for p in batch["item"]]
    else:
        # a local file's config beside it counts as the local engine counts it; a URI's cannot be read here
        rows = [diagnose_item(p, data, lang, config_beside(p) if os.path.isfile(p) else None)
                for p, data in zip(batch["path"], batch["bytes"])]
    return {"row": np.array([json.dumps(r, ensure_ascii=False) for r in rows], dtype=object)}


def _start(ray, progress):
    import logging
    if not ray.is_initialized():
        # RAY_ADDRESS, when set, is read by ray.init itself: a cluster; unset, a local Ray starts.
        try:
            ray.init(ignore_reinit_error=True, logging_level=logging.WARNING, log_to_driver=False,
                     include_dashboard=False)
        except ConnectionError as e:
            where = os.environ.get("RAY_ADDRESS") or "a local Ray"
            raise EngineMissing(f"--engine ray: cannot reach {where}: {str(e).splitlines()[0]}") from None
    logging.getLogger("ray.data").setLevel(logging.WARNING)    # its per-dataset lines are not the report's
    ctx = ray.data.DataContext.get_current()
    ctx.enable_progress_bars = progress
    if hasattr(ctx, "print_on_execution_start"):
        ctx.print_on_execution_start = False


def _readable(path):
    """A regular file this process may read: Ray Data fails the whole read on anything else."""
    from .inputs import regular
    return regular(path) and os.access(path, os.R_OK)


def _datasets(ray, files, uris, lang):
    """The Ray datasets to map: local files read as bytes, run folders by path, URIs as given."""
    opts = dict(batch_size=BATCH, fn_kwargs={"lang": lang}, batch_format="numpy")
    plain = [os.path.abspath(f) for f in files if not os.path.isdir(f) and _readable(f)]
    runs = [os.path.abspath(f) for f in files if os.path.isdir(f)]      # a worker may have another cwd
    # A run folder is one report made of several files (log, config, records): its workers read it by
    # path, which a local Ray, or a cluster on a shared filesystem, can.
    if plain:
        yield ray.data.read_binary_files(plain, include_paths=True).map_batches(_map, **opts)
    if runs:
        yield ray.data.from_items(runs).map_batches(_map, **opts)
    if uris:
        yield ray.data.read_binary_files(uris, include_paths=True).map_batches(_map, **opts)


def _scheme_back(path, uris):
    """Ray Data names a remote file without its scheme (bucket/logs/a.log): the URI's is put back."""
    if _is_uri(path):
        return path
    for uri in uris:
        scheme, rest = uri.split("://", 1)
        if path.startswith(rest.split("/", 1)[0]):
            return f"{scheme}://{path}"
    return path


def run_triage_ray(args, lang="en", progress=False):
    """PATH/URI arguments -> the triage/v1 report (None when nothing matched), the map on Ray."""
    ray = _ray()
    from . import batch
    from .inputs import expand
    local = [a for a in args if not _is_uri(a)]
    uris = [a for a in args if _is_uri(a)]
    files, missing = expand(local)
    if not files and not uris:
        return None
    given = {os.path.abspath(f): f for f in files}          # a row's source is the path as given
    order = {f: i for i, f in enumerate(files)}
    _start(ray, progress)
    state, failed = batch.empty(), []
    # A broken link, a FIFO, a file without read permission: its one-line error is made here, as the
    # local engine makes it (a stat, no read).
    failed += [batch.diagnose_item(f, f, lang) for f in files if not os.path.isdir(f) and not _readable(f)]
    for ds in _datasets(ray, files, uris, lang):
        for item in ds.iter_rows():
            row = json.loads(item["row"])
            name = given.get(row["id"]) or given.get(os.path.abspath(row["id"])) if not _is_uri(row["id"]) else None
            if name is None:
                name = _scheme_back(row["id"], uris)
            row["id"] = name
            if "error" in row:
                failed.append(row)
                continue
            row["source"] = name
            if name in order and row.get("mtime") is None:
                try:                     # bytes carry no time; the driver has the file's own
                    row["mtime"] = os.path.getmtime(name)
                except OSError:
                    pass
            batch.add(state, row)
    for row in sorted(failed, key=lambda r: (order.get(r["id"], len(order)), r["id"])):
        batch.add(state, row)
    if not files and not state["keys"] and not state["errors"]:
        return None
    return batch.finish(state, lang, [{"path": m, "error": "no such file, folder or glob match"} for m in missing])


def shutdown():
    if "ray" in sys.modules:
        sys.modules["ray"].shutdown()
