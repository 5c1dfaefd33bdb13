"""The user's files: read a config only when it is a regular file, never write over an input, and
write every output through a temporary file and a rename that keep the original's mode and owner.

Everything here fails with an InputError (one line, exit 2) and leaves no temporary file behind.
"""

import codecs
import os
import stat
import tempfile

from .reader import InputError, input_error

MAX_CONFIG_BYTES = 1 << 20      # a training config is kilobytes; a bigger file is not one (and a
                                # 20 MB YAML document takes ruamel minutes to parse)
_STREAMS = ("/dev/", "/proc/")  # /dev/stdin, /dev/fd/N, /proc/self/fd/N: a stream, not a file to patch


def _link_chain(path):
    """The absolute paths a symlink chain passes through (the path itself first); stops at 40 hops."""
    chain, cur = [os.path.abspath(path)], path
    for _ in range(40):
        try:
            nxt = os.readlink(cur)
        except OSError:
            break
        cur = os.path.join(os.path.dirname(cur), nxt)
        chain.append(os.path.abspath(cur))
    return chain


def why_not_regular(mode, what="config file"):
    if stat.S_ISDIR(mode):
        return f"is a directory, not a {what}"
    if stat.S_ISFIFO(mode):
        return f"is a FIFO (named pipe), not a {what}"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return f"is a device, not a {what}"
    return f"is not a regular file (a socket?), not a {what}"


def os_error(path, e, what="file"):
    """One line for an OSError on `path` (a symlink loop is named as such)."""
    return input_error(path, e, what)


def read_config_bytes(path, limit=MAX_CONFIG_BYTES):
    """The bytes of a config file. A FIFO, a device or /dev/stdin is refused before it is opened for
    good (opening a FIFO blocks until a writer comes; reading a device may never end)."""
    if any(p.startswith(_STREAMS) for p in _link_chain(path)):
        raise InputError(f"{path}: is a stream or device (like /dev/stdin), not a config file; give the file itself")
    try:
        st = os.stat(path)
        if not stat.S_ISREG(st.st_mode):
            raise InputError(f"{path}: {why_not_regular(st.st_mode)}")
        # O_NONBLOCK: should the path have become a FIFO since the stat, opening it still returns
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError as e:
        raise os_error(path, e, "config file") from None
    with os.fdopen(fd, "rb") as fh:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise InputError(f"{path}: {why_not_regular(st.st_mode)}")
        if st.st_size > limit:
            raise InputError(f"{path}: {st.st_size / 2**20:.1f} MiB is too big for a training config "
                             f"(the limit is {limit >> 20} MiB)")
        data = fh.read(limit + 1)
    if len(data) > limit:
        raise InputError(f"{path}: too big for a training config (the limit is {limit >> 20} MiB)")
    return data


# ---- outputs ------------------------------------------------------------------------------------
def _identity(path):
    try:
        st = os.stat(path)
        return ("inode", st.st_dev, st.st_ino)
    except OSError:
        return ("path", os.path.realpath(path))


def refuse_input_as_output(output, inputs, what="the report"):
    """-o naming one of the inputs (the same file by inode, or the same resolved path) would destroy
    it: refused before anything is read or written."""
    if not output:
        return
    mine = _identity(output)
    for src in inputs:
        if src and src != "-" and _identity(src) == mine:
            raise InputError(f"{output}: is the input {src}; refusing to write {what} over it "
                             f"(choose another -o path)")


def _is_stream(path):
    """/dev/stdout, a terminal, a FIFO: written directly (there is nothing to rename over)."""
    try:
        return not stat.S_ISREG(os.stat(path).st_mode)
    except OSError:
        return False


def write_output(path, data):
    """A report or a patched copy at `path`: complete or not at all."""
    data = data.encode("utf-8") if isinstance(data, str) else data
    if _is_stream(path):
        try:
            with open(path, "wb") as fh:
                fh.write(data)
        except OSError as e:
            raise InputError(f"{path}: cannot write ({e.strerror or e})") from None
        return
    real = os.path.realpath(path)       # -o a symlink: the file it points to gets the report
    atomic_write(real, data, like=real if os.path.exists(real) else None, shown=path)


def _umask_mode():
    mask = os.umask(0)
    os.umask(mask)
    return 0o666 & ~mask


def atomic_write(path, data, like=None, shown=None):
    """Write `data` to a temporary file beside `path`, give it the mode, owner and group of `like`
    (a path or an os.stat_result; a new file gets the umask's mode), then rename it over `path`.
    A failure at any step removes the temporary file and leaves `path` as it was."""
    shown = shown or path
    st = os.stat(like) if isinstance(like, (str, bytes, os.PathLike)) else like
    folder = os.path.dirname(os.path.abspath(path))
    tmp = None
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{os.path.basename(path)}.", suffix=".tmp", dir=folder)
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        if st is not None:
            keep_owner(tmp, st)
        os.chmod(tmp, stat.S_IMODE(st.st_mode) if st is not None else _umask_mode())
        os.replace(tmp, path)
        tmp = None
    except OSError as e:
        raise InputError(f"{shown}: cannot write ({e.strerror or e}); nothing was changed") from None
    finally:
        if tmp is not None:
            try:
                os.unlink(tmp)
            except OSError:
                pass


def keep_owner(path, st):
    """Give `path` the owner and group of `st`; True when it has them (only root may give a file
    away, so for anyone else this works only when the original was theirs)."""
    try:
        if (os.stat(path).st_uid, os.stat(path).st_gid) != (st.st_uid, st.st_gid):
            os.chown(path, st.st_uid, st.st_gid)
        return True
    except OSError:
        return False


def write_in_place(path, data, original):
    """Rewrite `path` itself (its inode, so other hard links and the owner stay). The caller made a
    backup first; should the write fail midway the original bytes are put back."""
    try:
        with open(path, "r+b") as fh:
            fh.write(data)
            fh.truncate()
            fh.flush()
            os.fsync(fh.fileno())
    except OSError as e:
        try:
            with open(path, "r+b") as fh:
                fh.write(original)
                fh.truncate()
        except OSError:
            pass
        raise InputError(f"{path}: cannot write ({e.strerror or e}); the original was put back") from None


# ---- a config's encoding: read it, and write the patch back in it -------------------------------
_BOMS = ((codecs.BOM_UTF8, "utf-8"), (codecs.BOM_UTF16_LE, "utf-16-le"), (codecs.BOM_UTF16_BE, "utf-16-be"))


def decode_config(raw, path):
    """(text, (codec, bom)) such that bom + text.encode(codec) == raw: the patcher can write the
    untouched lines back byte for byte. UTF-8 first, then GB18030 (Chinese configs), then Latin-1
    (any byte is a character: a Latin-1 comment is never turned into U+FFFD)."""
    for bom, codec in _BOMS:
        if raw.startswith(bom):
            try:
                return raw[len(bom):].decode(codec), (codec, bom)
            except UnicodeDecodeError:
                raise InputError(f"{path}: starts with a {codec.upper()} byte order mark but is not "
                                 f"valid {codec.upper()}") from None
    if b"\x00" in raw:
        even, odd = raw[0::2].count(0), raw[1::2].count(0)
        # UTF-16 without a BOM puts a NUL beside every ASCII character (the reader's own test)
        codec = "utf-16-le" if odd > len(raw) // 3 and even < len(raw) // 20 else \
                "utf-16-be" if even > len(raw) // 3 and odd < len(raw) // 20 else None
        if codec is None:
            raise InputError(f"{path}: holds NUL bytes: a binary file, not a text config")
        try:
            return raw.decode(codec), (codec, b"")
        except UnicodeDecodeError:
            raise InputError(f"{path}: looks like {codec.upper()} without a byte order mark, "
                             f"but does not decode as such") from None
    for codec in ("utf-8", "gb18030", "latin-1"):
        try:
            text = raw.decode(codec)
        except UnicodeDecodeError:
            continue
        if text.encode(codec) == raw:
            return text, (codec, b"")
    return raw.decode("latin-1"), ("latin-1", b"")


def encode_config(text, encoding, path):
    codec, bom = encoding
    try:
        return bom + text.encode(codec)
    except UnicodeEncodeError:
        raise InputError(f"{path}: the patched value cannot be written in the file's encoding "
                         f"({codec}); nothing written") from None


def open_regular(path):
    """A binary file object for a regular file; a symlink or a FIFO is refused before it is read."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOFOLLOW", 0))
    except OSError as e:
        raise input_error(path, e) from None
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        raise InputError(f"{path}: not a regular file; not opened")
    os.set_blocking(fd, True)
    return os.fdopen(fd, "rb"), st.st_size
