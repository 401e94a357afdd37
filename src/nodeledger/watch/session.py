"""The watch's use cases below the CLI: what a watch verifies (its expectations from a plan or a
job, on the machine the ledger is made for), the host sampler beside a card backend, and the
running engine's start-up log set beside the plan at the end of a watch.  The CLI parses the
options, calls these, runs the watch and renders; nothing here prints or exits."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from typing_extensions import NotRequired, TypedDict  # pydantic needs these on Python < 3.12

from nodeledger.errors import InputError
from nodeledger.machine.parsers.common import card_indices
from nodeledger.machine.resolve import machine_with_intro
from nodeledger.schemas import json_schema


def ledger_machine(machine: str | None, header_profile: str | None, live_real: bool):
    """(profile, name to record) for the ledger."""
    from nodeledger.machine import list_presets, resolve_machine

    if machine is not None:
        return resolve_machine(machine), machine
    if header_profile and header_profile in list_presets():
        return resolve_machine(header_profile), header_profile
    if live_real:
        profile, _ = machine_with_intro(None)
        return profile, None
    return resolve_machine(None), None


def expectations(plan, model, job, job_opts, cards, machine, header, live_real):
    """Expectations from --plan / --job, else a recording's own, else None: (expect, the
    profile's name to record, the profile the plan was made on or None)."""
    given = sorted(k for k, v in job_opts.items() if v is not None)
    if plan and job:
        raise InputError("give --plan or --job, not both")
    if given and not job:
        names = ", ".join("--" + k.replace("_", "-") for k in given)
        raise InputError(f"{names} describe a job: give --job (and --model)")
    if model and not job:
        raise InputError("--model needs --job")
    if cards is not None and not job:
        raise InputError("--cards applies to --job")
    if not plan and not job:
        return (header or {}).get("plan"), None, None
    from nodeledger.watch import expect as ex

    prof_name = ((header or {}).get("machine") or {}).get("profile")
    profile, name = ledger_machine(machine, prof_name, live_real)
    if plan:
        return ex.from_plan(plan, profile), name, profile
    if not model:
        raise InputError("--job needs --model MODEL")
    from nodeledger.ledger.jobs import build_job
    from nodeledger.model import load_model

    job_obj = build_job(job, job_opts)
    spec, _ = load_model(model)
    return ex.from_job(model, spec, job_obj, profile, card_indices(cards)), name, profile


def host_sampler(b):
    """The backend's own host figures (a fake scenario plays them), else this machine's."""
    host = getattr(b, "host", None)
    if host is None:
        from nodeledger.watch.host import HostSampler

        host = HostSampler()
    return host


def engine_log_checker(path, model, job, job_opts, machine, tolerance):
    """Check the options now (one line, exit 2, before anything is watched) and return the
    function that reads the log at the end of the watch and sets its KV pool beside the
    plan's: (summary, finding or None) for the watch's cards, on the profile the watch's plan
    was made on."""
    engine = job_opts.get("engine") or "hf"
    from nodeledger.ledger.jobs import ENGINE_NAMES, ENGINE_TRAITS

    traits = ENGINE_TRAITS.get(engine, ENGINE_TRAITS["hf"])
    if job != "serve" or not traits.start_log or not model:
        raise InputError("--engine-log applies to --job serve --engine vllm|sglang with --model")
    from nodeledger.files import read_log_ends

    what = ENGINE_NAMES.get(engine, engine) + " server log"
    if path != "-" and not Path(path).exists():
        raise InputError(f"--engine-log {path}: no such file")
    if path == "-":
        raise InputError(
            "--engine-log reads a file (the log the server writes), not standard input"
        )
    read_log_ends(path, what)  # readable now: a bad path is refused before the watch starts

    def check(cards: list[int], profile=None):
        from nodeledger.errors import NodeledgerError
        from nodeledger.machine import resolve_machine
        from nodeledger.machine.parsers import parse_kind
        from nodeledger.verdict.assess import check_engine_log
        from nodeledger.watch.engine_log import kv_pool_finding, kv_pool_summary

        try:  # what the watch collected is kept whatever the log holds by now
            text, cut = read_log_ends(path, what)
            reported = parse_kind(f"{engine}-log", text)
        except NodeledgerError as exc:
            return {"file": path, "notes": [f"the engine log could not be used: {exc}"]}, None
        profile = profile or resolve_machine(machine)  # the watch's own plan's machine
        chk = check_engine_log(model, job_opts, reported, profile)
        summary = kv_pool_summary(chk, path, cut)
        if reported.get("version") and not job_opts.get("engine_version"):
            summary["notes"].append(
                f"the plan follows release {reported['version']}, which the log prints"
            )
        return summary, kv_pool_finding(chk, cards, tolerance)

    return check


# -- the exporter -------------------------------------------------------------------------


@dataclass(frozen=True)
class SampledOptions:
    """What watch and exporter share (the CLI's _sampled_and_verified options): where the
    samples come from and what they are verified against."""

    interval: float = 1.0
    duration: float | None = None
    backend: str = "auto"
    plan: str | None = None
    model: str | None = None
    job: str | None = None
    cards: str | None = None
    machine: str | None = None
    idle_window: float = 60.0
    tolerance: float = 0.1
    tolerance_gib: float = 1.0
    timeout: float = 5.0
    job_options: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class ExporterOptions(SampledOptions):
    """``nodeledger exporter``'s options (bounds checked by the CLI)."""

    listen: str = "127.0.0.1:19835"
    expose: bool = False
    allow: tuple[str, ...] = ()
    tls_cert: str | None = None
    tls_key: str | None = None
    basic_auth_file: str | None = None
    client_timeout: float = 5.0
    handler_threads: int = 8
    max_connections: int = 1024
    lifeboat_cards: str | None = None
    vendor_series: bool = True


@dataclass
class ExporterRun:
    """An exporter ready to serve: its server bound, its sampler started."""

    exporter: Any
    server: Any
    backend: Any
    duration: float | None
    start_line: str  # what it serves, where, how often

    def serve(self) -> None:
        """Serve until ``duration`` (None: until KeyboardInterrupt), then close everything."""
        timer = threading.Timer(self.duration or 0, self.server.shutdown)
        timer.daemon = True
        if self.duration is not None:
            timer.start()
        try:
            self.server.serve_forever()
        except KeyboardInterrupt:
            pass  # Ctrl-C or SIGTERM (a service manager stopping it): a clean stop
        finally:
            timer.cancel()
            self.exporter.shutdown()
            self.backend.close()


def open_exporter(o: ExporterOptions, warn: Callable[[str], None]) -> ExporterRun:
    """Check the serving options (one line on a refusal), open the backend, the watch and the
    plan's expectations, bind the server and start sampling.  ``warn`` receives each warning
    (a non-loopback address, no --allow, passwords in clear, a host-only backend)."""
    from nodeledger.units import GiB
    from nodeledger.watch.analyze import Analyzer
    from nodeledger.watch.backends import open_backend
    from nodeledger.watch.exporter import (
        Exporter,
        load_basic_auth,
        load_tls,
        parse_allow,
        parse_listen,
        with_node_name,
    )
    from nodeledger.watch.watcher import Watcher

    boats = card_indices(o.lifeboat_cards, "--lifeboat")
    host_addr, port, loopback = parse_listen(o.listen)
    nets = parse_allow(o.allow)
    tls = load_tls(o.tls_cert, o.tls_key)
    users = load_basic_auth(o.basic_auth_file)
    if not loopback and not o.expose:
        raise InputError(
            f"--listen {o.listen} is not a loopback address: metrics name your processes and "
            "models; add --expose to serve them beyond this host"
        )
    if not loopback:
        warn(f"warning: serving metrics on {host_addr}:{port}, reachable beyond this host "
             "(process names, pids, memory); put a firewall or an authenticating proxy in front")  # fmt: skip
        if not nets:
            warn("warning: any client may scrape; restrict them with --allow CIDR "
                 "(e.g. --allow 10.0.0.0/8 --allow 127.0.0.1)")  # fmt: skip
        if users and tls is None:
            warn("warning: --basic-auth-file without --tls-cert: passwords cross the network "
                 "in clear")  # fmt: skip
    b = open_backend(o.backend, timeout=o.timeout, host_only=True)
    if getattr(b, "reason", None):
        warn(f"note: {b.reason}: serving the host's figures only")
    fake = o.backend.startswith("fake:")
    # a fake scenario too: scrapes see real time
    w = Watcher(b, host_sampler(b), o.interval, clock=time.time)
    expect, prof, _ = expectations(o.plan, o.model, o.job, o.job_options, o.cards, o.machine,
                                   None, not fake)  # fmt: skip
    if boats is not None:
        expect = dict(expect or {"source": None, "groups": []}, lifeboat=boats)
    header = with_node_name(w.header(expect, prof), os.environ)  # Kubernetes: the node's name
    an = Analyzer(header, expect, tolerance=o.tolerance,
                  tolerance_bytes=int(o.tolerance_gib * GiB), idle_window=o.idle_window)  # fmt: skip
    exp = Exporter(w, an, header, vendor_series=o.vendor_series)
    server = exp.serve(host_addr, port, workers=o.handler_threads,
                       client_timeout=o.client_timeout, max_connections=o.max_connections,
                       allow=nets, ssl_context=tls, users=users)  # fmt: skip
    exp.start_sampling()
    scheme = "https" if tls is not None else "http"
    where = o.listen if ":" not in host_addr else f"[{host_addr}]:{port}"
    line = (f"nodeledger exporter: {scheme}://{where}/metrics ({b.name}, every {o.interval:g} s; "
            f"{o.handler_threads} handler threads, {server.max_connections} connections, "
            f"{o.client_timeout:g} s client timeout)")  # fmt: skip
    return ExporterRun(exporter=exp, server=server, backend=b, duration=o.duration,
                       start_line=line)  # fmt: skip


# -- the watch ----------------------------------------------------------------------------


@dataclass(frozen=True)
class WatchOptions(SampledOptions):
    """``nodeledger watch``'s options (bounds checked by the CLI)."""

    samples: int | None = None
    record: str | None = None
    replay: str | None = None
    from_bundle: str | None = None
    fail_fast: bool = False
    engine_log: str | None = None


# ``watch --json``: the machine-readable contract (issue 31), its JSON Schema generated from
# these types and shipped as nodeledger/schemas/watch.schema.json
SCHEMA_VERSION = 2  # 2: idle[].first_t / last_t -> first_unix_s / last_unix_s


class WatchOwnerJSON(TypedDict):
    pid: int
    name: str | None
    last_bytes: int | None
    max_bytes: int | None


class WatchCardJSON(TypedDict):
    index: int
    total_bytes: int | None
    peak_bytes: int | None  # the sustained peak (peak_rule)
    max_bytes: int | None
    last_bytes: int | None
    predicted_bytes: int | None  # the plan's, where a plan was given
    unsharded_bytes: int | None
    group: str | None
    util_mean_pct: float | None
    processes_bytes: int | None
    last_pct: float | None  # where the tool gives only a share of the card
    owners: list[WatchOwnerJSON]


class WatchHostJSON(TypedDict):
    """The last sample's host figures (watch.analyze.host_summary)."""

    mem_total_bytes: int | None
    mem_available_bytes: int | None
    page_cache_bytes: int | None
    swap_total_bytes: int | None
    swap_free_bytes: int | None
    swap_in_pages: int | None  # since boot
    swap_out_pages: int | None
    cpu_ticks: dict[str, int | None] | None  # total, idle, iowait since boot
    numa: dict[str, dict[str, int | None]]  # node -> total_bytes, free_bytes


class WatchVerifyJSON(TypedDict):
    status: str
    findings: list[dict[str, Any]]


class WatchJSON(TypedDict):
    schema_version: int
    samples: int
    duration_s: float
    peak_rule: str
    cards: list[WatchCardJSON]
    host: WatchHostJSON | None
    verify: WatchVerifyJSON
    # idle-card findings, each with its evidence and hints, first and last seen (Unix seconds)
    idle: list[dict[str, Any]]
    cards_seen: bool
    host_only: str | None
    source: str
    clock: str
    wall_s: float | None
    engine_log: NotRequired[dict[str, Any] | None]
    plan: str | None
    notes: list[str]
    exit_code: int


def watch_json_schema() -> dict[str, Any]:
    """The JSON Schema of ``watch --json``, generated from :class:`WatchJSON`."""
    return json_schema(WatchJSON, "nodeledger watch --json")


@dataclass
class WatchSession:
    """One watch: a recorded stream, a bundle's recordings, a fake scenario or this host's
    cards, judged by one Analyzer against the plan's or the job's expectations.  ``open``
    checks and prepares everything, ``run`` samples (``on_sample`` sees each sample after the
    analyzer), ``summary`` is what the command prints."""

    analyzer: Any
    header: dict
    expect: dict | None
    profile: Any
    source: str  # where the samples come from, said in the summary
    clock: str  # whose clock times them
    live: bool  # samples this host in real time (the caller owns Ctrl-C / SIGTERM)
    host_only: str | None = None  # why only the host is sampled, if so
    engine_check: Callable | None = None
    _o: WatchOptions | None = None
    _stream: Any = None
    _watcher: Any = None
    _backend: Any = None
    _recorder: Any = None
    _samples: int | None = None
    _replayed: bool = False

    @classmethod
    def open(cls, o: WatchOptions) -> WatchSession:
        from nodeledger.units import GiB
        from nodeledger.watch.analyze import Analyzer

        kw = {"tolerance": o.tolerance, "tolerance_bytes": int(o.tolerance_gib * GiB),
              "idle_window": o.idle_window}  # fmt: skip
        check = None
        if o.engine_log is not None:
            check = engine_log_checker(o.engine_log, o.model, o.job, o.job_options, o.machine,
                                       o.tolerance)  # fmt: skip
        if o.replay:
            from nodeledger.watch.record import read_stream

            header, stream = read_stream(o.replay)
            expect, _, profile = expectations(o.plan, o.model, o.job, o.job_options, o.cards,
                                              o.machine, header, False)  # fmt: skip
            return cls(analyzer=Analyzer(header, expect, **kw), header=header, expect=expect,
                       profile=profile, source=f"replay of {o.replay}",
                       clock="the recording's timestamps", live=False, engine_check=check,
                       _o=o, _stream=stream)  # fmt: skip
        from nodeledger.watch.backends import open_backend
        from nodeledger.watch.watcher import Watcher

        notes: list[str] = []
        samples, interval = o.samples, o.interval
        if o.from_bundle:
            from nodeledger.watch.from_bundle import open_from_bundle

            b, host, clock, recorded, step, notes = open_from_bundle(o.from_bundle, o.backend)
            w = Watcher(b, host, step, clock=clock)
            if samples is not None and samples > recorded:
                notes.append(
                    f"the bundle holds {recorded} sample(s); samples beyond that repeat the last "
                    "recording of each command (not readings of their own)"
                )
            samples = samples if samples is not None or o.duration is not None else recorded
            interval = step
        else:
            b = open_backend(o.backend, timeout=o.timeout, host_only=True)
            w = Watcher(b, host_sampler(b), interval)
        try:
            fake = o.backend.startswith("fake:") and not o.from_bundle
            replayed = fake or bool(o.from_bundle)
            if fake:
                samples = _fake_samples(b.sc, samples, o.duration, notes)
            expect, prof, profile = expectations(o.plan, o.model, o.job, o.job_options, o.cards,
                                                 o.machine, None, not replayed)  # fmt: skip
            header = w.header(expect, prof)
            header["notes"] = header.get("notes", []) + notes
            an = Analyzer(header, expect, **kw)
            rec = None
            if o.record:
                from nodeledger.watch.record import Recorder

                rec = Recorder(o.record, header)
        except BaseException:
            b.close()
            raise
        source = (f"{b.name}, its own steps played without waiting" if fake
                  else f"{b.name} outputs recorded in {o.from_bundle}, replayed without waiting"
                  if o.from_bundle else f"{b.name}, every {interval:g} s") + (
                      f", recorded to {o.record}" if o.record else "")  # fmt: skip
        clock = ("the scenario's clock" if fake else "the bundle's sample times" if o.from_bundle
                 else "this host's clock")  # fmt: skip
        return cls(analyzer=an, header=header, expect=expect, profile=profile, source=source,
                   clock=clock, live=not replayed, host_only=getattr(b, "reason", None),
                   engine_check=check, _o=o, _watcher=w, _backend=b, _recorder=rec,
                   _samples=samples, _replayed=replayed)  # fmt: skip

    def run(self, on_sample: Callable[[dict], None] | None = None) -> None:
        """Sample until --samples / --duration / the recording's end (or --fail-fast's first
        failed verification, or KeyboardInterrupt); then close the backend and the record."""
        o, an = self._o, self.analyzer
        if self._stream is not None:
            t0 = None
            for s in self._stream:
                t0 = s["t"] if t0 is None else t0
                if o.duration is not None and s["t"] - t0 > o.duration:
                    break
                an.feed(s)
                if (o.fail_fast and an.ever_failed) or (
                    o.samples is not None and an.n >= o.samples
                ):
                    break
            return

        def each(s: dict):
            an.feed(s)
            if self._recorder:
                self._recorder.write(s)
            if on_sample:
                on_sample(s)
            if o.fail_fast and an.ever_failed:
                return False
            return None

        try:
            self._watcher.run(each, samples=self._samples, duration=o.duration,
                              sleep=(lambda _s: None) if self._replayed else None)  # fmt: skip
        except KeyboardInterrupt:
            pass  # Ctrl-C ends the watch; the verdict follows
        finally:
            try:
                if self._recorder:
                    self._recorder.close()
            finally:
                self._backend.close()

    def summary(self, wall_s: float | None = None) -> dict:
        """The watch's verdict as ``watch --json`` prints it (without its exit code)."""
        an, expect = self.analyzer, self.expect
        s = {"schema_version": SCHEMA_VERSION, **an.summary()}
        s["cards_seen"] = an.cards_seen
        s["host_only"] = self.host_only
        s["source"] = self.source
        s["clock"] = self.clock
        s["wall_s"] = None if wall_s is None else round(wall_s, 3)
        if self.engine_check is not None:
            groups = (expect or {}).get("groups") or [{}]
            s["engine_log"], finding = self.engine_check(groups[0].get("cards") or [], self.profile)
            if finding is not None:
                s["verify"]["findings"].append(finding)
                s["verify"]["status"] = "failed"
        s["plan"] = (expect or {}).get("source")
        s["notes"] = self.header.get("notes", [])
        return s


def _fake_samples(sc, samples: int | None, duration: float | None, notes: list[str]) -> int:
    """How many of a fake scenario's steps to play: never past its end (a scenario is played
    without waiting; --duration counts this host's seconds, which a replay does not wait for),
    and a note when --samples cuts it before its finding."""
    if samples is None or samples > sc.steps:
        if samples is not None:
            notes.append(
                f"the fake scenario {sc.name} holds {sc.steps} steps: {sc.steps} "
                "samples played (a replay stops at its end, whatever --samples)"
            )
        elif duration is not None:
            notes.append(
                f"the fake scenario {sc.name} holds {sc.steps} steps: the replay "
                "stops at its end at the latest (--duration counts this host's seconds)"
            )
        return sc.steps
    if samples < sc.steps:  # a demo cut short shows the start-up only: say where its finding is
        notes.append(
            f"the fake scenario {sc.name} holds {sc.steps} steps; {samples} played show its "
            f"start only: leave --samples out (or --samples {sc.steps}) to play it to its finding"
        )
    return samples
