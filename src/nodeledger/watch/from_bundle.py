"""A watch over a support bundle: the card tool's and the host's recorded outputs replayed
through the same backend and host sampler a live watch uses (`watch --from BUNDLE`).

What the bundle holds decides what the watch can say:

1. ``nodeledger bundle --watch-samples N`` runs the watch's own commands N times on the box
   (``amd-smi monitor -u -v``, ``amd-smi process --csv``, ``npu-smi info`` ...) and the host's
   /proc files each time (``manifest["file_samples"]``), so each sample replays as it was,
   with the times it was taken (``manifest["watch"]["t"]``).
2. A command recorded once answers every sample the same (a probe's bundle: one snapshot).
3. A /proc file the bundle did not read (a bundle assembled from pasted outputs) makes that
   process's liveness unknown, never "dead": the dead-owner finding needs a reading.
4. NVML and amdsmi answers are not replayable (they are in-process calls): a bundle replays
   through the text tools only, and ``auto`` tries them in the live order without the two
   libraries.
"""

from __future__ import annotations

from nodeledger.errors import InputError
from nodeledger.machine.probe.bundle import load_bundle
from nodeledger.watch.backends import open_backend
from nodeledger.watch.host import HostSampler

MAX_TIMES = 1_000_000  # timestamps read from a manifest (a hostile one cannot make more)


class ReplayClock:
    """The sample times a bundle recorded: the header and the first sample get the first,
    each later sample the next; past the last, one interval more each time."""

    def __init__(self, times: list[float], interval: float) -> None:
        self.times, self.interval, self.k = times or [0.0], interval, -1

    def __call__(self) -> float:
        self.k += 1
        i = max(0, self.k - 1)
        if i < len(self.times):
            return self.times[i]
        return self.times[-1] + (i - len(self.times) + 1) * self.interval


class _BundleHost(HostSampler):
    """The host sampler over the bundle's files, naming the bundle's host, not this one."""

    def __init__(self, runner, hostname: str | None) -> None:
        super().__init__(runner)
        self.hostname = hostname

    def describe(self) -> dict:
        d = super().describe()
        d["hostname"] = self.hostname or "unknown (not in the bundle)"
        return d


def _watch_info(manifest: dict, where: str) -> dict:
    info = manifest.get("watch") or {}
    if not isinstance(info, dict):
        raise InputError(f"{where}: bundle manifest field watch is malformed")
    times = info.get("t", [])
    if (
        not isinstance(times, list)
        or len(times) > MAX_TIMES
        or not all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in times)
    ):
        raise InputError(f"{where}: bundle manifest field watch.t is malformed")
    # backend None: the bundle's host had no card tool
    for key, types in (("backend", str), ("interval_s", (int, float)), ("samples", int)):
        v = info.get(key)
        if v is not None and (not isinstance(v, types) or isinstance(v, bool)):
            raise InputError(f"{where}: bundle manifest field watch.{key} is malformed")
    host = manifest.get("hostname")
    if host is not None and not isinstance(host, str):
        raise InputError(f"{where}: bundle manifest field hostname is malformed")
    return info


def open_from_bundle(path, backend: str = "auto"):
    """(backend, host sampler, clock, samples recorded, interval, notes) for a watch replaying
    bundle ``path``.  ``backend`` ``auto``: the one the bundle's watch samples used, else the
    first text tool whose recorded output lists cards.  Bad bundle: InputError (exit 2); no
    card tool in it: WatchError (exit 4)."""
    rr = load_bundle(path)
    info = _watch_info(rr.manifest, str(path))
    name = backend if backend != "auto" else info.get("backend") or "auto"
    if name in ("nvml", "amdsmi"):  # recorded through their tools' text, never in-process
        name = "auto"
    step = float(info.get("interval_s") or 1.0)
    b = open_backend(name, runner=rr, host_only=True)  # a bundle of a host without cards
    # what the bundle holds, never what its manifest claims (a hostile "samples": 10**12, or a
    # million sample times over one recording, would replay the last recording for ever): one
    # sample per recording of its most-recorded command or file
    held = max(1, rr.recordings)
    listed = info.get("t", [])
    times = [float(x) for x in listed[:held]]
    notes = []
    if len(listed) > held:
        notes.append(
            f"the manifest lists {len(listed):,} sample times; the bundle holds {held:,} "
            f"recording(s): {held:,} sample(s) replayed"
        )
    if not times:
        notes.append(
            "the bundle holds no sample times: samples are placed "
            f"{step:g} s apart from 0 (the watch's idle window counts those seconds)"
        )
    made = rr.manifest.get("composed_from")
    if isinstance(made, str) and made:
        notes.append(f"the bundle was assembled from {made[:300]}")
    samples = len(times) if times else held
    host = _BundleHost(rr, rr.manifest.get("hostname"))
    return b, host, ReplayClock(times, step), samples, step, notes


def record_samples(r, backend: str, samples: int, interval: float,
                   timeout: float) -> tuple[dict, str, int]:  # fmt: skip
    """Take ``samples`` watch samples through ``backend`` on Runner ``r`` (which keeps every
    record for the bundle) -> (the manifest's ``watch`` entry, whose ``backend`` is None when
    the host had no card tool; the backend's name; samples whose card tool failed)."""
    from nodeledger.watch.watcher import Watcher

    r.keep_records = True
    b = open_backend(backend, runner=r, timeout=timeout, host_only=True)
    w = Watcher(b, HostSampler(r), interval)
    w.header()
    times: list[float] = []
    w.run(lambda s: times.append(s["t"]), samples=samples)
    entry = {"backend": None if getattr(b, "reason", None) else b.name, "interval_s": interval,
             "samples": len(times), "t": times}  # fmt: skip
    return entry, b.name, w.errors


def collect_bundle(output: str, timeout: float = 5.0, watch_samples: int = 0,
                   watch_interval: float = 1.0, backend: str = "auto") -> str:  # fmt: skip
    """The ``bundle`` use case: every raw output of a probe (commands, /proc and /sys files),
    with ``watch_samples`` samples of the card tool when asked, into one archive; the line that
    says what was written."""
    import socket

    from nodeledger.machine.probe import Runner
    from nodeledger.machine.probe.bundle import write_bundle
    from nodeledger.machine.probe.probe import probe_with_facts

    if not timeout > 0:
        raise InputError(f"--timeout must be > 0, got {timeout}")
    if backend in ("nvml", "amdsmi"):
        raise InputError(
            f"--backend {backend}: a library's answers are not replayable; give its tool "
            "(nvidia-smi, amd-smi)"
        )
    r = Runner(timeout=timeout)  # NVML answers are not replayable: bundles hold tool outputs only
    profile, _ = probe_with_facts(r)  # the facts too: `doctor --from BUNDLE` replays them
    extra = {"probed_profile_name": profile.name, "hostname": socket.gethostname()}
    taken = ""
    if watch_samples:
        extra["watch"], through, errors = record_samples(r, backend, watch_samples,
                                                         watch_interval, timeout)  # fmt: skip
        taken = f"; {extra['watch']['samples']} watch samples through {through}" + (
            f" ({errors} failed)" if errors else ""
        )
    path = write_bundle(r, output, extra)
    return (
        f"wrote {path} ({path.stat().st_size:,} B): {len(r.log)} commands, {len(r.files)} files read; "
        f"{len(profile.accelerators)} cards, {len(profile.notes)} notes{taken}"
    )
