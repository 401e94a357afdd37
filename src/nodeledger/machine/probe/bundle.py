"""Support bundles: every raw output a probe collected (each command's argv, stdout, stderr,
exit code, duration; each /proc and /sys file read; tool look-ups and globs) in one .tar.gz
with a manifest, and a replaying runner so `machine probe --from BUNDLE` rebuilds the same
profile on another machine (a laptop).

The bundle command also reads the live facts `doctor` checks (probe_with_facts,
machine/probe/facts.py: the process table, /proc/cmdline, IOMMU groups, ``lspci -D -vvv``,
/proc/self/mountinfo, the working directory and the HF / MPS variables of /proc/self/environ —
only those, never the rest of the environment), so `doctor --from BUNDLE` replays the same
findings; `machine probe` and the other callers of probe_machine do not read them.  A file
that could not be read is kept with its reason (``{"file": null, "problem": "No such file or
directory"}``): a pid a card lists whose /proc entry was gone replays as gone.  A command
whose output the runner cut at its cap (an endless tool) keeps what was read, with
``"truncated": "stdout truncated at 16 MiB"`` and its ``problem`` in the manifest."""

from __future__ import annotations

import bz2
import gzip
import io
import json
import lzma
import tarfile
import time
import zlib
from pathlib import Path

from nodeledger.errors import InputError
from nodeledger.files import check_user_file
from nodeledger.machine.probe.runner import MiB, RawResult, Runner

MANIFEST = "manifest.json"
FORMAT = "nodeledger-bundle-1"
# Reading a bundle is bounded (a small gzip bomb must not take gigabytes and minutes, nor a
# manifest of millions of short strings hundreds of MB once parsed): each member's
# uncompressed size as its header declares it, their total, their number, and the
# decompressed archive itself (tar headers, padding and pax records on top of the members'
# data) are checked before anything is read on; the manifest's size, the number of values in
# it (counted in its text, before it is parsed) and the length of its lists too.  A bundle over
# a cap is refused with one line naming it.  Members are kept as bytes (decoded when a replay
# reads them), so memory stays within MAX_TOTAL_BYTES and the interpreter.  write_bundle keeps
# what it writes under the same caps (a probe's bundle is a few MiB).
MAX_MEMBER_BYTES = 24 * MiB  # above the runner's 16 MiB caps on one output or file
MAX_TOTAL_BYTES = 64 * MiB
MAX_MEMBERS = 65536
MAX_ARCHIVE_BYTES = MAX_TOTAL_BYTES + 72 * MiB  # + a 1 KiB header and padding per member
MAX_MANIFEST_BYTES = 16 * MiB
MAX_MANIFEST_VALUES = 1_000_000  # JSON values in the manifest (a probe's: tens of thousands)
MAX_LISTED = MAX_MEMBERS  # commands, files, file readings, glob paths: each in all
STDOUT_BUDGET = 32 * MiB  # bytes of commands' stdout in all
STDERR_BUDGET = 4 * MiB  # characters of stderr in all (inline in the manifest)
FILE_SAMPLES_BUDGET = 8 * MiB  # characters of repeated file readings (watch samples) in all
FILES_BUDGET = MAX_TOTAL_BYTES - STDOUT_BUDGET - FILE_SAMPLES_BUDGET - MAX_MANIFEST_BYTES


def write_bundle(r: Runner, path: str | Path, extra: dict | None = None) -> Path:
    # long: one archive: commands, files, file samples under their byte budgets, then the manifest
    """Archive what runner ``r`` collected."""
    p = Path(path)
    entries: dict[str, bytes] = {}
    commands = []
    out_used = err_used = 0
    for i, res in enumerate(r.log):
        name = f"commands/{i:03d}.stdout"
        data, stderr = res.stdout.encode(), res.stderr
        entry = {"argv": res.argv, "stdout": name, "stderr": stderr, "returncode": res.returncode,
                 "seconds": round(res.seconds, 4), "problem": res.problem}  # fmt: skip
        cut = []
        room = max(0, min(MAX_MEMBER_BYTES, STDOUT_BUDGET - out_used))
        if len(data) > room:  # many endless tools: the bundle stays loadable
            data = data[:room]
            cut.append(f"stdout cut at {room / MiB:.0f} MiB")
        room = max(0, STDERR_BUDGET - err_used)
        if len(stderr) > room:
            entry["stderr"] = stderr = stderr[:room]
            cut.append(f"stderr cut at {room / MiB:.0f} MiB")
        out_used, err_used = out_used + len(data), err_used + len(stderr)
        entries[name] = data
        if cut:
            cut_text = ", ".join(cut) + f" (the bundle's {MAX_TOTAL_BYTES / MiB:g} MiB cap)"
            entry["truncated"] = "; ".join(filter(None, (res.truncated, cut_text)))
            entry["problem"] = res.problem or cut_text
        elif res.truncated:
            entry["truncated"] = res.truncated  # "stdout truncated at 16 MiB" (the runner's cap)
        commands.append(entry)
    files = {}
    files_used = 0
    for j, (fpath, text) in enumerate(sorted(r.files.items())):
        data = text.encode() if text is not None else b""
        if text is None:
            files[fpath] = {"file": None, "problem": r.problems.get(fpath, "unreadable")}
        elif files_used + len(data) > FILES_BUDGET:
            files[fpath] = {"file": None, "problem": "left out: the bundle's "
                            f"{FILES_BUDGET / MiB:g} MiB cap on files was reached"}  # fmt: skip
        else:
            name = f"files/{j:04d}"
            entries[name] = data
            files_used += len(data)
            files[fpath] = {"file": name}
    # files read more than once (a watch sample's /proc figures): every reading, in order, so
    # the replay gives each sample its own; within FILE_SAMPLES_BUDGET characters in all
    file_samples: dict[str, list[dict]] = {}
    seen: dict[str, int] = {}
    for fpath, _text, _problem in r.file_log:
        seen[fpath] = seen.get(fpath, 0) + 1
    used = kept = 0
    for k, (fpath, text, problem) in enumerate(r.file_log):
        if seen[fpath] < 2:
            continue
        if kept >= MAX_LISTED:
            break  # as over the budget below
        kept += 1
        if text is None:
            file_samples.setdefault(fpath, []).append(
                {"file": None, "problem": problem or "unreadable"}
            )
            continue
        if used + len(text) > FILE_SAMPLES_BUDGET:
            break  # the rest replay as the last reading (files above)
        name = f"file_samples/{k:06d}"
        entries[name] = text.encode()
        used += len(text)
        file_samples.setdefault(fpath, []).append({"file": name})
    manifest = {"format": FORMAT, "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                "commands": commands, "files": files, "tools": r.tools, "globs": r.globs,
                "timeout_s": r.timeout, **(extra or {})}  # fmt: skip
    if file_samples:
        manifest["file_samples"] = file_samples
    entries[MANIFEST] = json.dumps(manifest, indent=1).encode()
    try:
        with tarfile.open(p, "w:gz") as tar:
            for name, data in entries.items():
                info = tarfile.TarInfo(name)
                info.size = len(data)
                info.mtime = int(time.time())
                tar.addfile(info, io.BytesIO(data))
    except OSError as exc:
        raise InputError(f"{p}: cannot write bundle: {exc.strerror or exc}") from None
    return p


class ReplayRunner(Runner):
    """A Runner whose commands, files, tool look-ups and globs come from a bundle."""

    def __init__(self, manifest: dict, blobs: dict[str, str | bytes], where: str) -> None:
        super().__init__()
        self.manifest, self.blobs, self.where = manifest, blobs, where
        # A command recorded several times (a watch's samples, ``bundle --watch-samples``)
        # answers with its recordings in order, then with its last one again.
        self._cmds: dict[tuple[str, ...], list[dict]] = {}
        for c in manifest.get("commands", []):
            self._cmds.setdefault(tuple(c["argv"]), []).append(c)
        self._played: dict[tuple[str, ...], int] = {}
        self._file_samples = manifest.get("file_samples") or {}  # checked by _check_manifest
        self._file_played: dict[str, int] = {}

    @property
    def rounds(self) -> int:
        """The most times any one command was recorded (1 for a probe's bundle)."""
        return max((len(v) for v in self._cmds.values()), default=0)

    @property
    def recordings(self) -> int:
        """The most readings the bundle really holds of any one command or file (a watch
        sample's own outputs): what a replay can play, whatever the manifest claims."""
        files = max((len(v) for v in self._file_samples.values()), default=0)
        return max(self.rounds, files)

    def which(self, tool: str) -> str | None:
        return self.manifest.get("tools", {}).get(tool)

    def _blob(self, name: str) -> str | None:
        """A member's text (members are kept as bytes and decoded when read), None if absent."""
        data = self.blobs.get(name)
        return data.decode(errors="replace") if isinstance(data, bytes) else data

    def _next(self, recorded: list, played: dict, key):
        """The next of ``key``'s recordings (in order, then the last again), or None."""
        if not recorded:
            return None
        k = played.get(key, 0)
        played[key] = k + 1
        return recorded[min(k, len(recorded) - 1)]

    def run(self, argv: list[str]) -> RawResult:
        key = tuple(argv)
        c = self._next(self._cmds.get(key), self._played, key)
        if c is None:
            res = RawResult(list(argv), problem="not in the bundle")
        else:
            res = RawResult(list(argv), self._blob(c["stdout"]) or "", c.get("stderr") or "",
                            c.get("returncode"), c.get("seconds") or 0.0, c.get("problem"),
                            c.get("truncated"))  # fmt: skip
        self.log.append(res)
        return res

    def read(self, path: str) -> str | None:
        f = self._next(self._file_samples.get(path), self._file_played, path)
        if f is not None:  # a file read at every watch sample: that sample's reading
            if f.get("file") is None or f["file"] not in self.blobs:
                self.problems[path] = str(f.get("problem") or "not in the bundle")
                self.files[path] = None
                return None
            text = self._blob(f["file"])
            self.files[path] = text
            return text
        f = self.manifest.get("files", {}).get(path)
        if f is None or f.get("file") is None:
            self.problems[path] = (f or {}).get("problem", "not in the bundle")
            self.files[path] = None
            return None
        text = self._blob(f["file"])
        self.files[path] = text
        return text

    def readlink(self, path: str) -> str | None:
        text = self.read(path)  # the target was recorded as the link's text
        return text.strip() if text else None

    def realpath(self, path: str) -> str | None:
        """Bundles do not record resolved paths: unknown (never this machine's own /sys)."""
        self.problems[path] = "resolved paths are not recorded in a bundle"
        return None

    def glob(self, pattern: str) -> list[str]:
        return list(self.manifest.get("globs", {}).get(pattern, []))


def load_bundle(path: str | Path) -> ReplayRunner:
    p = Path(path)
    check_user_file(p, "support bundle", limit=MAX_ARCHIVE_BYTES)  # a FIFO would block open()
    try:
        with (
            open(p, "rb") as raw,
            tarfile.open(
                fileobj=_Capped(_decompressed(raw), p), mode="r|", tarinfo=_CappedInfo
            ) as tar,
        ):  # read in order, member by member: each cap is checked before reading on
            blobs = {}
            total = 0
            for count, m in enumerate(tar, 1):  # (tar.getmembers() would read the whole archive)
                if count > MAX_MEMBERS:
                    raise InputError(
                        f"{p}: bundle has over {MAX_MEMBERS:,} members (the cap); refusing it"
                    )
                name = _member_name(m.name, p)
                if m.isfile() and name:
                    _check_member_size(m, p)
                    if name == MANIFEST and m.size > MAX_MANIFEST_BYTES:
                        raise InputError(
                            f"{p}: bundle manifest is {m.size / MiB:,.0f} MiB, over the "
                            f"{MAX_MANIFEST_BYTES / MiB:g} MiB cap on a manifest; refusing it"
                        )
                    total += m.size
                    if total > MAX_TOTAL_BYTES:
                        raise InputError(
                            f"{p}: bundle members add up to over {MAX_TOTAL_BYTES / MiB:g} MiB "
                            "uncompressed (the cap on a bundle); refusing it"
                        )
                    if name in blobs:
                        raise InputError(f"{p}: bundle member {name!r} appears twice")
                    fh = tar.extractfile(m)  # read into memory; nothing is ever extracted
                    blobs[name] = fh.read() if fh else b""  # decoded when replayed
    except _TooBig as exc:
        raise _too_big(exc.args[0], p) from None
    except RecursionError:  # thousands of chained extension headers: tarfile recurses per header
        raise InputError(f"{p}: bundle headers nest too deeply; refusing it") from None
    except (OSError, tarfile.TarError, EOFError, zlib.error, lzma.LZMAError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise InputError(f"{p}: not a readable bundle archive ({first.rstrip(':')})") from None
    if MANIFEST not in blobs:
        raise InputError(f"{p}: bundle has no {MANIFEST}")
    raw = blobs.pop(MANIFEST)
    # every value past a container's first follows a comma: an upper bound on the values the
    # parse would build, counted before building them
    values = raw.count(b",") + raw.count(b"[") + raw.count(b"{")
    if values > MAX_MANIFEST_VALUES:
        raise InputError(
            f"{p}: bundle manifest holds up to {values:,} values, over the cap of "
            f"{MAX_MANIFEST_VALUES:,} (a probe's holds tens of thousands); refusing it"
        )
    try:
        manifest = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise InputError(f"{p}: bundle manifest is not valid JSON: {exc.msg}") from None
    except RecursionError:  # [[[[... 200,000 levels deep
        raise InputError(f"{p}: bundle manifest nests too deeply; refusing it") from None
    except ValueError as exc:  # an integer of more digits than Python converts; bad UTF-8
        raise InputError(f"{p}: bundle manifest is not valid JSON: {str(exc)[:120]}") from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise InputError(f"{p}: not a {FORMAT} bundle")
    _check_manifest(manifest, p)
    return ReplayRunner(manifest, blobs, str(p))


def _member_name(name: str, p: Path) -> str:
    """A member's name as the manifest refers to it: a ``./`` prefix (``tar -C dir .``), empty
    and ``.`` parts dropped.  An absolute name or a ``..`` part is refused: a bundle names
    nothing outside itself."""
    if name.startswith("/") or "\x00" in name:
        raise InputError(f"{p}: bundle member {name!r} has an absolute name; refusing the bundle")
    parts = [part for part in name.split("/") if part not in ("", ".")]
    if ".." in parts:
        raise InputError(f"{p}: bundle member {name!r} climbs out with '..'; refusing the bundle")
    return "/".join(parts)


def _decompressed(raw):
    """The archive's bytes, decompressed as ``tarfile.open(mode="r:*")`` would (gzip, bzip2,
    xz or none), as a stream: nothing is decompressed before it is asked for."""
    head = raw.read(6)
    raw.seek(0)
    if head.startswith(b"\x1f\x8b"):
        return gzip.GzipFile(fileobj=raw, mode="rb")
    if head.startswith(b"BZh"):
        return bz2.BZ2File(raw)
    if head.startswith(b"\xfd7zXZ\x00"):
        return lzma.LZMAFile(raw)
    return raw


class _Capped:
    """A reader that refuses to give more than MAX_ARCHIVE_BYTES in all."""

    def __init__(self, f, p: Path) -> None:
        self.f, self.p, self.n = f, p, 0

    def read(self, size: int = -1) -> bytes:
        data = self.f.read(min(size, MAX_ARCHIVE_BYTES + 1) if size >= 0 else MAX_ARCHIVE_BYTES + 1)
        self.n += len(data)
        if self.n > MAX_ARCHIVE_BYTES:
            raise InputError(
                f"{self.p}: bundle archive decompresses to over {MAX_ARCHIVE_BYTES / MiB:g} MiB "
                "(the cap); refusing it"
            )
        return data


def _too_big(m: tarfile.TarInfo, p: Path) -> InputError:
    return InputError(
        f"{p}: bundle member {m.name!r} is {m.size / MiB:,.0f} MiB uncompressed, over the "
        f"{MAX_MEMBER_BYTES / MiB:g} MiB cap on a member; refusing the bundle"
    )


def _check_member_size(m: tarfile.TarInfo, p: Path) -> None:
    if m.size > MAX_MEMBER_BYTES:
        raise _too_big(m, p)


class _TooBig(Exception):
    """A header announcing more than MAX_MEMBER_BYTES (load_bundle names the bundle)."""


class _CappedInfo(tarfile.TarInfo):
    """Checks a header's size before tarfile reads what it announces (a pax record or a GNU
    long name is read into memory whole, before the member is handed to load_bundle)."""

    def _proc_member(self, tarfile):
        if self.size > MAX_MEMBER_BYTES:
            raise _TooBig(self)
        if self.type in _EXTENSION_HEADERS and self.size > MAX_EXTENSION_BYTES:
            # write_bundle never writes these; a big one is a hostile archive (and Python's own
            # pax parser is quadratic in it before 3.11.10: CVE-2024-6232)
            raise _TooBig(self)
        return super()._proc_member(tarfile)


MAX_EXTENSION_BYTES = 8 * 1024  # a pax record or GNU long name: a path, a few attributes
_EXTENSION_HEADERS = {tarfile.XHDTYPE, tarfile.XGLTYPE, tarfile.SOLARIS_XHDTYPE,
                      tarfile.GNUTYPE_LONGNAME, tarfile.GNUTYPE_LONGLINK}  # fmt: skip


def _is_str_list(v) -> bool:
    return isinstance(v, list) and all(isinstance(x, str) for x in v)


def _check_manifest(m: dict, p: Path) -> None:
    """Every field the replay uses has the type it needs; else one line naming the field."""

    def bad(field: str) -> InputError:
        return InputError(f"{p}: bundle manifest field {field} is malformed")

    cmds = m.get("commands", [])
    if not isinstance(cmds, list):
        raise bad("commands")
    for field, n in _listed(m):
        if n > MAX_LISTED:
            raise InputError(
                f"{p}: bundle manifest lists {n:,} {field}, over the cap of {MAX_LISTED:,}; "
                "refusing it"
            )
    for i, c in enumerate(cmds):
        if not isinstance(c, dict) or not _is_str_list(c.get("argv")) or not c.get("argv"):
            raise bad(f"commands.{i}.argv")
        if not isinstance(c.get("stdout"), str):
            raise bad(f"commands.{i}.stdout")
        for key, types in (
            ("stderr", (str,)),
            ("problem", (str,)),
            ("truncated", (str,)),
            ("returncode", (int,)),
            ("seconds", (int, float)),
        ):
            v = c.get(key)
            if v is not None and (not isinstance(v, types) or isinstance(v, bool)):
                raise bad(f"commands.{i}.{key}")
    samples = m.get("file_samples", {})
    if not isinstance(samples, dict) or not all(
        isinstance(v, list) and all(isinstance(x, dict) and isinstance(x.get("file"), (str, type(None)))
                                    for x in v)
        for v in samples.values()
    ):  # fmt: skip
        raise bad("file_samples")
    files = m.get("files", {})
    if not isinstance(files, dict):
        raise bad("files")
    for k, f in files.items():
        if not isinstance(f, dict) or not isinstance(f.get("file"), (str, type(None))):
            raise bad(f"files.{k}")
        if not isinstance(f.get("problem"), (str, type(None))):
            raise bad(f"files.{k}.problem")
    tools = m.get("tools", {})
    if not isinstance(tools, dict) or not all(
        isinstance(v, (str, type(None))) for v in tools.values()
    ):
        raise bad("tools")
    globs = m.get("globs", {})
    if not isinstance(globs, dict) or not all(_is_str_list(v) for v in globs.values()):
        raise bad("globs")


def _listed(m: dict) -> list[tuple[str, int]]:
    """(what, how many) of each list a replay walks: commands, files, file readings and glob
    paths, each counted in all."""

    def size(v) -> int:
        return len(v) if isinstance(v, (list, dict)) else 0

    samples, globs = m.get("file_samples"), m.get("globs")
    return [
        ("commands", size(m.get("commands"))),
        ("files", size(m.get("files"))),
        ("file readings", sum(map(size, samples.values())) if isinstance(samples, dict) else 0),
        ("glob paths", sum(map(size, globs.values())) if isinstance(globs, dict) else 0),
    ]


def manifest_from_outputs(commands: dict[tuple[str, ...], str], files: dict[str, str] | None = None,
                          tools: tuple[str, ...] = ()) -> dict:  # fmt: skip
    """Assemble a bundle manifest from recorded outputs (tests, and users with pasted outputs)."""
    blobs, cmds = {}, []
    for i, (argv, out) in enumerate(commands.items()):
        name = f"commands/{i:03d}.stdout"
        blobs[name] = out
        cmds.append(
            {
                "argv": list(argv),
                "stdout": name,
                "stderr": "",
                "returncode": 0,
                "seconds": 0.0,
                "problem": None,
            }
        )
    fmap = {}
    for j, (fpath, text) in enumerate((files or {}).items()):
        name = f"files/{j:04d}"
        blobs[name] = text
        fmap[fpath] = {"file": name}
    manifest = {"format": FORMAT, "commands": cmds, "files": fmap,
                "tools": {t: f"/usr/bin/{t}" for t in tools}, "globs": {}}  # fmt: skip
    return {"manifest": manifest, "blobs": blobs}
