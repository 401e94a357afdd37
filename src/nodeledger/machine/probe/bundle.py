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
directory"}``): a pid a card lists whose /proc entry was gone replays as gone."""

from __future__ import annotations

import io
import json
import tarfile
import time
from pathlib import Path

from nodeledger.errors import InputError
from nodeledger.machine.probe.runner import RawResult, Runner

MANIFEST = "manifest.json"
FORMAT = "nodeledger-bundle-1"


def write_bundle(r: Runner, path: str | Path, extra: dict | None = None) -> Path:
    """Archive what runner ``r`` collected."""
    p = Path(path)
    entries: dict[str, bytes] = {}
    commands = []
    for i, res in enumerate(r.log):
        name = f"commands/{i:03d}.stdout"
        entries[name] = res.stdout.encode()
        commands.append({"argv": res.argv, "stdout": name, "stderr": res.stderr, "returncode": res.returncode,
                         "seconds": round(res.seconds, 4), "problem": res.problem})  # fmt: skip
    files = {}
    for j, (fpath, text) in enumerate(sorted(r.files.items())):
        if text is None:
            files[fpath] = {"file": None, "problem": r.problems.get(fpath, "unreadable")}
        else:
            name = f"files/{j:04d}"
            entries[name] = text.encode()
            files[fpath] = {"file": name}
    manifest = {"format": FORMAT, "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                "commands": commands, "files": files, "tools": r.tools, "globs": r.globs,
                "timeout_s": r.timeout, **(extra or {})}  # fmt: skip
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

    def __init__(self, manifest: dict, blobs: dict[str, str], where: str) -> None:
        super().__init__()
        self.manifest, self.blobs, self.where = manifest, blobs, where
        self._cmds = {tuple(c["argv"]): c for c in manifest.get("commands", [])}

    def which(self, tool: str) -> str | None:
        return self.manifest.get("tools", {}).get(tool)

    def run(self, argv: list[str]) -> RawResult:
        c = self._cmds.get(tuple(argv))
        if c is None:
            res = RawResult(list(argv), problem="not in the bundle")
        else:
            res = RawResult(list(argv), self.blobs.get(c["stdout"], ""), c.get("stderr") or "",
                            c.get("returncode"), c.get("seconds") or 0.0, c.get("problem"))  # fmt: skip
        self.log.append(res)
        return res

    def read(self, path: str) -> str | None:
        f = self.manifest.get("files", {}).get(path)
        if f is None or f.get("file") is None:
            self.problems[path] = (f or {}).get("problem", "not in the bundle")
            self.files[path] = None
            return None
        text = self.blobs.get(f["file"])
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
    try:
        with tarfile.open(p, "r:*") as tar:
            blobs = {}
            for m in tar.getmembers():
                if m.isfile():
                    fh = tar.extractfile(m)
                    blobs[m.name] = fh.read().decode(errors="replace") if fh else ""
    except (OSError, tarfile.TarError, EOFError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise InputError(f"{p}: not a readable bundle archive ({first.rstrip(':')})") from None
    if MANIFEST not in blobs:
        raise InputError(f"{p}: bundle has no {MANIFEST}")
    try:
        manifest = json.loads(blobs[MANIFEST])
    except json.JSONDecodeError as exc:
        raise InputError(f"{p}: bundle manifest is not valid JSON: {exc.msg}") from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise InputError(f"{p}: not a {FORMAT} bundle")
    _check_manifest(manifest, p)
    return ReplayRunner(manifest, blobs, str(p))


def _is_str_list(v) -> bool:
    return isinstance(v, list) and all(isinstance(x, str) for x in v)


def _check_manifest(m: dict, p: Path) -> None:
    """Every field the replay uses has the type it needs; else one line naming the field."""

    def bad(field: str) -> InputError:
        return InputError(f"{p}: bundle manifest field {field} is malformed")

    cmds = m.get("commands", [])
    if not isinstance(cmds, list):
        raise bad("commands")
    for i, c in enumerate(cmds):
        if not isinstance(c, dict) or not _is_str_list(c.get("argv")) or not c.get("argv"):
            raise bad(f"commands.{i}.argv")
        if not isinstance(c.get("stdout"), str):
            raise bad(f"commands.{i}.stdout")
        for key, types in (
            ("stderr", (str,)),
            ("problem", (str,)),
            ("returncode", (int,)),
            ("seconds", (int, float)),
        ):
            v = c.get(key)
            if v is not None and (not isinstance(v, types) or isinstance(v, bool)):
                raise bad(f"commands.{i}.{key}")
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
