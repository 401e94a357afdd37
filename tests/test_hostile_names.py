"""Hostile names and interrupted writes (issue 14): a workload id never becomes a path outside
the -o folder or a shell line of an sbatch; outputs are written atomically; an empty state file
is refused, not taken as an empty database; bundles re-packed with './' members load."""

from __future__ import annotations

import io
import json
import os
import re
import shutil
import sqlite3
import subprocess
import tarfile
from dataclasses import replace
from pathlib import Path

import pytest
import yaml

from conftest import run_cli
from nodeledger import atomic
from nodeledger.errors import InputError, NodeledgerError
from nodeledger.machine import resolve_machine
from nodeledger.machine.profile import NumaNode
from nodeledger.placement import emit
from nodeledger.verdict.catalogue import default_catalogue_text, parse_catalogue, valid_id

PLAN = """
[[workloads]]
id = {id}
model = "qwen3-0.6b"
job = "serve"
context = 2048
"""


def plan_text(wid_toml: str, extra: str = "") -> str:
    return PLAN.format(id=wid_toml) + extra


def files_under(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


# -- 1. ids at the boundary (parse_catalogue) and from the CLI --------------------------------


@pytest.mark.parametrize(
    ("toml_id", "shown"),
    [
        ('"../../evil"', "'../../evil'"),
        ('"x\\necho PWNED #"', "'x\\necho PWNED #'"),  # repr: the newline is visible as \n
        ('"/etc/passwd"', "'/etc/passwd'"),
        ('".hidden"', "'.hidden'"),
        ('"-rf"', "'-rf'"),
        ('"a b"', "'a b'"),
        ('"x;reboot"', "'x;reboot'"),
        ('"$(reboot)"', "'$(reboot)'"),
        ('"caf\\u00e9"', "'café'"),
        ('"' + "a" * 65 + '"', "'" + "a" * 65 + "'"),
    ],
)
def test_bad_ids_are_refused_where_the_plan_is_parsed(toml_id, shown):
    with pytest.raises(InputError) as e:
        parse_catalogue(plan_text(toml_id), "p.toml")
    msg = str(e.value)
    assert msg.startswith("p.toml: workloads entry 1: id ") and shown in msg
    assert "\n" not in msg and "letters, digits" in msg


def test_good_ids_and_the_bundled_catalogue_pass():
    for wid in ("a" * 64, "serve-8b_tp1.v2", "_x", "A9"):
        assert valid_id(wid)
        (w,) = parse_catalogue(plan_text(json.dumps(wid)), "p")
        assert w.id == wid
    assert all(valid_id(w.id) for w in parse_catalogue(default_catalogue_text(), "default"))


@pytest.mark.parametrize(
    ("extra", "field"),
    [
        ('title = "t\\nrm -rf ~"\n', "title"),
        ('claim = "c\\u001b[31m"\n', "claim"),
        ('command = ["python", "serve.py\\necho PWNED"]\n', "command element"),
        ('title = "t\\u2028x"\n', "title"),
    ],
)
def test_control_characters_in_free_text_are_refused(extra, field):
    with pytest.raises(InputError) as e:
        parse_catalogue(plan_text('"ok"', extra), "p.toml")
    msg = str(e.value)
    assert msg.startswith(f"p.toml: workload 'ok': {field} ") and "\n" not in msg


@pytest.mark.parametrize("toml_id", ['"../../evil"', '"x\\necho PWNED #"'])
@pytest.mark.parametrize("kind", ["slurm", "k8s"])
def test_place_emit_refuses_a_hostile_id_and_writes_nothing(tmp_path, toml_id, kind):
    plan = tmp_path / "plan.toml"
    plan.write_text(plan_text(toml_id))
    out = tmp_path / "a" / "b" / "out"  # out/../../evil.sbatch would be tmp_path/a/evil.sbatch
    image = ("--image", "registry.example/serve:1") if kind == "k8s" else ()
    proc = run_cli("place", str(plan), "--machine", "k100-ai-8x64g", "--emit", kind, *image,
                   "-o", str(out))  # fmt: skip
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert "workloads entry 1: id" in lines[0] and repr(json.loads(toml_id)) in lines[0]
    assert files_under(tmp_path) == ["plan.toml"]  # nothing written, not even the folder


# -- 1b. belt and braces in the emitters ------------------------------------------------------


def _result(wid: str, replica: str | None = None) -> dict:
    return {"replicas": [{"replica": replica or f"{wid}#0", "workload": wid, "cards": [0],
                          "cpus": "0-3", "host_bytes": 2**30, "numa_node": 0,
                          "card_bytes": 2**30}]}  # fmt: skip


@pytest.mark.parametrize("wid", ["../../evil", "x\necho PWNED #", "x y"])
def test_emitters_refuse_ids_that_slipped_past_the_parser(wid):
    m = resolve_machine("dgx-h100")
    with pytest.raises(InputError):
        emit.sbatch_scripts(m, _result(wid), {})
    with pytest.raises(InputError):
        emit.k8s_pods(m, _result(wid), {})


def test_sbatch_words_are_shell_quoted_and_lines_hold_no_newline():
    m = resolve_machine("dgx-h100")
    cmd = ("python", "$(touch pwned)", "a b", "it's")
    script = emit.sbatch_scripts(m, _result("chat"), {"chat": cmd})["chat"]
    srun = [ln for ln in script.splitlines() if ln.startswith("srun ")]
    assert len(srun) == 1
    assert srun[0].endswith(" python '$(touch pwned)' 'a b' 'it'\"'\"'s'")
    with pytest.raises(InputError, match="control character"):
        emit.sbatch_scripts(m, _result("chat"), {"chat": ("python", "x\necho PWNED")})
    if shutil.which("bash"):  # the script parses, and its only command is srun
        assert subprocess.run(["bash", "-n"], input=script, text=True).returncode == 0


def test_gres_conf_refuses_a_node_name_with_a_newline_and_ignores_a_bad_cpulist():
    m = resolve_machine("dgx-h100")
    with pytest.raises(InputError, match="--node-name"):
        emit.gres_conf(m, "node1\nNodeName=evil Name=gpu File=/dev/sda")
    assert "NodeName=gpu[01-04] " in emit.gres_conf(m, "gpu[01-04]")
    cards = [replace(a, **{"numa_node": 0}) for a in m.accelerators]
    host = replace(m.host, **{"numa_nodes": [NumaNode(id=0, cpus="0-3\nAutoDetect=nvml")]})
    m = replace(m, **{"accelerators": cards, "host": host, "name": "box\nAutoDetect=nvml"})
    text = emit.gres_conf(m, "node1")
    assert not any(ln.startswith("AutoDetect=nvml") for ln in text.splitlines())
    lines = [ln for ln in text.splitlines() if not ln.startswith("#")]
    assert not any("Cores=" in ln for ln in lines) and "Cores unknown" in text


def test_yaml_scalars_keep_control_characters_escaped_on_one_line():
    m = resolve_machine("dgx-h100")
    m = replace(m, **{"accelerators": [replace(a, **{"product": "H100\nkind: Evil"})
                                              for a in m.accelerators]})  # fmt: skip
    (pod,) = emit.k8s_pods(m, _result("chat"), {"chat": ("sh", "-c", "a\nb")}).values()
    assert '    - "a\\nb"' in pod.splitlines()
    assert yaml.safe_load(pod)["spec"]["containers"][0]["command"] == ["sh", "-c", "a\nb"]
    assert not any(ln.strip().startswith("kind: Evil") for ln in pod.splitlines())
    assert "    nodeledger.feature.node.kubernetes.io/card-kind: H100-kind-Evil" in pod.splitlines()


def test_k8s_pod_names_that_collide_are_refused():
    m = resolve_machine("dgx-h100")
    res = _result("a_b")
    res["replicas"] += _result("a.b")["replicas"]
    with pytest.raises(InputError, match="Pod name 'a-b-0' is also 'a_b#0'"):
        emit.k8s_pods(m, res, {})


@pytest.mark.parametrize("name", ["../evil.sbatch", "sub/x.sbatch", "..", ".x", "x\ny", ""])
def test_write_files_refuses_names_that_leave_the_folder(tmp_path, name):
    out = tmp_path / "out"
    with pytest.raises(InputError, match="refusing to write"):
        emit.write_files(out, {"gres.conf": "ok\n", name: "evil\n"})
    assert files_under(tmp_path) == []  # checked before anything is written


def test_write_files_refuses_a_link_out_of_the_folder(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    (out / "chat.sbatch").symlink_to(victim)
    with pytest.raises(InputError, match="outside"):
        emit.write_files(out, {"chat.sbatch": "#!/bin/bash\n"})
    assert victim.read_text() == "precious\n"


def test_write_files_writes_each_file_atomically(tmp_path, monkeypatch):
    out = tmp_path / "out"
    out.mkdir()
    (out / "gres.conf").write_text("old\n")
    seen = _spy_fsync(monkeypatch, out / "gres.conf", "old\n")
    assert emit.write_files(out, {"gres.conf": "new\n"}) == [str(out / "gres.conf")]
    assert seen and (out / "gres.conf").read_text() == "new\n"
    assert files_under(out) == ["gres.conf"]  # no temporary file left behind


# -- 2. atomic writes ----------------------------------------------------------------------------


def _spy_fsync(monkeypatch, target: Path, old: str) -> list:
    """Record that the text was fsync'd in a temporary file beside ``target`` while ``target``
    still held ``old`` (the old code wrote ``target`` in place and never fsync'd)."""
    seen = []
    real = os.fsync

    def spy(fd):
        real(fd)
        if not os.path.isdir(f"/proc/self/fd/{fd}"):
            tmp = Path(os.readlink(f"/proc/self/fd/{fd}"))
            seen.append((tmp.parent == target.parent and tmp != target, target.read_text()))

    monkeypatch.setattr(atomic.os, "fsync", spy)
    return seen


def test_atomic_write_leaves_the_old_file_when_interrupted(tmp_path):
    p = tmp_path / "out.md"
    p.write_text("old\n")
    p.chmod(0o640)
    with pytest.raises(UnicodeEncodeError):  # fails half-way through the text
        atomic.write_text(p, "x" * 100_000 + "\ud800")
    assert p.read_text() == "old\n" and files_under(tmp_path) == ["out.md"]
    with pytest.raises(RuntimeError), atomic.AtomicText(p) as fh:
        fh.write("half")
        raise RuntimeError("interrupted")
    assert p.read_text() == "old\n" and files_under(tmp_path) == ["out.md"]
    atomic.write_text(p, "new\n")
    assert p.read_text() == "new\n" and (p.stat().st_mode & 0o777) == 0o640
    with pytest.raises(IsADirectoryError):
        atomic.write_text(tmp_path, "x")


def test_report_write_is_atomic(tmp_path, monkeypatch):
    from nodeledger.cli import report as rp

    out = tmp_path / "r.md"
    out.write_text("old\n")
    with pytest.raises(UnicodeEncodeError):  # the old code left r.md truncated here
        rp._write("# report\n" * 10_000 + "\ud800", out)
    assert out.read_text() == "old\n" and files_under(tmp_path) == ["r.md"]
    seen = _spy_fsync(monkeypatch, out, "old\n")
    rp._write("# report\n", out)
    assert seen == [(True, "old\n")] and out.read_text() == "# report\n"


def test_report_terminal_output_replaces_the_file_at_the_end(tmp_path):
    from nodeledger.cli import report as rp

    out = tmp_path / "r.txt"
    out.write_text("old\n")
    af, con = rp._terminal_out(out)
    con.print("new report")
    assert out.read_text() == "old\n"  # the old code had truncated it when it opened it
    rp._terminal_done(af, out, ok=False)  # an error while rendering: the old file stays
    assert out.read_text() == "old\n" and files_under(tmp_path) == ["r.txt"]
    af, con = rp._terminal_out(out)
    con.print("new report")
    rp._terminal_done(af, out, ok=True)
    assert out.read_text().strip() == "new report" and files_under(tmp_path) == ["r.txt"]
    with pytest.raises(NodeledgerError, match="cannot write"):
        rp._terminal_out(tmp_path)


def test_save_profile_is_atomic(tmp_path, monkeypatch):
    from nodeledger.machine.io import load_profile, save_profile

    m = resolve_machine("dgx-h100")
    f = tmp_path / "m.toml"
    f.write_text("old\n")
    seen = _spy_fsync(monkeypatch, f, "old\n")
    save_profile(m, f)
    assert seen == [(True, "old\n")] and load_profile(f) == m
    assert files_under(tmp_path) == ["m.toml"]


def test_place_cli_writes_its_files_atomically(tmp_path):
    plan = tmp_path / "plan.toml"
    plan.write_text(plan_text('"chat"', 'command = ["python", "serve.py"]\n'))
    out = tmp_path / "slurm"
    proc = run_cli(
        "place", str(plan), "--machine", "k100-ai-8x64g", "--emit", "slurm", "-o", str(out)
    )
    assert proc.returncode == 0, proc.stderr
    assert files_under(out) == ["chat.sbatch", "gres.conf"]
    assert re.search(r"^srun --cpu-bind=cores --cpus-per-task=\d+ python serve.py$",
                     (out / "chat.sbatch").read_text(), re.M)  # fmt: skip


# -- 3. the reservation state file ----------------------------------------------------------------


def test_empty_state_file_is_refused_and_left_alone(tmp_path):
    empty = tmp_path / "state.sqlite"
    empty.write_bytes(b"")
    r = run_cli("run", "--state", str(empty), "--list")
    assert r.returncode == 2, r.stdout + r.stderr
    line = r.stderr.strip()
    assert len(line.splitlines()) == 1 and "Traceback" not in line
    assert str(empty) in line and "is empty" in line and "remove it to start afresh" in line
    assert empty.read_bytes() == b""  # the old code turned it into an (empty) database
    fresh = tmp_path / "new" / "state.sqlite"  # a path that does not exist yet: created
    r = run_cli("run", "--state", str(fresh), "--list", "--json")
    assert r.returncode == 0, r.stderr
    assert fresh.read_bytes().startswith(b"SQLite format 3\x00")
    assert files_under(tmp_path / "new") == ["state.sqlite"]


def test_a_foreign_sqlite_database_is_refused_and_not_modified(tmp_path):
    other = tmp_path / "app.sqlite"
    db = sqlite3.connect(str(other))
    db.execute("CREATE TABLE users (name TEXT)")
    db.commit()
    db.close()
    before = other.read_bytes()
    r = run_cli("run", "--state", str(other), "--list")
    assert r.returncode == 2 and "not a nodeledger state file" in r.stderr, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1
    assert other.read_bytes() == before  # the old code added its table to it


# -- 4. bundles re-packed with './' members --------------------------------------------------------


def _bundle_dir(root: Path) -> Path:
    from nodeledger.machine.probe.bundle import manifest_from_outputs

    b = manifest_from_outputs({("nvidia-smi", "-L"): "GPU 0: X\n"}, tools=("nvidia-smi",))
    d = root / "bundle"
    (d / "commands").mkdir(parents=True)
    (d / "manifest.json").write_text(json.dumps(b["manifest"]))
    for name, text in b["blobs"].items():
        (d / name).write_text(text)
    return d


def test_bundle_repacked_with_dot_slash_members_loads(tmp_path):
    from nodeledger.machine.probe.bundle import load_bundle

    d = _bundle_dir(tmp_path)
    b = tmp_path / "b.tar.gz"
    if shutil.which("tar"):
        subprocess.run(["tar", "-czf", str(b), "-C", str(d), "."], check=True)
    else:  # pragma: no cover
        with tarfile.open(b, "w:gz") as tar:
            tar.add(d, arcname=".")
    with tarfile.open(b) as tar:
        assert "./manifest.json" in tar.getnames()
    r = load_bundle(b)
    assert r.run(["nvidia-smi", "-L"]).stdout == "GPU 0: X\n"
    assert r.which("nvidia-smi") == "/usr/bin/nvidia-smi"


@pytest.mark.parametrize("member", ["/etc/passwd", "../outside", "commands/../../x"])
def test_bundle_with_an_absolute_or_climbing_member_is_refused(tmp_path, member):
    b = tmp_path / "b.tar.gz"
    manifest = json.dumps({"format": "nodeledger-bundle-1"}).encode()
    with tarfile.open(b, "w:gz") as tar:
        for name, data in (("manifest.json", manifest), (member, b"x")):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    proc = run_cli("machine", "probe", "--from", str(b))
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert repr(member) in proc.stderr and "refusing the bundle" in proc.stderr
    assert files_under(tmp_path) == ["b.tar.gz"]
